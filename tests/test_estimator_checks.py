"""scikit-learn's own estimator checks, with no expected failures."""

from sklearn.utils.estimator_checks import parametrize_with_checks

from sklearn_fed import FederatedRidge, FederatedRidgeCV


@parametrize_with_checks([FederatedRidge(), FederatedRidgeCV()])
def test_sklearn_compatible_estimator(estimator, check):
    check(estimator)
