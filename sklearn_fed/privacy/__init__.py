"""Privacy: bounds, Gaussian calibration, noise streams, secure aggregation, accounting, audits."""

from ._accounting import PrivacyLedger, composed_noise_multiplier
from ._bounds import ClippingWarning, RangeScaler
from ._budget import PrivacyBudget
from ._calibration import (
    analytic_gaussian_std,
    classic_gaussian_std,
    gaussian_noise_std,
)
from ._noise import noise_generator
from ._secure_aggregation import MaskingKey, SecureAggregator

# gradient-inversion audit (needs torch): loaded on first access
_INVERSION = ("gradient_inversion", "inversion_audit", "reconstruction_ssim")


def __getattr__(name):
    if name in _INVERSION:
        from . import _inversion

        return getattr(_inversion, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ClippingWarning",
    "MaskingKey",
    "PrivacyBudget",
    "PrivacyLedger",
    "RangeScaler",
    "SecureAggregator",
    "analytic_gaussian_std",
    "classic_gaussian_std",
    "composed_noise_multiplier",
    "gaussian_noise_std",
    "gradient_inversion",
    "inversion_audit",
    "noise_generator",
    "reconstruction_ssim",
]
