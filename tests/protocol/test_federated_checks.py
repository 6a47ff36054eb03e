"""Federated checks shared by every estimator (see sklearn_fed.utils.estimator_checks)."""

import importlib.util

from sklearn_fed import (
    DPFedAvgRegressor,
    FedAvgRegressor,
    FederatedEmpiricalCovariance,
    FederatedLogisticRegression,
    FederatedMinMaxScaler,
    FederatedOneHotEncoder,
    FederatedPCA,
    FederatedRidge,
    FederatedRidgeClassifier,
    FederatedRidgeClassifierCV,
    FederatedRidgeCV,
    IncrementalFederatedRidge,
    FedNovaRegressor,
    FedProxRegressor,
    FESCRidge,
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
    FederatedRidge(solver="svd"),
    FederatedRidgeCV(),
    FederatedRidgeCV(cv="clients", scoring="neg_mean_absolute_error"),  # + a prediction round
    ProjectedFederatedRidge(n_components=2, random_state=0),
    IncrementalFederatedRidge(random_state=0),
    IncrementalFederatedRidge(fit_intercept=False, min_clients=2, random_state=0),
    FESCRidge(),
    FESCRidge(alpha=0.5, weighting="proportional", fit_intercept=False),
    FedAvgRegressor(n_rounds=4, batch_size=7, client_fraction=0.7, random_state=0),
    FedProxRegressor(n_rounds=3, fit_intercept=False, learning_rate=0.05),
    FedNovaRegressor(n_rounds=3, batch_size=11, random_state=0),
    DPFedAvgRegressor(n_rounds=3, epsilon=10.0, random_state=0),
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
    FederatedEmpiricalCovariance(),
    FederatedEmpiricalCovariance(assume_centered=True, store_precision=False),
    FederatedRidgeClassifier(class_weight="balanced"),
    FederatedRidgeClassifierCV(),
    FederatedRidgeClassifierCV(cv="clients"),  # accuracy: a round of held-out decisions
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

if all(importlib.util.find_spec(m) for m in ("torch", "skorch")):  # the `nn` extra
    from sklearn_fed import FedMPDDClassifier

    ESTIMATORS += [
        FedMPDDClassifier(n_directions=16, max_epochs=4, batch_size=8, random_state=0),
        FedMPDDClassifier(uplink="qsgd", quantization_levels=15, max_epochs=3,
                          client_fraction=1.0, random_state=0),
        FedMPDDClassifier(uplink="laplace", noise_scale=0.01, max_epochs=3, random_state=0),
    ]


@parametrize_with_federated_checks(ESTIMATORS)
def test_federated_estimator(estimator, check):
    check(estimator)
