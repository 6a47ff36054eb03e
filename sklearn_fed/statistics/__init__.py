"""Sufficient statistics of one client's rows for (weighted) ridge regression.

Every ridge estimator in :mod:`sklearn_fed` is built on :class:`ClientStatistics`:
a client turns its rows into one (compute), the server combines many (merge), and
in a real deployment they travel as bytes (serialize, validate).

Why centered statistics: a raw Gram ``X^T X`` of features with an offset of 1e6
holds entries near 1e12, and subtracting ``n * mean mean^T`` afterwards cancels
every significant digit of the variance. We instead shift each block of rows by
(nearly) its mean before the BLAS ``syrk`` product and combine blocks (and
clients) with the pairwise update of Chan, Golub & LeVeque (1979), which adds
``w_a w_b / (w_a + w_b) * delta delta^T`` for the difference of the means. Both
steps are exact in exact arithmetic and lose no digits to the offset. Blocks
whose columns all have mean^2 <= variance (standardized data, say) have no
offset to lose digits to (the cancellation factor is at most 2), so they are
read in place, saving the copy.

Two forms of the same statistics travel on the wire. The *Gram form* sends
``G``, ``h`` and the target sums of squares; the *factor form* sends instead
the triangular factor ``R`` of a QR decomposition of the client's
sqrt-weighted (centered) rows ``[X, y]``, from which ``R^T R`` gives all three.
Both cost about ``(d + t)(d + t + 1) / 2`` numbers; the factor form never
squares the condition number of ``X`` (a Gram of features with singular values
``s`` holds ``s^2``, so everything below ``sqrt(eps) s_max`` is round-off),
so a server can solve ridge from it as accurately as scikit-learn's ``svd``
solver on the pooled rows. Factors are merged exactly like the Gram form:
stack both factors and the Chan mean-shift row, and take the ``R`` of a QR
of the stack (TSQR).

The package's modules, by concept: :mod:`~sklearn_fed.statistics._message`
(:class:`ClientStatistics`: compute, merge, serialize, read format 1),
:mod:`~sklearn_fed.statistics._kernels` (the row kernels behind
:meth:`ClientStatistics.from_data`), :mod:`~sklearn_fed.statistics._validation`
(the checks of untrusted messages and of their merge),
:mod:`~sklearn_fed.statistics._moments` (:class:`ColumnMoments`),
and :mod:`~sklearn_fed.statistics._inplace` (d x d work without a second d x d
array).
"""

# FORMS and STATISTICS_KIND are importable from here, as before, but not in __all__.
from ..protocol._errors import InvalidClientMessage
from ._message import (  # noqa: F401
    FORMS,
    STATISTICS_KIND,
    ClientStatistics,
    StreamingMerge,
    merge_statistics,
)
from ._moments import ColumnMoments
from ._validation import check_aggregate, most_extreme_client

__all__ = [
    "ClientStatistics",
    "ColumnMoments",
    "InvalidClientMessage",
    "StreamingMerge",
    "check_aggregate",
    "merge_statistics",
    "most_extreme_client",
]
