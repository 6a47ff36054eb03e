"""Data generators from the papers and loaders that take a local path."""

from ._synthetic import make_heterogeneous_regression

__all__ = ["make_heterogeneous_regression"]
