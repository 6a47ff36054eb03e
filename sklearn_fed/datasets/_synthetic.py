"""The synthetic heterogeneous regression data of the one-shot federated ridge paper."""

import numbers

import numpy as np
from sklearn.utils import check_random_state

from ..simulation._partition import _check_number

__all__ = ["make_heterogeneous_regression"]


def make_heterogeneous_regression(
    n_clients=20,
    n_samples_per_client=500,
    n_features=100,
    heterogeneity=0.5,
    noise=0.1,
    test_size=0.2,
    random_state=None,
):
    """Clients whose features have shifted means (Sec. V-A2 of the one-shot paper).

    1. ``coef ~ N(0, I_d)``, normalized to unit norm.
    2. Client k has feature mean ``mu_k = heterogeneity * u_k`` for a random unit
       vector ``u_k`` (``heterogeneity=0``: i.i.d. clients).
    3. Client k's rows are ``x ~ N(mu_k, Sigma_k)`` with diagonal ``Sigma_k`` whose
       variances are drawn from U(0.8, 1.2) ("mild variance heterogeneity"; the
       paper does not give the range, this is our choice).
    4. ``y = x^T coef + e`` with ``e ~ N(0, noise^2)``. The paper writes
       ``N(0, 0.1)``; its reported test MSE of 0.0100 means 0.1 is the standard
       deviation, which is what ``noise`` is here.

    ``test_size`` of each client's rows are held out (the paper's 20%).

    Parameters
    ----------
    n_clients : int, default=20
        Number of clients K.
    n_samples_per_client : int, default=500
        Rows generated per client (before the test split).
    n_features : int, default=100
        Dimension d.
    heterogeneity : float in [0, 1], default=0.5
        The paper's gamma.
    noise : float, default=0.1
        Standard deviation of the target noise.
    test_size : float in [0, 1), default=0.2
        Fraction of each client's rows held out for testing.
    random_state : int, RandomState instance or None, default=None
        Seed.

    Returns
    -------
    X_train, X_test : ndarray of shape (n, n_features)
    y_train, y_test : ndarray of shape (n,)
    clients_train : ndarray of shape (n_train,)
        Client index of each training row.
    coef : ndarray of shape (n_features,)
        The true unit-norm coefficients.

    Examples
    --------
    >>> from sklearn_fed.datasets import make_heterogeneous_regression
    >>> X_tr, X_te, y_tr, y_te, clients, coef = make_heterogeneous_regression(
    ...     n_clients=4, n_samples_per_client=50, n_features=3, random_state=0)
    >>> X_tr.shape, X_te.shape, sorted(set(clients.tolist()))
    ((160, 3), (40, 3), [0, 1, 2, 3])
    """
    n_clients, n_samples_per_client, n_features = (
        _check_number(value, name, lambda v: v >= 1, "a positive int", numbers.Integral)
        for name, value in [("n_clients", n_clients),
                            ("n_samples_per_client", n_samples_per_client),
                            ("n_features", n_features)])
    heterogeneity = _check_number(heterogeneity, "heterogeneity", lambda h: 0 <= h <= 1,
                                  "in [0, 1]")
    noise = _check_number(noise, "noise", lambda v: v >= 0, "non-negative")
    test_size = _check_number(test_size, "test_size", lambda t: 0 <= t < 1, "in [0, 1)")
    rng = check_random_state(random_state)
    coef = rng.standard_normal(n_features)
    coef /= np.linalg.norm(coef)
    directions = rng.standard_normal((n_clients, n_features))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    means = heterogeneity * directions
    scales = np.sqrt(rng.uniform(0.8, 1.2, size=(n_clients, n_features)))
    n_test = int(round(test_size * n_samples_per_client))
    train, test = [], []
    for k in range(n_clients):
        X = means[k] + scales[k] * rng.standard_normal((n_samples_per_client, n_features))
        y = X @ coef + noise * rng.standard_normal(n_samples_per_client)
        cut = n_samples_per_client - n_test
        train.append((X[:cut], y[:cut], np.full(cut, k)))
        test.append((X[cut:], y[cut:]))
    X_train, y_train, clients_train = (np.concatenate(p) for p in zip(*train))
    X_test, y_test = (np.concatenate(p) for p in zip(*test))
    return X_train, X_test, y_train, y_test, clients_train, coef
