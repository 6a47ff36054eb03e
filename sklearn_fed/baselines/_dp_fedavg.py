"""DP-FedAvg for linear regression: every release clipped and noised by the site itself.

What a site releases, its sensitivity, the calibration of the noise and the
accounting are described once, in :class:`DPFedAvgRegressor`. The noise comes
from the package's per-release streams and is added as integers to values
rounded to a grid (:mod:`sklearn_fed.privacy._noise`), as for :class:`PrivateFederatedRidge`.
"""

import math
from numbers import Real

import numpy as np

from .._compat import Interval
from ..privacy import PrivacyLedger, gaussian_noise_std, noise_generator
from ..privacy._noise import discretized_sensitivity, grid_exponent, rounded_gaussian
from ..protocol._errors import failing, server_error
from ..protocol._fields import reply_keys, reply_number, task_field
from ._base import BaseFederatedSGD, SGDClient, SGDServer
from ._fedavg import _fill_docstring

__all__ = ["DPFedAvgRegressor"]


def noise_multiplier(epsilon, delta, n_releases):
    """Noise multiplier of each of ``n_releases`` Gaussian releases, ``(epsilon, delta)`` in all.

    Examples
    --------
    >>> round(noise_multiplier(1.0, 1e-5, 101), 2)  # sqrt(101) * 3.73
    37.49
    """
    return math.sqrt(n_releases) * gaussian_noise_std(epsilon, delta, 1.0)


class _Release:
    """One noised release: ``n_values`` values of L2 sensitivity ``sensitivity``.

    The values are rounded to the grid ``2^exponent`` and sent as integers
    plus integer Gaussian noise; the sensitivity that is calibrated includes
    the rounding. Site and server both derive it from public parameters.
    """

    def __init__(self, sensitivity, n_values, multiplier):
        self.exponent = grid_exponent(sensitivity, n_values, noisy=True)
        self.sensitivity = discretized_sensitivity(sensitivity, n_values, self.exponent)
        self.std = multiplier * self.sensitivity

    def noised(self, values, random_state, site, what):
        """``values`` on the grid plus integer noise keyed by exactly what is released."""
        steps = np.ldexp(np.asarray(values, dtype=np.float64), -self.exponent)
        if not np.all(np.abs(steps) < 2.0**52):
            raise ValueError(f"site {site!r}: a released value is too large for the grid.")
        steps = np.rint(steps).astype(np.int64)
        generator = noise_generator(random_state, site, "dp-fedavg", what,
                                    repr((self.std, self.exponent)), steps)
        noise = rounded_gaussian(generator, math.ldexp(self.std, -self.exponent), steps.size)
        return steps + noise.reshape(steps.shape)

    def value(self, steps):
        return np.ldexp(np.asarray(steps, dtype=np.float64), self.exponent)


class DPClient(SGDClient):
    """A DP-FedAvg site: noises its weight at setup and clips and noises every update.

    The noise is drawn here, at the site, from its own entropy (never from
    anything the server sends), and calibrated here from the task's
    ``epsilon``, ``delta`` and number of releases, so a site's
    :class:`~sklearn_fed.protocol.SitePolicy` (``max_epsilon``) bounds what it
    reveals.
    """

    def _multiplier(self, task):
        epsilon = task_field(task, "epsilon", float)
        delta = task_field(task, "delta", float)
        releases = task_field(task, "n_releases", int)
        # the release number is for the accounting: the noise is keyed by what is released
        release = task_field(task, "release", int)
        if not (epsilon > 0 and 0 < delta < 1 and 1 <= releases <= 10**9
                and 0 <= release < 2**63):
            server_error("malformed privacy parameters.")
        return noise_multiplier(epsilon, delta, releases)

    @staticmethod
    def _weight_bound(task):
        bound = task_field(task, "max_sample_weight", float)
        if not 0 < bound < math.inf:
            server_error("max_sample_weight must be positive.")
        return bound

    def _check_weights(self, task, weights):
        bound = self._weight_bound(task)
        if weights is not None and np.any(weights > bound):
            raise ValueError(
                f"site {task.site!r}: differentially private training needs sample weights "
                f"in [0, max_sample_weight={bound:g}] (a row's weight bounds how much it "
                "changes what is released); raise max_sample_weight, which adds noise in "
                "proportion, or rescale the weights."
            )

    def _setup(self, task, Xk, yk, sk, y_ndim):
        self._check_weights(task, sk)
        fields, arrays = super()._setup(task, Xk, yk, sk, y_ndim)
        release = _Release(self._weight_bound(task), 1, self._multiplier(task))
        fields["weight_sum"] = int(release.noised(
            [fields["weight_sum"]], self.estimator.random_state, task.site, "weight_sum")[0])
        return fields, arrays

    def _weight_sum(self, task, sk):
        self._check_weights(task, sk)
        return super()._weight_sum(task, sk)

    def _train_reply(self, task, coef, W, steps, loss):
        clip = task_field(task, "clip_norm", float)
        if not (0 < clip < math.inf):
            server_error("clip_norm must be positive.")
        update = W - coef
        norm = np.linalg.norm(update)
        if not math.isfinite(norm):
            return super()._train_reply(task, coef, W, steps, loss)  # says it diverged
        if norm > clip:
            update *= clip / norm
        release = _Release(2 * clip, update.size, self._multiplier(task))
        noised = release.noised(update, self.estimator.random_state, task.site, "update")
        return {"steps": int(steps)}, {"update": noised}


class DPServer(SGDServer):
    """DP-FedAvg's server: weights from noisy sizes, the mean of noisy updates, accounting."""

    def __init__(self, estimator, **kwargs):
        super().__init__(estimator, **kwargs)
        ledger = getattr(estimator, "_privacy_ledger", None)  # kept across fits
        self._privacy = PrivacyLedger() if ledger is None else ledger.copy()
        self._multiplier = noise_multiplier(
            float(estimator.epsilon), float(estimator.delta), int(estimator.n_rounds) + 1
        )
        self._weight_release = _Release(float(estimator.max_sample_weight), 1, self._multiplier)

    def _private_fields(self, step):
        estimator = self.estimator
        fields = {
            "epsilon": float(estimator.epsilon),
            "delta": float(estimator.delta),
            "n_releases": int(estimator.n_rounds) + 1,
            "max_sample_weight": float(estimator.max_sample_weight),
            # releases are numbered across fits for the accounting; a site keys its noise
            # by what it releases, not by this number (see noise_generator)
            "release": len(self._privacy),
        }
        if step == "train":
            fields["clip_norm"] = float(estimator.clip_norm)
        return fields

    def _read_weight(self, site, frame):  # grid steps, noised: may be negative
        steps = reply_number(frame, "weight_sum", site, low=-(2**62), high=2**62, integer=True)
        return float(self._weight_release.value(steps))

    def _read_train(self, site, frame, rows, t):
        reply_keys(frame, site, fields=["steps"], arrays=["update"])
        update = frame.arrays["update"]
        if not (isinstance(update, np.ndarray) and update.dtype == np.int64
                and update.shape == (rows, t) and np.all(np.abs(update) < 2**62)):
            failing(site)(f"the update must be ({rows}, {t}) int64 grid steps.")
        release = _Release(2 * float(self.estimator.clip_norm), update.size, self._multiplier)
        return {
            "steps": reply_number(frame, "steps", site, low=1, high=2**40, integer=True),
            "update": release.value(update),
        }

    def apply(self, replies, ledger):
        # every round is one release about a row, the setup too; on a copy, which
        # a refused round leaves behind (savepoint)
        self._privacy = self._privacy.copy()
        self._privacy.record(self._multiplier)
        super().apply(replies, ledger)

    def _reported_mse(self, replies, order, weights):
        return None  # a loss would be one more release

    def _aggregate(self, coef, replies, p, steps):
        return coef + np.tensordot(p, np.stack([reply["update"] for reply in replies]), axes=1)

    def _commit(self, state, ledger):
        super()._commit(state, ledger)
        estimator = self.estimator
        estimator._privacy_ledger = self._privacy.copy()
        estimator.noise_multiplier_ = self._multiplier
        estimator.noise_std_ = _Release(
            2 * float(estimator.clip_norm), state["coef"].size, self._multiplier).std
        estimator.n_releases_ = len(self._privacy)


class DPFedAvgRegressor(BaseFederatedSGD):
    """FedAvg with clipped, Gaussian-noised client updates: ``(epsilon, delta)``-DP per row.

    Each round, every participant trains locally as in
    :class:`FedAvgRegressor`, clips its update ``Delta_k = w_k - w_t`` to L2
    norm ``clip_norm``, adds Gaussian noise itself and sends the noisy update;
    the server adds the weighted average to the global model. Noise is added
    on each client (the trust model of the one-shot paper's private
    Algorithm 2: the server sees only noised messages).

    **Everything released is noised and accounted.** At setup a site
    announces only its total weight ``S_k``, noised; no feature or target
    means (with ``fit_intercept`` the intercept is an unpenalized coordinate
    of the model, trained and noised with it). Each of the ``n_rounds + 1``
    releases about a row (adjacency: adding or removing one row of weight at
    most ``max_sample_weight``) is a Gaussian mechanism of noise multiplier ``z = sqrt(n_rounds +
    1) * sigma(epsilon, delta)``, ``sigma`` the analytic calibration
    (:func:`~sklearn_fed.privacy.gaussian_noise_std`, valid for any epsilon):
    Gaussian mechanisms compose exactly, so ``fit`` is ``(epsilon,
    delta)``-DP in total. The update's sensitivity is ``2 * clip_norm`` (one
    row can move a clipped update anywhere in the ball). ``privacy_spent_``
    composes every release so far with the package's accountant; ``fit``
    does not reset it (refitting the same rows spends again), and each
    ``partial_fit`` adds two releases. Sites report no loss (it would be one
    more release): ``history_[r]["train_mse"]`` is ``None``.

    The noise is drawn at each site from the operating system's entropy; an
    int ``random_state`` is a key instead: each noise stream is a keyed hash
    of it, the site and the exact values released (on the grid, with their
    calibration), so refitting the same rows gives the same model and any
    other data independent noise (see
    :func:`~sklearn_fed.privacy.noise_generator`). A known seed voids the
    guarantee. Client sampling (``client_fraction``) is not counted as
    amplification.

    {sections}

    See Also
    --------
    FedAvgRegressor : Without clipping and noise.
    sklearn_fed.PrivateFederatedRidge : One noised release of the statistics.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_fed.baselines import DPFedAvgRegressor
    >>> rng = np.random.default_rng(0)
    >>> X, y = rng.normal(size=(200, 3)), rng.normal(size=200)
    >>> dp = DPFedAvgRegressor(epsilon=1.0, n_rounds=100, random_state=0)
    >>> dp = dp.fit(X, y, clients=np.arange(200) % 4)
    >>> round(dp.noise_multiplier_, 1), round(dp.noise_std_, 1), dp.n_releases_
    (37.5, 75.1, 101)
    >>> epsilon, delta = dp.privacy_spent_
    >>> round(epsilon, 3), delta
    (1.0, 1e-05)
    """

    _parameter_constraints: dict = {
        **BaseFederatedSGD._parameter_constraints,
        "learning_rate": [Interval(Real, 0, None, closed="neither")],
        "epsilon": [Interval(Real, 0, None, closed="neither")],
        "delta": [Interval(Real, 0, 1, closed="neither")],
        "clip_norm": [Interval(Real, 0, None, closed="neither")],
        "max_sample_weight": [Interval(Real, 0, None, closed="neither")],
    }

    _protocol = "sgd.dpfedavg"
    _server_role = DPServer
    _client_role = DPClient
    _intercept_coordinate = True

    def __init__(
        self,
        alpha=1.0,
        *,
        epsilon=1.0,
        delta=1e-5,
        clip_norm=1.0,
        max_sample_weight=1.0,
        fit_intercept=True,
        learning_rate=0.1,
        local_epochs=5,
        batch_size=None,
        n_rounds=100,
        client_fraction=1.0,
        random_state=None,
        verbose=0,
    ):
        self._set_constructor_arguments(locals())

    @property
    def privacy_spent_(self):
        """``(epsilon, delta)`` of every release so far, composed at ``delta``."""
        ledger = self.__dict__.get("_privacy_ledger")
        if ledger is None:
            raise AttributeError("privacy_spent_ is set by fit.")
        return float(ledger.epsilon(self.delta)), float(self.delta)


_fill_docstring(
    DPFedAvgRegressor,
    parameters="""
    epsilon : float, default=1.0
        Privacy budget of one ``fit`` (its setup and ``n_rounds`` rounds),
        for any one row; any value > 0 is valid (analytic calibration).
    delta : float in (0, 1), default=1e-5
        Delta of one ``fit``.
    clip_norm : float, default=1.0
        L2 bound C on each client's update per round (intercept included).
    max_sample_weight : float, default=1.0
        The largest sample weight a row may have (a site refuses heavier
        rows): the sensitivity of a site's noised total weight, whose noise
        grows in proportion. The updates' sensitivity does not depend on it
        (a clipped update stays in its ball whatever the weights).""",
    attributes="""
    noise_multiplier_ : float
        ``z``: noise std per unit of sensitivity, of every release.
    noise_std_ : float
        Standard deviation of the noise each client adds to each coordinate
        of its update (``z * 2 * clip_norm``); its weight gets ``z``.
    n_releases_ : int
        Releases about a row so far (setups and rounds, all fits).
    privacy_spent_ : tuple of (float, float)
        ``(epsilon, delta)`` of all releases so far, composed by
        :class:`~sklearn_fed.privacy.PrivacyLedger`.""",
    fit_intercept="""fit_intercept : bool, default=True
        Fit an unpenalized intercept, as one more coordinate of the model
        (every row gets a constant 1): it is trained, clipped and noised with
        the coefficients, so no means are released.""",
    learning_rate="""learning_rate : float, default=0.1
        Local step size (no ``"auto"``: it would read the data; clipping
        bounds every round's move anyway).""",
)
