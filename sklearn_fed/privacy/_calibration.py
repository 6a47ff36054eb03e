"""Standard deviation of Gaussian noise for (epsilon, delta)-differential privacy.

For a function with L2 sensitivity ``Delta`` (the largest change of its output,
in Euclidean norm, when one row is added or removed), adding independent
``N(0, sigma^2)`` noise to every coordinate is (epsilon, delta)-DP when

* classic (Dwork & Roth 2014, Thm A.1): ``sigma = Delta sqrt(2 ln(1.25/delta)) / epsilon``,
  proved only for ``epsilon < 1``;
* analytic (Balle & Wang 2018): the smallest ``sigma`` with
  ``Phi(D/(2 s) - e s/D) - exp(e) Phi(-D/(2 s) - e s/D) <= delta`` (``s = sigma``,
  ``D = Delta``, ``e = epsilon``),
  valid for every ``epsilon > 0`` and never larger than the classic value where
  both apply. Computed by ``dp_accounting.get_sigma_gaussian`` (extra ``dp``).
"""

import functools
import math

from ..utils._warnings import warn
from ._dp import import_optional

__all__ = ["analytic_gaussian_std", "classic_gaussian_std", "gaussian_noise_std"]


def classic_gaussian_std(epsilon, delta, sensitivity=1.0):
    """Noise std of the classic Gaussian mechanism, ``Delta sqrt(2 ln(1.25/delta))/epsilon``.

    The bound is proved only for ``epsilon < 1``; for larger ``epsilon`` a
    :class:`UserWarning` says that the guarantee is not established (use
    :func:`analytic_gaussian_std`). ``epsilon = inf`` returns 0 (no noise).

    Parameters
    ----------
    epsilon : float
        Privacy budget, > 0.
    delta : float
        In (0, 1).
    sensitivity : float, default=1.0
        L2 sensitivity of the released vector.

    Returns
    -------
    sigma : float

    Examples
    --------
    >>> round(classic_gaussian_std(0.5, 1e-5), 4)
    9.6896
    """
    return gaussian_noise_std(epsilon, delta, sensitivity, calibration="classic")


def analytic_gaussian_std(epsilon, delta, sensitivity=1.0):
    """Smallest noise std of the analytic Gaussian mechanism (Balle & Wang 2018).

    Uses ``dp_accounting.get_sigma_gaussian`` (noise multiplier for unit
    sensitivity) scaled by ``sensitivity``. ``epsilon = inf`` returns 0.

    Parameters
    ----------
    epsilon, delta, sensitivity
        As in :func:`classic_gaussian_std` (any ``epsilon > 0``).

    Returns
    -------
    sigma : float

    Examples
    --------
    >>> round(analytic_gaussian_std(1.0, 1e-5), 3)
    3.731
    """
    return gaussian_noise_std(epsilon, delta, sensitivity, calibration="analytic")


@functools.lru_cache(maxsize=256)
def _analytic_multiplier(epsilon, delta):
    # A pure function of (epsilon, delta) costing ~50 ms: cache it.
    dp_accounting = import_optional("dp_accounting", "dp-accounting", "dp")
    return float(dp_accounting.get_sigma_gaussian(epsilon, delta))


def gaussian_noise_std(epsilon, delta, sensitivity=1.0, *, calibration="analytic"):
    """Noise std of :func:`analytic_gaussian_std` or :func:`classic_gaussian_std`.

    Parameters
    ----------
    epsilon, delta, sensitivity
        As in :func:`classic_gaussian_std`.
    calibration : {"analytic", "classic"}, default="analytic"

    Returns
    -------
    sigma : float

    Examples
    --------
    >>> gaussian_noise_std(2.0, 1e-5, 3.0) == 3 * gaussian_noise_std(2.0, 1e-5)
    True
    """
    if calibration not in ("analytic", "classic"):
        raise ValueError(f"calibration must be 'analytic' or 'classic'; got {calibration!r}.")
    if not (isinstance(epsilon, (int, float)) and epsilon > 0):
        raise ValueError(f"epsilon must be a positive number; got {epsilon!r}.")
    if not (isinstance(delta, (int, float)) and 0 < delta < 1):
        raise ValueError(f"delta must be in the open interval (0, 1); got {delta!r}.")
    if not (isinstance(sensitivity, (int, float)) and 0 < sensitivity < math.inf):
        raise ValueError(f"sensitivity must be positive and finite; got {sensitivity!r}.")
    if epsilon == math.inf:
        return 0.0
    if calibration == "analytic":
        return sensitivity * _analytic_multiplier(float(epsilon), float(delta))
    if epsilon >= 1:
        warn(
            f"The classic Gaussian mechanism is proved (epsilon, delta)-DP only for "
            f"epsilon < 1; epsilon={epsilon} is outside that range. Use the analytic "
            "calibration for a valid guarantee.",
            UserWarning,
        )
    return sensitivity * math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon
