"""Saving a fitted estimator so it can be loaded without pickle: skops.

skops writes a zip of JSON schemas and ``.npy`` arrays and, on load,
rebuilds only the types the caller trusts; an untrusted type in a file is
refused before anything is constructed. :func:`load_model` trusts exactly
sklearn-fed's own classes (plus skops' defaults: numpy, scipy, scikit-learn
and builtins), so a model file from a server can be opened without running
code from it.
"""

import importlib
import os
from pathlib import Path

__all__ = ["load_model", "save_model"]


def _skops():
    try:
        import skops.io
    except ImportError as exc:
        raise ImportError(
            "saving and loading models needs skops; install the extra with "
            "`pip install sklearn-fed[flower]`."
        ) from exc
    return skops.io


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
    sio.dump(estimator, partial)
    os.replace(partial, path)  # a reader never sees half a file


def _is_our_class(name):
    module, _, attribute = name.rpartition(".")
    if not (module == "sklearn_fed" or module.startswith("sklearn_fed.")):
        return False
    try:
        return isinstance(getattr(importlib.import_module(module), attribute), type)
    except (ImportError, AttributeError):
        return False


def _trusted_types(untrusted, where):
    """The types skops must be told to trust: sklearn-fed's classes, nothing else."""
    ours = [name for name in untrusted if _is_our_class(name)]
    others = sorted(set(untrusted) - set(ours))
    if others:
        raise ValueError(
            f"{where}: refusing to load types that are not sklearn-fed's: {others}. Inspect "
            "them with skops.io.get_untrusted_types and pass the ones you trust to "
            "skops.io.load(path, trusted=...)."
        )
    return ours


def dumps(obj):
    """``obj`` as skops bytes (see :func:`loads`)."""
    return _skops().dumps(obj)


def loads(data):
    """An object from :func:`dumps` bytes, trusting only sklearn-fed's classes."""
    sio = _skops()
    return sio.loads(data, trusted=_trusted_types(sio.get_untrusted_types(data=data), "state"))


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
    return sio.load(path, trusted=_trusted_types(sio.get_untrusted_types(file=path), path))
