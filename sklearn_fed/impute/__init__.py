"""Federated imputation: SimpleImputer's mean, most_frequent and constant strategies."""

from ._base import FederatedSimpleImputer

__all__ = ["FederatedSimpleImputer"]
