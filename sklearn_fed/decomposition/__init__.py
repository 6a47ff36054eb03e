"""Federated decomposition: PCA from the sites' merged centered Gram matrices."""

from ._pca import FederatedPCA
from ._private import PrivateFederatedPCA

__all__ = ["FederatedPCA", "PrivateFederatedPCA"]
