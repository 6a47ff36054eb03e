"""Federated preprocessing: scalers and the one-hot encoder, as scikit-learn's on pooled rows."""

from ._data import FederatedMinMaxScaler, FederatedStandardScaler
from ._encoders import FederatedOneHotEncoder
from ._private import PrivateFederatedOneHotEncoder, PrivateFederatedStandardScaler

__all__ = [
    "FederatedMinMaxScaler",
    "FederatedOneHotEncoder",
    "FederatedStandardScaler",
    "PrivateFederatedOneHotEncoder",
    "PrivateFederatedStandardScaler",
]
