"""Federated preprocessing: scalers and the one-hot encoder, as scikit-learn's on pooled rows."""

from ._data import FederatedMinMaxScaler, FederatedStandardScaler
from ._encoders import FederatedOneHotEncoder

__all__ = ["FederatedMinMaxScaler", "FederatedOneHotEncoder", "FederatedStandardScaler"]
