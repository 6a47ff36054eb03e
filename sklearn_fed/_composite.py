"""What the composite protocols (pipelines, column transformers) share.

A composite protocol runs its parts' own protocols: its server asks each
part's server for the part's tasks and wraps them (with the fitted models
the sites need to transform their rows first) into one task per site; its
client rebuilds those models, transforms the site's rows, and answers each
part's task with the part's own client; its server hands each part's
replies back to the part's server, which validates and applies them as it
would alone. So a step validates its messages the same way inside a
pipeline as on its own, and the bytes of a part are the bytes it would send
alone plus the envelope.
"""

import hashlib

import numpy as np
import pandas as pd
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.kernel_approximation import RBFSampler
from sklearn.preprocessing import (
    Binarizer,
    FunctionTransformer,
    Normalizer,
    PolynomialFeatures,
    SplineTransformer,
)
from sklearn.random_projection import GaussianRandomProjection, SparseRandomProjection
from sklearn.utils import _safe_indexing
from sklearn.utils.validation import _num_samples

from ._clients import known_labels
from ._compat import _check_sample_weight
from .base import FederatedEstimatorMixin
from .privacy import RangeScaler
from .protocol import (
    Client,
    InvalidClientMessage,
    Server,
    match_columns,
    nest,
    unnest,
)
from .protocol._fields import server_error

__all__ = [
    "DATA_FREE",
    "DataFreeClient",
    "DataFreeServer",
    "FederatedCompositeMixin",
    "answer_part",
    "broadcast_state",
    "check_data_free",
    "check_federated",
    "commit_federation",
    "exact_part",
    "fit_data_free",
    "fitted_digest",
    "is_data_free",
    "load_fitted",
    "make_part_server",
    "parse_parts",
    "prefixed",
    "site_rows",
    "table_feature_names",
    "take_prefixed",
]


def table_feature_names(X):
    """The feature names ``fit`` tells a server for the table ``X``: its column names when
    they are all strings (as scikit-learn's ``feature_names_in_``), else None."""
    columns = getattr(X, "columns", None)
    if columns is not None and all(isinstance(c, str) for c in columns):
        return [str(c) for c in columns]
    return None


def site_rows(rows, X, y, sample_weight):
    """The rows ``rows`` of a site's table, targets and weights (None: all of them)."""
    if rows is None:
        return X, y, sample_weight
    return (_safe_indexing(X, rows), None if y is None else _safe_indexing(y, rows),
            None if sample_weight is None else sample_weight[rows])


def commit_federation(estimator, ledger, parts, sites):
    """A composite's ``communication_`` (the model size summed over its fitted ``parts``),
    ``clients_`` and ``n_clients_``."""
    ledger.n_parameters = sum(
        part.communication_.n_parameters for part in parts if hasattr(part, "communication_"))
    estimator.communication_ = ledger
    estimator.clients_ = known_labels([], sites)
    estimator.n_clients_ = len(estimator.clients_)


class FederatedCompositeMixin(FederatedEstimatorMixin):
    """The fit template (:class:`~sklearn_fed.base.FederatedEstimatorMixin`) for composites.

    A composite validates no values itself (its steps do, at the sites): its
    rows are the table as its first step will read it, and its server is told
    the table's column names, as a user would tell a deployed server.
    """

    def _validate_fit_data(self, X, y, sample_weight, *, reset):
        """The table in a form whose rows can be taken (``reset`` unused): DataFrames are kept
        (their column dtypes matter), sparse as CSR, a list of strings an object array."""
        if sp.issparse(X):
            X = X.tocsr()
        elif not hasattr(X, "iloc"):
            array = np.asarray(X)
            X = np.asarray(X, dtype=object) if (
                not hasattr(X, "dtype") and array.dtype.kind == "U") else array
            if X.ndim != 2:
                raise ValueError(f"Expected a 2D table of rows, got an array of shape {X.shape}.")
        y = y if y is None or hasattr(y, "iloc") else np.asarray(y)  # a Series is kept
        n_rows = _num_samples(X)
        if y is not None and _num_samples(y) != n_rows:
            raise ValueError(f"X has {n_rows} rows but y has {_num_samples(y)}.")
        if sample_weight is not None:
            sample_weight = _check_sample_weight(
                sample_weight, np.empty((n_rows, 0)), dtype=np.float64, ensure_non_negative=True)
        return X, y, sample_weight

    def _server_feature_names(self, X):
        return table_feature_names(X)

    def fit_transform(self, X, y=None, clients=None, **params):
        """Fit (see :meth:`fit`), then transform ``X`` with the fitted estimator.

        Returns
        -------
        X_t : ndarray, sparse matrix or DataFrame
        """
        return self.fit(X, y, clients=clients, **params).transform(X)


def check_federated(estimator, name, *, transformer):
    """Refuse a part that would be fitted on pooled rows: it must have the protocol roles."""
    if estimator is None or (isinstance(estimator, str) and estimator in ("passthrough", "drop")):
        return
    if transformer and is_data_free(estimator):
        check_data_free(estimator, name)
        return
    if not hasattr(estimator, "make_server") or (
            transformer and not hasattr(estimator, "_broadcast_state")):
        raise TypeError(
            f"step {name!r} ({type(estimator).__name__}) is not federated: fitting it would "
            "need every site's rows in one place. Use its sklearn_fed counterpart (e.g. "
            "FederatedStandardScaler for StandardScaler), or a transformer whose fit reads "
            f"no rows ({', '.join(sorted(DATA_FREE))})."
        )


def prefixed(fields_arrays, prefix, arrays):
    """Add a part's arrays to ``arrays`` under ``prefix``; returns the part's fields."""
    fields, part_arrays = fields_arrays
    for name, value in part_arrays.items():
        arrays[prefix + name] = value
    return fields


def take_prefixed(arrays, prefix):
    """The arrays of one part (``prefix`` removed)."""
    return {name[len(prefix):]: value for name, value in arrays.items() if name.startswith(prefix)}


def make_part_server(part, **kwargs):
    """The server role of a composite's part (a data-free step's: :class:`DataFreeServer`)."""
    if is_data_free(part):
        return DataFreeServer(part, **kwargs)
    return part.make_server(**kwargs)


def exact_part(part):
    """Whether a part gives the pooled model for any split of the rows."""
    return is_data_free(part) or getattr(part, "_exact_federation", False)


def broadcast_state(fitted):
    """``(fields, arrays)`` the sites rebuild a fitted part from (see :func:`load_fitted`).

    A data-free step travels as its columns and the digest of its fit: each
    site fits it again and checks the digest.
    """
    if not is_data_free(fitted):
        return fitted._broadcast_state()
    names = getattr(fitted, "feature_names_in_", None)
    return {"data_free": fitted_digest(fitted), "n_features": int(fitted.n_features_in_),
            "feature_names": None if names is None else [str(n) for n in names]}, {}


def load_fitted(template, fields, arrays):
    """A site's copy of a fitted part: its own unfitted ``template`` plus the broadcast state."""
    if not isinstance(fields, dict):
        server_error("malformed fitted model in the task.")
    if not is_data_free(template):
        return clone(template)._load_broadcast_state(fields, arrays)
    n, names = fields.get("n_features"), fields.get("feature_names")
    if set(fields) != {"data_free", "n_features", "feature_names"} or arrays or not (
            type(n) is int and 0 < n < 2**31 and (names is None or (
                isinstance(names, list) and len(names) == n
                and all(isinstance(x, str) for x in names)))):
        server_error("malformed fitted data-free step.")
    fitted = fit_data_free(template, n, names)
    if fitted_digest(fitted) != fields["data_free"]:
        server_error(f"its {type(template).__name__} differs from this site's fit of the same "
                      "step (another version of it runs at the server or here).")
    return fitted


def answer_part(estimator, meta, arrays, prefix, X, y, sample_weight, *, site, policy):
    """A site's reply to one part's nested task, made by that part's own client role.

    Returns the nested reply (``meta`` for the outer fields; its arrays are
    added to the returned dict under ``prefix``).
    """
    task = unnest(meta, arrays, prefix, site=site, fail=server_error)
    client = (DataFreeClient(estimator, policy=policy) if is_data_free(estimator)
              else estimator.make_client(policy=policy))
    # The part's reply is screened by the site's policy as a reply of its own would be.
    reply = client.checked_reply(task, X, y, sample_weight, policy)
    reply_arrays = {}
    return nest(reply, prefix, reply_arrays), reply_arrays


def parse_parts(parts, replies, on_invalid):
    """Parse every part's replies of a round before any is applied; then apply them all.

    ``parts`` is ``{key: server}``; ``replies`` is ``{key: {site: inner frame}}``.
    Raises the first failure (``on_invalid="raise"``) before anything is
    applied; returns ``{site: reason}`` of the replies dropped otherwise.
    """
    parsed, dropped = {}, {}
    # taken before reading: what a part notes while reading is undone too when the round fails
    restores = [server.savepoint() for server in parts.values()]
    try:
        for key, server in parts.items():
            parsed[key], failures = server.check_round(replies[key], {})
            if failures and on_invalid == "raise":
                raise next(iter(failures.values()))
            if not parsed[key]:
                raise ValueError(
                    f"no valid reply for part {key!r} in this round; nothing applied.")
            dropped.update({site: str(exc) for site, exc in failures.items()})
            parsed[key] = (parsed[key], failures)
        for key, server in parts.items():
            ok, failures = parsed[key]
            server.commit_round(replies[key], ok, {}, failures)
    except BaseException:  # a later part failed: the round is applied whole or not at all
        for restore in restores:
            restore()
        raise
    return dropped


# ------------------------------------------------------------------ data-free steps
#: ``{class name: class}`` of the transformers whose fit reads no row's values. Their
#: fitted state depends on the number (and names) of the columns and on their parameters
#: only, so every site and the server fit the same model from a table of the right
#: columns; no round of statistics is needed.
DATA_FREE = {cls.__name__: cls for cls in (
    RangeScaler, FunctionTransformer, PolynomialFeatures, SplineTransformer,
    GaussianRandomProjection, SparseRandomProjection, RBFSampler, Normalizer, Binarizer)}


def is_data_free(estimator):
    """Whether ``estimator`` is one of :data:`DATA_FREE`'s classes (subclasses are not)."""
    return type(estimator) in DATA_FREE.values()


def check_data_free(estimator, name):
    """Refuse the parameters with which a data-free class would read the rows after all."""
    params = estimator.get_params(deep=False)
    kind = type(estimator).__name__
    where = f"step {name!r} ({kind})"
    if "random_state" in params and not (
            isinstance(params["random_state"], (int, np.integer))
            and not isinstance(params["random_state"], bool)):
        raise ValueError(
            f"{where} draws random numbers at every site, which must all draw the same: "
            f"give it an integer random_state (got {params['random_state']!r})."
        )
    if kind == "SplineTransformer" and isinstance(params["knots"], str):
        raise ValueError(
            f"{where} with knots={params['knots']!r} places its knots from the rows; state "
            "them: knots=array of shape (n_knots, n_features)."
        )
    if "n_components" in params and "Projection" in kind and isinstance(
            params["n_components"], str):
        raise ValueError(
            f"{where} with n_components='auto' sizes itself from the number of rows; give an "
            "integer n_components."
        )


def _hash_value(value, digest):
    """Feed a canonical encoding of a fitted attribute to ``digest`` (a hashlib object)."""
    if sp.issparse(value):
        csr = value.tocsr()
        digest.update(f"sparse{csr.shape}".encode())
        for part in (csr.data, csr.indices, csr.indptr):
            _hash_value(part, digest)
    elif isinstance(value, np.ndarray) and value.dtype != object:
        digest.update(f"array{value.dtype.str}{value.shape}".encode())
        digest.update(np.ascontiguousarray(value).tobytes())
    elif isinstance(value, (list, tuple, np.ndarray)):
        digest.update(f"list{len(value)}".encode())
        for item in value:
            _hash_value(item, digest)
    elif isinstance(value, dict):
        digest.update(f"dict{len(value)}".encode())
        for key in sorted(value, key=str):
            _hash_value(str(key), digest)
            _hash_value(value[key], digest)
    elif value is None or isinstance(value, (bool, int, float, str, np.generic)):
        digest.update(repr(value).encode())
    else:  # e.g. a function: its name (its code is the same module at every site)
        digest.update(f"{type(value).__module__}.{getattr(value, '__qualname__', '')}".encode())


def fitted_digest(fitted):
    """SHA-256 of a fitted data-free step's fitted attributes (those ending in ``_``)."""
    digest = hashlib.sha256(type(fitted).__name__.encode())
    for name in sorted(vars(fitted)):
        if name.endswith("_") and not name.startswith("_"):
            _hash_value(name, digest)
            _hash_value(vars(fitted)[name], digest)
    return digest.hexdigest()


def fit_data_free(template, n_features, names):
    """A copy of ``template`` fitted on a table of zeros with the given columns (two rows:
    SplineTransformer asks for two)."""
    if names is not None:
        table = pd.DataFrame(np.zeros((2, len(names))), columns=list(names))
    else:
        table = np.zeros((2, n_features))
    return clone(template).fit(table)


class DataFreeClient(Client):
    """A site's check of a data-free step: it fits the step on its own rows, sends the digest."""

    protocol = "data_free"
    needs_y = False

    def check_rows(self, X, y, sample_weight, schema, site):
        X, names = match_columns(X, schema, site=site)
        return X, None, None, names

    def compute(self, task, X, y, sample_weight, rows):
        if rows is not None:
            X = _safe_indexing(X, rows)
        return {"digest": fitted_digest(clone(self.estimator).fit(X))}, {}


class DataFreeServer(Server):
    """Server of a data-free step: one round in which every site sends the digest of its fit.

    The server fits the step itself on a table of the sites' columns and
    refuses (naming the site) any site whose fit differs: its rows changed the
    fit, or it runs another version of the step.
    """

    protocol = "data_free"

    def plan(self, sites):
        if self.round == 0:
            return {site: ({}, {}) for site in sites}
        return {}

    def _expected(self, schema):
        n_features = self.schema.n_features or schema.get("n_features")
        names = self.schema.feature_names or schema.get("feature_names")
        fitted = fit_data_free(self.estimator, n_features, names)
        return fitted, fitted_digest(fitted)

    def read_reply(self, site, frame):
        digest = frame.fields.get("digest")
        if set(frame.fields) != {"digest"} or frame.arrays or not (
                isinstance(digest, str) and len(digest) == 64):
            raise InvalidClientMessage(f"client {site!r}: malformed data-free reply.", site)
        return digest, frame.schema

    def cross_check(self, replies):
        failures = {}
        if not replies:
            return failures
        # every reply has the same schema here (checked before): one fit to compare with
        expected = self._expected(next(iter(replies.values()))[1])[1]
        for site, (digest, _) in replies.items():
            if digest != expected:
                failures[site] = InvalidClientMessage(
                    f"client {site!r}: its {type(self.estimator).__name__} fitted on its rows "
                    "differs from the server's: the step read the rows' values, or the site "
                    "runs another version of it.", site)
        return failures

    def apply(self, replies, ledger):
        fitted, _ = self._expected({})
        self.estimator.__dict__.update(vars(fitted))
