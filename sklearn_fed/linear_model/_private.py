"""PrivateFederatedRidge: one-shot ridge from Gaussian-noised client statistics.

What a release is (its layout, joint sensitivity and noise) is in
``_private_release``, the protocol's site and server roles in ``_private_roles``;
here are the estimator and the server's post-processing of the noisy sums
(centering, projection onto the positive semi-definite cone, the solve).
"""

import types
from numbers import Real

import numpy as np
from scipy import linalg

from .._compat import Interval, Options, StrOptions
from ._base import BaseFederatedRidge, fit_method
from ._private_release import _unpack
from ._private_roles import PrivateClient, PrivateServer, _warn_if_clipped
from ._solver import _solve_gram, numerical_range

__all__ = ["PrivateFederatedRidge"]


def project_psd(gram):
    """Nearest (Frobenius) positive semi-definite matrix: clip negative eigenvalues."""
    return _psd_projection(gram)[0]


def _psd_projection(gram):
    """:func:`project_psd` and the eigenpairs ``(values, vectors)`` of the projection
    (None when ``gram`` was positive definite already: nothing was decomposed)."""
    gram = (gram + gram.T) / 2
    try:  # positive definite already (the usual case with enough rows): nothing to clip
        linalg.cholesky(gram, check_finite=False)
        return gram, None
    except linalg.LinAlgError:
        pass
    values, vectors = np.linalg.eigh(gram)
    negative = values < 0
    # G+ = V+ L+ V+^T = G - V- L- V-^T: one syrk over the fewer eigenvectors
    # (d^2 k flops, where V L V^T would be 2 d^3).
    if np.count_nonzero(negative) <= gram.shape[0] // 2:
        part = vectors[:, negative] * np.sqrt(-values[negative])
        projected = gram + part @ part.T
    else:
        part = vectors[:, ~negative] * np.sqrt(values[~negative])
        projected = part @ part.T
    return projected, (np.maximum(values, 0.0), vectors)


class PrivateFederatedRidge(BaseFederatedRidge):
    """Federated ridge with (epsilon, delta)-differential privacy for every row.

    Each site clips its rows to ``||x||_2 <= feature_bound`` and
    ``|y| <= target_bound`` (data-independent bounds, never read from the
    data), sums the statistics of the clipped rows, adds Gaussian noise once
    and sends the result (Algorithm 2 of the one-shot federated ridge paper,
    with a corrected sensitivity). The server sums the messages, derives the
    centered Gram and moment, optionally projects the noisy Gram onto the
    positive semi-definite cone (post-processing: free in privacy) and solves.

    Everything released (counts, sums, the packed upper triangle of the Gram,
    the moment) is covered by **one** joint L2 sensitivity under
    add/remove-one-row adjacency,
    ``sqrt(1 + Bx^2 + By^2 + Bx^4 + Bx^2 By^2)`` with an intercept and
    ``sqrt(Bx^4 + Bx^2 By^2)`` without, so one release is (epsilon, delta)-DP
    in total. Read more in the :ref:`User Guide <private_projected>`.

    Parameters
    ----------
    alpha : float or ndarray of shape (n_targets,), default=1.0
        Non-negative L2 penalty, as in :class:`~sklearn.linear_model.Ridge`.
    epsilon : float, default=1.0
        Privacy budget of one release, > 0; ``np.inf`` disables the noise
        (then the result equals FederatedRidge on the clipped rows).
    delta : float, default=1e-5
        In (0, 1).
    feature_bound : float, default=1.0
        Rows are scaled to L2 norm at most this (> 0). Choose it from domain
        knowledge, not from the data (a bound read from the data leaks it):
        :class:`~sklearn_fed.privacy.RangeScaler` maps features from known
        ranges to rows of norm at most 1, the default.
    target_bound : float, default=1.0
        Targets are clipped to ``[-target_bound, target_bound]`` (per-row L2
        norm for several targets), > 0.
    noise : {"local", "distributed"}, default="local"
        ``"local"``: each site adds noise of std ``tau`` (the paper's
        protocol; every message is private on its own). ``"distributed"``:
        each of the K sites adds std ``tau / sqrt(K)`` and the messages are
        masked for secure aggregation (X25519 key agreement between sites),
        so only the sum, whose noise has std ``tau``, is revealed. Valid
        under that protocol's trust model (the server relays keys faithfully
        and does not collude with sites).
    calibration : {"analytic", "classic"}, default="analytic"
        ``"analytic"``: the analytic Gaussian mechanism (Balle & Wang 2018)
        through ``dp-accounting`` (extra ``dp``), valid for any epsilon.
        ``"classic"``: ``tau = Delta sqrt(2 ln(1.25/delta)) / epsilon`` as in
        the paper; proved only for epsilon < 1 (a warning is issued otherwise).
    psd_projection : bool, default=True
        Project the noisy centered Gram onto the PSD cone before solving.
    fit_intercept : bool, default=True
        Fit an unpenalized intercept (sites then also release counts and sums).
    random_state : int, RandomState instance or None, default=None
        ``None`` (use it for privacy): every release of every site draws
        fresh noise from the operating system's entropy, which no seeding
        elsewhere in the program can reproduce. An integer is a key: a
        site's noise is drawn from a keyed hash of it, the site and the
        exact sums it releases, so refitting the same rows gives the same
        model while any change in the rows gives independent noise
        (:func:`~sklearn_fed.privacy.noise_generator`). **Anyone who knows
        the integer can recompute the noise**: keep it secret or use it for
        tests only.

    Attributes
    ----------
    coef_ : ndarray of shape (n_features,) or (n_targets, n_features)
        Coefficients, in the dtype of ``X``.
    intercept_ : float or ndarray of shape (n_targets,)
        Intercept; ``0.0`` when ``fit_intercept=False``.
    epsilon_ : float
        Epsilon of the last release.
    delta_ : float
        Delta of the last release.
    sensitivity_ : float
        L2 sensitivity the last release was calibrated to: the joint
        sensitivity plus the grid's rounding (at most 2^-10 more).
    noise_std_ : float
        ``tau``: std of the noise on each coordinate of the *sum* of one
        release for ``"distributed"``, and of each site's message for
        ``"local"`` (then the sum carries ``K tau^2``).
    privacy_spent_ : tuple of (float, float)
        ``(epsilon, delta)`` of every release of this estimator so far
        (each ``fit``, refits included, and each ``partial_fit``), composed
        exactly (Gaussian releases compose to one Gaussian) at ``delta``.
    n_releases_ : int
        Number of releases composed in ``privacy_spent_``.
    clipped_share_ : float
        Share of the rows of the last ``fit``/``partial_fit`` that clipping
        changed (simulation only: in a deployment each site sees its own).
    n_features_in_ : int
        Number of features seen during fit.
    feature_names_in_ : ndarray of shape (n_features,)
        Names of features seen during fit, when ``X`` has string column names.
    clients_ : ndarray of shape (n_clients,)
        Labels of the clients whose releases were aggregated.
    n_clients_ : int
        Number of clients.
    communication_ : CommunicationLedger
        Bytes of the tasks and replies.

    See Also
    --------
    FederatedRidge : The exact, non-private estimator.
    sklearn_fed.privacy.RangeScaler : Rows of norm <= 1 from known feature ranges.
    sklearn_fed.privacy.SecureAggregator : The secure sum, run in one process.

    Notes
    -----
    ``sample_weight`` multiplies a row's contribution; the guarantee is for
    one row of weight at most 1, and a row of weight ``w > 1`` is protected
    like a group of ``ceil(w)`` rows.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_fed import PrivateFederatedRidge
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(-1, 1, size=(4000, 3)) / np.sqrt(3)
    >>> y = X @ np.array([1.0, -0.5, 0.25])
    >>> clients = np.repeat(np.arange(4), 1000)
    >>> model = PrivateFederatedRidge(alpha=1.0, epsilon=2.0, random_state=0)
    >>> model = model.fit(X, y, clients=clients)
    >>> bool(np.abs(model.coef_ - [1.0, -0.5, 0.25]).max() < 0.1)
    True
    >>> round(model.privacy_spent_[0], 3), model.privacy_spent_[1], model.clipped_share_
    (2.0, 1e-05, 0.0)
    """

    _parameter_constraints: dict = {
        **BaseFederatedRidge._parameter_constraints,
        "epsilon": [Interval(Real, 0, None, closed="neither"), Options(Real, {np.inf})],
        "delta": [Interval(Real, 0, 1, closed="neither")],
        "feature_bound": [Interval(Real, 0, None, closed="neither")],
        "target_bound": [Interval(Real, 0, None, closed="neither")],
        "noise": [StrOptions({"local", "distributed"})],
        "calibration": [StrOptions({"analytic", "classic"})],
        "psd_projection": ["boolean"],
        "random_state": ["random_state"],
    }

    _server_role = PrivateServer
    # Set by fit from the simulated sites' counts, not by the server.
    _simulation_only_attributes = ("clipped_share_",)
    _client_role = PrivateClient

    # A non-finite X reaches every clipped sum, which a site refuses to encode.
    _finite_from_statistics = True

    @property
    def _without_clients(self):  # what fit does without clients (MissingClientsWarning)
        if self.noise == "local" and self.epsilon != float("inf"):
            return ("the noise is added once, as by one site holding every row; K sites "
                    "add it K times, so the simulated accuracy is optimistic")
        return None  # the total noise does not depend on the number of sites

    _dask_rows = "partitions"

    def __init__(
        self,
        alpha=1.0,
        *,
        epsilon=1.0,
        delta=1e-5,
        feature_bound=1.0,
        target_bound=1.0,
        noise="local",
        calibration="analytic",
        psd_projection=True,
        fit_intercept=True,
        random_state=None,
    ):
        self.alpha = alpha
        self.epsilon = epsilon
        self.delta = delta
        self.feature_bound = feature_bound
        self.target_bound = target_bound
        self.noise = noise
        self.calibration = calibration
        self.psd_projection = psd_projection
        self.fit_intercept = fit_intercept
        self.random_state = random_state

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # Calibrated noise with data-independent bounds gives no R^2 guarantee
        # on data of arbitrary scale and size (scikit-learn's check asks for
        # R^2 > 0.5 on 200 standardized rows; at epsilon=1 the noise there
        # dominates the Gram). This tag is the declared way to say so.
        tags.regressor_tags.poor_score = True
        return tags

    @fit_method
    def fit(self, X, y, sample_weight=None, clients=None):
        """Fit from one private release of every client's statistics.

        A refit is a new release (fresh noise with ``random_state=None``; with
        an integer, the same rows give the same release), and is counted in
        ``privacy_spent_`` with every earlier release of this estimator.
        """
        return self._fit(X, y, sample_weight, clients)

    @fit_method(partial=True)
    def partial_fit(self, X, y, sample_weight=None, clients=None):
        """Add a further private release (new rows) and refit.

        The released sums add up, so the model uses all rows seen; each call
        is a new release and ``privacy_spent_`` composes all of them. A call
        that raises leaves the estimator unchanged.
        """
        return self._fit(X, y, sample_weight, clients, partial=True)

    @property
    def privacy_spent_(self):
        """``(epsilon, delta)`` of every release so far (computed when read)."""
        privacy = self.__dict__.get("_privacy")
        if privacy is None:
            raise AttributeError("privacy_spent_ is set by fit or partial_fit.")
        return privacy.epsilon(self.delta_), self.delta_

    def _fitted_state(self):
        if getattr(self, "_noisy_sums", None) is None:
            return None
        return self._n_targets, self._fit_intercept

    def _run_sites(self, X, y, sample_weight, labels, rows, *, warm_start=False, clients=None):
        server, client = super()._run_sites(X, y, sample_weight, labels, rows,
                                            warm_start=warm_start)
        counts = list(client.clipped_.values())
        self.clipped_share_ = _warn_if_clipped(
            sum(count for _, count, _ in counts), sum(total for *_, total in counts), "the sites")
        return server, client

    def _solve(self, total, d, t, alpha, single_target, plan):
        """Server side: derive centered statistics from the noisy sums and solve."""
        w, sx, sy, gram, moment = _unpack(total, d, t, self.fit_intercept)
        if self.fit_intercept:
            if plan.noise_std > 0:
                # Post-processing: a noisy count below one row would blow up the means.
                w = max(w, 1.0)
            elif not w > 0:
                raise ValueError("The sum of sample weights must be positive.")
            x_mean, y_mean = sx / w, sy / w
            gram = gram - np.outer(sx, x_mean)
            moment = moment - np.outer(sx, y_mean)
        else:
            x_mean, y_mean = np.zeros(d), np.zeros(t)
        spectrum = None
        if self.psd_projection:
            gram, eigenpairs = _psd_projection(gram)
            if eigenpairs is not None:  # the eigen path needs no second decomposition
                spectrum = numerical_range(gram, eigenpairs=eigenpairs)
        coef = _solve_gram(gram, moment, alpha, spectrum=spectrum)[0]
        summary = types.SimpleNamespace(x_mean=x_mean, y_mean=y_mean, single_target=single_target)
        return coef, summary  # what _set_coef reads of an aggregate
