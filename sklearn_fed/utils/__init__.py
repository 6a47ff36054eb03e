"""Utilities for users and developers of federated estimators."""
