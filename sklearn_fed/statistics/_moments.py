"""Per-column statistics: :class:`ColumnMoments`, the message of the per-column transformers."""

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from .._compat import _get_mask
from ..protocol._errors import failing
from ._kernels import _BLOCK_BYTES, _HEAD_ROWS, _blocks, _scratch, gathered
from ._message import merge_statistics
from ._validation import MAX_MEAN, MAX_SECOND

__all__ = ["ColumnMoments"]


def _is_nan(value):
    return isinstance(value, float) and np.isnan(value)


def _constant_columns(low, high):
    """``(constant, value)``: the columns whose weighted values are all one value, and it.

    ``low`` and ``high`` are each column's smallest and largest value among
    rows with positive weight (``inf`` and ``-inf`` without any). Where they
    are equal, the column's exact weighted mean is that value and its exact
    sum of squared deviations is 0; ``sum / weight`` and the two-pass sum of
    squares would instead carry round-off (a variance of ~1e-50 where
    scikit-learn's scalers test for 0). Setting them exactly is what the data
    say, reveals nothing more than the mean already does, and keeps the
    pooled result exact: merging two columns of the same value gives a zero
    ``delta``, so the merged sum of squares stays exactly 0 (Chan et al.).
    """
    constant = low == high
    return constant, np.where(constant, low, 0.0)


@dataclass(eq=False)
class ColumnMoments:
    """Per-column statistics of one client's rows: counts, weights, means, sums of squares.

    The message of the per-column transformers (scalers, the mean imputer),
    which need neither targets nor cross-products: ``O(d)`` values instead of
    the ``O(d^2)`` of :class:`ClientStatistics`. Missing entries (NaN, or
    ``missing_values``) are skipped column by column, as scikit-learn's
    scalers and imputers skip them, so every column has its own count and
    weight. ``order`` says how much is sent: 0 counts and weights, 1 also
    the means, 2 also the centered sums of squares (no more than the model
    needs). Two messages merge exactly with the pairwise update of Chan et
    al., column by column.

    Parameters
    ----------
    n_samples : ndarray of shape (n_features,), dtype int64
        Rows with a value (not missing) in each column.
    weight_sum : ndarray of shape (n_features,)
        Sum of the sample weights of those rows.
    mean : ndarray of shape (n_features,) or None
        Weighted mean of each column's values (``order >= 1``; 0 for a
        column without weight).
    m2 : ndarray of shape (n_features,) or None
        ``sum(sw * (x - mean)^2)`` per column (``order == 2``).

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_fed.statistics import ColumnMoments
    >>> X = np.array([[1.0, np.nan], [3.0, 4.0], [5.0, 6.0]])
    >>> a, b = ColumnMoments.from_data(X[:1]), ColumnMoments.from_data(X[1:])
    >>> merged = a.merge(b)
    >>> merged.n_samples, merged.mean, merged.m2
    (array([3, 2]), array([3., 5.]), array([8., 2.]))
    """

    n_samples: np.ndarray
    weight_sum: np.ndarray
    mean: np.ndarray = None
    m2: np.ndarray = None

    @property
    def order(self):
        return 0 if self.mean is None else 1 if self.m2 is None else 2

    @property
    def n_features(self):
        return self.n_samples.shape[0]

    @classmethod
    def from_data(cls, X, sample_weight=None, *, order=2, missing_values=np.nan, rows=None):
        """Compute the per-column statistics of one client's (validated) rows.

        Parameters
        ----------
        X : {ndarray, sparse matrix} of shape (n_samples, n_features)
            Numeric for ``order >= 1``; any dtype for ``order=0``. Sparse
            columns count their implicit zeros as values. Accumulated in
            float64, in blocks of rows.
        sample_weight : ndarray of shape (n_samples,), default=None
        order : {0, 1, 2}, default=2
        missing_values : scalar, default=np.nan
            Entries equal to it are skipped (as scikit-learn's ``_get_mask``).
        rows : slice or ndarray of int, default=None
            Use only these rows.

        Returns
        -------
        moments : ColumnMoments
        """
        if order not in (0, 1, 2):
            raise ValueError(f"order must be 0, 1 or 2; got {order!r}.")
        if rows is not None and (sp.issparse(X) or isinstance(rows, slice)):
            X = X[rows]  # a view of contiguous dense rows
            sample_weight = None if sample_weight is None else sample_weight[rows]
            rows = None
        if sp.issparse(X):
            return cls._from_sparse(sp.csc_matrix(X), sample_weight, order, missing_values)
        block = max(1, _BLOCK_BYTES // (8 * max(X.shape[1], 1)))
        # X[rows] gathered block by block (in cache for the passes over them) in C order,
        # as X[rows] is: the same bits. No rows: the moments of none.
        takes = list(_blocks(slice(None) if rows is None else rows, X.shape[0], block))
        parts = [cls._from_dense(gathered(X, take), None if sample_weight is None
                                 else sample_weight[take], order, missing_values)
                 for take in takes or [slice(0, 0)]]
        return merge_statistics(parts)

    @classmethod
    def _from_dense(cls, X, sample_weight, order, missing_values):
        w = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
        n, d = X.shape
        if order and n and X.flags.c_contiguous and _is_nan(missing_values) and (
                w is None or np.all(w > 0)):
            # Without a NaN (which would make its column's sum NaN) every value
            # counts with its row's weight: the general passes below on the same
            # values, without their masks.
            values = X.astype(np.float64, copy=False)
            sums = values.sum(axis=0) if w is None else w @ values
            if np.all(np.isfinite(sums)):
                counts = np.full(d, n, dtype=np.int64)
                weights = np.full(d, float(n) if w is None else w.sum())
                head = values[:_HEAD_ROWS]
                if (head == head[0]).all(axis=0).any():
                    constant = _constant_columns(values.min(axis=0, initial=np.inf),
                                                 values.max(axis=0, initial=-np.inf))
                else:  # no column is constant on its first rows, so none is on all
                    constant = np.zeros(d, dtype=bool), np.zeros(d)
                return cls._from_values(counts, weights, values, None, w, sums, constant, order)
        present = ~_get_mask(X, missing_values)
        counts = present.sum(axis=0).astype(np.int64)
        if w is None:
            weights = counts.astype(np.float64)
        else:  # complete columns share one sum, bit for bit
            weights = np.where(counts == n, w.sum(), w @ present)
        if order == 0:
            return cls(counts, weights)
        values = np.where(present, X, 0.0).astype(np.float64, copy=False)
        counted = present if w is None else present & (w > 0)[:, None]
        constant = _constant_columns(
            np.where(counted, values, np.inf).min(axis=0, initial=np.inf),
            np.where(counted, values, -np.inf).max(axis=0, initial=-np.inf),
        )
        sums = values.sum(axis=0) if w is None else w @ values
        return cls._from_values(counts, weights, values, present, w, sums, constant, order)

    @classmethod
    def _from_values(cls, counts, weights, values, present, w, sums, constant, order):
        """The moments of dense ``values`` (0 where not ``present``; None: all are) from
        their (weighted) ``sums`` and ``(constant, value)`` of :func:`_constant_columns`."""
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(weights > 0, sums / weights, 0.0)
        constant, value = constant
        mean = np.where(constant, value, mean)
        if order == 1:
            return cls(counts, weights, mean)
        # Two passes, with the correction term of scikit-learn's
        # _incremental_mean_and_var: exact for offsets as large as the data allow.
        deviation = np.subtract(values, mean, out=_scratch(*values.shape, "deviation")
                                if values.flags.c_contiguous else None)
        if present is not None:
            deviation[~present] = 0.0
        correction = deviation.sum(axis=0) if w is None else w @ deviation
        deviation **= 2
        squares = deviation.sum(axis=0) if w is None else w @ deviation
        with np.errstate(invalid="ignore", divide="ignore"):
            m2 = np.where(weights > 0, squares - correction**2 / weights, 0.0)
        return cls(counts, weights, mean, np.where(constant, 0.0, np.maximum(m2, 0.0)))

    @classmethod
    def _from_sparse(cls, X, sample_weight, order, missing_values):
        n, d = X.shape
        w = np.ones(n) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
        column = np.repeat(np.arange(d), np.diff(X.indptr))  # column of each stored entry
        entry_w = w[X.indices]
        missing = _get_mask(X.data, missing_values)
        counts = (n - np.bincount(column[missing], minlength=d)).astype(np.int64)
        kept, kept_w = column[~missing], entry_w[~missing]
        # (bincount of no entries is an int64 array: the float64 casts keep m2 += float)
        stored_weight = np.bincount(kept, kept_w, minlength=d).astype(np.float64)
        # Implicit zeros are values; their weight is computed only where there are any,
        # so a column stored in full has no round-off from a subtraction.
        implicit = np.diff(X.indptr) < n
        implicit_weight = np.where(
            implicit, np.maximum(w.sum() - np.bincount(column, entry_w, minlength=d), 0.0), 0.0
        )
        weights = stored_weight + implicit_weight
        if order == 0:
            return cls(counts, weights)
        values = X.data[~missing].astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(
                weights > 0, np.bincount(kept, kept_w * values, minlength=d) / weights, 0.0
            )
        low, high = np.full(d, np.inf), np.full(d, -np.inf)
        counted = kept_w > 0
        np.minimum.at(low, kept[counted], values[counted])
        np.maximum.at(high, kept[counted], values[counted])
        zeros = implicit_weight > 0  # implicit zeros with weight are values too
        low[zeros], high[zeros] = np.minimum(low[zeros], 0.0), np.maximum(high[zeros], 0.0)
        constant, value = _constant_columns(low, high)
        mean = np.where(constant, value, mean)
        if order == 1:
            return cls(counts, weights, mean)
        m2 = np.bincount(kept, kept_w * (values - mean[kept]) ** 2, minlength=d).astype(
            np.float64)
        m2 += implicit_weight * mean**2
        return cls(counts, weights, mean, np.where(constant, 0.0, m2))

    def merge(self, other):
        """Statistics of the union of both clients' rows (a new object), column by column."""
        if self.n_features != other.n_features or self.order != other.order:
            raise ValueError(
                f"cannot merge column statistics of {self.n_features} and "
                f"{other.n_features} features, orders {self.order} and {other.order}."
            )
        wa, wb = self.weight_sum, other.weight_sum
        w = wa + wb
        n = self.n_samples + other.n_samples
        if self.order == 0:
            return type(self)(n, w)
        delta = other.mean - self.mean
        with np.errstate(invalid="ignore", divide="ignore"):
            share = np.where(w > 0, wb / w, 0.0)
            mean = np.where(wa > 0, self.mean + share * delta, other.mean)
            if self.order == 1:
                return type(self)(n, w, mean)
            pair = np.where((wa > 0) & (wb > 0), wa * wb / w, 0.0)
        return type(self)(n, w, mean, self.m2 + other.m2 + pair * delta**2)

    # -------------------------------------------------------------- serialize
    def to_payload(self):
        """``(fields, arrays)`` of the message: the order and the per-column arrays."""
        arrays = {"n_samples": self.n_samples.astype(np.int64),
                  "weight_sum": np.asarray(self.weight_sum, dtype=np.float64)}
        if self.order >= 1:
            arrays["mean"] = np.asarray(self.mean, dtype=np.float64)
        if self.order == 2:
            arrays["m2"] = np.asarray(self.m2, dtype=np.float64)
        return {"order": self.order}, arrays

    @classmethod
    def from_payload(cls, fields, arrays, *, client=None, n_features=None, order=None):
        """Column statistics from a message; untrusted, so every value is checked.

        Raises
        ------
        InvalidClientMessage
            Naming ``client``: wrong names, types or shapes; a negative or
            inconsistent count or weight; non-finite or huge values; a
            negative sum of squares; or a column without weight whose mean
            or sum of squares is not zero.
        """
        fail = failing(client)
        level = fields.get("order") if isinstance(fields, dict) else None
        if type(level) is not int or set(fields) != {"order"} or level not in (0, 1, 2):
            fail(f"column statistics need one field 'order' in 0, 1, 2; got {fields!r}.")
        if order is not None and level != order:
            fail(f"sent statistics of order {level}, the task asked for {order}.")
        names = ("n_samples", "weight_sum", "mean", "m2")[: level + 2]
        if set(arrays) != set(names):
            fail(f"column statistics arrays must be {list(names)}; got {sorted(arrays)}.")
        counts = arrays["n_samples"]
        if not (isinstance(counts, np.ndarray) and counts.dtype == np.int64 and counts.ndim == 1):
            fail("n_samples must be a vector of int64 counts.")
        d = counts.shape[0]
        if d == 0 or (n_features is not None and d != n_features):
            fail(f"has {d} features, expected {n_features}.")
        values = []
        for name in names[1:]:
            value = arrays[name]
            if not (isinstance(value, np.ndarray) and value.dtype == np.float64
                    and value.shape == (d,)):
                fail(f"{name} must be a float64 vector of length {d}.")
            cap = MAX_SECOND if name == "m2" else MAX_MEAN
            if not np.all(np.isfinite(value)) or np.max(np.abs(value), initial=0.0) > cap:
                fail(f"{name} must be finite and at most {cap:g} in magnitude.")
            values.append(np.array(value))
        weight_sum = values[0]
        if np.any(counts < 0) or np.any(counts >= 2**62):
            fail("n_samples must be non-negative counts.")
        if np.any(weight_sum < 0) or np.any((counts == 0) & (weight_sum != 0)):
            fail("weight_sum must be non-negative, and zero in a column without values.")
        empty = weight_sum == 0
        if level >= 1 and np.any(empty & (values[1] != 0)):
            fail("a column without weight must have a zero mean.")
        if level == 2:
            m2 = values[2]
            if np.any(m2 < 0) or np.any(empty & (m2 != 0)):
                fail("m2 must be non-negative, and zero in a column without weight.")
        return cls(np.array(counts), *values)
