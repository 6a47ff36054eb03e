"""Data generators from the papers and loaders that take a local path."""

from ._fesc import make_fesc_regression
from ._synthetic import make_heterogeneous_regression
from ._tabular import load_california_housing_csv, load_insurance_csv

__all__ = [
    "load_california_housing_csv",
    "load_insurance_csv",
    "make_fesc_regression",
    "make_heterogeneous_regression",
]
