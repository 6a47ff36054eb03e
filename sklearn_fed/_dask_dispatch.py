"""Route ``fit``/``partial_fit`` on Dask collections to :mod:`sklearn_fed.dask`.

This module never imports dask: a Dask collection is recognised by the Dask
collection protocol (``__dask_graph__``), and :mod:`sklearn_fed.dask` is
imported only when one is passed, so ``import sklearn_fed`` stays dask-free.
"""

import functools
import inspect

__all__ = ["DaskDispatchMixin", "is_dask_collection"]


def is_dask_collection(obj):
    """Whether ``obj`` is a Dask collection (array, DataFrame, Series, ...).

    Examples
    --------
    >>> import numpy as np
    >>> is_dask_collection(np.zeros(3))
    False
    """
    graph = getattr(type(obj), "__dask_graph__", None)
    return graph is not None and obj.__dask_graph__() is not None


class DaskDispatchMixin:
    """``fit`` and ``partial_fit`` of every subclass accept Dask collections.

    As scikit-learn's ``_SetOutputMixin`` wraps ``transform``, each subclass's
    own ``fit`` and ``partial_fit`` are wrapped when the class is created: a
    call whose ``X``, ``y``, ``sample_weight`` or ``clients`` is a Dask
    collection goes to :func:`sklearn_fed.dask._fit.fit_collection`, which
    calls the method itself with the collections' partitions as ``X``; any
    other call runs the method unchanged. The method's own validation
    (``_validate_rows``) and protocol run (``run_simulation``) recognise the
    partitions, so each estimator keeps its own ``fit`` logic on Dask.
    """

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for name in ("fit", "partial_fit"):
            method = cls.__dict__.get(name)
            if method is not None and not hasattr(method, "_dask_method"):
                setattr(cls, name, _dispatching(method, name))


def _dispatching(method, name):
    signature = inspect.signature(method)

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        # (arguments are bound only for Dask: binding costs a few us per partial_fit)
        if not any(is_dask_collection(value) for value in (*args, *kwargs.values())):
            return method(self, *args, **kwargs)
        bound = signature.bind(self, *args, **kwargs)
        data = {k: v for k, v in bound.arguments.items() if k != "self"}
        from .dask._fit import fit_collection

        return fit_collection(self, method, name, **data)

    wrapper._dask_method = name
    return wrapper
