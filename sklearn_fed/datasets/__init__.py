"""Data generators from the papers and loaders that take a local path."""

from ._fesc import make_fesc_regression
from ._mnist import load_mnist_idx
from ._site import load_site_data, save_site_data
from ._synthetic import make_heterogeneous_regression
from ._tabular import load_california_housing_csv, load_insurance_csv

__all__ = [
    "load_california_housing_csv",
    "load_insurance_csv",
    "load_mnist_idx",
    "load_site_data",
    "make_fesc_regression",
    "make_heterogeneous_regression",
    "save_site_data",
]
