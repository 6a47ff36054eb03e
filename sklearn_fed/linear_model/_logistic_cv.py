"""FederatedLogisticRegressionCV: the search over C as one protocol run, every C advancing together.

It is :class:`~sklearn_fed.model_selection.FederatedGridSearchCV` over ``C``
specialised to :class:`FederatedLogisticRegression`: each round carries, in
one message per site, the Newton task of every ``(C, fold)`` still
converging, so the whole path costs as many rounds as the slowest fit (plus
one round of scores and the refit's), not their sum. The fitted attributes
are LogisticRegressionCV's.
"""

import numbers
from typing import ClassVar

import numpy as np
from sklearn.base import ClassifierMixin
from sklearn.utils._param_validation import Interval, StrOptions

from ..metrics import federated_score
from ..model_selection import LeaveSitesOut, SiteKFold
from ..model_selection._search import _FederatedSearchCV
from ._logistic import FederatedLogisticRegression

__all__ = ["FederatedLogisticRegressionCV"]


class FederatedLogisticRegressionCV(ClassifierMixin, _FederatedSearchCV):
    """Logistic regression with C chosen by cross-validation across sites, in one run.

    The equivalent of :class:`~sklearn.linear_model.LogisticRegressionCV`
    (``solver="newton-cholesky"``, L2 penalty) on the pooled rows with the
    folds of ``cv`` (each site splits its own rows, or whole sites are held
    out; see :class:`~sklearn_fed.model_selection.SiteKFold`): every
    ``(C, fold)`` is fitted by :class:`FederatedLogisticRegression`'s Newton
    protocol, all of them in the same rounds, scored with the federated
    metrics on the test rows, and the best C is refitted on every row.

    Parameters
    ----------
    Cs : int or array-like of float, default=10
        An int: ``np.logspace(-4, 4, Cs)``, as scikit-learn.
    fit_intercept : bool, default=True
    cv : int, "sites", SiteKFold or LeaveSitesOut, default=5
    scoring : str, default=None
        A federated metric or scorer name; None: accuracy.
    tol : float, default=1e-4
        Newton tolerance of each fit (see :class:`FederatedLogisticRegression`).
    max_iter : int, default=50
    class_weight : dict or "balanced", default=None
    refit : bool, default=True
        Fit the best C on every row; False: average the best C's fold models.

    Attributes
    ----------
    Cs_ : ndarray of shape (n_Cs,)
    C_ : ndarray of shape (1,)
        The chosen C.
    scores_ : dict
        ``{classes_[1] or each class: ndarray (n_folds, n_Cs)}``, as scikit-learn's
        legacy attributes (the same array for every class).
    coef_, intercept_, classes_, n_iter_
        Of the final model.
    cv_results_, best_index_, best_score_
        As :class:`~sklearn_fed.model_selection.FederatedGridSearchCV`'s.
    clients_, n_clients_, communication_

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.datasets import load_breast_cancer
    >>> from sklearn_fed.linear_model import FederatedLogisticRegressionCV
    >>> X, y = load_breast_cancer(return_X_y=True)
    >>> X = (X - X.mean(0)) / X.std(0)
    >>> model = FederatedLogisticRegressionCV(Cs=4, cv=3).fit(X, y, clients=np.arange(569) % 3)
    >>> model.C_
    array([21.5443469])
    >>> round(model.score(X, y), 3)
    0.991
    """

    _parameter_constraints: ClassVar[dict] = {
        "Cs": [Interval(numbers.Integral, 1, None, closed="left"), "array-like"],
        "fit_intercept": ["boolean"],
        "cv": [Interval(numbers.Integral, 2, None, closed="left"), StrOptions({"sites"}),
               SiteKFold, LeaveSitesOut],
        "scoring": [str, None],
        "tol": [Interval(numbers.Real, 0, None, closed="left")],
        "max_iter": [Interval(numbers.Integral, 1, None, closed="left")],
        "class_weight": [dict, StrOptions({"balanced"}), None],
        "refit": ["boolean"],
    }

    def __init__(self, *, Cs=10, fit_intercept=True, cv=5, scoring=None, tol=1e-4, max_iter=50,
                 class_weight=None, refit=True):
        self.Cs = Cs
        self.fit_intercept = fit_intercept
        self.cv = cv
        self.scoring = scoring
        self.tol = tol
        self.max_iter = max_iter
        self.class_weight = class_weight
        self.refit = refit

    def _Cs(self):
        if isinstance(self.Cs, numbers.Integral):
            return np.logspace(-4, 4, int(self.Cs))
        return np.asarray(self.Cs, dtype=np.float64)

    def _base_estimator(self):
        return FederatedLogisticRegression(fit_intercept=self.fit_intercept, tol=self.tol,
                                           max_iter=self.max_iter,
                                           class_weight=self.class_weight)

    def _candidates(self):
        return [{"C": float(C)} for C in self._Cs()]

    def _finish(self, fitted):
        best, Cs = self.best_index_, self._Cs()
        if self.refit:
            model = self.best_estimator_
        else:  # as scikit-learn: the best C's fold models averaged
            folds = [fitted[(best, k)] for k in range(self.n_splits_)]
            model = folds[0]
            model.coef_ = np.mean([m.coef_ for m in folds], axis=0)
            model.intercept_ = np.mean([m.intercept_ for m in folds], axis=0)
            self.best_estimator_ = model
        self.Cs_ = Cs
        self.C_ = np.array([Cs[best]])
        test = np.array([self.cv_results_[f"split{k}_test_score"]
                         for k in range(self.n_splits_)])
        self.classes_ = model.classes_
        keys = self.classes_[1:] if len(self.classes_) == 2 else self.classes_
        self.scores_ = {key: test for key in keys}
        self.coef_, self.intercept_ = model.coef_, model.intercept_
        self.n_iter_ = np.asarray(getattr(model, "n_iter_", 0))

    def _check_refit(self, name):
        return self.best_estimator_

    def score(self, X, y, sample_weight=None):
        """``scoring`` on rows in one place, as LogisticRegressionCV's ``score`` (accuracy if None)."""
        if self.scoring is None:
            return super().score(X, y, sample_weight=sample_weight)
        return federated_score(self.best_estimator_, X, y, metric=self.scoring,
                               sample_weight=sample_weight)

    @property
    def classes_(self):
        return self.__dict__["classes_"]

    @classes_.setter
    def classes_(self, value):
        self.__dict__["classes_"] = value

    def fit(self, X, y, sample_weight=None, clients=None):
        """Choose C by cross-validation across sites, then fit it on every row: one run.

        Parameters
        ----------
        X : array-like or DataFrame of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
        sample_weight : array-like of shape (n_samples,), default=None
        clients : array-like of shape (n_samples,), default=None
            Site label of each row.

        Returns
        -------
        self : FederatedLogisticRegressionCV
        """
        return super().fit(X, y, sample_weight=sample_weight, clients=clients)
