"""FederatedRidgeClassifier and FederatedRidgeClassifierCV: ridge on {-1, 1} class indicators."""

import numpy as np
from sklearn.linear_model._base import LinearClassifierMixin

from .._compat import StrOptions, _fit_context, _unique
from ..protocol import InvalidClientMessage, atomic
from ..statistics import ClientStatistics
from ._base import BaseFederatedRidge, StatisticsServer, task_field
from ._classes import ClassesClient, ClassesServerMixin, class_weights, validate_labelled
from ._federated_ridge import FederatedRidgeServer
from ._federated_ridge_cv import FederatedRidgeCV, FederatedRidgeCVServer

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


class RidgeClassifierClient(ClassesClient):
    """A site of the ridge classifiers: its labels' classes, then statistics of ``(X, Y)``."""

    protocol = "ridge.classifier"

    def _compute_encoded(self, task, X, index, weight, classes):
        Y = indicator_targets(index, classes.shape[0])
        stats = ClientStatistics.from_data(
            X, Y, weight, centered=task_field(task, "centered", bool), check_input=False
        )
        return stats.to_payload()


class _ClassifierStatistics(ClassesServerMixin):
    """The statistics round of a ridge classifier, after the classes round."""

    protocol = "ridge.classifier"

    def _plan_classified(self, sites):
        if self.round > 1:
            return {}
        fields, arrays = self._classes_task()
        fields.update(step="statistics", centered=bool(self.estimator.fit_intercept))
        return {site: (dict(fields), dict(arrays)) for site in sites}

    def _read_classified(self, site, frame):
        stats = StatisticsServer._read_reply(self, site, frame)
        expected = 1 if self.classes_.shape[0] <= 2 else self.classes_.shape[0]
        if stats.n_targets != expected or stats.single_target:
            raise InvalidClientMessage(
                f"client {site!r}: statistics must have {expected} indicator targets.", site
            )
        return stats

    def _commit_classes(self):
        """``classes_``, and RidgeClassifier's binary layout: ``coef_`` of shape (n_features,)."""
        estimator = self.estimator
        estimator.classes_ = self.classes_
        if estimator.coef_.shape[0] == 1:
            estimator.coef_ = estimator.coef_.ravel()


class RidgeClassifierServer(_ClassifierStatistics, FederatedRidgeServer):
    """Server of :class:`FederatedRidgeClassifier`: classes, then one ridge solve."""

    def _apply_classified(self, replies, ledger):
        FederatedRidgeServer._apply(self, replies, ledger)
        self._commit_classes()


class RidgeClassifierCVServer(_ClassifierStatistics, FederatedRidgeCVServer):
    """Server of :class:`FederatedRidgeClassifierCV`: classes, then leave-one-client-out."""

    def _apply_classified(self, replies, ledger):
        FederatedRidgeCVServer._apply(self, replies, ledger)
        self._commit_classes()


class _RidgeClassifierTags:
    """Tags shared by the two ridge classifiers: classifiers of one label per row."""

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_label = False
        tags.target_tags.multi_output = False
        tags.regressor_tags = None
        return tags


class FederatedRidgeClassifier(_RidgeClassifierTags, LinearClassifierMixin, BaseFederatedRidge):
    """:class:`~sklearn.linear_model.RidgeClassifier` fitted from per-site statistics in two rounds.

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

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    coef_ : ndarray of shape (n_features,) or (n_classes, n_features)
        As RidgeClassifier: one row per class, a vector for two classes.
    intercept_ : ndarray of shape (1,) or (n_classes,), or 0.0
    n_features_in_, feature_names_in_
        As in :class:`~sklearn.linear_model.RidgeClassifier`.
    clients_ : ndarray of shape (n_clients_,)
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
    }
    _server_role = RidgeClassifierServer
    _client_role = RidgeClassifierClient
    _exact_federation = True

    def __init__(self, alpha=1.0, *, fit_intercept=True, class_weight=None):
        self.alpha = alpha
        self.fit_intercept = fit_intercept
        self.class_weight = class_weight

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
        X, y, sample_weight, labels, rows = validate_labelled(self, X, y, sample_weight, clients)
        return self._run_protocol(X, y, sample_weight, labels, rows)

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
    """:class:`~sklearn.linear_model.RidgeClassifierCV` with leave-one-client-out alpha selection.

    The two rounds of :class:`FederatedRidgeClassifier`; then, from the
    same messages, :class:`~sklearn_fed.FederatedRidgeCV`'s
    leave-one-client-out criterion on the {-1, 1} indicator targets
    (squared error summed over sites and classes) picks ``alpha_``, and the
    model is refit on all statistics. With ``clients=None``: leave-one-out
    on the rows, as RidgeClassifierCV.

    Read more in the :ref:`User Guide <federated_pipelines>`.

    Parameters
    ----------
    alphas : array-like of shape (n_alphas,), default=(0.1, 1.0, 10.0)
    fit_intercept : bool, default=True
    class_weight : dict or "balanced", default=None
    cv : int, cross-validation generator, iterable or None, default=None
        As in :class:`~sklearn_fed.FederatedRidgeCV`.

    Attributes
    ----------
    classes_, coef_, intercept_, alpha_, best_score_, cv_results_, clients_, n_clients_, \
communication_
        As in :class:`FederatedRidgeClassifier` and :class:`~sklearn_fed.FederatedRidgeCV`.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_fed import FederatedRidgeClassifierCV
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(90, 3))
    >>> y = (X[:, 0] + 0.3 * rng.normal(size=90) > 0).astype(int)
    >>> fed = FederatedRidgeClassifierCV(alphas=[0.1, 10.0]).fit(X, y, clients=np.arange(90) % 3)
    >>> fed.cv_results_.shape, float(fed.alpha_)
    ((3, 1, 2), 10.0)
    """

    _parameter_constraints: dict = {
        **FederatedRidgeCV._parameter_constraints,
        "class_weight": [dict, StrOptions({"balanced"}), None],
    }
    _server_role = RidgeClassifierCVServer
    _client_role = RidgeClassifierClient

    def __init__(self, alphas=(0.1, 1.0, 10.0), *, fit_intercept=True, class_weight=None,
                 cv=None):
        self.alphas = alphas
        self.fit_intercept = fit_intercept
        self.class_weight = class_weight
        self.cv = cv

    @_fit_context(prefer_skip_nested_validation=True)
    @atomic
    def fit(self, X, y, sample_weight=None, clients=None):
        """Pick alpha by leave-one-client-out CV, then fit on all rows.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
        sample_weight : array-like of shape (n_samples,), default=None
        clients : array-like of shape (n_samples,), default=None
            Site label of each row; at least two sites. ``None``:
            leave-one-out on the rows.

        Returns
        -------
        self : FederatedRidgeClassifierCV
        """
        alphas = self._checked_alphas()
        X, y, sample_weight, labels, rows = validate_labelled(self, X, y, sample_weight, clients)
        if clients is not None and self.cv is None:
            return self._run_protocol(X, y, sample_weight, labels, rows)
        # One site holds every row: encode the labels here, then FederatedRidgeCV's local modes.
        classes, index, counts = _unique(y, return_inverse=True, return_counts=True)
        weights = class_weights(self.class_weight, classes, counts)[index]
        if sample_weight is not None:
            weights = weights * sample_weight
        Y = indicator_targets(index, classes.shape[0])
        if self.cv is not None:
            self._fit_folds(X, Y, weights, clients, labels, rows, alphas)
        else:
            self._fit_leave_one_sample_out(X, Y, weights, alphas)
        self.classes_ = classes
        if self.coef_.shape[0] == 1:
            self.coef_ = self.coef_.ravel()
        return self

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
