"""Row partitions: ``X``, ``y``, ``sample_weight`` and ``clients`` cut into aligned blocks.

A Dask array is cut along its row chunks (its column chunks are joined, one
block of rows at a time); a Dask DataFrame or Series along its partitions.
Partition ``i`` of every input must hold the same rows: for arrays with known
chunks this is checked before anything runs, otherwise (DataFrames, unknown
chunk sizes) when the partition is read, by its row count and, between two
pandas objects, its index.
"""

import itertools
import math
import mmap
from dataclasses import dataclass

import dask.array as da
import numpy as np
from sklearn.utils import check_array

from .._clients import group_rows_by_client
from .._compat import _check_sample_weight
from ..utils._collections import is_dask_collection

__all__ = ["Partitions", "partition_labels"]


def partition_labels(X):
    """Label every row of a Dask collection with the index of its partition.

    Pass the result as ``clients`` to make each partition one client (for
    example, leave-one-partition-out cross-validation with
    :class:`~sklearn_fed.FederatedRidgeCV`).

    Parameters
    ----------
    X : dask Array or dask DataFrame
        Rows in partitions (row chunks of an array).

    Returns
    -------
    labels : dask Array or Series of shape (n_samples,)
        ``int64`` partition index of each row, partitioned as ``X`` (a Series,
        with ``X``'s index, for a DataFrame).

    Examples
    --------
    >>> import dask.array as da
    >>> from sklearn_fed.dask import partition_labels
    >>> X = da.ones((5, 2), chunks=(2, 2))
    >>> partition_labels(X).compute().tolist()
    [0, 0, 1, 1, 2]
    """
    if isinstance(X, da.Array):
        return da.map_blocks(
            _fill_block_index, X[:, 0] if X.ndim == 2 else X, dtype=np.int64
        )
    if is_dask_collection(X) and hasattr(X, "map_partitions"):
        import pandas as pd

        return X.map_partitions(_partition_series, meta=pd.Series(dtype=np.int64))
    raise TypeError(f"partition_labels needs a Dask Array or DataFrame, got {type(X).__name__}.")


def _fill_block_index(block, block_info=None):
    return np.full(block.shape[0], block_info[0]["chunk-location"][0], dtype=np.int64)


def _partition_series(part, partition_info=None):
    import pandas as pd

    number = np.full(len(part), partition_info["number"], dtype=np.int64)
    return pd.Series(number, index=part.index)


@dataclass
class _Input:
    """One input cut into blocks: ``blocks[i]`` is partition ``i`` (a Delayed or in memory)."""

    name: str
    blocks: list
    lengths: tuple  # rows of each partition, None where unknown


def _cut(name, value, lengths=None):
    """Blocks of one input; in-memory values are sliced at ``lengths``."""
    if value is None:
        return None
    if isinstance(value, da.Array):
        if value.ndim == 2 and value.numblocks[1] > 1:
            value = value.rechunk({1: -1})  # one block of rows holds every column
        # Unoptimized graphs: a task shared by two inputs (the chunk that holds
        # both X and y) keeps its key, so it is read once.
        blocks = value.to_delayed(optimize_graph=False).reshape(-1).tolist()
        known = tuple(None if math.isnan(n) else int(n) for n in value.chunks[0])
        return _Input(name, blocks, known)
    if is_dask_collection(value) and hasattr(value, "npartitions"):
        blocks = value.to_delayed(optimize_graph=False)
        return _Input(name, blocks, (None,) * len(blocks))
    if is_dask_collection(value):
        raise TypeError(
            f"{name} must be a Dask Array, DataFrame or Series (or in memory); got "
            f"{type(value).__name__}."
        )
    if lengths is None or None in lengths:
        raise ValueError(
            f"{name} is in memory but X's partitions have unknown sizes; pass {name} as a "
            "Dask collection aligned with X (e.g. a column of the same DataFrame)."
        )
    array = np.asarray(value) if not hasattr(value, "iloc") else value
    if len(array) != sum(lengths):
        raise ValueError(f"X has {sum(lengths)} rows but {name} has {len(array)}.")
    bounds = np.cumsum((0,) + tuple(lengths))
    take = (lambda a, b: array.iloc[a:b]) if hasattr(array, "iloc") else (lambda a, b: array[a:b])
    return _Input(name, [take(a, b) for a, b in itertools.pairwise(bounds)], tuple(lengths))


class Partitions:
    """Aligned row partitions of ``X``, ``y``, ``sample_weight`` and ``clients``.

    Parameters
    ----------
    X : dask Array of shape (n_samples, n_features) or dask DataFrame
    y : dask Array, DataFrame or Series, or in memory
    sample_weight, clients : same kinds as ``y``, or None

    Attributes
    ----------
    n_partitions : int
    n_features : int
    dtype : numpy dtype
        float32 when every column of ``X`` is float32, else float64 (as
        ``validate_data`` would convert).
    columns : list or None
        Column labels of a DataFrame ``X``, which every partition must have.
    stand_in : ndarray or DataFrame with no rows
        Has ``X``'s columns, names and dtypes: what ``validate_data`` checks
        feature names and counts on.
    n_targets : int or None
        Columns of ``y`` (``None`` when ``y`` is one-dimensional).
    """

    def __init__(self, X, y, sample_weight=None, clients=None):
        self._describe_X(X)
        self.inputs = {"X": _cut("X", X)}
        lengths = self.inputs["X"].lengths
        for name, value in (("y", y), ("sample_weight", sample_weight), ("clients", clients)):
            self.inputs[name] = _cut(name, value, lengths)
        self.n_targets = _n_targets(y)
        self._check_alignment()
        self.n_partitions = len(self.inputs["X"].blocks)

    def _describe_X(self, X):
        if isinstance(X, da.Array):
            if X.ndim != 2:
                raise ValueError(
                    f"Expected a 2-D X, got a Dask array of {X.ndim} dimension(s); reshape it "
                    "with X.reshape(-1, 1) for a single feature."
                )
            if math.isnan(X.shape[1]):
                raise ValueError("X has an unknown number of columns.")
            self.n_features = int(X.shape[1])
            self.columns = None
            self.dtype = np.dtype(np.float32 if X.dtype == np.float32 else np.float64)
            self.stand_in = np.empty((0, self.n_features), dtype=self.dtype)
        elif is_dask_collection(X) and hasattr(X, "columns"):
            import pandas as pd

            self.columns = list(X.columns)
            self.n_features = len(self.columns)
            dtypes = X.dtypes
            self.dtype = np.dtype(
                np.float32 if all(t == np.float32 for t in dtypes) else np.float64
            )
            self.stand_in = pd.DataFrame(
                {c: pd.Series(dtype=t) for c, t in dtypes.items()}, columns=X.columns
            )
        else:
            raise ValueError(
                f"Expected a 2-D X (Dask Array or DataFrame), got {type(X).__name__}."
            )

    def _check_alignment(self):
        x = self.inputs["X"]
        for other in self.inputs.values():
            if other is None or other is x:
                continue
            for i, (a, b) in enumerate(zip(x.lengths, other.lengths)):
                if a is not None and b is not None and a != b:
                    raise ValueError(
                        f"partition {i}: X has {a} rows but {other.name} has {b}; "
                        f"{other.name} must have X's row chunks (e.g. "
                        f"{other.name}.rechunk({{0: X.chunks[0]}}))."
                    )
            if len(other.blocks) != len(x.blocks):
                raise ValueError(
                    f"X has {len(x.blocks)} partitions but {other.name} has "
                    f"{len(other.blocks)}: they must be cut at the same rows."
                )

    def delayed(self, i):
        """The blocks of partition ``i`` (Delayed or in memory), X first."""
        return tuple(
            None if value is None else value.blocks[i]
            for value in (self.inputs[k] for k in ("X", "y", "sample_weight", "clients"))
        )

    def spec(self):
        """What a partition is checked against (small; travels to every worker)."""
        return _Spec(self.n_features, self.dtype, self.columns, self.n_targets)


def _n_targets(y):
    if (np.ndim(y) if getattr(y, "ndim", None) is None else y.ndim) == 1:
        return None
    width = len(y.columns) if hasattr(y, "columns") else getattr(y, "shape", (None, None))[1]
    return None if width is None or math.isnan(width) else int(width)


def _read_ahead(*blocks):
    """Ask the kernel to read memory-mapped blocks (``.npy`` partitions) ahead, whole.

    Otherwise each page is read when first touched, a few at a time; one
    advice per file lets the reads run in large requests, alongside the
    other partitions' products.
    """
    advice = getattr(mmap, "MADV_WILLNEED", None)
    for block in blocks:
        mapping = getattr(block, "_mmap", None)  # set on np.memmap and its views
        if advice is not None and isinstance(mapping, mmap.mmap):
            mapping.madvise(advice)


def _all_finite(X):
    """Whether every value of ``X`` is finite, in one pass as fast as reading it.

    Any NaN or infinity makes its row's sum non-finite. The product reads a
    strided block at memory speed, about three times as fast as the sum
    ``check_array`` starts with (a partition is read at least twice: here
    and for its statistics, so this pass is a visible share of a fit). A
    sum that only overflows is sorted out by the caller's exact check.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        return bool(np.isfinite(X @ np.ones(X.shape[1], dtype=X.dtype)).all())


@dataclass(frozen=True)
class _Spec:
    n_features: int
    dtype: np.dtype
    columns: list
    n_targets: int

    def check(self, i, X, y, sample_weight, clients):
        """Partition ``i`` as validated arrays; every error names the partition.

        Returns ``(X, y, sample_weight, labels, rows)`` with ``labels, rows`` as
        :func:`~sklearn_fed._clients.group_rows_by_client` gives them (``None``
        when ``clients`` is None), or ``None`` for a partition without rows.
        """
        _read_ahead(X, y, sample_weight, clients)
        try:
            return self._check(X, y, sample_weight, clients)
        except ValueError as exc:
            raise ValueError(f"partition {i}: {exc}") from exc

    def _check(self, X, y, sample_weight, clients):
        n = X.shape[0]
        lengths = {"y": y, "sample_weight": sample_weight, "clients": clients}
        for name, value in lengths.items():
            if value is not None and len(value) != n:
                raise ValueError(f"X has {n} rows but {name} has {len(value)}.")
        index = getattr(X, "index", None)
        for name, value in lengths.items():
            other = getattr(value, "index", None)
            if index is not None and other is not None and not index.equals(other):
                raise ValueError(f"the index of {name} differs from X's (misaligned partitions).")
        if self.columns is not None:
            columns = list(X.columns)
            if columns != self.columns:
                raise ValueError(
                    f"it has {len(columns)} columns {columns[:10]}, but X's metadata has "
                    f"{len(self.columns)} {self.columns[:10]}."
                )
        elif X.ndim != 2 or X.shape[1] != self.n_features:
            raise ValueError(
                f"X has shape {X.shape}, but the other partitions have {self.n_features} columns."
            )
        if n == 0:
            return None
        X = check_array(X, dtype=self.dtype, ensure_all_finite=False, input_name="X")
        if not _all_finite(X):
            check_array(X, ensure_all_finite=True, input_name="X")  # its message
        y = check_array(y, ensure_2d=False, dtype=np.float64, ensure_all_finite=True,
                        input_name="y")
        if (None if y.ndim == 1 else y.shape[1]) != self.n_targets:
            raise ValueError(f"y has shape {y.shape}, inconsistent with the other partitions.")
        if sample_weight is not None:
            sample_weight = _check_sample_weight(
                np.asarray(sample_weight), X, dtype=np.float64, ensure_non_negative=True
            )
        labels, rows = (None, None) if clients is None else group_rows_by_client(
            np.asarray(clients), n
        )
        return X, y, sample_weight, labels, rows
