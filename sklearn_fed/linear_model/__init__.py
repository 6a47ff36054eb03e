"""The ridge family: federated estimators built on client sufficient statistics."""

from ._base import BaseFederatedRidge, solve_ridge
from ._federated_ridge import FederatedRidge
from ._federated_ridge_cv import FederatedRidgeCV
from ._private import PrivateFederatedRidge
from ._projected import ProjectedFederatedRidge

__all__ = [
    "BaseFederatedRidge", "FederatedRidge", "FederatedRidgeCV",
    "PrivateFederatedRidge",
    "ProjectedFederatedRidge",
    "solve_ridge",
]
