"""A fitted model on the wire: what a server sends so that sites can predict with it.

A site evaluates the server's model, not one of its own: the task carries the
model's fitted attributes, and the site sets them on its own unfitted copy of
the estimator (from its code, or from the Flower run config), so nothing but
numbers, text and ``None`` is rebuilt from a message (no pickle, no code).

- a transformer with a broadcast state (sklearn-fed's scalers, encoders,
  imputer, PCA) sends exactly that;
- a pipeline sends each step's state;
- any other estimator sends its public fitted attributes (names ending in
  ``_``) that are arrays, numbers, text, dtypes or lists of them, except the
  federation's bookkeeping (``communication_``, ``clients_``, ...), which
  prediction never reads.
"""

import keyword

from sklearn.base import clone

from ..protocol import decode_state, encode_state
from ..protocol._fields import server_error

__all__ = ["load_model_state", "model_state"]

# attributes of the federation, not of the model: never needed to predict
_BOOKKEEPING = frozenset({"communication_", "clients_", "n_clients_", "dropped_"})


def _prefixed(state, prefix, arrays):
    fields, part = state
    for name, value in part.items():
        arrays[prefix + name] = value
    return fields


def _public_attributes(estimator):
    names = []
    for name in list(vars(estimator)):
        if not name.endswith("_") or name.startswith("_") or name in _BOOKKEEPING:
            continue
        try:
            encode_state(estimator, [name])
        except (TypeError, ValueError):
            continue  # not a plain value (a nested estimator, a ledger): not sent
        names.append(name)
    return sorted(names)


def model_state(estimator):
    """``(fields, arrays)`` of a fitted estimator, for :func:`load_model_state` at a site.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_fed import FederatedRidge
    >>> model = FederatedRidge().fit(np.eye(3), [1.0, 2.0, 3.0])
    >>> fields, arrays = model_state(model)
    >>> sorted(fields["attributes"])
    ['coef_', 'intercept_', 'n_features_in_', 'solver_']
    >>> site = load_model_state(FederatedRidge(), fields, arrays)
    >>> bool((site.predict(np.eye(3)) == model.predict(np.eye(3))).all())
    True
    """
    steps = getattr(estimator, "steps", None)
    if isinstance(steps, list):
        arrays = {}
        parts = [None if step is None or isinstance(step, str)
                 else _prefixed(model_state(step), f"s{j}.", arrays)
                 for j, (_, step) in enumerate(steps)]
        return {"steps": parts}, arrays
    if hasattr(estimator, "_broadcast_state"):
        fields, arrays = estimator._broadcast_state()
        return {"broadcast": fields}, arrays
    fields, arrays = encode_state(estimator, _public_attributes(estimator))
    return {"attributes": fields}, arrays


def load_model_state(template, fields, arrays, depth=0):
    """A copy of the unfitted ``template`` with the fitted state a server sent (untrusted)."""
    if not isinstance(fields, dict) or len(fields) != 1 or depth > 4:
        server_error("malformed fitted model in the task.")
    (kind, value), = fields.items()
    model = clone(template)
    if kind == "steps":
        steps = getattr(model, "steps", None)
        if not (isinstance(steps, list) and isinstance(value, list)
                and len(value) == len(steps)):
            server_error("the fitted pipeline's steps do not match this site's pipeline.")
        model.steps = [
            (name, step if step is None or isinstance(step, str) else load_model_state(
                step, value[j], {k[len(f"s{j}."):]: v for k, v in arrays.items()
                                 if k.startswith(f"s{j}.")}, depth + 1))
            for j, (name, step) in enumerate(steps)]
        return model
    if kind == "broadcast" and hasattr(model, "_load_broadcast_state"):
        return model._load_broadcast_state(value, arrays)
    if kind != "attributes" or not isinstance(value, dict):
        server_error("malformed fitted model in the task.")
    names = [name for name in value if isinstance(name, str) and name.isidentifier()
             and not keyword.iskeyword(name) and name.endswith("_")
             and not name.startswith("_") and name not in _BOOKKEEPING]
    state = decode_state(value, arrays, names, server_error)
    for name, item in state.items():
        setattr(model, name, item)
    return model
