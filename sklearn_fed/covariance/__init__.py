"""Federated covariance estimation: the pooled covariance from the sites' merged statistics."""

from ._empirical import FederatedEmpiricalCovariance

__all__ = ["FederatedEmpiricalCovariance"]
