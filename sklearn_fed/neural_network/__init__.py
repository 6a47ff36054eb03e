"""Federated neural networks with tiny uplinks (FedMPDD), built on skorch and torch.

Needs the ``nn`` extra (``pip install sklearn-fed[nn]``). Importing
:mod:`sklearn_fed` never imports torch; this subpackage imports it only when
one of its names is first used.
"""

import importlib
import importlib.util

__all__ = ["CommunicationLog", "FedMPDDClassifier", "LeNet", "MLP", "make_codec"]

_WHERE = {
    "CommunicationLog": "._fedmpdd",
    "FedMPDDClassifier": "._fedmpdd",
    "LeNet": "._modules",
    "MLP": "._modules",
    "make_codec": "._codecs",
}


def _require_nn():
    missing = [m for m in ("torch", "skorch") if importlib.util.find_spec(m) is None]
    if missing:
        raise ImportError(
            f"sklearn_fed.neural_network needs {' and '.join(missing)}; install the extra "
            "with `pip install sklearn-fed[nn]` (on CPU-only machines install "
            "torch==2.13.0 first)."
        )


def __getattr__(name):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    _require_nn()
    module = importlib.import_module(_WHERE[name], __name__)
    return getattr(module, name)


def __dir__():
    return sorted(list(globals()) + __all__)
