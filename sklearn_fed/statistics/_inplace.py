"""d x d work without a second d x d matrix: row chunks, in-place updates, a lent triangle.

A server holds one merged Gram of ``d^2`` float64 values; the checks and the
solve that read it work on it row chunk by row chunk (:func:`_row_chunks`),
update it in place (:func:`_update_by_outer`), or borrow its upper triangle
as the work array of a factorization (:func:`lend_upper`,
:func:`restore_upper`), so that no second d x d array is allocated. The
masks of upper triangles and trapezoids they and the factor-form messages
use are built once per shape (:func:`upper_mask`).
"""

import functools

import numpy as np

__all__ = ["lend_upper", "lendable", "restore_upper", "upper_mask", "upper_part"]

# Row chunks of d x d work: small enough to stay in cache and in the heap (a fresh
# d x d temporary costs more in page faults than the arithmetic at d >= 1,000).
_CHUNK_BYTES = 2**20


def _row_chunks(matrix):
    """``(rows, buffer)`` covering ``matrix`` in row slices, with a work buffer of their shape."""
    n_rows, n_cols = matrix.shape
    step = max(1, _CHUNK_BYTES // (8 * max(n_cols, 1)))
    if step >= n_rows:  # one chunk (d <= 362): no generator bookkeeping per message
        return ((slice(0, n_rows), np.empty((n_rows, n_cols))),)
    buffer = np.empty((step, n_cols))
    return (
        (slice(start, min(start + step, n_rows)), buffer[: min(step, n_rows - start)])
        for start in range(0, n_rows, step)
    )


#: Up to this many entries, :func:`_max_abs` takes ``np.abs`` into a temporary:
#: one reduction instead of two (three times faster on a message's means).
_MAX_ABS_TEMPORARY = 2**14


def _max_abs(values):
    """``np.max(np.abs(values), initial=0.0)`` (NaN if any entry is NaN) without the
    array-sized temporary of ``np.abs`` for large arrays: a Gram's would be one more
    d x d matrix."""
    if values.size <= _MAX_ABS_TEMPORARY:
        return np.abs(values).max(initial=0.0)
    return np.maximum(values.max(initial=0.0), -values.min(initial=0.0))


def lendable(matrix):
    """Whether ``matrix`` can lend its upper triangle to LAPACK (:func:`lend_upper`).

    True for a non-empty, square, C-ordered, writeable float64 ndarray; its
    symmetry bit for bit is checked by :func:`lend_upper` itself, as it goes.
    The server's PSD check and the ridge solves of :mod:`sklearn_fed.linear_model`
    ask this before borrowing a merged Gram's triangle.
    """
    return (isinstance(matrix, np.ndarray) and matrix.dtype == np.float64
            and matrix.ndim == 2 and matrix.shape[0] == matrix.shape[1] > 0
            and matrix.flags.c_contiguous and matrix.flags.writeable)


def lend_upper(gram, fill):
    """Write another matrix into the upper triangle of an exactly symmetric ``gram``.

    A symmetric Gram holds all its values in its lower triangle (and a
    diagonal saved aside), so its upper triangle can serve as the d x d work
    array of a factorization: LAPACK reads it as the lower triangle of the
    Fortran-ordered ``gram.T`` (``lower=True``). Row chunk by row chunk from
    the top, ``fill(rows, part)`` gets ``part``, a copy of ``gram[rows]``, and
    turns its upper part (columns from ``rows.start`` on) into those rows of
    the wanted matrix, which are then written into ``gram``. Undo with
    :func:`restore_upper`. The server's PSD check
    (:func:`~sklearn_fed.statistics.check_aggregate`) and its Cholesky solve
    (in :mod:`sklearn_fed.linear_model`) factor a merged Gram this way.

    Parameters
    ----------
    gram : ndarray of shape (n, n)
        C-ordered, writeable (see :func:`lendable`).
    fill : callable

    Returns
    -------
    diagonal : ndarray of shape (n,) or None
        ``gram``'s diagonal, for :func:`restore_upper`; None when ``gram`` is
        not symmetric bit for bit (its upper triangle could not be restored
        from the lower one), and ``gram`` is then unchanged (as it is when
        ``fill`` raises).
    """
    diagonal = np.diag(gram).copy()
    for rows, part in _row_chunks(gram):
        start, stop = rows.start, rows.stop
        np.copyto(part, gram[rows])
        # Checked as we go: the rows above were checked, so they can be restored.
        # Bit for bit (as integers: -0.0 is not 0.0), in the mirror's memory order.
        mirror, upper = gram[start:, rows].view(np.int64), part[:, start:].T.view(np.int64)
        if not (mirror == upper).all():
            restore_upper(gram, diagonal, stop=start)
            return None
        try:
            fill(rows, part)
        except BaseException:
            restore_upper(gram, diagonal, stop=start)
            raise
        gram[rows, stop:] = part[:, stop:]
        np.copyto(gram[rows, rows], part[:, rows], where=upper_mask(stop - start, stop - start))
    return diagonal


def restore_upper(gram, diagonal, stop=None):
    """Undo :func:`lend_upper`: the upper triangle of ``gram`` (in rows before ``stop``)
    copied back from its lower one, and its diagonal from ``diagonal``.

    ``diagonal`` is what :func:`lend_upper` returned; ``stop`` (rows from the
    top) is for :func:`lend_upper`'s own early exits, callers restore the whole
    triangle. Afterwards ``gram`` holds its original bits again.
    """
    n = gram.shape[0]
    step = max(1, _CHUNK_BYTES // (8 * n))  # the row chunks of _row_chunks
    for start in range(0, n if stop is None else stop, step):
        rows = slice(start, min(start + step, n))
        gram[rows, rows.stop:] = gram[rows.stop:, rows].T
        block = gram[rows, rows]
        np.copyto(block, block.T.copy(), where=upper_mask(*block.shape, k=1))
        np.einsum("ii->i", block)[...] = diagonal[rows]


#: Masks of at most this many entries (128 KB) are kept, the last 64 shapes used
#: (a row chunk's, a small site's factor's, ...: shapes repeat), so at most 8 MB;
#: a larger one is made for each use.
_MASK_KEEP_ENTRIES = 2**17


def upper_mask(n_rows, n_cols, k=0):
    """Read-only boolean mask of the entries of an ``(n_rows, n_cols)`` matrix on and
    above its ``k``-th diagonal (``np.triu``'s entries).

    Each shape's mask is built once (up to ``2**17`` entries): the row chunks
    here, the packed trapezoid of a factor-form message
    (:meth:`ClientStatistics.to_payload <sklearn_fed.ClientStatistics.to_payload>`)
    and the factor of a site with few rows repeat their shapes message after message.
    """
    if n_rows * n_cols > _MASK_KEEP_ENTRIES:
        return np.triu(np.ones((n_rows, n_cols), dtype=bool), k)
    return _kept_upper_mask(n_rows, n_cols, k)


@functools.lru_cache(maxsize=64)
def _kept_upper_mask(n_rows, n_cols, k):
    mask = np.triu(np.ones((n_rows, n_cols), dtype=bool), k)
    mask.flags.writeable = False
    return mask


def upper_part(matrix):
    """``np.triu(matrix)`` (the same bits), with the mask of :func:`upper_mask`."""
    return np.where(upper_mask(*matrix.shape), matrix, 0.0)


def _update_by_outer(matrix, u, v, scale_op, scale, update_op):
    """``matrix = update_op(matrix, scale_op(u_i v_j, scale))`` in place, row chunk by row chunk.

    The same bits as forming ``np.outer(u, v)`` first, without a d x d temporary.
    """
    for rows, part in _row_chunks(matrix):
        np.multiply.outer(u[rows], v, out=part)
        scale_op(part, scale, out=part)
        update_op(matrix[rows], part, out=matrix[rows])
