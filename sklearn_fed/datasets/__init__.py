"""Data generators from the papers and loaders that take a local path."""

__all__ = []
