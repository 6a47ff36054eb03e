"""Feature schemas, and the checks a site runs on its own rows before it answers.

A task carries the schema the server expects (number of features, and their
names in order when known); a site matches its table to it (a DataFrame's
columns are reordered by name, a missing or extra column is refused by name)
and its reply carries a fingerprint of what it used, which the server checks.
"""

import hashlib
import json

import numpy as np
import scipy.sparse as sp
from sklearn.utils import check_array

from .._compat import _check_sample_weight

__all__ = [
    "FeatureSchema", "check_agreement", "check_site_data", "count_rows",
    "malformed_reply_schema", "match_columns", "reply_schema",
]


def _names_digest(names):
    if names is None:
        return None
    text = json.dumps(list(names), separators=(",", ":")).encode("utf-8")
    return hashlib.sha256(text).hexdigest()[:32]


class FeatureSchema:
    """What a task tells a site about the features it must use.

    Parameters
    ----------
    n_features : int or None
        ``None``: not known yet (the first round of a new federation).
    feature_names : sequence of str or None
        Column names in the order the model uses; ``None`` when unknown.

    Examples
    --------
    >>> schema = FeatureSchema(feature_names=["age", "bmi"])
    >>> schema.n_features, schema.to_json()
    (2, {'n_features': 2, 'feature_names': ['age', 'bmi']})
    """

    def __init__(self, n_features=None, feature_names=None):
        if feature_names is not None:
            feature_names = tuple(str(name) for name in feature_names)
            if n_features is not None and int(n_features) != len(feature_names):
                raise ValueError(
                    f"n_features={n_features} but {len(feature_names)} feature names given."
                )
            n_features = len(feature_names)
            if len(set(feature_names)) != len(feature_names):
                raise ValueError("feature names must be unique.")
        self.n_features = None if n_features is None else int(n_features)
        self.feature_names = feature_names

    @classmethod
    def of(cls, estimator):
        """The schema of a fitted estimator (``n_features_in_``, ``feature_names_in_``)."""
        names = getattr(estimator, "feature_names_in_", None)
        return cls(getattr(estimator, "n_features_in_", None), names)

    @property
    def names_digest(self):
        return _names_digest(self.feature_names)

    def to_json(self):
        names = None if self.feature_names is None else list(self.feature_names)
        return {"n_features": self.n_features, "feature_names": names}

    @classmethod
    def from_json(cls, value):
        """Parse a task's schema (raises ValueError when malformed)."""
        if value is None:
            return cls()
        if not isinstance(value, dict) or set(value) != {"n_features", "feature_names"}:
            raise ValueError("malformed feature schema in task.")
        names, d = value["feature_names"], value["n_features"]
        if names is not None and not (
            isinstance(names, list) and all(isinstance(n, str) for n in names)
        ):
            raise ValueError("malformed feature names in task.")
        if d is not None and not (type(d) is int and d > 0):
            raise ValueError("malformed n_features in task.")
        return cls(d, names)

    def __eq__(self, other):
        return (
            isinstance(other, FeatureSchema)
            and self.n_features == other.n_features
            and self.feature_names == other.feature_names
        )

    def __repr__(self):
        if self.feature_names is not None:
            return f"FeatureSchema(feature_names={list(self.feature_names)!r})"
        return f"FeatureSchema(n_features={self.n_features!r})"


def reply_schema(X, names, y=None, *, send_names=False):
    """The schema fingerprint a reply carries: what the site actually used.

    The names themselves are sent only when the task did not name the
    features (``send_names``), so the server can learn them.
    """
    n_targets = None if y is None else 1 if np.ndim(y) == 1 else int(np.shape(y)[1])
    schema = {
        "n_features": int(X.shape[1]),
        "names": _names_digest(names),
        "n_targets": n_targets,
        "dtype": "float32" if getattr(X, "dtype", None) == np.float32 else "float64",
    }
    if send_names and names is not None:
        schema["feature_names"] = list(names)
    return schema


def match_columns(X, schema=None, *, site=None):
    """Reorder a site's DataFrame to the federation's feature names; nothing else.

    The first step of :func:`check_site_data`, and all a site does before
    handing non-numeric tables (categories, text) to an estimator's own
    validation.

    Parameters
    ----------
    X : array-like or DataFrame
    schema : FeatureSchema, default=None
    site : hashable, default=None
        Named in the error when a column is missing or unexpected (``None``:
        the error is not prefixed, for callers that prefix it themselves).

    Returns
    -------
    X : array-like or DataFrame
        A DataFrame's columns in the schema's order; anything else as given.
    names : list of str or None
        The feature names used, in order.

    Examples
    --------
    >>> import pandas as pd
    >>> frame = pd.DataFrame({"b": ["x"], "a": [1]})
    >>> X, names = match_columns(frame, FeatureSchema(feature_names=["a", "b"]))
    >>> list(X.columns), names
    (['a', 'b'], ['a', 'b'])
    """
    schema = FeatureSchema() if schema is None else schema
    columns = getattr(X, "columns", None)
    names = None if columns is None else [str(c) for c in columns]
    if schema.feature_names is not None and names is not None:
        expected = list(schema.feature_names)
        missing = [n for n in expected if n not in names]
        extra = [n for n in names if n not in set(expected)]
        if missing or extra:
            parts = [f"{what} columns {columns}" for what, columns in
                     (("missing", missing), ("unexpected", extra)) if columns]
            message = f"the table does not match the federation's features: {' and '.join(parts)}."
            raise ValueError(message if site is None else f"site {site!r}: {message}")
        if names != expected:
            X = X[[X.columns[names.index(n)] for n in expected]]
        names = expected
    elif names is None:
        names = None if schema.feature_names is None else list(schema.feature_names)
    return X, names


def _listing(names, limit=8):
    names = list(names)
    shown = ", ".join(repr(n) for n in names[:limit])
    return f"[{shown}{', ...' if len(names) > limit else ''}]"


def nan_advice(exc):
    """What to do about missing values, appended to a validation error that reports NaN."""
    if "NaN" not in str(exc) or "y contains NaN" in str(exc):
        return ""
    return (" Fill the missing values where they are: put sklearn_fed.FederatedSimpleImputer "
            "first (make_federated_pipeline(FederatedSimpleImputer(), estimator)), whose "
            "statistics are computed from every site's rows without moving them.")


def unnamed_columns_message(schema, site):
    """Why a site refuses a task that names its features when its rows name no columns."""
    return (
        f"site {site!r}: the task names its features {_listing(schema.feature_names)} but this "
        "site's rows have no column names, so their order cannot be checked (a wrong order "
        "would give a wrong model without any error). Give the rows as a DataFrame with these "
        "columns (on Flower: a CSV or Parquet file, or an .npz saved with feature_names=), or, "
        "if the columns are in this order, say so: SitePolicy(columns_in_order=True) (on "
        "Flower: the node config's columns-in-order=true)."
    )


def check_site_data(
    X, y=None, sample_weight=None, *, schema=None, site=None, accept_sparse=True, y_numeric=True,
    ensure_min_samples=1,
):
    """Validate one site's rows against a task's schema, like ``validate_data`` does.

    DataFrames are matched to ``schema.feature_names`` by column name and
    reordered; lists, 1-D ``X``, NaN or infinity, a length mismatch, or a
    missing/extra column raise a ``ValueError`` that names the site, before
    anything is computed or sent.

    Parameters
    ----------
    X : array-like, sparse matrix or DataFrame of shape (n_samples, n_features)
    y : array-like of shape (n_samples,) or (n_samples, n_targets), default=None
    sample_weight : array-like of shape (n_samples,), default=None
    schema : FeatureSchema, default=None
    site : hashable, default=None
        Used in error messages.
    accept_sparse : bool, default=True
    y_numeric : bool, default=True
    ensure_min_samples : int, default=1
        Fewer rows are refused (0: a streaming site may answer from rows it held).

    Returns
    -------
    X, y, sample_weight : arrays
        ``X`` float64 or float32 (sparse stays sparse, as CSR).
    names : list of str or None
        The feature names used, in order.

    Examples
    --------
    >>> import pandas as pd
    >>> frame = pd.DataFrame({"b": [1.0, 2.0], "a": [3.0, 4.0]})
    >>> X, y, _, names = check_site_data(frame, [0.0, 1.0], schema=FeatureSchema(
    ...     feature_names=["a", "b"]))
    >>> X.tolist(), names
    ([[3.0, 1.0], [4.0, 2.0]], ['a', 'b'])
    """
    where = "site data" if site is None else f"site {site!r}"
    schema = FeatureSchema() if schema is None else schema
    try:
        X, names = match_columns(X, schema)
        X = check_array(
            X,
            accept_sparse=["csr", "csc", "coo"] if accept_sparse else False,
            dtype=[np.float64, np.float32],
            ensure_all_finite=True,
            ensure_2d=True,
            ensure_min_samples=ensure_min_samples,
            input_name="X",
        )
        if sp.issparse(X):
            X = X.tocsr()
        if schema.n_features is not None and X.shape[1] != schema.n_features:
            raise ValueError(
                f"X has {X.shape[1]} features, but the federation expects {schema.n_features}."
            )
        if y is not None:
            y = check_array(
                y,
                ensure_2d=False,
                dtype=np.float64 if y_numeric else None,
                ensure_all_finite=True,
                ensure_min_samples=ensure_min_samples,
                input_name="y",
            )
            if y.ndim not in (1, 2):
                raise ValueError(f"y must be 1-D or 2-D, got {y.ndim} dimensions.")
            if y.shape[0] != X.shape[0]:
                raise ValueError(
                    f"X has {X.shape[0]} rows but y has {y.shape[0]}: they must match."
                )
        if sample_weight is not None:
            sample_weight = _check_sample_weight(
                sample_weight, X, dtype=np.float64, ensure_non_negative=True
            )
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}{nan_advice(exc)}") from exc
    return X, y, sample_weight, names


def count_rows(n_samples, rows):
    """How many rows ``rows`` (a slice, an index array, or None: all) selects of ``n_samples``.

    Examples
    --------
    >>> count_rows(10, slice(2, 5)), count_rows(10, [1, 7]), count_rows(10, None)
    (3, 2, 10)
    """
    if rows is None:
        return n_samples
    return len(range(n_samples)[rows]) if isinstance(rows, slice) else len(rows)


_DTYPES = ("float32", "float64")
_REQUIRED_KEYS = frozenset({"n_features", "names", "n_targets", "dtype"})


def malformed_reply_schema(schema):
    """Why a reply's schema (see :func:`reply_schema`) is malformed; None when well formed."""
    if not isinstance(schema, dict):
        return "the reply carries no feature schema."
    # exactly the keys reply_schema writes: a missing one must not surface later as a KeyError
    if not _REQUIRED_KEYS <= set(schema) <= _REQUIRED_KEYS | {"feature_names"}:
        return f"the reply's schema must have the keys {sorted(_REQUIRED_KEYS)} (and " \
            "optionally feature_names)."
    n_features, names, n_targets = (
        schema.get("n_features"), schema.get("names"), schema.get("n_targets"))
    if type(n_features) is not int or n_features < 0:
        return "the reply carries no valid feature count."
    if names is not None and not (isinstance(names, str) and len(names) == 32):
        return "the reply's feature-name digest is malformed."
    if n_targets is not None and not (type(n_targets) is int and n_targets > 0):
        return "the reply's target count is malformed."
    if schema.get("dtype") not in _DTYPES:
        return f"the reply's dtype must be one of {list(_DTYPES)}."
    listed = schema.get("feature_names")
    if listed is not None and not (
        isinstance(listed, list) and len(listed) == n_features
        and all(isinstance(name, str) for name in listed)
        and len(set(listed)) == len(listed) and _names_digest(listed) == names
    ):
        return "the reply's feature names are malformed or do not match their digest."
    return None


def check_agreement(schemas):
    """Replies of one round must describe the same features and targets.

    What the server declared (``feature_names``, ``n_features``, ``n_targets``)
    was checked reply by reply, naming the site that differs. What it did not
    declare has no reference: the first reply read is no better than any other,
    so a disagreement refuses the round and blames no site (a hostile reply read
    first must not get the honest sites named or dropped).
    """
    groups, shown = {}, {}
    for site, schema in schemas.items():
        described = (schema["n_features"], schema["names"], schema["n_targets"])
        groups.setdefault(described, []).append(site)
        # the names themselves travel when the task named none (checked against the digest)
        shown.setdefault(described, schema.get("feature_names"))
    if len(groups) > 1:
        def describe(described):
            n_features, _, n_targets = described
            names = shown[described]
            columns = f"columns {_listing(names, 12)}" if names is not None else (
                f"{n_features} unnamed columns")
            return columns + ("" if n_targets is None or not targets_differ
                              else f" and {n_targets} target(s)")

        targets_differ = len({described[2] for described in groups}) > 1

        listing = "; ".join(f"site(s) {sites} have {describe(described)}"
                            for described, sites in groups.items())
        raise ValueError(
            "the sites' replies disagree on their features or targets, and the server "
            f"declared none to tell which are right: {listing}. Declare the features with "
            "make_server(feature_names=[...]) (on Flower: the run config's feature-names, a "
            "JSON list such as '[\"age\", \"bmi\"]'); then every site's table is matched by "
            "column name and reordered, and a site that lacks a column is named and refused. "
            "(make_server(n_targets=...) declares the targets.)"
        )
