"""FederatedLogisticRegressionCV equals LogisticRegressionCV(newton-cholesky) with equivalent folds."""

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer, load_iris
from sklearn.linear_model import LogisticRegressionCV
from sklearn.model_selection import PredefinedSplit

from sklearn_fed.linear_model import FederatedLogisticRegressionCV
from sklearn_fed.model_selection import LeaveSitesOut, SiteKFold


def _reference(cv, sites, **kw):
    return LogisticRegressionCV(cv=PredefinedSplit(cv.pooled_test_fold(sites)),
                                solver="newton-cholesky", l1_ratios=(0,),
                                use_legacy_attributes=True, **kw)


@pytest.mark.parametrize("cv", [SiteKFold(3), SiteKFold(3, shuffle=True, random_state=1),
                                LeaveSitesOut()])
@pytest.mark.parametrize("scoring", [None, "neg_log_loss"])
def test_equals_logistic_regression_cv_on_pooled_rows(cv, scoring):
    X, y = load_breast_cancer(return_X_y=True)
    X = (X - X.mean(0)) / X.std(0)
    sites = np.random.default_rng(0).permutation(np.arange(len(y)) % 4)
    model = FederatedLogisticRegressionCV(Cs=5, cv=cv, tol=1e-10, scoring=scoring).fit(
        X, y, clients=sites)
    reference = _reference(cv, sites, Cs=5, tol=1e-10, scoring=scoring).fit(X, y)
    np.testing.assert_array_equal(model.Cs_, reference.Cs_)
    np.testing.assert_array_equal(model.C_, reference.C_)
    np.testing.assert_allclose(model.scores_[1], reference.scores_[1][..., 0], rtol=1e-6)
    np.testing.assert_allclose(model.coef_, reference.coef_, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(model.intercept_, reference.intercept_, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(model.score(X, y), reference.score(X, y), rtol=1e-8)
    assert model.n_clients_ == 4


def test_multiclass_and_refit_false():
    X, y = load_iris(return_X_y=True)
    X = (X - X.mean(0)) / X.std(0)
    sites = np.arange(len(y)) % 3
    cv = SiteKFold(3, shuffle=True, random_state=0)
    Cs = [0.05, 0.5, 5.0]
    model = FederatedLogisticRegressionCV(Cs=Cs, cv=cv, tol=1e-10, refit=False,
                                          scoring="neg_log_loss").fit(X, y, clients=sites)
    reference = _reference(cv, sites, Cs=Cs, tol=1e-10, refit=False,
                           scoring="neg_log_loss").fit(X, y)
    np.testing.assert_array_equal(model.C_, reference.C_[:1])
    assert sorted(model.scores_) == [0, 1, 2]
    np.testing.assert_allclose(model.scores_[0], reference.scores_[0][..., 0], rtol=1e-6)
    np.testing.assert_allclose(model.coef_, reference.coef_, rtol=1e-6, atol=1e-8)
    np.testing.assert_array_equal(model.predict(X), reference.predict(X))
