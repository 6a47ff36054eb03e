"""Row partitioners: turn a data set into a per-row ``clients`` array.

Every partitioner returns an integer array of shape ``(n_samples,)`` whose value
at row ``j`` is the client (``0 .. n_clients - 1``) that holds row ``j``. Every
row belongs to exactly one client and every client holds at least one row, so
the result can be passed straight to ``fit(X, y, clients=...)``.
"""

import numbers

import numpy as np
from sklearn.utils import check_random_state

__all__ = [
    "partition_by_sizes",
    "partition_dirichlet",
    "partition_feature_shift",
    "partition_iid",
    "partition_label_shards",
]


def _check_int(value, name):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {value!r}.")
    return int(value)


def _check_number(value, name, valid, text, kind=numbers.Real):
    """``value`` as a float (an int for ``kind=numbers.Integral``), if it is a finite
    number of that kind (not a bool) passing ``valid``; else ValueError "name must be text"."""
    if (isinstance(value, bool) or not isinstance(value, kind)
            or not np.isfinite(value) or not valid(value)):
        raise ValueError(f"{name} must be {text}, got {value!r}.")
    return int(value) if kind is numbers.Integral else float(value)


def _check_n_clients(n_clients, n_samples=None):
    n_clients = _check_int(n_clients, "n_clients")
    if n_clients < 1:
        raise ValueError(f"n_clients must be >= 1, got {n_clients}.")
    if n_samples is not None and n_clients > n_samples:
        raise ValueError(
            f"n_clients={n_clients} exceeds n_samples={n_samples}: every client "
            "needs at least one row."
        )
    return n_clients


def _check_labels(y, n_clients):
    """``(codes, counts, n_clients)``: each row's class code, the rows per class, the clients."""
    y = np.asarray(y)
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1 or y.shape[0] == 0:
        raise ValueError(f"y must be a non-empty 1d array of labels, got shape {y.shape}.")
    _, codes, counts = np.unique(y, return_inverse=True, return_counts=True)
    return codes.reshape(-1), counts, _check_n_clients(n_clients, y.shape[0])


def _cut(order, sizes):
    """Client index per row: the first ``sizes[0]`` rows of ``order`` go to client 0..."""
    clients = np.empty(order.shape[0], dtype=np.intp)
    clients[order] = np.repeat(np.arange(len(sizes), dtype=np.intp), sizes)
    return clients


def _even_sizes(n_samples, n_parts):
    sizes = np.full(n_parts, n_samples // n_parts, dtype=np.intp)
    sizes[: n_samples % n_parts] += 1
    return sizes


def partition_iid(n_samples, n_clients, *, random_state=None):
    """Assign rows to clients uniformly at random, with sizes as equal as possible.

    Parameters
    ----------
    n_samples : int
        Number of rows to assign.
    n_clients : int
        Number of clients, ``1 <= n_clients <= n_samples``.
    random_state : int, RandomState instance or None, default=None
        Seed of the shuffle.

    Returns
    -------
    clients : ndarray of shape (n_samples,), dtype int
        Client index of every row. Client sizes differ by at most one.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_fed.simulation import partition_iid
    >>> clients = partition_iid(10, 3, random_state=0)
    >>> np.bincount(clients).tolist()
    [4, 3, 3]
    """
    n_samples = _check_int(n_samples, "n_samples")
    n_clients = _check_n_clients(n_clients, n_samples)
    rng = check_random_state(random_state)
    return _cut(rng.permutation(n_samples), _even_sizes(n_samples, n_clients))


def partition_by_sizes(sizes, *, random_state=None):
    """Assign shuffled rows to clients with the given numbers of rows.

    Combine with :func:`sample_client_sizes` to draw the sizes from one of the
    FESC paper's sample-size laws.

    Parameters
    ----------
    sizes : array-like of int, shape (n_clients,)
        Number of rows of each client; every entry must be ``>= 1``. The number
        of rows partitioned is ``sum(sizes)``.
    random_state : int, RandomState instance or None, default=None
        Seed of the shuffle.

    Returns
    -------
    clients : ndarray of shape (sum(sizes),), dtype int
        Client index of every row; ``np.bincount(clients) == sizes``.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_fed.simulation import partition_by_sizes
    >>> clients = partition_by_sizes([1, 5, 2], random_state=0)
    >>> np.bincount(clients).tolist()
    [1, 5, 2]
    """
    raw = np.asarray(sizes)
    if raw.ndim != 1 or raw.shape[0] == 0:
        raise ValueError(f"sizes must be a non-empty 1d array, got shape {raw.shape}.")
    if raw.dtype.kind not in "iuf" or not np.all(np.isfinite(raw)) or np.any(raw != np.round(raw)):
        raise ValueError("sizes must hold whole numbers of rows.")
    sizes = raw.astype(np.intp)
    empty = np.flatnonzero(sizes < 1)
    if empty.size:
        raise ValueError(
            f"every client needs at least one row: client {int(empty[0])} has "
            f"size {int(sizes[empty[0]])}."
        )
    rng = check_random_state(random_state)
    return _cut(rng.permutation(int(sizes.sum())), sizes)


def _shard_quota(counts, n_clients, classes_per_client):
    """Number of clients that receive each class: balanced, feasible, sums to n*c."""
    n_classes = counts.shape[0]
    cap = np.minimum(counts, n_clients)
    total = n_clients * classes_per_client
    if total < n_classes:
        raise ValueError(
            f"n_clients * classes_per_client = {total} is smaller than the "
            f"{n_classes} classes in y: some class would have no client."
        )
    if cap.sum() < total:
        raise ValueError(
            f"cannot give {n_clients} clients {classes_per_client} classes each: "
            f"classes have too few rows (counts {counts.tolist()}) to be split "
            f"into {total} non-empty shards."
        )
    quota = np.ones(n_classes, dtype=np.intp)
    # Water-filling: raise the smallest quota that still has room, preferring
    # the class with the most rows, until the shards add up.
    for _ in range(total - n_classes):
        room = quota < cap
        key = np.where(room, quota, np.iinfo(np.intp).max)
        best = np.flatnonzero(key == key.min())
        quota[best[np.argmax(counts[best])]] += 1
    return quota


def partition_label_shards(y, n_clients, *, classes_per_client=2, random_state=None):
    """Give each client rows of exactly ``classes_per_client`` distinct classes.

    This is the pathological non-iid "shards" split of FedAvg and FedMPDD, made
    exact: each client holds rows of exactly ``classes_per_client`` classes.

    How: class ``k`` is cut into ``s_k`` shards, where the ``s_k`` are as equal
    as possible, sum to ``n_clients * classes_per_client`` and never exceed the
    number of rows of ``k`` (so no shard is empty) nor ``n_clients``. Clients
    then pick, one after the other, the ``classes_per_client`` classes with the
    most shards left (ties broken at random), which always succeeds. Rows of a
    class are shuffled and split into its shards with sizes differing by at
    most one; finally client indices are shuffled.

    Parameters
    ----------
    y : array-like of shape (n_samples,)
        Class label of every row.
    n_clients : int
        Number of clients, ``1 <= n_clients <= n_samples``.
    classes_per_client : int, default=2
        Number of distinct classes of every client; at most the number of
        classes, and ``n_clients * classes_per_client`` must be at least the
        number of classes so that every row gets a client.
    random_state : int, RandomState instance or None, default=None
        Seed.

    Returns
    -------
    clients : ndarray of shape (n_samples,), dtype int
        Client index of every row.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_fed.simulation import partition_label_shards
    >>> y = np.repeat([0, 1, 2, 3], 5)
    >>> clients = partition_label_shards(y, 4, classes_per_client=2, random_state=0)
    >>> [len(set(y[clients == c])) for c in range(4)]
    [2, 2, 2, 2]
    """
    codes, counts, n_clients = _check_labels(y, n_clients)
    n_classes = counts.shape[0]
    classes_per_client = _check_number(
        classes_per_client, "classes_per_client", lambda c: 1 <= c <= n_classes,
        f"an int in [1, {n_classes}] (the number of classes in y)", numbers.Integral)
    rng = check_random_state(random_state)
    quota = _shard_quota(counts, n_clients, classes_per_client)

    left = quota.copy()
    holders = [[] for _ in range(n_classes)]
    for client in range(n_clients):
        # Most shards left first; random tie-break keeps the class pairs varied.
        order = np.lexsort((rng.random_sample(n_classes), -left))
        for k in order[:classes_per_client]:
            holders[k].append(client)
            left[k] -= 1

    relabel = rng.permutation(n_clients)
    clients = np.empty(codes.shape[0], dtype=np.intp)
    for k in range(n_classes):
        rows = rng.permutation(np.flatnonzero(codes == k))
        sizes = _even_sizes(rows.shape[0], len(holders[k]))
        clients[rows] = np.repeat(relabel[holders[k]], sizes)
    return clients


def partition_dirichlet(y, n_clients, *, alpha=0.5, random_state=None):
    """Label-skewed split: each class is shared among clients by Dirichlet(alpha).

    For every class, proportions ``p ~ Dirichlet(alpha, ..., alpha)`` over the
    clients are drawn and the class's shuffled rows are cut accordingly
    (multinomial counts). Small ``alpha`` gives clients dominated by few
    classes; large ``alpha`` approaches an iid split. Any client left empty
    then receives one row taken from the currently largest client, so every
    client holds at least one row (this touches at most ``n_clients - 1`` rows).

    Parameters
    ----------
    y : array-like of shape (n_samples,)
        Class label of every row.
    n_clients : int
        Number of clients, ``1 <= n_clients <= n_samples``.
    alpha : float, default=0.5
        Concentration of the Dirichlet law, ``> 0``.
    random_state : int, RandomState instance or None, default=None
        Seed.

    Returns
    -------
    clients : ndarray of shape (n_samples,), dtype int
        Client index of every row.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_fed.simulation import partition_dirichlet
    >>> y = np.repeat([0, 1, 2], 20)
    >>> clients = partition_dirichlet(y, 5, alpha=0.3, random_state=0)
    >>> bool(np.bincount(clients, minlength=5).min() >= 1)
    True
    """
    codes, counts, n_clients = _check_labels(y, n_clients)
    alpha = _check_number(alpha, "alpha", lambda a: a > 0, "a finite float > 0")
    rng = check_random_state(random_state)
    clients = np.empty(codes.shape[0], dtype=np.intp)
    for k in range(counts.shape[0]):
        rows = rng.permutation(np.flatnonzero(codes == k))
        p = rng.dirichlet(np.full(n_clients, alpha))
        sizes = rng.multinomial(rows.shape[0], p)
        clients[rows] = np.repeat(np.arange(n_clients), sizes)
    sizes = np.bincount(clients, minlength=n_clients)
    for empty in np.flatnonzero(sizes == 0):
        donor = int(np.argmax(sizes))
        row = rng.choice(np.flatnonzero(clients == donor))
        clients[row] = empty
        sizes[donor] -= 1
        sizes[empty] += 1
    return clients


def partition_feature_shift(X, n_clients, *, heterogeneity=0.5, random_state=None):
    """Split rows so that clients differ in their feature distribution.

    Each row gets a sort key that mixes its position along a random direction
    with pure noise, and clients are contiguous, near-equal blocks of rows in
    key order. Precisely: the columns of ``X`` are standardized, a direction
    ``u`` is drawn uniformly on the unit sphere, ``r_j`` is the rank of
    ``x_j @ u`` divided by ``n_samples`` (in ``[0, 1)``), ``e_j ~ U[0, 1)``
    independently, and the key is ``h * r_j + (1 - h) * e_j`` with
    ``h = heterogeneity``. So ``h = 0`` is an iid split and ``h = 1`` makes the
    clients disjoint slabs of the data along ``u``, whose feature means differ
    the most; in between, client means move apart smoothly. This plays the
    role of the heterogeneity ``gamma`` of the one-shot ridge paper (which
    shifts each client's feature mean by ``gamma`` along a random direction)
    for data that already exist.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        Features (dense). Constant columns are allowed.
    n_clients : int
        Number of clients, ``1 <= n_clients <= n_samples``.
    heterogeneity : float in [0, 1], default=0.5
        0 is iid, 1 is maximal feature shift.
    random_state : int, RandomState instance or None, default=None
        Seed of the direction and of the noise.

    Returns
    -------
    clients : ndarray of shape (n_samples,), dtype int
        Client index of every row; client sizes differ by at most one.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_fed.simulation import partition_feature_shift
    >>> X = np.arange(8.0).reshape(-1, 1)
    >>> partition_feature_shift(X, 2, heterogeneity=1.0, random_state=0).tolist()
    [0, 0, 0, 0, 1, 1, 1, 1]
    """
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[0] == 0:
        raise ValueError(f"X must be a non-empty 2d array, got shape {X.shape}.")
    if not np.all(np.isfinite(X)):
        raise ValueError("X contains NaN or infinity.")
    n_samples = X.shape[0]
    n_clients = _check_n_clients(n_clients, n_samples)
    heterogeneity = _check_number(heterogeneity, "heterogeneity", lambda h: 0.0 <= h <= 1.0,
                                "a float in [0, 1]")
    rng = check_random_state(random_state)
    scale = X.std(axis=0)
    scale[scale == 0] = 1.0
    u = rng.standard_normal(X.shape[1])
    u /= np.linalg.norm(u)
    projection = ((X - X.mean(axis=0)) / scale) @ u
    rank = np.empty(n_samples)
    rank[np.argsort(projection, kind="stable")] = np.arange(n_samples) / n_samples
    key = heterogeneity * rank + (1.0 - heterogeneity) * rng.random_sample(n_samples)
    return _cut(np.argsort(key, kind="stable"), _even_sizes(n_samples, n_clients))
