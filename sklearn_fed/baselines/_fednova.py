"""FedNova for linear regression: updates normalized by each client's local steps."""

import numpy as np

from ._base import BaseFederatedSGD, SGDServer
from ._fedavg import _fill_docstring

__all__ = ["FedNovaRegressor"]


class FedNovaServer(SGDServer):
    """FedNova's aggregation: updates normalized by the clients' local steps."""

    def _aggregate(self, coef, replies, p, steps):
        local = np.stack([reply["coef"] for reply in replies])
        # sum_k p_k d_k with d_k = (coef - local_k) / tau_k, then scale by tau_eff.
        direction = np.tensordot(p / steps, coef[None] - local, axes=1)
        return coef - (p @ steps) * direction


class FedNovaRegressor(BaseFederatedSGD):
    """FedNova (Wang et al., 2020) for L2-penalized linear regression.

    Local training is FedAvg's (plain SGD). Client ``k`` takes ``tau_k``
    local steps (``local_epochs * ceil(n_k / batch_size)``) and sends its
    local model ``w_k`` and ``tau_k``; with the normalized update ``d_k =
    (w_t - w_k) / tau_k`` (its average step direction, times the learning
    rate) the server moves
    ``w_{t+1} = w_t - tau_eff * sum_k p_k d_k`` with ``tau_eff = sum_k p_k
    tau_k``. Clients that take more steps (more rows) no longer pull the
    average toward their own optimum: the fixed point is that of the global
    objective, up to the curvature of local trajectories. When every client
    takes the same number of steps it equals FedAvg: in particular with
    ``batch_size=None`` (every client takes ``local_epochs`` full-batch
    steps), the default.

    {sections}

    See Also
    --------
    FedAvgRegressor : Unnormalized averaging.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_fed.baselines import FedNovaRegressor
    >>> rng = np.random.default_rng(0)
    >>> X, y = rng.normal(size=(90, 3)), rng.normal(size=90)
    >>> clients = np.repeat([0, 1], [20, 70])  # unequal sizes: 2 and 7 steps/epoch
    >>> nova = FedNovaRegressor(batch_size=10, random_state=0).fit(X, y, clients=clients)
    >>> [h["train_mse"] < 1.5 for h in nova.history_[-2:]]
    [True, True]
    """

    _protocol = "sgd.fednova"

    _server_role = FedNovaServer


_fill_docstring(FedNovaRegressor)
