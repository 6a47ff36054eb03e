"""sklearn-fed: federated learning as scikit-learn estimators.

The ridge family (exact, from client sufficient statistics) lives in
:mod:`sklearn_fed.linear_model`; this top level re-exports the public API.
Importing :mod:`sklearn_fed` never imports torch.
"""

from ._clients import MissingClientsWarning
from .baselines import (
    DPFedAvgRegressor,
    FedAvgRegressor,
    FedNovaRegressor,
    FedProxRegressor,
)
from .covariance import FederatedEmpiricalCovariance
from .decomposition import FederatedPCA
from .impute import FederatedSimpleImputer
from .linear_model import (
    FederatedLogisticRegression,
    FederatedLogisticRegressionCV,
    FederatedRidge,
    FederatedRidgeClassifier,
    FederatedRidgeClassifierCV,
    FederatedRidgeCV,
    FESCRidge,
    IncrementalFederatedRidge,
    PrivateFederatedRidge,
    ProjectedFederatedRidge,
)
from .metrics import FederatedEvaluator
from .model_selection import FederatedGridSearchCV, FederatedRandomizedSearchCV
from .preprocessing import (
    FederatedMinMaxScaler,
    FederatedOneHotEncoder,
    FederatedStandardScaler,
)
from .statistics import (
    ClientStatistics,
    ColumnMoments,
    InvalidClientMessage,
    merge_statistics,
)
from .utils._lazy import lazy_names

__version__ = "0.1.0.dev0"

# torch-backed estimators load on first access, so `import sklearn_fed` stays torch-free
__getattr__ = lazy_names(__name__, "nn", {".neural_network": ((), ["FedMPDDClassifier"])})[0]


__all__ = [
    "ClientStatistics",
    "ColumnMoments",
    "DPFedAvgRegressor",
    "FESCRidge",
    "FedAvgRegressor",
    "FedMPDDClassifier",
    "FedNovaRegressor",
    "FedProxRegressor",
    "FederatedEmpiricalCovariance",
    "FederatedEvaluator",
    "FederatedGridSearchCV",
    "FederatedLogisticRegression",
    "FederatedLogisticRegressionCV",
    "FederatedMinMaxScaler",
    "FederatedOneHotEncoder",
    "FederatedPCA",
    "FederatedRandomizedSearchCV",
    "FederatedRidge",
    "FederatedRidgeCV",
    "FederatedRidgeClassifier",
    "FederatedRidgeClassifierCV",
    "FederatedSimpleImputer",
    "FederatedStandardScaler",
    "IncrementalFederatedRidge",
    "InvalidClientMessage",
    "MissingClientsWarning",
    "PrivateFederatedRidge",
    "ProjectedFederatedRidge",
    "__version__",
    "merge_statistics",
]
