"""Saving a fitted estimator so it can be loaded without pickle: skops.

:func:`load_model` trusts exactly the types of
:data:`~sklearn_fed.flower._trust.MODEL_TYPES`, not skops' wider defaults, and
checks the archive first (:func:`~sklearn_fed.flower._trust.check_archive`);
:func:`save_model` refuses to write what :func:`load_model` would refuse to read.

A torch network (an estimator with ``module_``, e.g. FedMPDDClassifier) is
written as its class name, its parameters (JSON, as in a run config), its
module's ``state_dict`` as arrays and its other fitted attributes, since
skorch's own state is a pickle of the module; loading rebuilds the estimator
and loads the arrays into its module.
"""

import contextlib
import io
import os
import threading
import zipfile
from pathlib import Path

from ._config import estimator_from_config, estimator_to_config
from ._trust import (
    DEFAULT_MAX_BYTES,
    MODEL_FUNCTIONS,
    MODEL_TYPES,
    SKOPS_LOADERS,
    check_archive,
    read_json,
)

__all__ = ["import_skops_in_background", "load_model", "save_model"]

_NETWORK = "sklearn_fed_network"  # marks the dict a torch network is saved as
# what skorch's initialize() builds or records itself; restored by initializing
_SKORCH_OWN = frozenset({
    "module_", "criterion_", "optimizer_", "callbacks_", "history_", "initialized_",
    "init_context_", "prefixes_", "cuda_dependent_attributes_", "virtual_params_",
})


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
        with contextlib.suppress(ImportError):  # save_model raises it, naming the extra
            _skops()

    threading.Thread(target=run, name="sklearn-fed-import-skops", daemon=True).start()


def _schema_types(schema, where):
    """Every type a skops schema names, refused unless each is in :data:`MODEL_TYPES`.

    The schema is walked without recursion (its depth is capped by ``read_json``);
    a node with a loader that calls something from the file (functions,
    methods, ``__reduce__`` constructors) is refused whatever its type.
    """
    names, refused, stack = set(), set(), [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
            continue
        if not isinstance(node, dict):
            continue
        stack.extend(node.values())
        if "__loader__" not in node:
            continue
        name = f"{node.get('__module__')}.{node.get('__class__')}"
        if node["__loader__"] == "FunctionNode":
            if name in MODEL_FUNCTIONS:
                names.add(name)
            else:
                refused.add(name[:200])
        elif node["__loader__"] in SKOPS_LOADERS and name in MODEL_TYPES:
            names.add(name)
        else:
            refused.add(name[:200])
    if refused:
        raise ValueError(
            f"{where}: refusing to load types that are not sklearn-fed's or the numpy and "
            f"builtin types its models hold: {sorted(refused)}. If you trust the file, "
            "inspect it with skops.io.get_untrusted_types and load it with "
            "skops.io.load(path, trusted=...)."
        )
    return names


def _audited(data, where):
    """The skops types ``data`` holds, once its sizes, arrays and types are checked."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            text = archive.read("schema.json")
    except KeyError:
        raise ValueError(f"{where}: not a skops file (no schema.json).") from None
    return _schema_types(read_json(text, f"{where}: schema.json"), where)


def _writable(value):
    """Whether skops writes ``value`` with the types :func:`load_model` trusts only."""
    sio = _skops()
    try:
        data = sio.dumps(value)
        _audited(data, "value")
        return True
    except Exception:  # noqa: BLE001 - skops cannot write it (a torch object, a lock, ...)
        return False  # or writes a type that would be refused on load


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

    if not (isinstance(payload.get(_NETWORK), str) and isinstance(payload.get("params"), str)
            and isinstance(payload.get("attributes"), dict)
            and isinstance(payload.get("module"), dict)):
        # ValueError: load_model reports every malformed file as one, naming it
        raise ValueError("a torch network's entries are missing or of another type.")  # noqa: TRY004

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
    data = sio.dumps(_network_payload(estimator) if hasattr(estimator, "module_") else estimator)
    _audited(data, f"{path} (not written)")  # never write what load_model refuses
    partial = path.with_name(path.name + ".partial")
    partial.write_bytes(data)
    os.replace(partial, path)  # a reader never sees half a file


def load_model(path, *, max_bytes=None):
    """Load a model written by :func:`save_model`, trusting only sklearn-fed's classes.

    Parameters
    ----------
    path : str or path-like
    max_bytes : int, default=None
        Cap on the file's decompressed size, checked before anything is
        read; None means :data:`~sklearn_fed.flower._trust.DEFAULT_MAX_BYTES`
        (256 MiB). A file that expands more than 32 times is refused
        whatever the cap (see :doc:`/security`).

    Returns
    -------
    estimator : estimator

    Raises
    ------
    ValueError
        Naming the file: it is larger than the cap, a compression bomb, not a
        skops file, holds an array whose header does not match its data, or
        holds types other than those of :data:`MODEL_TYPES`; inspect them
        with ``skops.io.get_untrusted_types(file=path)`` and load with
        ``skops.io.load(path, trusted=[...])`` if you trust them.
    """
    sio = _skops()
    where = os.fspath(path)
    cap = DEFAULT_MAX_BYTES if max_bytes is None else int(max_bytes)
    try:
        size = os.stat(path).st_size
        if size > cap:
            raise ValueError(f"{where}: {size} bytes, more than the cap of {cap} bytes "
                             "(raise max_bytes if you trust it).")
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(f"{where}: cannot be read ({exc}).") from None
    check_archive(data, where, max_bytes=cap)
    names = _audited(data, where)
    try:
        loaded = sio.loads(data, trusted=sorted(names))
        if isinstance(loaded, dict) and _NETWORK in loaded:
            return _network_from_payload(loaded)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - a forged schema skops cannot rebuild: name the file
        raise ValueError(f"{where}: cannot be rebuilt ({type(exc).__name__}: {exc}).") from None
    return loaded
