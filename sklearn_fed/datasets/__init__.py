"""Data generators from the papers and loaders that take a local path."""

from ._fesc import make_fesc_regression
from ._synthetic import make_heterogeneous_regression

__all__ = ["make_fesc_regression", "make_heterogeneous_regression"]
