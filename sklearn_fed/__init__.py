"""sklearn-fed: federated learning as scikit-learn estimators.

The ridge family (exact, from client sufficient statistics) lives in
:mod:`sklearn_fed.linear_model`; this top level re-exports the public API.
Importing :mod:`sklearn_fed` never imports torch.
"""

from .baselines import (
    DPFedAvgRegressor,
    FedAvgRegressor,
    FedNovaRegressor,
    FedProxRegressor,
)
from .linear_model import (
    FederatedRidge,
    FederatedRidgeCV,
    FESCRidge,
    IncrementalFederatedRidge,
    PrivateFederatedRidge,
    ProjectedFederatedRidge,
)
from .statistics import ClientStatistics, InvalidClientMessage, merge_statistics

__version__ = "0.1.0.dev0"

__all__ = [
    "__version__",
    "ClientStatistics",
    "DPFedAvgRegressor",
    "FedAvgRegressor",
    "FedNovaRegressor",
    "FedProxRegressor",
    "FederatedRidge",
    "FederatedRidgeCV",
    "FESCRidge",
    "IncrementalFederatedRidge",
    "InvalidClientMessage",
    "merge_statistics",
    "PrivateFederatedRidge",
    "ProjectedFederatedRidge",
]
