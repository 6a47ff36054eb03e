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

import numpy as np
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.utils.validation import _num_samples

from ._clients import group_rows_by_client, take_clients
from ._compat import _check_sample_weight
from .protocol import FeatureSchema, InvalidClientMessage, nest, run_simulation, unnest

__all__ = [
    "answer_part",
    "check_federated",
    "load_fitted",
    "parse_parts",
    "prefixed",
    "simulate_composite",
    "site_table",
    "site_targets",
    "take_prefixed",
]


def site_targets(y):
    """A site's targets in a form whose rows can be taken (Series kept)."""
    return y if y is None or hasattr(y, "iloc") else np.asarray(y)


def site_table(X):
    """A site's table as its first step will read it, in a form whose rows can be taken.

    DataFrames are kept (their column dtypes matter); sparse matrices become
    CSR; anything else an array (a list of strings an object array, as
    scikit-learn's encoders make it). The steps validate the values.
    """
    if hasattr(X, "iloc"):
        return X
    if sp.issparse(X):
        return X.tocsr()
    array = np.asarray(X)
    if not hasattr(X, "dtype") and array.dtype.kind == "U":
        array = np.asarray(X, dtype=object)
    if array.ndim != 2:
        raise ValueError(f"Expected a 2D table of rows, got an array of shape {array.shape}.")
    return array


def simulate_composite(estimator, X, y, sample_weight, clients, **server_kwargs):
    """``fit`` of a composite: its protocol run in process, one simulated site per label.

    The server is made as a user would make it: told the feature names when
    ``X`` is a table with named columns.
    """
    clients = take_clients(estimator, X, clients)
    X, y = site_table(X), site_targets(y)
    n_samples = _num_samples(X)
    if sample_weight is not None:
        sample_weight = _check_sample_weight(
            sample_weight, np.empty((n_samples, 0)), dtype=np.float64)
    labels, rows = group_rows_by_client(clients, n_samples)
    columns = getattr(X, "columns", None)
    names = None
    if columns is not None and all(isinstance(c, str) for c in columns):
        names = [str(c) for c in columns]
    server = estimator.make_server(feature_names=names, **server_kwargs)
    return run_simulation(server, estimator.make_client(), X, y, sample_weight, labels, rows,
                          names)


def check_federated(estimator, name, *, transformer):
    """Refuse a part that would be fitted on pooled rows: it must have the protocol roles."""
    if estimator is None or (isinstance(estimator, str) and estimator in ("passthrough", "drop")):
        return
    missing = not hasattr(estimator, "make_server") or (
        transformer and not hasattr(estimator, "_broadcast_state"))
    if missing:
        raise TypeError(
            f"step {name!r} ({type(estimator).__name__}) is not federated: fitting it would "
            "need every site's rows in one place. Use its sklearn_fed counterpart (e.g. "
            "FederatedStandardScaler for StandardScaler)."
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


def _server_error(reason):
    raise InvalidClientMessage(f"server: {reason}", "server")


def load_fitted(template, fields, arrays):
    """A site's copy of a fitted part: its own unfitted ``template`` plus the broadcast state."""
    if not isinstance(fields, dict):
        _server_error("malformed fitted model in the task.")
    return clone(template)._load_broadcast_state(fields, arrays)


def answer_part(estimator, meta, arrays, prefix, X, y, sample_weight, *, site, policy):
    """A site's reply to one part's nested task, made by that part's own client role.

    Returns the nested reply (``meta`` for the outer fields; its arrays are
    added to the returned dict under ``prefix``).
    """
    task = unnest(meta, arrays, prefix, site=site, fail=_server_error)
    client = estimator.make_client(policy=policy)
    client.check_task(task)
    try:
        schema = FeatureSchema.from_json(task.schema)
    except ValueError as exc:
        raise InvalidClientMessage(f"server: {exc}", "server") from exc
    if client.needs_y and y is None:
        raise ValueError(f"site {site!r}: this task needs targets y.")
    X, y, sample_weight, names = client.check_rows(X, y, sample_weight, schema, site)
    if policy is not None:
        policy.check_task(client.protocol, task, schema, X.shape[0], site)
    # The part's reply is screened by the site's policy as a reply of its own would be.
    reply = client.screened_reply(policy, task, X, y, sample_weight, None, names)
    reply_arrays = {}
    return nest(reply, prefix, reply_arrays), reply_arrays


def parse_parts(parts, replies, on_invalid):
    """Parse every part's replies of a round before any is applied; then apply them all.

    ``parts`` is ``{key: server}``; ``replies`` is ``{key: {site: inner frame}}``.
    Raises the first failure (``on_invalid="raise"``) before anything is
    applied; returns ``{site: reason}`` of the replies dropped otherwise.
    """
    parsed, dropped = {}, {}
    for key, server in parts.items():
        parsed[key], failures = server.check_round(replies[key], {})
        if failures and on_invalid == "raise":
            raise next(iter(failures.values()))
        if not parsed[key]:
            raise ValueError(f"no valid reply for part {key!r} in this round; nothing applied.")
        dropped.update({site: str(exc) for site, exc in failures.items()})
        parsed[key] = (parsed[key], failures)
    restores = [server.savepoint() for server in parts.values()]
    try:
        for key, server in parts.items():
            ok, failures = parsed[key]
            server.commit_round(replies[key], ok, {}, failures)
    except BaseException:  # a later part failed: the round is applied whole or not at all
        for restore in restores:
            restore()
        raise
    return dropped
