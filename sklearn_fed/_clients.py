"""Turning a per-row ``clients`` array into groups of rows, one per client."""

import numpy as np

__all__ = ["group_rows_by_client", "known_labels", "label_array"]


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
    rows : list of (slice or ndarray)
        For each label, the rows of that client: a ``slice`` when they are
        contiguous (so no copy is made), else an increasing index array.

    Examples
    --------
    >>> labels, rows = group_rows_by_client(["b", "a", "b", "c", "c"], 5)
    >>> labels.tolist()
    ['a', 'b', 'c']
    >>> rows
    [slice(1, 2, None), array([0, 2]), slice(3, 5, None)]
    """
    if clients is None:
        return np.array([0]), [slice(0, n_samples)]
    clients = np.asarray(clients)
    if clients.ndim == 2 and clients.shape[1] == 1:
        clients = clients[:, 0]
    if clients.ndim != 1 or clients.shape[0] != n_samples:
        raise ValueError(
            f"clients must hold one label per row: got an array of shape "
            f"{clients.shape} for {n_samples} rows."
        )
    if clients.dtype.kind == "f" and np.isnan(clients).any():
        raise ValueError("clients contains NaN; every row needs a client label.")
    try:
        labels, inverse = np.unique(clients, return_inverse=True)
    except TypeError:  # mixed, unorderable labels: keep order of first appearance
        position = {}
        inverse = np.fromiter(
            (position.setdefault(label, len(position)) for label in clients.tolist()),
            dtype=np.intp,
            count=n_samples,
        )
        labels = np.empty(len(position), dtype=object)
        labels[:] = list(position)
    inverse = inverse.reshape(-1)
    order = np.argsort(inverse, kind="stable")
    bounds = np.cumsum(np.bincount(inverse, minlength=len(labels)))[:-1]
    rows = []
    for idx in np.split(order, bounds):
        if idx[-1] - idx[0] + 1 == idx.shape[0]:
            rows.append(slice(int(idx[0]), int(idx[-1]) + 1))
        else:
            rows.append(idx)
    return labels, rows


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
    if array.ndim != 1 or array.tolist() != [
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
    from .protocol import label_key

    known = list(previous_labels)
    seen = {label_key(label) for label in known}
    for label in new_labels:
        if label_key(label) not in seen:
            seen.add(label_key(label))
            known.append(label)
    return label_array(known)
