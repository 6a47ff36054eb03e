"""FedProx for linear regression: FedAvg plus a proximal term in the local objective."""

from numbers import Real

from .._compat import Interval
from ._base import BaseFederatedSGD
from ._fedavg import _fill_docstring

__all__ = ["FedProxRegressor"]


class FedProxRegressor(BaseFederatedSGD):
    """FedProx (Li et al., 2020) for L2-penalized linear regression.

    As :class:`FedAvgRegressor`, but each client minimizes
    ``F_k(w) + (mu / 2) ||w - w_t||^2`` locally, where ``w_t`` is the
    global model received this round: the proximal term
    limits how far local steps drift toward the client's own optimum. With
    ``mu=0`` it is exactly FedAvg. Aggregation and messages are FedAvg's.

    {sections}

    See Also
    --------
    FedAvgRegressor : The same without the proximal term.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_fed.baselines import FedAvgRegressor, FedProxRegressor
    >>> rng = np.random.default_rng(0)
    >>> X, y = rng.normal(size=(60, 3)), rng.normal(size=60)
    >>> clients = np.repeat([0, 1, 2], 20)
    >>> prox = FedProxRegressor(mu=0.0, n_rounds=20).fit(X, y, clients=clients)
    >>> avg = FedAvgRegressor(n_rounds=20).fit(X, y, clients=clients)
    >>> bool(np.array_equal(prox.coef_, avg.coef_))
    True
    """

    _parameter_constraints: dict = {
        **BaseFederatedSGD._parameter_constraints,
        "mu": [Interval(Real, 0, None, closed="left")],
    }

    def __init__(
        self,
        alpha=1.0,
        *,
        mu=0.01,
        fit_intercept=True,
        learning_rate="auto",
        local_epochs=5,
        batch_size=None,
        n_rounds=100,
        client_fraction=1.0,
        random_state=None,
        verbose=0,
    ):
        self._set_constructor_arguments(locals())

    _protocol = "sgd.fedprox"


_fill_docstring(
    FedProxRegressor,
    parameters="""
    mu : float, default=0.01
        Weight of the proximal term (the one-shot paper's FedProx uses 0.01).""",
)
