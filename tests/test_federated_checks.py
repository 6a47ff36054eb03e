"""Federated checks shared by every estimator (see sklearn_fed.utils.estimator_checks)."""

from sklearn_fed import FederatedRidge, FederatedRidgeCV, FESCRidge, ProjectedFederatedRidge
from sklearn_fed.utils.estimator_checks import parametrize_with_federated_checks

ESTIMATORS = [
    FederatedRidge(),
    FederatedRidge(fit_intercept=False),
    FederatedRidgeCV(),
    ProjectedFederatedRidge(n_components=2, random_state=0),
    FESCRidge(),
    FESCRidge(alpha=0.5, weighting="proportional", fit_intercept=False),
]


@parametrize_with_federated_checks(ESTIMATORS)
def test_federated_estimator(estimator, check):
    check(estimator)
