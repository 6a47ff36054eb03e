"""DP-FedAvg for linear regression: clipped client updates with Gaussian noise."""

from numbers import Real

import numpy as np

from .._compat import Interval
from ._base import BaseFederatedSGD
from ._fedavg import _fill_docstring

__all__ = ["DPFedAvgRegressor"]


def _advanced_composition(epsilon_round, delta_slack, n_rounds):
    """Total epsilon of ``n_rounds`` (epsilon_round, .)-DP steps (Dwork et al. 2010)."""
    with np.errstate(over="ignore"):  # a huge epsilon_round spends inf, honestly
        return float(
            np.sqrt(2 * n_rounds * np.log(1 / delta_slack)) * epsilon_round
            + n_rounds * epsilon_round * np.expm1(epsilon_round)
        )


class DPFedAvgRegressor(BaseFederatedSGD):
    """FedAvg with clipped, Gaussian-noised client updates.

    Each round, every participant trains locally as in
    :class:`FedAvgRegressor`, clips its coefficient update ``Delta_k = w_k -
    w_t`` to L2 norm ``clip_norm``, adds
    Gaussian noise ``N(0, noise_std^2 I)`` itself, and sends the noisy update;
    the server adds the weighted average to the global model. Noise is added
    on each client (the trust model of the one-shot paper's private
    Algorithm 2: the server sees only noised messages).

    **Accounting.** Following the one-shot paper's comparison (Sec. V-F), each
    round gets the budget ``epsilon_round = epsilon / sqrt(n_rounds)`` and
    ``delta`` (not split across rounds), and the noise is calibrated with the
    classic Gaussian mechanism, ``noise_std = clip_norm * sqrt(2 ln(1.25 /
    delta)) / epsilon_round`` (Dwork and Roth, Thm A.1; proven for
    ``epsilon_round < 1``), with L2 sensitivity ``clip_norm`` (adding or
    removing a client's clipped update). The ``epsilon / sqrt(R)`` split is
    a heuristic: it does **not** make the whole run ``(epsilon, delta)``-DP.
    What R rounds actually guarantee by advanced composition (Dwork,
    Rothblum and Vadhan 2010; the paper's Eq. 15) with slack ``delta`` is
    reported in ``epsilon_spent_`` / ``delta_spent_``: more than
    ``sqrt(2 ln(1/delta))`` (about 4.8 at ``delta=1e-5``) times ``epsilon``.
    Use a dedicated accountant (RDP/PLD) for tight numbers.

    Read more in the :ref:`User Guide <baselines>`.

    Parameters
    ----------
    {parameters}

    Attributes
    ----------
    {attributes}

    See Also
    --------
    FedAvgRegressor : Without clipping and noise.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_fed.baselines import DPFedAvgRegressor
    >>> rng = np.random.default_rng(0)
    >>> X, y = rng.normal(size=(200, 3)), rng.normal(size=200)
    >>> dp = DPFedAvgRegressor(epsilon=1.0, n_rounds=100, random_state=0)
    >>> dp = dp.fit(X, y, clients=np.arange(200) % 4)
    >>> round(dp.epsilon_per_round_, 3), round(dp.noise_std_, 1)
    (0.1, 48.4)
    >>> round(dp.epsilon_spent_, 2), dp.delta_spent_
    (5.85, 0.00101)
    """

    _parameter_constraints: dict = {
        **BaseFederatedSGD._parameter_constraints,
        "epsilon": [Interval(Real, 0, None, closed="neither")],
        "delta": [Interval(Real, 0, 1, closed="neither")],
        "clip_norm": [Interval(Real, 0, None, closed="neither")],
    }

    def __init__(
        self,
        alpha=1.0,
        *,
        epsilon=1.0,
        delta=1e-5,
        clip_norm=1.0,
        fit_intercept=True,
        learning_rate=0.01,
        local_epochs=5,
        batch_size=None,
        n_rounds=100,
        client_fraction=1.0,
        random_state=None,
    ):
        self.alpha = alpha
        self.epsilon = epsilon
        self.delta = delta
        self.clip_norm = clip_norm
        self.fit_intercept = fit_intercept
        self.learning_rate = learning_rate
        self.local_epochs = local_epochs
        self.batch_size = batch_size
        self.n_rounds = n_rounds
        self.client_fraction = client_fraction
        self.random_state = random_state

    def _noise_std(self):
        epsilon_round = self.epsilon / np.sqrt(self.n_rounds)
        return self.clip_norm * np.sqrt(2 * np.log(1.25 / self.delta)) / epsilon_round

    def _aggregate(self, coef, local_coef, p, steps, rng):
        K = local_coef.shape[0]
        update = (local_coef - coef[None]).reshape(K, -1)
        norms = np.linalg.norm(update, axis=1)
        factor = np.minimum(1.0, self.clip_norm / np.where(norms > 0, norms, 1.0))
        noisy = update * factor[:, None] + rng.normal(0.0, self._noise_std(), update.shape)
        return coef + (p @ noisy).reshape(coef.shape)

    def _commit(self, state, data, single_target, X_dtype):
        super()._commit(state, data, single_target, X_dtype)
        self.epsilon_per_round_ = float(self.epsilon / np.sqrt(self.n_rounds))
        self.noise_std_ = float(self._noise_std())
        self.epsilon_spent_ = _advanced_composition(
            self.epsilon_per_round_, self.delta, self.n_rounds_
        )
        self.delta_spent_ = float((self.n_rounds_ + 1) * self.delta)


_fill_docstring(
    DPFedAvgRegressor,
    parameters="""
    epsilon : float, default=1.0
        Total privacy budget in the paper's convention: each of the
        ``n_rounds`` rounds gets ``epsilon / sqrt(n_rounds)``. See
        *Accounting* above for what it does and does not guarantee.
    delta : float in (0, 1), default=1e-5
        Per-round delta of the Gaussian mechanism.
    clip_norm : float, default=1.0
        L2 bound C on each client's update per round (the sensitivity).""",
    attributes="""
    epsilon_per_round_ : float
        ``epsilon / sqrt(n_rounds)``.
    noise_std_ : float
        Standard deviation of the noise each client adds per coordinate.
    epsilon_spent_, delta_spent_ : float
        Guarantee of the ``n_rounds_`` rounds run so far by advanced
        composition with slack ``delta``: ``delta_spent_ = (n_rounds_ + 1) *
        delta``. A ``partial_fit`` past ``n_rounds`` keeps spending.""",
)
