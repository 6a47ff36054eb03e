"""The ridge family on Dask collections: exact, out of core (extra ``dask``).

Estimators need no import from here: ``fit`` and ``partial_fit`` of
:class:`~sklearn_fed.FederatedRidge`, :class:`~sklearn_fed.FederatedRidgeCV`,
:class:`~sklearn_fed.ProjectedFederatedRidge`,
:class:`~sklearn_fed.PrivateFederatedRidge` and
:class:`~sklearn_fed.IncrementalFederatedRidge` accept Dask arrays and
DataFrames (``X``, ``y``, ``sample_weight``, ``clients``) and compute each
partition's statistics where it lives; see :doc:`/user_guide/dask`.
"""

try:
    import dask.array  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "sklearn_fed.dask needs Dask: install the 'dask' extra, "
        "pip install 'sklearn-fed[dask]'."
    ) from exc

from ._partitions import partition_labels

__all__ = ["partition_labels"]
