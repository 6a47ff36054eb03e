"""The ridge family: federated estimators built on client sufficient statistics."""

from ._base import BaseFederatedRidge
from ._federated_ridge import FederatedRidge
from ._federated_ridge_cv import FederatedRidgeCV
from ._fesc import FESCRidge, fesc_weights
from ._incremental import IncrementalFederatedRidge
from ._logistic import FederatedLogisticRegression
from ._logistic_cv import FederatedLogisticRegressionCV
from ._private import PrivateFederatedRidge
from ._projected import ProjectedFederatedRidge
from ._ridge_classifier import FederatedRidgeClassifier, FederatedRidgeClassifierCV
from ._robust import RobustAggregation
from ._solver import GRAM_MAX_CONDITION, solve_ridge, solve_ridge_factor

__all__ = [
    "GRAM_MAX_CONDITION",
    "BaseFederatedRidge",
    "FESCRidge",
    "FederatedLogisticRegression",
    "FederatedLogisticRegressionCV",
    "FederatedRidge",
    "FederatedRidgeCV",
    "FederatedRidgeClassifier",
    "FederatedRidgeClassifierCV",
    "IncrementalFederatedRidge",
    "PrivateFederatedRidge",
    "ProjectedFederatedRidge",
    "RobustAggregation",
    "fesc_weights",
    "solve_ridge",
    "solve_ridge_factor",
]
