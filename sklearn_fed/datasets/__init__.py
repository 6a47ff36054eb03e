"""Data generators from the papers and loaders that take a local path."""

from ._fesc import make_fesc_regression

__all__ = ["make_fesc_regression"]
