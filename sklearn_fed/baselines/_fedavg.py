"""FedAvg for linear regression: local SGD, weighted model averaging."""

from ._base import BaseFederatedSGD

__all__ = ["FedAvgRegressor"]

_COMMON_PARAMETERS = """alpha : float, default=1.0
        L2 penalty on the coefficients, on the scale of
        :class:`~sklearn.linear_model.Ridge`: the fixed point of exact gradient
        descent on the global objective is ``Ridge(alpha)``'s solution.
    {fit_intercept}
    {learning_rate}
    local_epochs : int, default=5
        Local passes E over each client's rows per round.
    batch_size : int or None, default=None
        Rows per local step. ``None`` (or a size at least a client's rows):
        full local batch, one deterministic step per epoch. Otherwise each
        epoch reshuffles the client's rows (from a seed in its task); a
        client of ``n_k`` rows takes ``ceil(n_k / batch_size)`` steps, so
        clients of different sizes take different numbers of steps. With
        ``None`` every client takes ``local_epochs`` steps, so FedNova equals
        FedAvg.
    n_rounds : int, default=100
        Communication rounds R run by :meth:`fit`.
    client_fraction : float in (0, 1], default=1.0
        Fraction of clients sampled uniformly without replacement each round
        (``max(1, round(client_fraction * K))`` clients); aggregation weights
        are renormalized over the sampled clients.
    random_state : int, RandomState instance or None, default=None
        Seed of the server's client sampling and of the seeds it sends for
        minibatch shuffling.
    verbose : int, default=0
        Print one line per round (sites answered, bytes each way, seconds)."""

_FIT_INTERCEPT = """fit_intercept : bool, default=True
        Fit an unpenalized intercept: clients announce their weighted means
        at setup, train on rows centered at the global means, and the
        intercept is ``y_mean - x_mean @ coef_`` (exact for any ``coef_``)."""

_LEARNING_RATE = """learning_rate : float or "auto", default="auto"
        Local step size eta on the objective ``(1/2S)(sum_i s_i r_i^2 +
        alpha ||w||^2)`` (``S``: total sample weight), i.e. on half the mean
        squared error. ``"auto"``: ``1 / L`` with ``L`` a bound on the
        curvature of every site's local objective, from one number each site
        announces at setup (the mean squared norm of its rows around the
        global mean; ``+ alpha / S``, ``+ mu`` for FedProx). Full-batch local
        gradient descent is then stable on any data scale; small batches of
        rows with very unequal norms may need a smaller step."""

_COMMON_ATTRIBUTES = """coef_ : ndarray of shape (n_features,) or (n_targets, n_features)
        Coefficients of the global model, shaped like Ridge's.
    intercept_ : float or ndarray of shape (n_targets,)
        Intercept; ``0.0`` when ``fit_intercept=False``.
    learning_rate_ : float
        The step size used (``learning_rate``, or the value ``"auto"`` chose).
    history_ : list of dict
        One entry per model round: ``round``; ``train_mse``, the weighted MSE
        of the global model the participants received that round (the model
        of the previous round), as they report it (averaged over targets);
        ``uplink_bytes`` and ``downlink_bytes``, the bytes of the round's
        messages (the first entry of each ``fit``/``partial_fit`` also counts
        its setup round); ``n_participants``.
    n_rounds_ : int
        Model rounds run so far (``len(history_)``).
    clients_ : ndarray of shape (n_clients,)
        Client labels of the last call.
    n_clients_ : int
        Number of clients of the last call.
    communication_ : CommunicationLedger
        Bytes of every task and reply, per client, over all rounds (setup
        rounds included: ``rounds`` is ``n_rounds + 1`` after ``fit``).
    n_features_in_ : int
        Number of features seen during fit.
    feature_names_in_ : ndarray of shape (n_features,)
        Names of features seen during fit, when ``X`` has string column names."""


class FedAvgRegressor(BaseFederatedSGD):
    """Federated averaging (McMahan et al., 2017) for L2-penalized linear regression.

    Each round, the sampled clients start from the global model, run
    ``local_epochs`` epochs of minibatch SGD on their own rows, and send their
    local model; the server averages them weighted by the clients' total
    sample weight ``S_k``, announced in a setup round. Client ``k``'s local
    objective is::

        F_k(w) = (1 / 2 S_k) sum_{i in k} s_i (y_i - y_mean - (x_i - x_mean) w)^2
                 + (alpha / 2 S) ||w||^2

    with ``S = sum_k S_k`` and the global weighted means, which the clients
    announce once (``fit_intercept=False``: no centering). ``sum_k (S_k / S)
    F_k`` is ridge's objective (with its unpenalized intercept profiled out)
    divided by ``2 S``, so
    one client with full batches converges to ``Ridge(alpha)``. With several
    heterogeneous clients and ``local_epochs > 1`` the fixed point drifts
    from it (client drift); with minibatches a constant step leaves an SGD
    noise floor. This is the iterative baseline against which the exact
    one-shot estimators are compared.

    A diverging run raises a :class:`~sklearn.exceptions.ConvergenceWarning`
    (the clients report the loss of the model they receive), and a model
    that overflows raises ``ValueError``; both name the round.

    {sections}

    See Also
    --------
    FedProxRegressor : Adds a proximal term against client drift.
    FedNovaRegressor : Normalizes updates by the number of local steps.
    DPFedAvgRegressor : Clipped, noised updates.
    sklearn_fed.FederatedRidge : The exact one-shot solution.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.linear_model import Ridge
    >>> from sklearn_fed.baselines import FedAvgRegressor
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(60, 3))
    >>> y = X @ [1.0, -2.0, 0.5] + 0.1 * rng.normal(size=60)
    >>> clients = np.repeat([0, 1, 2], 20)
    >>> fed = FedAvgRegressor(n_rounds=50).fit(X, y, clients=clients)
    >>> ridge = Ridge(alpha=1.0).fit(X, y)
    >>> bool(np.abs(fed.coef_ - ridge.coef_).max() < 0.02)
    True
    >>> len(fed.history_), fed.communication_.rounds  # setup, then 50 rounds
    (50, 51)
    """

    _protocol = "sgd.fedavg"


_SECTIONS = """Read more in the :ref:`User Guide <baselines>`.

    Parameters
    ----------
    {parameters}

    Attributes
    ----------
    {attributes}"""


def _fill_docstring(cls, parameters="", attributes="", *, fit_intercept=_FIT_INTERCEPT,
                    learning_rate=_LEARNING_RATE):
    """Share the common parameter/attribute text; subclasses add or change their own."""
    common = _COMMON_PARAMETERS.replace("{fit_intercept}", fit_intercept).replace(
        "{learning_rate}", learning_rate)
    sections = _SECTIONS.replace("{parameters}", common + parameters).replace(
        "{attributes}", _COMMON_ATTRIBUTES + attributes)
    cls.__doc__ = cls.__doc__.replace("{sections}", sections)
    return cls


_fill_docstring(FedAvgRegressor)
