"""Saving a fitted estimator so it can be loaded without pickle: skops.

skops writes a zip of JSON schemas and ``.npy`` arrays and, on load,
rebuilds only the types the caller trusts; an untrusted type in a file is
refused before anything is constructed. :func:`load_model` trusts exactly
sklearn-fed's own classes and ``Counter``/``OrderedDict`` (plus skops'
defaults: numpy, scipy, scikit-learn and builtins), so a model file from a
server can be opened without running code from it.

A torch network (an estimator with ``module_``, e.g. FedMPDDClassifier) is
not written as itself: skorch's own state is a pickle of the module. It is
written as its class name, its parameters (JSON, as in a run config), its
module's ``state_dict`` as arrays and its other fitted attributes that skops
writes with trusted types only; loading rebuilds the estimator, initializes
its module and loads the arrays into it.
"""

import importlib
import os
import threading
from pathlib import Path

from ._config import estimator_from_config, estimator_to_config

__all__ = ["import_skops_in_background", "load_model", "our_class", "save_model"]

_NETWORK = "sklearn_fed_network"  # marks the dict a torch network is saved as
# what skorch's initialize() builds or records itself; restored by initializing
_SKORCH_OWN = frozenset({
    "module_", "criterion_", "optimizer_", "callbacks_", "history_", "initialized_",
    "init_context_", "prefixes_", "cuda_dependent_attributes_", "virtual_params_",
})
# containers skops does not trust by default that rebuild as plain dicts, running no code
_PLAIN_CONTAINERS = frozenset({"collections.Counter", "collections.OrderedDict"})


def _skops():
    try:
        import skops.io
    except ImportError as exc:
        raise ImportError(
            "saving and loading models needs skops; install the extra with "
            "`pip install sklearn-fed[flower]`."
        ) from exc
    return skops.io


def import_skops_in_background():
    """Start importing skops in a thread, so that saving a model later does not wait for it.

    Importing ``skops.io`` imports every scikit-learn estimator (seconds on a
    busy machine); a server app spends most of a run waiting for replies.
    """
    def run():
        try:
            _skops()
        except ImportError:  # save_model raises it, naming the extra, if it is ever called
            pass

    threading.Thread(target=run, name="sklearn-fed-import-skops", daemon=True).start()


def our_class(name):
    """The class ``name`` ("module.Class") if it is one of sklearn-fed's, else None."""
    module, _, attribute = name.rpartition(".")
    if not (module == "sklearn_fed" or module.startswith("sklearn_fed.")):
        return None
    try:
        found = getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError):
        return None
    return found if isinstance(found, type) else None


def _trusted_types(untrusted, where):
    """The types skops must be told to trust: sklearn-fed's classes and plain containers."""
    ours = [name for name in untrusted if our_class(name) is not None or name in _PLAIN_CONTAINERS]
    others = sorted(set(untrusted) - set(ours))
    if others:
        raise ValueError(
            f"{where}: refusing to load types that are not sklearn-fed's: {others}. Inspect "
            "them with skops.io.get_untrusted_types and pass the ones you trust to "
            "skops.io.load(path, trusted=...)."
        )
    return ours


def _writable(value):
    """Whether skops writes ``value`` with sklearn-fed's and its default types only."""
    sio = _skops()
    try:
        untrusted = sio.get_untrusted_types(data=sio.dumps(value))
        return all(our_class(t) is not None or t in _PLAIN_CONTAINERS for t in untrusted)
    except Exception:  # skops cannot write it at all (a torch object, a lock, ...)
        return False


def _network_payload(estimator):
    state = estimator.module_.state_dict()
    return {
        _NETWORK: type(estimator).__name__,
        "params": estimator_to_config(estimator)["estimator-params"],
        "module": {name: tensor.detach().cpu().numpy() for name, tensor in state.items()},
        "attributes": {
            name: value for name, value in vars(estimator).items()
            if name.endswith("_") and name not in _SKORCH_OWN and _writable(value)
        },
    }


def _network_from_payload(payload):
    import torch

    estimator = estimator_from_config(
        {"estimator": payload[_NETWORK], "estimator-params": payload["params"]})
    estimator.__dict__.update(payload["attributes"])  # the fitted shape initialize() reads
    estimator.initialize()
    estimator.module_.load_state_dict(
        {name: torch.as_tensor(array) for name, array in payload["module"].items()})
    return estimator


def save_model(estimator, path):
    """Write a fitted estimator to ``path`` in the skops format (atomically).

    Parameters
    ----------
    estimator : estimator
    path : str or path-like
        Conventionally ends in ``.skops``.

    Examples
    --------
    >>> import numpy as np, os, tempfile
    >>> from sklearn_fed import FederatedRidge
    >>> model = FederatedRidge().fit(np.eye(3), [1.0, 2.0, 3.0])
    >>> path = os.path.join(tempfile.mkdtemp(), "model.skops")
    >>> save_model(model, path)
    >>> load_model(path).coef_.tolist() == model.coef_.tolist()
    True
    """
    sio = _skops()
    path = Path(path)
    partial = path.with_name(path.name + ".partial")
    sio.dump(_network_payload(estimator) if hasattr(estimator, "module_") else estimator, partial)
    os.replace(partial, path)  # a reader never sees half a file


def load_model(path):
    """Load a model written by :func:`save_model`, trusting only sklearn-fed's classes.

    Parameters
    ----------
    path : str or path-like

    Returns
    -------
    estimator : estimator

    Raises
    ------
    ValueError
        The file holds types other than sklearn-fed's classes and skops'
        defaults; inspect them with ``skops.io.get_untrusted_types(file=path)``
        and load with ``skops.io.load(path, trusted=[...])`` if you trust them.
    """
    sio = _skops()
    loaded = sio.load(path, trusted=_trusted_types(sio.get_untrusted_types(file=path), path))
    if isinstance(loaded, dict) and _NETWORK in loaded:
        return _network_from_payload(loaded)
    return loaded
