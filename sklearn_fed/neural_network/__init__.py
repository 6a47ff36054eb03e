"""Federated neural networks with tiny uplinks (FedMPDD), built on skorch and torch.

Needs the ``nn`` extra (``pip install sklearn-fed[nn]``). Importing
:mod:`sklearn_fed` never imports torch; this subpackage imports it only when
one of its names is first used.
"""

import importlib
import importlib.util

__all__ = ["CommunicationLog", "FedMPDDClassifier", "LeNet", "MLP", "make_codec"]

_MODULES = {
    "._codecs": ("make_codec",),
    "._fedmpdd": ("CommunicationLog", "FedMPDDClassifier"),
    "._modules": ("LeNet", "MLP"),
}
_WHERE = {name: module for module, names in _MODULES.items() for name in names}


def __getattr__(name):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    missing = [m for m in ("torch", "skorch") if importlib.util.find_spec(m) is None]
    if missing:
        raise ImportError(
            f"sklearn_fed.neural_network needs {' and '.join(missing)}; install the extra "
            "with `pip install sklearn-fed[nn]` (on CPU-only machines install "
            "torch==2.13.0 first)."
        )
    return getattr(importlib.import_module(_WHERE[name], __name__), name)


def __dir__():
    return sorted(list(globals()) + __all__)
