"""Data generators from the papers and loaders that take a local path."""

from ._tabular import load_california_housing_csv, load_insurance_csv

__all__ = ["load_california_housing_csv", "load_insurance_csv"]
