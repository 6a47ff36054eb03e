"""Client dropout: some clients never send their message."""

import numpy as np
from sklearn.utils import check_random_state

from .._clients import group_rows_by_client
from ._partition import _check_number

__all__ = ["drop_clients"]


def drop_clients(clients, *, fraction=None, mask=None, random_state=None):
    """Rows that survive when some clients drop out.

    Give exactly one of ``fraction`` (drop ``floor(fraction * n_clients)``
    clients chosen uniformly at random) or ``mask`` (drop the clients you
    name). At least one client must survive.

    Parameters
    ----------
    clients : array-like of shape (n_samples,)
        Client label of every row (any hashable).
    fraction : float in [0, 1), default=None
        Fraction of the distinct clients to drop at random.
    mask : array-like of bool, shape (n_clients,), default=None
        ``True`` for each client that drops out, aligned with the sorted
        distinct labels of ``clients`` (``np.unique(clients)``; order of first
        appearance when labels cannot be sorted).
    random_state : int, RandomState instance or None, default=None
        Seed of the random choice (``fraction`` only).

    Returns
    -------
    keep : ndarray of shape (n_samples,), dtype bool
        ``True`` for rows whose client survives; fit on ``X[keep]``,
        ``y[keep]``, ``clients[keep]``.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_fed.simulation import drop_clients
    >>> clients = np.array(["a", "b", "b", "c"])
    >>> drop_clients(clients, mask=[False, True, False]).tolist()
    [True, False, False, True]
    >>> int(drop_clients(np.repeat(np.arange(10), 3), fraction=0.5, random_state=0).sum())
    15
    """
    if clients is None:
        raise ValueError("clients must be an array of per-row client labels, got None.")
    clients = np.asarray(clients)
    if clients.ndim != 1 or clients.shape[0] == 0:
        raise ValueError(f"clients must be a non-empty 1d array, got shape {clients.shape}.")
    labels, rows = group_rows_by_client(clients, clients.shape[0])
    n_clients = labels.shape[0]
    if (fraction is None) == (mask is None):
        raise ValueError("give exactly one of fraction and mask.")
    if fraction is not None:
        fraction = _check_number(fraction, "fraction", lambda f: 0.0 <= f < 1.0, "a float in [0, 1)")
        n_drop = min(int(np.floor(fraction * n_clients)), n_clients - 1)
        rng = check_random_state(random_state)
        dropped = np.zeros(n_clients, dtype=bool)
        dropped[rng.choice(n_clients, size=n_drop, replace=False)] = True
    else:
        dropped = np.asarray(mask)
        if dropped.dtype != bool or dropped.shape != (n_clients,):
            raise ValueError(
                f"mask must be a boolean array with one entry per client "
                f"({n_clients}), got dtype {dropped.dtype} and shape {dropped.shape}."
            )
        if dropped.all():
            raise ValueError("mask drops every client; at least one must survive.")
    keep = np.ones(clients.shape[0], dtype=bool)
    for label_rows, gone in zip(rows, dropped):
        if gone:
            keep[label_rows] = False
    return keep
