"""Federated decomposition: PCA from the sites' merged centered Gram matrices."""

from ._pca import FederatedPCA

__all__ = ["FederatedPCA"]
