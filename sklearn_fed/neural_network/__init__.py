"""Federated neural networks with tiny uplinks (FedMPDD), built on skorch and torch.

Needs the ``nn`` extra (``pip install sklearn-fed[nn]``). Importing
:mod:`sklearn_fed` never imports torch; this subpackage imports it only when
one of its names is first used.
"""

from ..utils._lazy import lazy_names

__all__ = ["CommunicationLog", "FedMPDDClassifier", "LeNet", "MLP", "make_codec"]

_NEEDS = ("torch", "skorch")
__getattr__, __dir__, _ = lazy_names(__name__, "nn", {
    "._codecs": (_NEEDS, ("make_codec",)),
    "._fedmpdd": (_NEEDS, ("CommunicationLog", "FedMPDDClassifier")),
    "._modules": (_NEEDS, ("LeNet", "MLP")),
}, advice=" (on CPU-only machines install torch==2.13.0 first)")
