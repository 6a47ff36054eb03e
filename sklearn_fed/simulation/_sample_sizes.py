"""The 13 client sample-size laws of the FESC demo, each of mean ``m ** gamma``.

The FESC paper lists, for ``m`` clients and an exponent ``gamma``, thirteen laws
of the number of rows per client, each with mean ``m ** gamma``. We implement
each one with ``scipy.stats`` so that its mean is exactly ``m ** gamma``. One of
the paper's parameterizations does not give that mean (the high-variance
log-normal: see :data:`SAMPLE_SIZE_LAWS` and the user guide); we implement the
stated mean.
"""

import math

import numpy as np
from scipy import stats
from sklearn.utils import check_random_state

from ._partition import _check_n_clients, _check_number

__all__ = ["SAMPLE_SIZE_LAWS", "sample_client_sizes", "sample_size_distribution"]

# Bounds on gamma: the demo sweeps 0.2 .. 1.2; beyond 2 the total number of rows
# (about m ** (1 + gamma)) is unreasonable for a simulation.
GAMMA_RANGE = (0.0, 2.0)


def _lognormal(s):
    # mean of lognorm(s, scale) is scale * exp(s**2 / 2)
    return lambda mu: stats.lognorm(s, scale=mu * math.exp(-(s**2) / 2))


_WEIBULL_C = 1.5

#: Law name -> function of the mean ``mu = m ** gamma`` returning a frozen
#: ``scipy.stats`` distribution of mean ``mu``. Parameters follow the FESC paper,
#: except the high-variance log-normal, whose stated scale ``mu * e**2`` gives
#: mean ``mu * e**4``; we use ``mu * e**-2`` (mean ``mu``).
_LAWS = {
    "lognormal-low": _lognormal(1.0),
    "lognormal-high": _lognormal(2.0),
    "poisson": lambda mu: stats.poisson(mu),
    "gaussian-low": lambda mu: stats.norm(loc=mu, scale=0.1 * mu),
    "gaussian-medium": lambda mu: stats.norm(loc=mu, scale=0.5 * mu),
    "gaussian-high": lambda mu: stats.norm(loc=mu, scale=mu),
    "uniform-low": lambda mu: stats.uniform(loc=0.5 * mu, scale=mu),
    "uniform-high": lambda mu: stats.uniform(loc=0.0, scale=2.0 * mu),
    "laplace-low": lambda mu: stats.laplace(loc=mu, scale=0.1 * mu),
    "laplace-medium": lambda mu: stats.laplace(loc=mu, scale=0.5 * mu),
    "laplace-high": lambda mu: stats.laplace(loc=mu, scale=mu),
    "pareto": lambda mu: stats.pareto(2.5, scale=0.6 * mu),
    "weibull": lambda mu: stats.weibull_min(
        _WEIBULL_C, scale=mu / math.gamma(1.0 + 1.0 / _WEIBULL_C)
    ),
}

#: Names of the 13 sample-size laws of the FESC demo, in the paper's order.
SAMPLE_SIZE_LAWS = tuple(_LAWS)


def sample_size_distribution(law, n_clients, gamma):
    """The frozen ``scipy.stats`` law of one client's size, of mean ``n_clients ** gamma``.

    Parameters
    ----------
    law : str
        One of :data:`SAMPLE_SIZE_LAWS`.
    n_clients : int
        Number of clients ``m``.
    gamma : float in [0, 2]
        Exponent: the mean is ``m ** gamma``.

    Returns
    -------
    dist : scipy.stats frozen distribution
        Continuous (or Poisson) law before rounding and clipping.

    Examples
    --------
    >>> from sklearn_fed.simulation import sample_size_distribution
    >>> round(float(sample_size_distribution("pareto", 100, 1.0).mean()), 6)
    100.0
    """
    if law not in _LAWS:
        raise ValueError(
            f"unknown sample-size law {law!r}; choose one of {', '.join(SAMPLE_SIZE_LAWS)}."
        )
    n_clients = _check_n_clients(n_clients)
    low, high = GAMMA_RANGE
    gamma = _check_number(gamma, "gamma", lambda g: low <= g <= high, f"a float in [{low}, {high}]")
    return _LAWS[law](float(n_clients) ** gamma)


def sample_client_sizes(law, n_clients, gamma, *, random_state=None):
    """Draw the number of rows of each of ``n_clients`` clients.

    Sizes are drawn iid from :func:`sample_size_distribution` (mean exactly
    ``n_clients ** gamma``), rounded to the nearest integer and clipped to at
    least 1, since every client holds a row. Clipping raises the mean of the
    laws that put mass below 1: at every scale for ``"gaussian-high"`` (about
    +8.5 %), ``"laplace-medium"`` (+3.4 %) and ``"laplace-high"`` (+18.6 %),
    and at small means for the others (at mean 10, +2.8 % for
    ``"lognormal-high"``, under 1 % for the rest; at mean 2.5, up to +21 %).

    Parameters
    ----------
    law : str
        One of :data:`SAMPLE_SIZE_LAWS`.
    n_clients : int
        Number of clients ``m``.
    gamma : float in [0, 2]
        Exponent: the law's mean is ``m ** gamma``.
    random_state : int, RandomState instance or None, default=None
        Seed.

    Returns
    -------
    sizes : ndarray of shape (n_clients,), dtype int
        Rows per client, all ``>= 1``.

    Examples
    --------
    >>> from sklearn_fed.simulation import partition_by_sizes, sample_client_sizes
    >>> sizes = sample_client_sizes("lognormal-low", 100, 1.0, random_state=0)
    >>> sizes.shape, bool(sizes.min() >= 1)
    ((100,), True)
    >>> clients = partition_by_sizes(sizes, random_state=0)
    >>> bool(clients.shape[0] == sizes.sum())
    True
    """
    dist = sample_size_distribution(law, n_clients, gamma)
    rng = check_random_state(random_state)
    draws = np.asarray(dist.rvs(size=n_clients, random_state=rng), dtype=np.float64)
    return np.maximum(np.rint(draws), 1).astype(np.int64)
