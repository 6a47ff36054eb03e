"""Loaders for the tabular data sets of the FedDelta experiments (local CSV paths)."""

import csv
import os

import numpy as np

__all__ = ["load_california_housing_csv", "load_insurance_csv"]

_MISSING = {"", "na", "nan", "null", "none"}


def _load_csv(path, target, categorical, return_feature_names):
    path = os.fspath(path)
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        columns = reader.fieldnames or []
        needed = set(categorical) | {target}
        missing = sorted(needed - set(columns))
        if missing:
            raise ValueError(f"{path}: missing column(s) {missing}; found {columns}.")
        records = [
            row
            for row in reader
            if all(row.get(c) is not None and row[c].strip().lower() not in _MISSING
                   for c in columns)
        ]
    if not records:
        raise ValueError(f"{path}: no complete rows.")
    numeric = [c for c in columns if c not in needed]
    try:
        values = np.array([[float(row[c]) for c in numeric] for row in records])
    except ValueError as exc:
        raise ValueError(f"{path}: a numeric column holds text ({exc}).") from None
    blocks, names = [values.reshape(len(records), len(numeric))], list(numeric)
    for column in categorical:  # one-hot, one column per level (sorted)
        levels, codes = np.unique([row[column].strip() for row in records], return_inverse=True)
        blocks.append((codes[:, None] == np.arange(len(levels))).astype(np.float64))
        names += [f"{column}={level}" for level in levels]
    X = np.hstack(blocks)
    y = np.array([float(row[target]) for row in records])
    finite = np.isfinite(X).all(axis=1) & np.isfinite(y)
    X, y = X[finite], y[finite]
    if return_feature_names:
        return X, y, names
    return X, y


def load_california_housing_csv(path, *, return_feature_names=False):
    """Load the California Housing Prices CSV (Kaggle layout) from a local path.

    ``median_house_value`` is the target; ``ocean_proximity`` is one-hot
    encoded (one column per level); rows with a missing value (207 rows
    lack ``total_bedrooms`` in the usual file) are dropped.

    Parameters
    ----------
    path : str or path-like
        The ``housing.csv`` file.
    return_feature_names : bool, default=False
        Also return the column names of ``X``.

    Returns
    -------
    X : ndarray of shape (n_samples, 13)
    y : ndarray of shape (n_samples,)
    feature_names : list of str
        Only when ``return_feature_names=True``.

    Examples
    --------
    >>> import tempfile, os
    >>> from sklearn_fed.datasets import load_california_housing_csv
    >>> text = ("longitude,latitude,housing_median_age,total_rooms,total_bedrooms,"
    ...         "population,households,median_income,median_house_value,ocean_proximity\\n"
    ...         "-122.2,37.9,41,880,129,322,126,8.3,452600,NEAR BAY\\n"
    ...         "-122.2,37.9,21,7099,,2401,1138,8.3,358500,NEAR BAY\\n"
    ...         "-118.4,34.1,30,1000,200,500,190,3.1,200000,INLAND\\n")
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     path = os.path.join(folder, "housing.csv")
    ...     _ = open(path, "w").write(text)
    ...     X, y, names = load_california_housing_csv(path, return_feature_names=True)
    >>> X.shape, names[-2:]
    ((2, 10), ['ocean_proximity=INLAND', 'ocean_proximity=NEAR BAY'])
    """
    return _load_csv(path, "median_house_value", ["ocean_proximity"], return_feature_names)


def load_insurance_csv(path, *, return_feature_names=False):
    """Load the Medical Insurance Cost CSV (Kaggle layout) from a local path.

    ``charges`` is the target; ``sex``, ``smoker`` and ``region`` are one-hot
    encoded (one column per level); rows with a missing value are dropped.

    Parameters
    ----------
    path : str or path-like
        The ``insurance.csv`` file.
    return_feature_names : bool, default=False
        Also return the column names of ``X``.

    Returns
    -------
    X : ndarray of shape (n_samples, 11)
    y : ndarray of shape (n_samples,)
    feature_names : list of str
        Only when ``return_feature_names=True``.

    Examples
    --------
    >>> import tempfile, os
    >>> from sklearn_fed.datasets import load_insurance_csv
    >>> text = ("age,sex,bmi,children,smoker,region,charges\\n"
    ...         "19,female,27.9,0,yes,southwest,16884.924\\n"
    ...         "18,male,33.77,1,no,southeast,1725.5523\\n")
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     path = os.path.join(folder, "insurance.csv")
    ...     _ = open(path, "w").write(text)
    ...     X, y = load_insurance_csv(path)
    >>> X.shape, y.tolist()
    ((2, 9), [16884.924, 1725.5523])
    """
    return _load_csv(path, "charges", ["sex", "smoker", "region"], return_feature_names)

