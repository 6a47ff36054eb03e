"""The ridge family: federated estimators built on client sufficient statistics."""

from ._base import BaseFederatedRidge, solve_ridge
from ._federated_ridge import FederatedRidge
from ._fesc import FESCRidge, fesc_weights
from ._federated_ridge_cv import FederatedRidgeCV
from ._incremental import IncrementalFederatedRidge
from ._private import PrivateFederatedRidge
from ._projected import ProjectedFederatedRidge
from ._robust import RobustAggregation

__all__ = [
    "BaseFederatedRidge",
    "FESCRidge",
    "FederatedRidge",
    "FederatedRidgeCV",
    "IncrementalFederatedRidge",
    "fesc_weights",
    "PrivateFederatedRidge",
    "ProjectedFederatedRidge",
    "RobustAggregation",
    "solve_ridge",
]
