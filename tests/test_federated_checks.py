"""Federated checks shared by every estimator (see sklearn_fed.utils.estimator_checks)."""

from sklearn_fed import (
    FederatedLogisticRegression,
    FederatedMinMaxScaler,
    FederatedOneHotEncoder,
    FederatedPCA,
    FederatedRidge,
    FederatedRidgeClassifier,
    FederatedRidgeClassifierCV,
    FederatedRidgeCV,
    FederatedSimpleImputer,
    FederatedStandardScaler,
    PrivateFederatedRidge,
    ProjectedFederatedRidge,
)
from sklearn_fed.compose import FederatedColumnTransformer
from sklearn_fed.pipeline import make_federated_pipeline
from sklearn_fed.utils.estimator_checks import parametrize_with_federated_checks

ESTIMATORS = [
    FederatedRidge(),
    FederatedRidge(fit_intercept=False),
    FederatedRidgeCV(),
    ProjectedFederatedRidge(n_components=2, random_state=0),
    PrivateFederatedRidge(epsilon=2.0, feature_bound=5.0, target_bound=10.0, random_state=0),
    PrivateFederatedRidge(
        epsilon=2.0, feature_bound=5.0, target_bound=10.0, noise="distributed",
        fit_intercept=False, random_state=0,
    ),
    FederatedStandardScaler(),
    FederatedMinMaxScaler(),
    FederatedOneHotEncoder(),
    FederatedSimpleImputer(strategy="most_frequent", add_indicator=True),
    FederatedPCA(n_components=2, whiten=True),
    FederatedRidgeClassifier(class_weight="balanced"),
    FederatedRidgeClassifierCV(),
    FederatedLogisticRegression(),
    make_federated_pipeline(FederatedSimpleImputer(), FederatedStandardScaler(), FederatedRidge()),
    make_federated_pipeline(FederatedPCA(n_components=3), FederatedLogisticRegression()),
    make_federated_pipeline(
        FederatedColumnTransformer(
            [("scale", FederatedStandardScaler(), [0, 1]),
             ("onehot", FederatedOneHotEncoder(sparse_output=True), [2])],
            remainder="passthrough",
        ),
        FederatedRidge(),
    ),
    FederatedColumnTransformer([("impute", FederatedSimpleImputer(), [1, 3])]),
]


@parametrize_with_federated_checks(ESTIMATORS)
def test_federated_estimator(estimator, check):
    check(estimator)
