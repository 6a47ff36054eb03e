"""Privacy: Gaussian calibration, simulated secure aggregation, accounting."""

from ._accounting import PrivacyLedger
from ._calibration import analytic_gaussian_std, classic_gaussian_std, gaussian_noise_std
from ._secure_aggregation import SecureAggregator

__all__ = [
    "PrivacyLedger",
    "SecureAggregator",
    "analytic_gaussian_std",
    "classic_gaussian_std",
    "gaussian_noise_std",
]
