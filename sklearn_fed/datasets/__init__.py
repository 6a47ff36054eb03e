"""Data generators from the papers and loaders that take a local path."""

from ._mnist import load_mnist_idx

__all__ = ["load_mnist_idx"]
