"""The synthetic linear model of the FESC demo."""

import numbers

import numpy as np
from sklearn.utils import check_random_state

from ..simulation import partition_by_sizes
from ..simulation._partition import _check_number

__all__ = ["make_fesc_regression"]


def make_fesc_regression(sizes, n_features=10, *, noise=1.0, shuffle=False, random_state=None):
    """Rows of the FESC demo's linear model, split among clients of given sizes.

    ``theta* ~ U[0, 1]^d``, every row ``x ~ N(0, I_d)`` and
    ``y = x @ theta* + eps`` with ``eps ~ N(0, noise**2)``; there is no
    intercept. Client ``i`` holds ``sizes[i]`` rows.

    Parameters
    ----------
    sizes : array-like of int, shape (n_clients,)
        Rows of each client, all ``>= 1`` (e.g. from
        :func:`~sklearn_fed.simulation.sample_client_sizes`).
    n_features : int, default=10
        Dimension ``d``.
    noise : float, default=1.0
        Standard deviation of the additive Gaussian noise.
    shuffle : bool, default=False
        If False, client 0's rows come first, then client 1's, and so on;
        if True, rows are assigned to clients at random.
    random_state : int, RandomState instance or None, default=None
        Seed.

    Returns
    -------
    X : ndarray of shape (sum(sizes), n_features)
    y : ndarray of shape (sum(sizes),)
    clients : ndarray of shape (sum(sizes),), dtype int
        Client index of every row.
    coef : ndarray of shape (n_features,)
        The true parameter ``theta*``.

    Examples
    --------
    >>> from sklearn_fed.datasets import make_fesc_regression
    >>> X, y, clients, coef = make_fesc_regression([3, 5], n_features=2, random_state=0)
    >>> X.shape, clients.tolist(), coef.shape
    ((8, 2), [0, 0, 0, 1, 1, 1, 1, 1], (2,))
    """
    rng = check_random_state(random_state)
    n_features = _check_number(n_features, "n_features", lambda n: n >= 1, "an int >= 1",
                               numbers.Integral)
    noise = _check_number(noise, "noise", lambda v: v >= 0, "a finite float >= 0")
    if shuffle:
        clients = partition_by_sizes(sizes, random_state=rng)
    else:
        # validates sizes the same way, without spending random numbers on a shuffle
        clients = np.sort(partition_by_sizes(sizes, random_state=0))
    coef = rng.uniform(0.0, 1.0, size=n_features)
    X = rng.standard_normal((clients.shape[0], n_features))
    y = X @ coef + noise * rng.standard_normal(clients.shape[0])
    return X, y, clients, coef
