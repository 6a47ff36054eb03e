"""Federated imputation: SimpleImputer's mean, most_frequent and constant strategies."""

from ._base import FederatedSimpleImputer
from ._private import PrivateFederatedSimpleImputer

__all__ = ["FederatedSimpleImputer", "PrivateFederatedSimpleImputer"]
