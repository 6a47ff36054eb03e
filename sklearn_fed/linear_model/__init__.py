"""The ridge family: federated estimators built on client sufficient statistics."""

from ._base import BaseFederatedRidge, solve_ridge
from ._federated_ridge import FederatedRidge
from ._federated_ridge_cv import FederatedRidgeCV

__all__ = ["BaseFederatedRidge", "FederatedRidge", "FederatedRidgeCV", "solve_ridge"]

from ._incremental import IncrementalFederatedRidge  # noqa: E402

__all__ += ["IncrementalFederatedRidge"]
