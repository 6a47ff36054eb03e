"""The ``clients`` argument of every ``fit``: checked, grouped into rows, kept as labels.

Every estimator calls :func:`take_clients` on the raw ``X`` and ``clients``
before validating ``X`` (it warns when ``clients`` is missing and the answer
depends on it, and reads pandas labels by index), then
:func:`group_rows_by_client` on the validated rows.
"""

from collections.abc import Mapping, Sequence

import numpy as np

from .protocol import label_key
from .protocol._simulate import MadeWhenRead
from .utils._warnings import warn

__all__ = [
    "MissingClientsWarning",
    "group_rows_by_client",
    "known_labels",
    "label_array",
    "take_clients",
]


class MissingClientsWarning(UserWarning):
    """``fit`` got no ``clients``, and this estimator's answer depends on them.

    Issued once per ``fit`` / ``partial_fit`` call by the estimators whose
    result changes with the split of rows into clients (all but the exact
    ones: :class:`~sklearn_fed.FederatedRidge` and
    :class:`~sklearn_fed.ProjectedFederatedRidge` give the same model for any
    split). The message says what the estimator does instead and how to pass
    ``clients`` directly, through a Pipeline, or with metadata routing. To
    fit without clients on purpose, filter it::

        warnings.filterwarnings("ignore", category=MissingClientsWarning)
    """


def take_clients(estimator, X, clients):
    """The ``clients`` of a fit call, checked against the raw ``X``.

    - ``None``: a :class:`MissingClientsWarning` when the estimator's answer
      depends on the clients (its ``_without_clients`` says what happens
      instead; estimators with ``_exact_federation`` never warn).
    - A column name (``clients="region"``): refused with the call to write,
      because the column would otherwise have to be left out of ``X`` at
      ``fit`` but not at ``predict``.
    - A pandas Series when ``X`` is a DataFrame: aligned to ``X`` by index
      (an index that does not match is refused). In any other case labels
      are taken by position (row ``i`` of ``X`` belongs to ``clients[i]``),
      as inside a Pipeline, whose steps keep the row order.

    Parameters
    ----------
    estimator : estimator
        The estimator being fitted (for its name and ``_without_clients``).
    X : array-like, DataFrame or sparse matrix
        The rows, before validation.
    clients : array-like, pandas Series, or None
        One client label per row.

    Returns
    -------
    clients : array-like of shape (n_samples,) or None
        The labels in the row order of ``X``.

    Examples
    --------
    >>> import pandas as pd
    >>> from sklearn_fed import FederatedRidge
    >>> X = pd.DataFrame({"age": [30, 40, 50]}, index=[10, 11, 12])
    >>> by_index = pd.Series(["b", "a", "a"], index=[12, 11, 10])
    >>> take_clients(FederatedRidge(), X, by_index).tolist()
    ['a', 'a', 'b']
    """
    if clients is None:
        consequence = getattr(estimator, "_without_clients", "every row is treated as one client")
        if consequence is not None and not getattr(estimator, "_exact_federation", False):
            warn(f"{type(estimator).__name__} was fitted without clients, so {consequence}. "
                 f"{_how_to_pass(estimator)}", MissingClientsWarning)
        return None
    if np.ndim(clients) == 0:
        raise ValueError(_column_name_message(X, clients))
    if _is_pandas(clients) and _is_pandas(X) and hasattr(X, "columns"):
        return _aligned(clients, X)
    return clients


def _is_pandas(obj):
    return type(obj).__module__.partition(".")[0] == "pandas"


def _aligned(series, X):
    """Labels of ``series`` in the row order of the DataFrame ``X`` (matched by index)."""
    if not hasattr(series, "reindex"):  # a pandas array without an index
        return series
    if not series.index.equals(X.index):
        if (
            series.index.has_duplicates
            or X.index.has_duplicates
            or len(series) != len(X)
            or not X.index.isin(series.index).all()
        ):
            raise ValueError(
                "clients is a pandas Series whose index does not match X's index, so "
                "its labels cannot be matched to rows. Give it X's index, or pass "
                "clients.to_numpy() to take the labels by position."
            )
        series = series.reindex(X.index)
    return series.to_numpy()


def _column_name_message(X, name):
    if hasattr(X, "columns") and name in list(X.columns):
        return (
            f"clients={name!r} names a column of X; pass its values and leave it out "
            f"of the features: fit(X.drop(columns={name!r}), y, clients=X[{name!r}]) "
            f"(then predict on X.drop(columns={name!r}) too)."
        )
    return (
        f"clients must hold one label per row; got the single value {name!r}. To use "
        f"a column of a DataFrame df as the clients: "
        f"fit(df.drop(columns=[col]), y, clients=df[col])."
    )


def _how_to_pass(estimator):
    """The sentence that says how to give ``clients``, for the routing mode in force."""
    from sklearn import get_config

    name = type(estimator).__name__
    if not get_config().get("enable_metadata_routing", False):
        return (
            "Pass one client label per row: fit(X, y, clients=...), or in a Pipeline "
            "pipe.fit(X, y, <step>__clients=...)."
        )
    try:
        request = estimator._get_metadata_request().fit.requests.get("clients")
    except AttributeError:  # an estimator without metadata routing support
        request = None
    if request is None or request is False:
        return (
            f"Metadata routing is on and {name} does not request clients: call "
            f"set_fit_request(clients=True) on it (or clients=\"groups\" to share "
            f"GroupKFold's groups) and pass clients=... to the Pipeline or search."
        )
    alias = "clients" if request is True else request
    return f"Pass {alias}=... to the Pipeline or search (or clients=... to fit)."


def _missing_labels(clients):
    """Boolean mask of labels that are missing: NaN, None, NaT or pandas.NA."""
    kind = clients.dtype.kind
    if kind == "f" or kind == "c":
        return np.isnan(clients)
    if kind in "mM":
        return np.isnat(clients)
    if kind == "O":
        return np.fromiter((_is_missing(label) for label in clients), bool, clients.shape[0])
    return np.zeros(clients.shape[0], dtype=bool)


def _is_missing(label):
    if label is None:
        return True
    try:
        return bool(label != label)  # noqa: PLR0124 (NaN and NaT differ from themselves)
    except (TypeError, ValueError):  # pandas.NA: its comparisons are undecided
        return True


def group_rows_by_client(clients, n_samples):
    """Group row positions by client label.

    Parameters
    ----------
    clients : array-like of shape (n_samples,) or None
        Client label of each row (any hashable). ``None`` puts every row in one
        client labelled ``0``.
    n_samples : int
        Number of rows the labels must describe.

    Returns
    -------
    labels : ndarray of shape (n_clients,)
        Distinct labels, sorted when they can be sorted, otherwise in order of
        first appearance.
    rows : ClientRows
        For each label, the rows of that client: a ``slice`` when they are
        contiguous (so no copy is made), else an increasing index array; and
        ``rows.counts``, the number of rows of each (an array), known before
        any row index is made.

    Examples
    --------
    >>> labels, rows = group_rows_by_client(["b", "a", "b", "c", "c"], 5)
    >>> labels.tolist(), rows.counts.tolist()
    (['a', 'b', 'c'], [1, 2, 2])
    >>> list(rows)
    [slice(1, 2, None), array([0, 2]), slice(3, 5, None)]
    """
    if clients is None:
        return np.array([0]), ClientRows(np.array([n_samples]), lambda: [slice(0, n_samples)])
    clients = np.asarray(clients)
    if clients.ndim == 2 and clients.shape[1] == 1:
        clients = clients[:, 0]
    if clients.ndim != 1 or clients.shape[0] != n_samples:
        raise ValueError(
            f"clients must hold one label per row: got an array of shape "
            f"{clients.shape} for {n_samples} rows."
        )
    missing = _missing_labels(clients)
    if missing.any():
        raise ValueError(
            f"clients has {int(missing.sum())} missing labels (NaN or None), the first "
            f"at row {int(np.argmax(missing))}; every row needs a client: drop those "
            f"rows or give them a label."
        )
    runs = _label_runs(clients)
    if runs is not None:  # each client's rows are one run: slices, no sort
        return runs
    small = _small_integer_labels(clients)
    if small is not None:
        labels, keys, counts = small
    else:
        try:
            labels, keys = np.unique(clients, return_inverse=True)
        except TypeError:  # mixed, unorderable labels: keep order of first appearance
            labels, keys = _first_appearance(clients, n_samples)
        keys = keys.reshape(-1)
        counts = np.bincount(keys, minlength=len(labels))

    def rows():
        # Keys order rows as the labels do. Stable sorts of 16-bit integers are
        # radix sorts in numpy: O(n).
        order = np.argsort(keys.astype(np.uint16) if keys.max(initial=0) < 2**16 else keys,
                           kind="stable")
        stops = np.cumsum(counts)
        starts = stops - counts
        # A label's rows are contiguous when its first and last row span its count.
        firsts, lasts = order[starts].tolist(), order[stops - 1].tolist()
        return [
            slice(first, last + 1) if last - first + 1 == count else order[start:stop]
            for first, last, count, start, stop in zip(
                firsts, lasts, counts.tolist(), starts.tolist(), stops.tolist())
        ]

    return labels, ClientRows(counts, rows)


class ClientRows(MadeWhenRead, Sequence):
    """Each client's rows (see :func:`group_rows_by_client`), made when first read.

    ``counts`` (an integer array) is known at once; the row indices (a sort,
    for shuffled labels, and one object per client) are made on first
    access, so a round that needs only the counts (a pooled round, see
    :func:`~sklearn_fed.protocol.run_simulation`) never makes them.
    """

    def __init__(self, counts, make):
        super().__init__(len(counts), make)
        self.counts = counts

    def __repr__(self):
        return f"ClientRows({self._all()!r})"


def _label_runs(clients):
    """``(labels, slices)`` when every label's rows form one run and runs are sorted, else None.

    One O(n) comparison decides it: the common layout of rows stacked site
    after site needs no sort at all.
    """
    if clients.dtype.kind not in "biuf" or clients.shape[0] == 0:
        return None
    if not (clients[1:] >= clients[:-1]).all():
        return None  # a label comes back, or runs are out of order: np.unique's order
    starts = np.concatenate([[0], np.flatnonzero(clients[1:] != clients[:-1]) + 1])
    labels = clients[starts]
    stops = np.append(starts[1:], clients.shape[0])
    return labels, ClientRows(
        stops - starts,
        lambda: [slice(a, b) for a, b in zip(starts.tolist(), stops.tolist())],
    )


def _small_integer_labels(clients):
    """``(labels, keys, counts)`` by counting, for integers in a small range; else None.

    ``labels`` are the distinct labels, sorted; ``keys`` give each row's label
    an integer in the labels' order (its offset from the smallest label) and
    ``counts`` the rows of each label.
    """
    if clients.dtype.kind not in "iu" or clients.shape[0] == 0:
        return None
    low, high = int(clients.min()), int(clients.max())
    if high - low > 4 * clients.shape[0]:
        return None
    offset = clients - low
    counts = np.bincount(offset, minlength=high - low + 1)
    present = np.flatnonzero(counts)
    return (present + low).astype(clients.dtype), offset, counts[present]


def _first_appearance(clients, n_samples):
    """Labels in order of first appearance and each row's position among them."""
    position = {}
    inverse = np.fromiter(
        (position.setdefault(label, len(position)) for label in clients.tolist()),
        dtype=np.intp,
        count=n_samples,
    )
    labels = np.empty(len(position), dtype=object)
    labels[:] = list(position)
    return labels, inverse


def label_array(labels):
    """Client labels as an ndarray, keeping mixed types (e.g. 1 and "a") as objects.

    ``np.asarray([1, "a"])`` would silently turn ``1`` into ``"1"``.

    Examples
    --------
    >>> label_array([1, "a"]).tolist(), label_array([3, 1]).dtype.kind
    ([1, 'a'], 'i')
    """
    labels = list(labels)
    array = np.asarray(labels)
    if array.ndim != 1 or array.dtype.kind not in "biuf" and array.tolist() != [
        label.item() if hasattr(label, "item") else label for label in labels
    ]:
        array = np.empty(len(labels), dtype=object)
        array[:] = labels
    return array


def known_labels(previous_labels, new_labels):
    """Labels of every client so far, in order of first appearance (for ``clients_``).

    Examples
    --------
    >>> known_labels(["a", "b"], ["b", 3]).tolist()
    ['a', 'b', 3]
    """
    if len(previous_labels) == 0 and isinstance(new_labels, Mapping):
        return label_array(new_labels)  # the sites of one round: distinct already
    known = list(previous_labels)
    seen = {label_key(label) for label in known}
    for label in new_labels:
        if label_key(label) not in seen:
            seen.add(label_key(label))
            known.append(label)
    return label_array(known)
