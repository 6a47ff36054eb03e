"""FederatedRidgeClassifier and FederatedRidgeClassifierCV: ridge on {-1, 1} class indicators."""

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.linear_model._base import LinearClassifierMixin
from sklearn.metrics import check_scoring
from sklearn.utils.multiclass import type_of_target

from .._compat import StrOptions
from ..protocol import InvalidClientMessage, decode_values
from ..protocol._fields import reply_error, server_error
from ..statistics import ClientStatistics
from ._base import BaseFederatedRidge, StatisticsClient, fit_method, task_field
from ._classes import (
    ClassesClient,
    ClassesServerMixin,
    validate_classification,
)
from ._federated_ridge import FederatedRidgeServer
from ._federated_ridge_cv import FederatedRidgeCV
from ._ridge_cv_client import CVClient
from ._ridge_cv_server import FederatedRidgeCVServer

__all__ = ["FederatedRidgeClassifier", "FederatedRidgeClassifierCV"]

_LABELS = "Class labels (numbers or strings); 2-D: multilabel 0/1 indicators."


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


def multilabel(y):
    """Whether ``y`` is a 2-D target of several columns (RidgeClassifier's multilabel case)."""
    if y is None:
        return False
    shape = getattr(y, "shape", None)
    if shape is None:  # a list, or an object only convertible with __array__
        try:
            shape = np.asarray(y).shape
        except ValueError:  # ragged: the classification checks say what is wrong
            return False
    return len(shape) == 2 and shape[1] > 1


def multilabel_targets(y):
    """RidgeClassifier's targets for a multilabel ``y``: 0 becomes -1, other values stay.

    What ``LabelBinarizer(neg_label=-1, pos_label=1)`` gives for a
    multilabel-indicator ``y``, row by row: so each site encodes its own
    rows without knowing the others'.

    Examples
    --------
    >>> multilabel_targets(np.array([[0, 1], [1, 1]]))
    array([[-1.,  1.],
           [ 1.,  1.]])
    """
    y = np.asarray(y, dtype=np.float64)
    return np.where(y == 0, -1.0, y)


def _check_multilabel(y, class_weight):
    """Refuse, as RidgeClassifier, a 2-D ``y`` that is not multilabel-indicator."""
    if type_of_target(y) != "multilabel-indicator":
        raise ValueError("Multioutput target data is not supported with label binarization")
    _refuse_class_weight(class_weight)


def _refuse_class_weight(class_weight):
    """A multilabel ``y`` takes no class weights here (a documented limitation)."""
    if class_weight is not None:
        raise ValueError(
            "class_weight is not supported with a multilabel y by the federated ridge "
            "classifiers (scikit-learn's per-output class weights are not offered)."
        )


class _MultilabelSite:
    """A ridge classifier's site: a multilabel ``y`` is encoded row by row.

    The classes round carries the distinct values of ``y`` (as for one
    label per row) and ``n_outputs`` (its columns, 0 for a 1-D ``y``); later
    steps encode a multilabel ``y`` with :func:`multilabel_targets`.
    """

    def check_rows(self, X, y, sample_weight, schema, site):
        if not multilabel(y):
            return super().check_rows(X, y, sample_weight, schema, site)
        X, y, sample_weight, names = super(ClassesClient, self).check_rows(
            X, y, sample_weight, schema, site)
        try:
            _check_multilabel(y, self.estimator.class_weight)
        except ValueError as exc:
            raise ValueError(f"site {site!r}: {exc}") from exc
        return X, y, sample_weight, names

    def _classes_extra(self, task, X, y, sample_weight):
        return {"n_outputs": int(y.shape[1]) if y.ndim == 2 else 0}, {}

    def _compute_labels(self, task, X, y, sample_weight, rows):
        if y.ndim != 2 or task_field(task, "step", str) == "classes":
            return ClassesClient.compute(self, task, X, y, sample_weight, rows)
        if rows is not None:
            X, y = X[rows], y[rows]
            sample_weight = None if sample_weight is None else sample_weight[rows]
        classes = decode_values(task.fields.get("classes"), task.arrays, server_error)
        if not np.array_equal(classes, np.arange(y.shape[1])):
            server_error(f"a multilabel task must name the {y.shape[1]} outputs 0, 1, ...")
        return self._compute_targets(task, X, multilabel_targets(y), sample_weight)

    def _compute_encoded(self, task, X, index, weight, classes):
        return self._compute_targets(task, X, indicator_targets(index, classes.shape[0]), weight)


class RidgeClassifierClient(_MultilabelSite, ClassesClient, StatisticsClient):
    """A site of :class:`FederatedRidgeClassifier`: its classes, then statistics of ``(X, Y)``."""

    protocol = "ridge.classifier"

    def replies_are_independent(self, tasks):
        return True  # a site's classes, then the statistics of its own rows: nothing shared

    def compute(self, task, X, y, sample_weight, rows):
        return self._compute_labels(task, X, y, sample_weight, rows)

    def _compute_targets(self, task, X, Y, weight):
        return StatisticsClient.compute(self, task, X, Y, weight, None)


class RidgeClassifierCVClient(_MultilabelSite, ClassesClient, CVClient):
    """A site of :class:`FederatedRidgeClassifierCV`: classes, then FederatedRidgeCV's steps."""

    protocol = "ridge.classifier_cv"

    def compute(self, task, X, y, sample_weight, rows):
        # The classes step selects the site's rows first: its folds go with them.
        site = self.for_rows(task, X.shape[0], rows)
        return site._compute_labels(task, X, y, sample_weight, rows)

    def _compute_targets(self, task, X, Y, weight):
        return CVClient.compute(self, task, X, Y, weight, None)


class _ClassifierRounds(ClassesServerMixin):
    """A regression server's rounds on the indicator targets, after the classes round.

    Mixed in before the regression server (FederatedRidge's or
    FederatedRidgeCV's): every later task also carries the classes and
    their weights, every statistics reply must have one indicator target
    per class (one for two classes), and the classes are committed with
    the model, in RidgeClassifier's layout.
    """

    n_outputs_ = 0  # columns of a multilabel y (0: one label per row)

    def _regression(self):
        return super(ClassesServerMixin, self)

    def _classes_extra_keys(self):
        return frozenset({"n_outputs"}), frozenset()

    def _labels_per_row(self, frame):
        outputs = frame.fields.get("n_outputs")
        return outputs if type(outputs) is int and 1 < outputs < 2**20 else 1

    def _read_classes_extra(self, site, frame, classes):
        outputs = frame.fields.get("n_outputs")
        if not (type(outputs) is int and (outputs == 0 or 1 < outputs < 2**20)):
            raise InvalidClientMessage(f"client {site!r}: malformed n_outputs.", site)
        return outputs

    def _after_classes(self, replies, ledger):
        outputs = {}
        for site in replies:
            outputs.setdefault(replies[site][2], []).append(site)
        if len(outputs) > 1:
            raise ValueError("the sites' labels disagree on their number of columns: " + "; ".join(
                f"{k or '1-D'} at {sorted(sites, key=repr)}" for k, sites in outputs.items()))
        n_outputs = next(iter(outputs))
        if n_outputs:
            # the values of all sites' y together must make a multilabel-indicator y
            values = self.classes_
            if not (values.size <= 2 and values.dtype.kind in "biuf"
                    and np.all(values == np.round(values))):
                raise ValueError(
                    "Multioutput target data is not supported with label binarization")
            _refuse_class_weight(self.estimator.class_weight)
            self.classes_ = np.arange(n_outputs)  # LabelBinarizer's classes_ for multilabel y
            self.class_weight_ = np.ones(n_outputs)
        self.n_outputs_ = n_outputs
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
        if self.n_outputs_:
            return self.n_outputs_
        return 1 if self.classes_.shape[0] <= 2 else self.classes_.shape[0]

    def _read_classified(self, site, frame):
        parsed = self._regression().read_reply(site, frame)
        # FederatedRidgeCV's server checks its statistics with _expected_targets itself.
        if isinstance(parsed, ClientStatistics) and (
                parsed.n_targets != self._expected_targets(frame) or parsed.single_target):
            reply_error(site, f"statistics must have {self._expected_targets(frame)} "
                              "indicator targets.")
        return parsed

    def _apply_classified(self, replies, ledger):
        self._regression().apply(replies, ledger)
        if self._next_round > self.round:
            return  # another round comes (factors, held-out sums, predictions)
        estimator = self.estimator
        estimator.classes_ = self.classes_
        estimator._multilabel = bool(self.n_outputs_)
        if estimator.coef_.shape[0] == 1 and not self.n_outputs_:  # RidgeClassifier's binary
            estimator.coef_ = estimator.coef_.ravel()


class RidgeClassifierServer(_ClassifierRounds, FederatedRidgeServer):
    """Server of :class:`FederatedRidgeClassifier`: classes, then one ridge solve."""

    protocol = "ridge.classifier"


class _IdentityClassifier(LinearClassifierMixin, BaseEstimator):
    """Decision values in, the classifier's predictions out (for scorers of held-out rows)."""

    def __init__(self, classes, multilabel=False):
        self.classes_ = classes
        self.multilabel = multilabel

    def decision_function(self, decision):
        return decision

    def predict(self, decision):
        if self.multilabel:  # RidgeClassifier's multilabel predict: positive decisions
            return (decision > 0).astype(int)
        return super().predict(decision)


class RidgeClassifierCVServer(_ClassifierRounds, FederatedRidgeCVServer):
    """Server of :class:`FederatedRidgeClassifierCV`: classes, then FederatedRidgeCV's rounds."""

    protocol = "ridge.classifier_cv"

    def _score_rows(self, predictions, targets, weights, per_target):
        """The scorer on held-out decision values against the rows' classes."""
        kwargs = {} if np.all(weights == 1) else {"sample_weight": weights}
        if self.n_outputs_:
            truth = (targets > 0).astype(int)
        else:
            truth = self.classes_[(targets[:, 0] > 0).astype(int) if targets.shape[1] == 1
                                  else np.argmax(targets, axis=1)]
        identity = _IdentityClassifier(self.classes_, multilabel=bool(self.n_outputs_))
        decision = predictions[:, 0, :] if predictions.shape[1] == 1 else predictions
        return np.asarray([
            self._scorer(identity, decision[..., a], truth, **kwargs)
            for a in range(len(self._alphas))
        ], dtype=np.float64)


class _RidgeClassifierTags:
    """What the two ridge classifiers share: classifiers of one label per row."""

    _dask_rows = None  # their classes round keeps no partition-wise reduction

    def _validate_fit_data(self, X, y, sample_weight, *, reset):
        if not multilabel(y):
            return validate_classification(self, X, y, sample_weight, reset=reset)
        return validate_classification(
            self, X, y, sample_weight, reset=reset, multi_output=True,
            check_targets=lambda y: _check_multilabel(y, self.class_weight))

    def predict(self, X):
        """Predict class labels (multilabel ``y``: each output where its decision is positive).

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)

        Returns
        -------
        y_pred : ndarray of shape (n_samples,) or (n_samples, n_outputs)
        """
        if getattr(self, "_multilabel", False):
            return (self.decision_function(X) > 0).astype(int)
        return LinearClassifierMixin.predict(self, X)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_label = True
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
    class weights) to round-off. A multilabel ``y`` (2-D, 0/1 indicators)
    is encoded as RidgeClassifier encodes it (0 as -1), row by row at each
    site; ``predict`` then gives an indicator per output. Class weights are
    not offered with a multilabel ``y``.

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

    @fit_method(y=_LABELS, clients="Site label of each row. ``None``: one site.")
    def fit(self, X, y, sample_weight=None, clients=None):
        """Fit on rows split among sites by ``clients`` (two rounds)."""
        return self._fit(X, y, sample_weight, clients)



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

    @fit_method(y=_LABELS, clients="Site label of each row (``None``: one site; "
                "``cv=\"clients\"`` needs at least two).")
    def fit(self, X, y, sample_weight=None, clients=None):
        """Choose alpha by cross-validation (see ``cv``), then fit on all rows."""
        return self._fit(X, y, sample_weight, clients)

