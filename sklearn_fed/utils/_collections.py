"""Recognising Dask collections without importing Dask."""

__all__ = ["is_dask_collection"]


def is_dask_collection(obj):
    """Whether ``obj`` is a Dask collection (array, DataFrame, Series, ...).

    Recognised by the Dask collection protocol (``__dask_graph__``), so that
    ``import sklearn_fed`` never imports Dask.

    Examples
    --------
    >>> import numpy as np
    >>> is_dask_collection(np.zeros(3))
    False
    """
    graph = getattr(type(obj), "__dask_graph__", None)
    return graph is not None and obj.__dask_graph__() is not None
