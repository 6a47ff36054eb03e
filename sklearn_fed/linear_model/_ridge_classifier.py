"""FederatedRidgeClassifier and FederatedRidgeClassifierCV: ridge on {-1, 1} class indicators."""

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.linear_model._base import LinearClassifierMixin
from sklearn.metrics import check_scoring

from .._compat import StrOptions, _fit_context
from ..protocol import InvalidClientMessage, atomic
from ..statistics import ClientStatistics
from ._base import BaseFederatedRidge, StatisticsClient
from ._classes import ClassesClient, ClassesServerMixin, validate_classification
from ._federated_ridge import FederatedRidgeServer
from ._federated_ridge_cv import FederatedRidgeCV
from ._ridge_cv_client import CVClient
from ._ridge_cv_server import FederatedRidgeCVServer

__all__ = ["FederatedRidgeClassifier", "FederatedRidgeClassifierCV"]


def indicator_targets(index, n_classes):
    """RidgeClassifier's targets: +1 for a row's class, -1 elsewhere; one column if binary.

    A single class gives one column of -1, as scikit-learn's LabelBinarizer.

    Examples
    --------
    >>> indicator_targets(np.array([0, 2, 1]), 3)
    array([[ 1., -1., -1.],
           [-1., -1.,  1.],
           [-1.,  1., -1.]])
    >>> indicator_targets(np.array([1, 0]), 2).ravel()
    array([ 1., -1.])
    """
    Y = -np.ones((index.shape[0], n_classes))
    if n_classes == 1:
        return Y
    Y[np.arange(index.shape[0]), index] = 1.0
    return Y[:, 1:] if n_classes == 2 else Y


class RidgeClassifierClient(ClassesClient, StatisticsClient):
    """A site of :class:`FederatedRidgeClassifier`: its classes, then statistics of ``(X, Y)``."""

    protocol = "ridge.classifier"

    def replies_are_independent(self, tasks):
        return True  # a site's classes, then the statistics of its own rows: nothing shared

    def _compute_encoded(self, task, X, index, weight, classes):
        Y = indicator_targets(index, classes.shape[0])
        return StatisticsClient.compute(self, task, X, Y, weight, None)


class RidgeClassifierCVClient(ClassesClient, CVClient):
    """A site of :class:`FederatedRidgeClassifierCV`: classes, then FederatedRidgeCV's steps."""

    protocol = "ridge.classifier_cv"

    def compute(self, task, X, y, sample_weight, rows):
        # The classes step selects the site's rows first: its folds go with them.
        site = self.for_rows(task, X.shape[0], rows)
        return ClassesClient.compute(site, task, X, y, sample_weight, rows)

    def _compute_encoded(self, task, X, index, weight, classes):
        Y = indicator_targets(index, classes.shape[0])
        return CVClient.compute(self, task, X, Y, weight, None)


class _ClassifierRounds(ClassesServerMixin):
    """A regression server's rounds on the indicator targets, after the classes round.

    Mixed in before the regression server (FederatedRidge's or
    FederatedRidgeCV's): every later task also carries the classes and
    their weights, every statistics reply must have one indicator target
    per class (one for two classes), and the classes are committed with
    the model, in RidgeClassifier's layout.
    """

    def _regression(self):
        return super(ClassesServerMixin, self)

    def _after_classes(self, replies, ledger):
        self.request_round(step="statistics", form=self.form)

    def _plan_classified(self, sites):
        fields, arrays = self._classes_task()
        return {
            site: ({"step": "statistics", **task_fields, **fields}, {**task_arrays, **arrays})
            for site, (task_fields, task_arrays) in self._regression().plan(sites).items()
        }

    def cross_check(self, replies):
        return {} if self.classes_ is None else self._regression().cross_check(replies)

    def reply_fold(self):
        return None if self.classes_ is None else self._regression().reply_fold()

    def pools_round(self, fields):
        # The statistics round pools as the regression's does: every site encodes
        # its labels with the same classes, so the statistics add up. Only with
        # unit class weights (a site's weight sum is then its row count).
        if fields is None:
            return self._regression().pools_round(None)
        if self.classes_ is None or fields.get("step") != "statistics" or not np.all(
                self.class_weight_ == 1.0):
            return False
        own = self._classes_task()[0].keys() | {"step"}
        return self._regression().pools_round({k: v for k, v in fields.items() if k not in own})

    def _expected_targets(self, frame):
        return 1 if self.classes_.shape[0] <= 2 else self.classes_.shape[0]

    def _read_classified(self, site, frame):
        parsed = self._regression().read_reply(site, frame)
        # FederatedRidgeCV's server checks its statistics with _expected_targets itself.
        if isinstance(parsed, ClientStatistics) and (
                parsed.n_targets != self._expected_targets(frame) or parsed.single_target):
            raise InvalidClientMessage(
                f"client {site!r}: statistics must have {self._expected_targets(frame)} "
                "indicator targets.", site
            )
        return parsed

    def _apply_classified(self, replies, ledger):
        self._regression().apply(replies, ledger)
        if self._next_round > self.round:
            return  # another round comes (factors, held-out sums, predictions)
        estimator = self.estimator
        estimator.classes_ = self.classes_
        if estimator.coef_.shape[0] == 1:  # RidgeClassifier's binary layout
            estimator.coef_ = estimator.coef_.ravel()


class RidgeClassifierServer(_ClassifierRounds, FederatedRidgeServer):
    """Server of :class:`FederatedRidgeClassifier`: classes, then one ridge solve."""

    protocol = "ridge.classifier"


class _IdentityClassifier(LinearClassifierMixin, BaseEstimator):
    """Decision values in, the classifier's predictions out (for scorers of held-out rows)."""

    def __init__(self, classes):
        self.classes_ = classes

    def decision_function(self, decision):
        return decision


class RidgeClassifierCVServer(_ClassifierRounds, FederatedRidgeCVServer):
    """Server of :class:`FederatedRidgeClassifierCV`: classes, then FederatedRidgeCV's rounds."""

    protocol = "ridge.classifier_cv"

    def _score_rows(self, predictions, targets, weights, per_target):
        """The scorer on held-out decision values against the rows' classes."""
        kwargs = {} if np.all(weights == 1) else {"sample_weight": weights}
        truth = self.classes_[(targets[:, 0] > 0).astype(int) if targets.shape[1] == 1
                              else np.argmax(targets, axis=1)]
        identity = _IdentityClassifier(self.classes_)
        decision = predictions[:, 0, :] if predictions.shape[1] == 1 else predictions
        return np.asarray([
            self._scorer(identity, decision[..., a], truth, **kwargs)
            for a in range(len(self._alphas))
        ], dtype=np.float64)


class _RidgeClassifierTags:
    """What the two ridge classifiers share: classifiers of one label per row."""

    _dask_rows = None  # their classes round keeps no partition-wise reduction

    def _validate_fit_data(self, X, y, sample_weight, *, reset):
        return validate_classification(self, X, y, sample_weight, reset=reset)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_label = False
        tags.target_tags.multi_output = False
        tags.regressor_tags = None
        return tags


class FederatedRidgeClassifier(_RidgeClassifierTags, LinearClassifierMixin, BaseFederatedRidge):
    """:class:`~sklearn.linear_model.RidgeClassifier` from per-site statistics, in two rounds.

    Round 1: each site sends its set of labels (and, for
    ``class_weight="balanced"``, its count per label); the server takes
    their sorted union as ``classes_``. Round 2: every site encodes its
    labels as RidgeClassifier does (+1 for the row's class, -1 for the
    others; one column for two classes), weights each row by its sample and
    class weight, and sends the :class:`~sklearn_fed.ClientStatistics` of
    ``(X, Y)``; the server solves ridge once. The result equals
    RidgeClassifier on the pooled rows (binary and multiclass, sample and
    class weights) to round-off.

    Read more in the :ref:`User Guide <federated_pipelines>`.

    Parameters
    ----------
    alpha : float, default=1.0
    fit_intercept : bool, default=True
    class_weight : dict or "balanced", default=None
        As in :class:`~sklearn.linear_model.RidgeClassifier`.
    solver : {"auto", "cholesky", "svd"}, default="auto"
        The form of the statistics, as in :class:`~sklearn_fed.FederatedRidge`
        (``"auto"`` repeats the statistics round as factors when the pooled
        Gram is too ill-conditioned).

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    coef_ : ndarray of shape (n_features,) or (n_classes, n_features)
        As RidgeClassifier: one row per class, a vector for two classes.
    intercept_ : ndarray of shape (1,) or (n_classes,), or 0.0
    solver_ : {"cholesky", "eigen", "svd"}
        How the model was solved (see :class:`~sklearn_fed.FederatedRidge`).
    n_features_in_, feature_names_in_
        As in :class:`~sklearn.linear_model.RidgeClassifier`.
    clients_ : ndarray of shape (`n_clients_`,)
    n_clients_ : int
    communication_ : CommunicationLedger

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.linear_model import RidgeClassifier
    >>> from sklearn_fed import FederatedRidgeClassifier
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(90, 3))
    >>> y = np.where(X[:, 0] > 0, "yes", "no")
    >>> fed = FederatedRidgeClassifier().fit(X, y, clients=np.arange(90) % 3)
    >>> fed.classes_, fed.communication_.rounds
    (array(['no', 'yes'], dtype='<U3'), 2)
    >>> bool(np.allclose(fed.coef_, RidgeClassifier().fit(X, y).coef_))
    True
    """

    _parameter_constraints: dict = {
        **BaseFederatedRidge._parameter_constraints,
        "class_weight": [dict, StrOptions({"balanced"}), None],
        "solver": [StrOptions({"auto", "cholesky", "svd"})],
    }
    _server_role = RidgeClassifierServer
    _client_role = RidgeClassifierClient
    _exact_federation = True

    def __init__(self, alpha=1.0, *, fit_intercept=True, class_weight=None, solver="auto"):
        self.alpha = alpha
        self.fit_intercept = fit_intercept
        self.class_weight = class_weight
        self.solver = solver

    @_fit_context(prefer_skip_nested_validation=True)
    @atomic
    def fit(self, X, y, sample_weight=None, clients=None):
        """Fit on rows split among sites by ``clients`` (two rounds).

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
            Class labels (numbers or strings).
        sample_weight : array-like of shape (n_samples,), default=None
        clients : array-like of shape (n_samples,), default=None
            Site label of each row. ``None``: one site.

        Returns
        -------
        self : FederatedRidgeClassifier
        """
        return self._fit(X, y, sample_weight, clients)

    def predict(self, X):
        """Predict class labels (the class of the largest decision value).

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)

        Returns
        -------
        y_pred : ndarray of shape (n_samples,)
        """
        return LinearClassifierMixin.predict(self, X)


class FederatedRidgeClassifierCV(_RidgeClassifierTags, LinearClassifierMixin, FederatedRidgeCV):
    """:class:`~sklearn.linear_model.RidgeClassifierCV`: alpha by cross-validation, federated.

    The classes round of :class:`FederatedRidgeClassifier`, then
    :class:`~sklearn_fed.FederatedRidgeCV`'s rounds on the {-1, 1} class
    indicators weighted by sample and class weight, with its ``cv``
    interface:

    - ``cv=None``: leave-one-row-out, as RidgeClassifierCV (its default):
      the mean squared leave-one-out error of the indicators, or
      ``scoring`` on the leave-one-out decision values.
    - ``cv="clients"``: leave-one-client-out from the statistics round.
    - ``cv`` an int, splitter or iterable (``clients`` go to it as
      ``groups``; an int is stratified, as for any classifier): the folds of
      the pooled rows, each fold's model from the sites' fold statistics.

    With a fold ``cv`` and ``scoring=None`` the score is accuracy, as
    RidgeClassifierCV's grid search: it is not a sum of per-row errors, so
    a further round collects the held-out rows' decision values (see
    :class:`~sklearn_fed.FederatedRidgeCV` on which scorers need it).

    Read more in the :ref:`User Guide <federated_pipelines>`.

    Parameters
    ----------
    alphas : array-like of shape (n_alphas,), default=(0.1, 1.0, 10.0)
    fit_intercept : bool, default=True
    scoring : str, callable or None, default=None
    cv : int, cross-validation generator, iterable, "clients" or None, default=None
    class_weight : dict or "balanced", default=None
    store_cv_results : bool, default=False
        As in :class:`~sklearn.linear_model.RidgeClassifierCV` (and
        :class:`~sklearn_fed.FederatedRidgeCV` for ``cv="clients"``).
    solver : {"auto", "cholesky", "svd"}, default="auto"
        As in :class:`~sklearn_fed.FederatedRidge`.

    Attributes
    ----------
    classes_, coef_, intercept_, alpha_, best_score_, cv_results_, solver_, clients_, \
n_clients_, communication_
        As in :class:`FederatedRidgeClassifier` and :class:`~sklearn_fed.FederatedRidgeCV`.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.linear_model import RidgeClassifierCV
    >>> from sklearn_fed import FederatedRidgeClassifierCV
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(90, 3))
    >>> y = (X[:, 0] + 0.3 * rng.normal(size=90) > 0).astype(int)
    >>> clients = np.arange(90) % 3
    >>> loo = FederatedRidgeClassifierCV(alphas=[0.1, 10.0]).fit(X, y, clients=clients)
    >>> float(loo.alpha_) == RidgeClassifierCV(alphas=[0.1, 10.0]).fit(X, y).alpha_
    True
    >>> loco = FederatedRidgeClassifierCV(alphas=[0.1, 10.0], cv="clients")
    >>> loco.fit(X, y, clients=clients).communication_.rounds  # classes, statistics, decisions
    3
    >>> loco.set_params(scoring="neg_mean_squared_error").fit(X, y, clients=clients)
    FederatedRidgeClassifierCV(alphas=[0.1, 10.0], cv='clients',
                               scoring='neg_mean_squared_error')
    >>> loco.communication_.rounds  # from the statistics' sums alone
    2
    """

    _parameter_constraints: dict = {
        key: value for key, value in FederatedRidgeCV._parameter_constraints.items()
        if key not in ("alpha_per_target", "criterion")
    }
    _parameter_constraints["class_weight"] = [dict, StrOptions({"balanced"}), None]
    _server_role = RidgeClassifierCVServer
    _client_role = RidgeClassifierCVClient
    # RidgeClassifierCV has neither; FederatedRidgeCV's server reads them.
    alpha_per_target = False
    criterion = "mean_fold_score"

    def __init__(self, alphas=(0.1, 1.0, 10.0), *, fit_intercept=True, scoring=None, cv=None,
                 class_weight=None, store_cv_results=False, solver="auto"):
        self.alphas = alphas
        self.fit_intercept = fit_intercept
        self.scoring = scoring
        self.cv = cv
        self.class_weight = class_weight
        self.store_cv_results = store_cv_results
        self.solver = solver

    def _scorer(self):
        if self.scoring is None and self.cv is not None:
            return check_scoring(self, scoring="accuracy")  # a grid search's default
        return super()._scorer()

    @_fit_context(prefer_skip_nested_validation=True)
    @atomic
    def fit(self, X, y, sample_weight=None, clients=None):
        """Choose alpha by cross-validation (see ``cv``), then fit on all rows.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
            Class labels (numbers or strings).
        sample_weight : array-like of shape (n_samples,), default=None
        clients : array-like of shape (n_samples,), default=None
            Site label of each row (``None``: one site; ``cv="clients"``
            needs at least two).

        Returns
        -------
        self : FederatedRidgeClassifierCV
        """
        return self._fit(X, y, sample_weight, clients)

    def predict(self, X):
        """Predict class labels (the class of the largest decision value).

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)

        Returns
        -------
        y_pred : ndarray of shape (n_samples,)
        """
        return LinearClassifierMixin.predict(self, X)
