"""One site's rows from a file on that site: CSV, Parquet or ``.npz``.

A deployed site (a Flower SuperNode, a Dask worker) reads its own table from
a local path; these two functions are the one place that knows the formats.
``.npz`` files are read with ``allow_pickle=False``, so a data file can never
execute code.
"""

from pathlib import Path

import numpy as np

__all__ = ["load_site_data", "save_site_data"]

_TABLE_SUFFIXES = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}


def _as_list(value):
    if value is None:
        return None
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return [str(part) for part in value]


def load_site_data(path, *, target=None, features=None, weight=None, round_column=None,
                   in_round=None):
    """Read one site's rows: features ``X``, targets ``y`` and optional weights.

    Parameters
    ----------
    path : str or path-like
        ``.csv``, ``.parquet`` (needs pyarrow) or ``.npz``. An ``.npz`` holds
        the arrays ``X`` and ``y`` and optionally ``sample_weight`` and
        ``feature_names`` (as written by :func:`save_site_data`).
    target : str or list of str, default=None
        Target column(s) of a table; several (a list or ``"a,b"``) give a
        2-D ``y``. Required for tables, not allowed for ``.npz``.
    features : str or list of str, default=None
        Feature columns, in order (``"a,b"`` or a list). ``None``: every
        column except the target and weight columns.
    weight : str, default=None
        Column of non-negative row weights (tables only).
    round_column : str, default=None
        Column (or ``.npz`` array) saying in which round of a streaming
        protocol each row arrives; it is never a feature.
    in_round : int, default=None
        With ``round_column``: return only the rows of this round.

    Returns
    -------
    X : DataFrame or ndarray of shape (n_samples, n_features)
        A DataFrame when the features have names, so a task's feature
        names are matched by name.
    y : ndarray of shape (n_samples,) or (n_samples, n_targets)
    sample_weight : ndarray of shape (n_samples,) or None

    Examples
    --------
    >>> import numpy as np, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "site.npz")
    >>> save_site_data(path, np.eye(3), [1.0, 2.0, 3.0], feature_names=["a", "b", "c"])
    >>> X, y, w = load_site_data(path, features="c,a")
    >>> X.columns.tolist(), X.to_numpy()[:, 0].tolist(), w is None
    (['c', 'a'], [0.0, 0.0, 1.0], True)
    """
    path = Path(path)
    features = _as_list(features)
    if path.suffix == ".npz":
        if target is not None or weight is not None:
            raise ValueError(
                f"{path}: an .npz file names its arrays (X, y, sample_weight); "
                "target= and weight= apply to CSV and Parquet tables only."
            )
        X, y, sample_weight, arrays = _load_npz(path, features)
        rounds = None if round_column is None else arrays.get(round_column)
        if round_column is not None and rounds is None:
            raise ValueError(f"{path}: no array {round_column!r}; has {sorted(arrays)}.")
        return _rows_of_round(X, y, sample_weight, rounds, in_round)
    kind = _TABLE_SUFFIXES.get(path.suffix.lower())
    if kind is None:
        raise ValueError(
            f"{path}: unsupported data file type {path.suffix!r}; use .csv, .parquet or .npz."
        )
    targets = _as_list(target)
    if not targets:
        raise ValueError(f"{path}: name the target column(s) with target=.")
    import pandas as pd  # the flower extra installs pandas; the core package does not need it

    if kind == "csv":
        # every float must parse to the value that was written, bit for bit: pandas 3
        # does so by default; pandas 2 only with float_precision="round_trip"
        exact = {} if int(pd.__version__.split(".")[0]) >= 3 else {"float_precision": "round_trip"}
        table = pd.read_csv(path, **exact)
    else:
        table = pd.read_parquet(path)
    table.columns = [str(column) for column in table.columns]
    others = targets + [c for c in (weight, round_column) if c is not None]
    wanted = features if features is not None else [c for c in table.columns if c not in others]
    missing = [c for c in others + wanted if c not in table.columns]
    if missing:
        raise ValueError(f"{path}: no column(s) {missing}; the table has {list(table.columns)}.")
    y = table[targets].to_numpy()
    y = y[:, 0] if len(targets) == 1 else y
    sample_weight = None if weight is None else table[weight].to_numpy(dtype=np.float64)
    rounds = None if round_column is None else table[round_column].to_numpy()
    return _rows_of_round(table[wanted], y, sample_weight, rounds, in_round)


def _rows_of_round(X, y, sample_weight, rounds, in_round):
    if rounds is None or in_round is None:
        return X, y, sample_weight
    mask = rounds == in_round
    X = X[mask] if not hasattr(X, "iloc") else X.iloc[np.flatnonzero(mask)]
    return X, y[mask], None if sample_weight is None else sample_weight[mask]


def _load_npz(path, features):
    with np.load(path, allow_pickle=False) as data:
        arrays = {name: data[name] for name in data.files}
    if "X" not in arrays or "y" not in arrays:
        raise ValueError(
            f"{path}: an .npz site file needs arrays 'X' and 'y'; has {sorted(arrays)}."
        )
    X, y = arrays["X"], arrays["y"]
    names = arrays.get("feature_names")
    if names is not None:
        import pandas as pd

        X = pd.DataFrame(X, columns=[str(name) for name in names])
        if features is not None:
            missing = [c for c in features if c not in X.columns]
            if missing:
                raise ValueError(f"{path}: no feature(s) {missing}; has {list(X.columns)}.")
            X = X[features]
    elif features is not None:
        raise ValueError(f"{path}: features= needs an .npz with 'feature_names'.")
    return X, y, arrays.get("sample_weight"), arrays


def save_site_data(path, X, y, sample_weight=None, *, feature_names=None, rounds=None):
    """Write one site's rows as an ``.npz`` that :func:`load_site_data` reads back exactly.

    Parameters
    ----------
    path : str or path-like
        Ends in ``.npz``.
    X : array-like or DataFrame of shape (n_samples, n_features)
        Dense; its dtype is kept (float32 stays float32). A DataFrame's
        column names are stored as the feature names.
    y : array-like of shape (n_samples,) or (n_samples, n_targets)
        Numbers or strings (class labels).
    sample_weight : array-like of shape (n_samples,), default=None
    feature_names : list of str, default=None
        Overrides the column names of a DataFrame ``X``.
    rounds : array-like of shape (n_samples,), default=None
        The round of a streaming protocol in which each row arrives; stored
        as the array ``round`` (read with ``round_column="round"``).
    """
    path = Path(path)
    if path.suffix != ".npz":
        raise ValueError(f"{path}: save_site_data writes .npz files.")
    columns = getattr(X, "columns", None)
    if feature_names is None and columns is not None:
        feature_names = [str(c) for c in columns]
    if hasattr(X, "toarray"):
        raise TypeError("save_site_data writes dense rows; convert a sparse X with X.toarray().")
    arrays = {"X": np.asarray(X), "y": np.asarray(y)}
    for name in ("X", "y"):
        if arrays[name].dtype == object:  # e.g. string class labels in an object array
            arrays[name] = arrays[name].astype(str)
    if sample_weight is not None:
        arrays["sample_weight"] = np.asarray(sample_weight, dtype=np.float64)
    if feature_names is not None:
        arrays["feature_names"] = np.asarray([str(n) for n in feature_names])
    if rounds is not None:
        arrays["round"] = np.asarray(rounds, dtype=np.int64)
    np.savez(path, **arrays)
