"""Differentially private releases of preprocessing statistics, at a site.

Each release is one Gaussian mechanism calibrated by the package's one
calibration (:func:`~sklearn_fed.privacy.gaussian_noise_std`) and recorded
in the one accountant (:class:`~sklearn_fed.privacy.PrivacyLedger`), with
noise on a grid (:mod:`sklearn_fed.privacy._noise`: integers plus integer
noise, no floating-point side channel):

- :func:`noisy_column_moments`: per column, the count, sum and sum of squares
  of the values clipped to data-independent bounds and mapped onto
  ``[-1, 1]`` (scalers, the mean imputer). A row changes each of ``d``
  counts by at most 1 and each mapped sum by at most 1: L2 sensitivity
  ``sqrt(order + 1) sqrt(d)``.
- :func:`noisy_value_counts`: per column, the counts of its values plus
  Gaussian noise, keeping only values whose noisy count reaches a threshold
  (one-hot encoder, most-frequent imputer): a row changes one count per
  column (sensitivity ``sqrt(d)``), and the threshold ``1 + sigma
  Phi^-1(1 - delta_s / d)`` lets a value seen in one row only through with
  probability at most ``delta_s / d`` per column ("Gaussian partition
  selection"; Gopi et al. 2020). The release is then ``(epsilon, delta_g +
  delta_s)``-DP; half of ``delta`` goes to each.

Sites hold disjoint rows, so every site's release is one mechanism on its
own rows, and the ledger records one release per ``fit`` (parallel composition).
"""

import math

import numpy as np
from scipy.stats import norm

from ._calibration import gaussian_noise_std
from ._noise import discretized_sensitivity, grid_exponent, rounded_gaussian

__all__ = [
    "check_bounds",
    "gaussian_release",
    "moments_from_noisy_sums",
    "moments_noise_std",
    "noisy_column_moments",
    "noisy_value_counts",
    "selection_threshold",
]


def check_bounds(bounds, n_features):
    """``(low, high)`` arrays of shape ``(n_features,)`` from the user's ``bounds``.

    ``bounds`` is one ``(low, high)`` pair for every column or one pair per
    column; ``low < high``, finite. They must not be read from the data.
    """
    array = np.asarray(bounds, dtype=np.float64)
    if array.shape == (2,):
        array = np.tile(array, (n_features, 1))
    if array.shape != (n_features, 2) or not np.all(np.isfinite(array)) or np.any(
            array[:, 0] >= array[:, 1]):
        raise ValueError(
            f"bounds must be one finite (low, high) pair with low < high, or one per column "
            f"({n_features} columns); got {bounds!r}. State them from what is known in "
            "advance (a data dictionary), never from the rows.")
    return array[:, 0], array[:, 1]


def gaussian_release(total, sensitivity, epsilon, delta, calibration, generator_for):
    """``total`` plus Gaussian noise on a grid: ``(noisy, std, sensitivity)``.

    The values are rounded to the grid ``2^k`` (:func:`grid_exponent`),
    integer noise of ``std / 2^k`` steps is added, and the result is scaled
    back; ``std`` is calibrated for the sensitivity of the rounded values
    (:func:`discretized_sensitivity`). ``noisy - total`` is then
    ``N(0, std^2)`` up to the rounding of ``total`` (at most ``2^(k-1)``).

    Examples
    --------
    >>> import numpy as np
    >>> noisy, std, sens = gaussian_release(np.zeros(3), 1.0, 1.0, 1e-5, "analytic",
    ...                                     lambda *released: np.random.default_rng(0))
    >>> noisy.shape, round(std / sens, 3)
    ((3,), 3.731)
    """
    total = np.asarray(total, dtype=np.float64).ravel()
    p = total.size
    exponent = grid_exponent(sensitivity, p, noisy=True)
    sensitivity = discretized_sensitivity(sensitivity, p, exponent)
    std = gaussian_noise_std(epsilon, delta, sensitivity, calibration=calibration)
    grid = np.rint(np.ldexp(total, -exponent))
    if np.any(np.abs(grid) > 2.0**52):
        raise OverflowError("the statistics are too large for the noise grid; "
                            "state tighter bounds.")
    grid = grid.astype(np.int64)
    # the stream is keyed on the exact released values and the calibration
    generator = generator_for(grid, f"std={std!r};grid={exponent}")
    noisy = grid + rounded_gaussian(generator, math.ldexp(std, -exponent), p)
    return np.ldexp(noisy.astype(np.float64), exponent), std, sensitivity


def noisy_column_moments(X, low, high, order, epsilon, delta, calibration, generator_for):
    """Noisy per-column ``(count, sum, sum of squares)`` of ``X`` clipped to ``[low, high]``.

    Values are clipped, then mapped onto ``[-1, 1]`` (``v = (x - c) / h``
    with ``c``, ``h`` the middle and half-width of the bounds); NaN values are
    left out of their column. Returns ``(release, std, sensitivity)`` with
    ``release`` of shape ``(order + 1, d)``.
    """
    X = np.asarray(X, dtype=np.float64)
    center, half = (low + high) / 2, (high - low) / 2
    present = ~np.isnan(X)
    mapped = np.where(present, (np.clip(X, low, high) - center) / half, 0.0)
    parts = [present.sum(axis=0, dtype=np.float64), mapped.sum(axis=0)]
    if order == 2:
        parts.append((mapped * mapped).sum(axis=0))
    total = np.concatenate(parts)
    sensitivity = math.sqrt(len(parts) * X.shape[1])
    noisy, std, sensitivity = gaussian_release(total, sensitivity, epsilon, delta, calibration,
                                               generator_for)
    return noisy.reshape(len(parts), X.shape[1]), std, sensitivity


def moments_noise_std(n_features, order, epsilon, delta, calibration):
    """The noise std a site adds to each value of :func:`noisy_column_moments`'s release."""
    p = (order + 1) * n_features
    sensitivity = math.sqrt(p)
    exponent = grid_exponent(sensitivity, p, noisy=True)
    return gaussian_noise_std(epsilon, delta, discretized_sensitivity(sensitivity, p, exponent),
                              calibration=calibration)


def moments_from_noisy_sums(sums, low, high, noise_std=0.0):
    """``(count, mean, variance)`` per column from summed noisy releases (post-processing).

    A noisy count below one is taken as one; the mean is clipped into the
    bounds and the variance into ``[floor, (high - low)^2 / 4]``, where
    ``floor`` is the noise level of the variance, ``noise_std / count`` in
    mapped units (``noise_std``: the std of the summed noise): a smaller
    variance cannot be told from the noise, and a scale derived from it would
    blow up the scaled values.
    """
    center, half = (low + high) / 2, (high - low) / 2
    count = np.maximum(sums[0], 1.0)
    mean = np.clip(sums[1] / count, -1.0, 1.0)
    variance = None
    if sums.shape[0] > 2:
        floor = np.minimum(noise_std / count, 1.0)
        variance = np.clip(sums[2] / count - mean * mean, floor, 1.0) * half * half
    return count, center + half * mean, variance


def selection_threshold(std, n_columns, delta_selection):
    """The noisy count a value needs to be released: ``1 + std Phi^-1(1 - delta_s / d)``.

    Examples
    --------
    >>> round(selection_threshold(4.0, 1, 1e-6), 2)
    20.01
    """
    return 1.0 + std * float(norm.isf(delta_selection / n_columns))


def noisy_value_counts(columns, epsilon, delta, calibration, generator_for, min_count=None):
    """Per column, the values whose noisy count reaches the selection threshold.

    Parameters
    ----------
    columns : list of (values, counts)
        Each column's distinct values and their counts at this site.
    epsilon, delta, calibration
        The release's budget: ``delta / 2`` for the Gaussian noise, ``delta / 2``
        for the selection.
    generator_for : callable
        ``generator_for(*released)``: the noise stream of these released values
        (:func:`~sklearn_fed.privacy.noise_generator` of the site).
    min_count : int, default=None
        A site policy's threshold: the release threshold is at least this
        (post-processing, free).

    Returns
    -------
    released : list of (values, noisy counts)
        Noisy counts are integers (as float64).
    std, sensitivity, threshold : float
    """
    d = len(columns)
    sensitivity = math.sqrt(d)
    # Counts are integers already: the grid is 1 and the sensitivity is exact.
    std = gaussian_noise_std(epsilon, delta / 2, sensitivity, calibration=calibration)
    threshold = max(selection_threshold(std, d, delta / 2), float(min_count or 0))
    released = []
    generator = generator_for(
        *[np.asarray(counts, dtype=np.int64) for _, counts in columns],
        repr([np.asarray(values).tolist() for values, _ in columns]),
        f"std={std!r};threshold={threshold!r}")
    for values, counts in columns:
        noisy = np.asarray(counts, dtype=np.int64) + rounded_gaussian(
            generator, std, len(counts))
        keep = noisy >= threshold
        released.append((values[keep], noisy[keep].astype(np.float64)))
    return released, std, sensitivity, threshold

