"""Row kernels: one client's rows reduced to its statistics, block by block.

The Gram form of dense rows (unweighted float rows: one shift and one
accumulator, :func:`_shifted_statistics`; weighted rows, and the rare rows on
which one shift would cancel digits: the blocked Chan path,
:func:`_chan_statistics`), of sparse rows (:func:`_sparse_statistics`), and
the factor form (:func:`_factor_statistics`, a TSQR of the blocks); why the
rows are shifted and how blocks are combined is told in the docstring of
:mod:`sklearn_fed.statistics`. Two helpers serve the estimators of
:mod:`sklearn_fed.linear_model` too: :func:`rows_times` (their own row
loops) and :func:`drop_direction` (the incremental ridge's factor rows);
:func:`few_rows_factor` is the factor form of a site with fewer rows than
features in one QR (the incremental ridge's streaming sites).
"""

import threading

import numpy as np
import scipy.sparse as sp
from scipy import linalg
from scipy.linalg.lapack import dgeqrf, get_lapack_funcs

from ..protocol._schema import count_rows
from ._inplace import _update_by_outer, upper_part

__all__ = ["drop_direction", "few_rows_factor", "rows_times"]

# Rows per block are chosen so one centered float64 block takes about this much
# memory: large enough for BLAS to run at full speed, small next to X.
_BLOCK_BYTES = 2 * 2**20

_workspace = threading.local()

# Work blocks up to this size are kept between calls (a fresh one costs its page
# faults every time); a larger one (blocks of at least p rows are Gram-sized:
# 32 MB at d = 2,000, 800 MB at d = 10,000) is freed after use, so no buffer
# above it outlives a fit.
_SCRATCH_KEEP_BYTES = 64 * 2**20


def _scratch(n_rows, n_cols, name="buffer"):
    """A reusable C-ordered float64 work block (one per thread and ``name``).

    Each client's statistics need a block of (centered or gathered) rows;
    reusing the memory across blocks and clients avoids faulting in fresh
    pages every time.
    """
    size = n_rows * n_cols
    if 8 * size > _SCRATCH_KEEP_BYTES:
        return np.empty((n_rows, n_cols))
    cached = getattr(_workspace, name, None)
    if cached is None or cached.size < size:
        cached = np.empty(size)
        setattr(_workspace, name, cached)
    return cached[:size].reshape(n_rows, n_cols)


def gathered(X, take):
    """``X[take]``: a view for a slice; for an index array of float64 rows, C-ordered rows
    in reused memory (``np.take`` into it is ~1.6x faster than ``X[take]``)."""
    if not isinstance(take, slice) and isinstance(X, np.ndarray) and X.dtype == np.float64:
        return np.take(X, take, axis=0, out=_scratch(len(take), X.shape[1], "rows"), mode="clip")
    return X[take]


def _blocks(rows, n_rows, block):
    """``rows`` of ``n_rows`` (a slice or an index array) in blocks of ``block`` rows: slices
    (read as views of contiguous rows) or index arrays."""
    if isinstance(rows, slice):
        first, stop, _ = rows.indices(n_rows)
        for start in range(first, stop, block):
            yield slice(start, min(start + block, stop))
    else:
        for start in range(0, len(rows), block):
            yield rows[start : start + block]


def _triangular_factor(rows):
    """The ``R`` of a QR decomposition of ``rows`` (``min(m, p)`` rows, upper trapezoidal).

    LAPACK ``geqrf`` (Householder, backward stable); ``Q`` is never formed.
    """
    m, p = rows.shape
    if m == 0:
        return np.zeros((0, p))
    work = np.array(rows, dtype=np.float64, order="F")
    geqrf = get_lapack_funcs("geqrf", (work,))
    optimal = int(geqrf(work, lwork=-1)[2][0].real)  # workspace query (blocked QR)
    qr, _, _, info = geqrf(work, lwork=max(optimal, p, 1), overwrite_a=True)
    if info != 0:
        raise linalg.LinAlgError(f"geqrf failed (info={info}).")
    return np.triu(qr[: min(m, p)])


def drop_direction(M, s):
    """Rows with the Gram of ``M`` and one row fewer, given ``s @ M == 0``.

    A Householder reflection maps ``s`` to a multiple of ``e_1``; the
    reflected first row is ``(s / |s|) @ M = 0``, so it is dropped. It keeps
    the row count of a centered block honest (``r`` sqrt-weighted centered
    rows ``M`` satisfy ``sqrt(w) @ M = 0``, so they have rank ``r - 1``), and
    turns the ``K`` Chan mean-shift rows of ``K`` groups into ``K - 1``.
    Used by the factor kernel here and by the incremental ridge's rounds
    (:mod:`sklearn_fed.linear_model`).
    """
    # np.linalg.norm(s) and np.outer, bit for bit, without their Python overhead
    # (this runs once per round of the incremental ridge)
    norm = np.sqrt(s.dot(s))
    if M.shape[0] <= 1 or norm == 0:
        return M[:0]
    v = s / norm
    v[0] += 1.0 if v[0] >= 0 else -1.0
    reflected = M - v[:, None] * ((v @ M) * (2.0 / (v @ v)))[None, :]
    return reflected[1:]


def few_rows_factor(X, y, sample_weight, centered):
    """Factor-form statistics of a site's rows in one QR: ``(weight_sum, x_mean, y_mean, R)``.

    For a site with few rows (a streaming site's new rows; see
    :class:`~sklearn_fed.IncrementalFederatedRidge`), where the blocked
    kernel behind :meth:`ClientStatistics.from_data(..., factor=True)
    <sklearn_fed.ClientStatistics.from_data>` costs more in its bookkeeping
    than in its arithmetic. ``R`` is upper trapezoidal with ``R^T R`` the
    products of the sqrt-weighted (centered) rows ``C = [x, y]``, as in the
    factor form of :class:`~sklearn_fed.ClientStatistics`. Centered rows
    satisfy ``sqrt(w)^T C = 0``, so they have rank ``n - 1``: the QR of
    ``[sqrt(w), C]`` puts that direction in its first row, and the remaining
    rows of ``R`` (past the first column) factor ``C^T C``; ``R`` has
    ``min(n - 1, d + t)`` rows (``min(n, d + t)`` uncentered). The means are
    plain (weighted) means of the rows, without the blocked kernel's refinement.

    Parameters
    ----------
    X : ndarray or sparse matrix of shape (n, d)
        Validated rows, ``n >= 1``.
    y : ndarray of shape (n,) or (n, t)
    sample_weight : ndarray of shape (n,) or None
    centered : bool
    """
    n, d = X.shape
    X = np.asarray(X.toarray() if sp.issparse(X) else X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64).reshape(n, -1)
    t = y.shape[1]
    if sample_weight is None:
        weight_sum, root = float(n), None
        x_mean, y_mean = X.sum(axis=0) / n, y.sum(axis=0) / n  # np.mean, without its overhead
    else:
        w = np.asarray(sample_weight, dtype=np.float64)
        weight_sum = float(w.sum())
        denom = weight_sum if weight_sum > 0 else 1.0
        x_mean, y_mean = (w @ X) / denom, (w @ y) / denom
        root = np.sqrt(w)
    first = 1 if centered else 0  # the column of sqrt(w), when centered
    # [sqrt(w), C] in Fortran order, so LAPACK works on it in place
    stacked = np.empty((n, first + d + t), order="F")
    if centered:
        np.subtract(X, x_mean, out=stacked[:, 1 : d + 1])
        np.subtract(y, y_mean, out=stacked[:, d + 1 :])
        stacked[:, 0] = 1.0 if root is None else root
    else:
        stacked[:, :d] = X
        stacked[:, d:] = y
    if root is not None:
        stacked[:, first:] *= root[:, None]
    qr = dgeqrf(stacked, overwrite_a=True)[0]
    factor = upper_part(qr[first : min(n, first + d + t), first:])
    return weight_sum, x_mean, y_mean, factor


# Rows of a client that choose its shift (a few cache lines per column).
_HEAD_ROWS = 64


def _shifted_statistics(X, y, centered, rows):
    """Unweighted statistics read in one pass into one accumulator, or None.

    The shift ``s`` of ``[x, y]`` is taken once from the client's first
    rows: their mean (a column constant on them is shifted by its first
    value, so a column constant on the whole client centers to exact
    zeros), or zero for feature columns whose mean is well within their
    spread there (then BLAS reads ``X`` in place, with no centered copy;
    always without centering). Blocks of rows ``[x - s, y - s_y, 1]`` are
    added to one accumulator of products (``syrk`` into the Gram when ``X``
    is read in place), and the products are centered once at the end, ``B - S S^T / n``. That
    cancels digits in proportion to ``(mean - s)^2 / variance``: when this
    exceeds 1 for some column (a client whose first rows are not
    representative of the rest), None is returned and the caller takes the
    Chan path. A site of at most ``_HEAD_ROWS`` rows is all head: its copy is
    shifted by its own mean and multiplied once. The blocks of one client
    depend only on its own rows, in order, so a site holding just those rows
    sends the same bits.
    """
    n = count_rows(X.shape[0], rows)
    if n == 0:
        return None
    d, t = X.shape[1], y.shape[1]
    p = d + t
    take = rows if n <= _HEAD_ROWS else next(_blocks(rows, X.shape[0], _HEAD_ROWS))
    # C order: the reductions below then add in the same order for any layout of X.
    head = np.array(np.hstack([gathered(X, take), y[take]]), dtype=np.float64, order="C")
    flat = np.ptp(head, axis=0) == 0
    head_mean = head.mean(axis=0)
    shift = np.where(flat, head[0], head_mean) if centered else np.zeros(p)
    if len(head) == n:  # the head is the whole site: its products about that shift
        head -= shift
        products = head.T @ head
        sums = head.sum(axis=0)
        return _centered_parts(
            products[:d, :d], products[:d, d:], products[d:, d:], sums[:d], sums[d:],
            shift, n, centered,
        )
    spread = np.mean((head - head_mean) ** 2, axis=0)
    # Read in place when centering the raw products loses at most ~half a bit
    # (mean^2 <= variance / 2 on the head; the check at the end falls back above one).
    in_place = X.dtype == np.float64 and (
        not centered or bool(np.all(head_mean[:d] ** 2 <= 0.5 * spread[:d]))
    )
    if in_place:
        shift[:d] = 0.0
    # At least p rows per block: a site of up to p rows is one syrk, straight into its Gram.
    block = max(1, _BLOCK_BYTES // (8 * (p + 1)), p)
    if in_place and block == p and isinstance(rows, slice) and X.flags.c_contiguous:
        # Blocks of p rows outgrow the cache anyway, and these are views of X:
        # one syrk over the whole site needs no second d x d accumulator.
        block = max(n, 1)
    if in_place:
        # X's products go straight into the Gram (the first block's syrk writes
        # it, no copy at the end); [y - s_y, 1] times X and itself go beside.
        gram = np.empty((d, d))
        side = np.zeros((t + 1, d))  # rows: sum (y_j - s_j) x per target, then sum x
        corner = np.zeros((t + 1, t + 1))  # products of [y - s_y, 1]
        out = np.empty((d, d)) if n > block else None
        side_block, corner_block = np.empty((t + 1, d)), np.empty((t + 1, t + 1))
    else:
        total = np.empty((p + 1, p + 1))  # products of [x - s, y - s_y, 1]
        out = np.empty((p + 1, p + 1)) if n > block else None
    for i, take in enumerate(_blocks(rows, X.shape[0], block)):
        Xb, yb = gathered(X, take), y[take]
        m = Xb.shape[0]
        if in_place:
            if not Xb.flags.c_contiguous:  # BLAS always sees one layout
                gather = _scratch(m, d, "rows")
                Xb = np.copyto(gather, Xb) or gather
            targets = _scratch(t + 1, m, "targets")  # rows: y - s_y per target, then ones
            np.subtract(yb.T, shift[d:, None], out=targets[:t])
            targets[t] = 1.0
            # numpy runs syrk: one read of the rows in place
            np.matmul(Xb.T, Xb, out=gram if i == 0 else out)
            if i:
                gram += out
            side += rows_times(targets, Xb, out=side_block)
            np.matmul(targets, targets.T, out=corner_block)
            corner += corner_block
        else:
            work = _scratch(m, p + 1)
            np.subtract(Xb, shift[:d], out=work[:, :d])
            np.subtract(yb, shift[d:], out=work[:, d:p])
            work[:, p] = 1.0
            np.matmul(work.T, work, out=total if i == 0 else out)
            if i:
                total += out
    if in_place:
        return _centered_parts(gram, side[:t].T, corner[:t, :t], side[t], corner[:t, t],
                               shift, n, centered)
    return _centered_parts(total[:d, :d], total[:d, d:p], total[d:p, d:p], total[:d, p],
                           total[d:p, p], shift, n, centered)


def rows_times(rows, X, *, out):
    """``rows @ X`` into ``out``, for a few ``rows`` (targets, a row of ones) and a tall ``X``.

    Moments and column sums while a block is in cache: up to four
    matrix-vector products read it once each, faster than one matrix
    product, which packs it first (d = 100: 25 against 33 ms per 500,000 rows).
    Used by the dense kernels here and by the private ridge's gathers
    (:mod:`sklearn_fed.linear_model`); ``out`` has shape
    ``(rows.shape[0], X.shape[1])`` and is returned.
    """
    if rows.shape[0] <= 4:
        for j in range(rows.shape[0]):
            np.matmul(rows[j], X, out=out[j])
    else:
        np.matmul(rows, X, out=out)
    return out


def _centered_parts(gram, cross, y_products, x_sums, y_sums, shift, n, centered):
    """The statistics from products about ``shift``: ``[x - s]^T [x - s]`` (``gram``),
    ``[x - s]^T [y - s_y]`` (``cross``), ``[y - s_y]^T [y - s_y]`` and the sums of
    ``x - s`` and ``y - s_y`` over ``n`` rows; None if centering would cancel digits."""
    d = len(x_sums)
    sums = np.concatenate([x_sums, y_sums])
    mean = shift + sums / n
    if centered:
        squares = np.concatenate([np.diag(gram), np.diag(y_products)])
        if np.any((sums / n) ** 2 > 0.5 * squares / n):  # more than one bit would cancel
            return None
        # B - S S^T / n, each entry (s_i s_j) / n: symmetric bit for bit.
        _update_by_outer(gram, x_sums, x_sums, np.divide, n, np.subtract)
        cross -= np.outer(x_sums, y_sums) / n
        y_products -= np.outer(y_sums, y_sums) / n
    gram = np.ascontiguousarray(gram)
    moment = np.ascontiguousarray(cross)
    return float(n), mean[:d], mean[d:], gram, moment, np.maximum(np.diag(y_products), 0.0)


def _chan_statistics(X, y, sample_weight, centered, rows):
    """Blocked, single-pass statistics of dense rows (see :mod:`sklearn_fed.statistics`).

    Each block is shifted into a work array ``[X - s, y - s_y, 1]`` (rows
    scaled by ``sqrt(w)``), where the shift ``s`` is the mean of the block's
    first rows (the running mean after the first block), then re-centered on
    the block's own weighted mean: that removes any large offset, so no
    digits cancel. One BLAS product ``work^T work`` then yields,
    in a single read of the block, the shifted Gram, moment and target sums of
    squares together with the column sums and the weight; the exact centered
    block statistics follow from ``B - S S^T / W``, and blocks are merged with
    the Chan update.
    """
    d, t = X.shape[1], y.shape[1]
    p = d + t
    # At least p rows per block, as in the in-place path: each block's merge is
    # O(p^2) work, which 2 MiB blocks of few wide rows would repeat every few
    # hundred rows (a weighted fit at 1e5 x 1,000: 2.14 -> 1.45 of the floor).
    block = max(1, _BLOCK_BYTES // (8 * (p + 1)), p)
    total = np.zeros((p, p))  # centered (or raw) products of [x, y]
    weight_sum = 0.0
    mean = np.zeros(p)
    for take in _blocks(rows, X.shape[0], block):
        Xv, yv = gathered(X, take), y[take]  # contiguous rows: a view, copied by the shift below
        wv = None if sample_weight is None else sample_weight[take]
        if wv is not None and not np.all(wv > 0):  # rows of weight 0 add nothing
            keep = wv > 0
            Xv, yv, wv = Xv[keep], yv[keep], wv[keep]
            if not len(wv):
                continue
        if centered and weight_sum == 0:  # first block: shift by its first rows
            shift = np.concatenate([Xv[:64].mean(axis=0), yv[:64].mean(axis=0)])
        else:
            shift = mean if centered else np.zeros(p)
        # float64 shift: a float32 block is then subtracted in float64.
        shift = shift.astype(np.float64)
        work = _scratch(Xv.shape[0], p + 1)
        np.subtract(Xv, shift[:d], out=work[:, :d])
        np.subtract(yv, shift[d:], out=work[:, d:p])
        work[:, p] = 1.0
        if centered:
            # Re-center on the block's own mean: the correction S S^T / W
            # below is then second order, so it cancels no digits even when
            # the shift is off by as much as the spread (near-constant columns).
            if wv is None:
                residual_mean = work[:, :p].mean(axis=0)
            else:  # np.average's weights times the block would be one more block-sized array
                residual_mean = (wv @ work[:, :p]) / wv.sum()
            # over whole rows (the ones minus 0): numpy buffers a strided work[:, :p]
            work -= np.append(residual_mean, 0.0)
            shift = shift + residual_mean
        if wv is not None:
            work *= np.sqrt(wv)[:, None]
        products = work.T @ work  # numpy runs syrk and mirrors the triangle
        wsum = products[p, p]
        if wsum == 0:
            continue
        sums = products[:p, p]
        block_products = products[:p, :p]
        if centered:
            block_products -= np.outer(sums, sums) / wsum
            constant = _constant_columns(Xv, yv, block_products, residual_mean, wsum)
            if constant.size:
                block_products[constant, :] = 0.0
                block_products[:, constant] = 0.0
        # the block added to the running products (Chan et al.)
        block_mean, new_weight = shift + sums / wsum, weight_sum + wsum
        if centered and weight_sum > 0:
            delta = block_mean - mean
            block_products = block_products + (weight_sum * wsum / new_weight) * np.outer(
                delta, delta)
        total = total + block_products
        mean, weight_sum = mean + (wsum / new_weight) * (block_mean - mean), new_weight
    gram = np.ascontiguousarray(total[:d, :d])
    moment = np.ascontiguousarray(total[:d, d:])
    # Sums of squares: round-off of a (near-)constant target must not make them negative.
    return weight_sum, mean[:d], mean[d:], gram, moment, np.maximum(np.diag(total)[d:], 0.0)


def _constant_columns(Xv, yv, block_products, residual_mean, weight):
    """Columns of ``[Xv, yv]`` constant on the block, whose centered products are exactly 0.

    Round-off of their mean must not make those products nonzero. A
    constant column's shifted entries are all one value ``v``, so after
    removing the block mean ``r`` (``v`` to within the round-off of two sums
    of ``n`` terms: ``|v - r| <= (2n + 2) eps |r|``) each centered entry is
    ``v - r``, and its centered square sum is at most ``weight (v - r)^2``
    (up to its own round-off). Only columns below twice that bound, with
    room, are candidates for the exact test (``np.ptp``, which reads them
    whole): none, for the columns of real data.
    """
    n, d = Xv.shape[0], Xv.shape[1]
    room = (4 * n + 16) * np.finfo(np.float64).eps
    bound = 2 * weight * (room * np.abs(residual_mean)) ** 2
    candidates = np.flatnonzero(np.diag(block_products) <= bound)
    if not candidates.size:
        return candidates
    features, targets = candidates[candidates < d], candidates[candidates >= d]
    spread = np.concatenate([np.ptp(Xv[:, features], axis=0),
                             np.ptp(yv[:, targets - d], axis=0)])
    return candidates[spread == 0]


class _DenseRows:
    """A sparse matrix whose row blocks read as dense arrays (for the dense path)."""

    def __init__(self, X):
        self.X, self.shape, self.dtype = X, X.shape, np.float64

    def __getitem__(self, rows):
        return self.X[rows].toarray()


def _sparse_statistics(X, y, sample_weight, centered):
    """Statistics of sparse rows without densifying X, or None.

    Centering is done on the d x d products (``X^T W X - W m m^T``), since
    subtracting the mean from X would make it dense. That cancels digits in
    proportion to mean^2 / variance, so when a column's mean^2 exceeds its
    variance (an offset) None is returned and the caller takes the dense
    blocked path on densified blocks of rows instead.
    """
    X = sp.csr_matrix(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    n = X.shape[0]
    w = np.ones(n) if sample_weight is None else sample_weight
    weight_sum = float(w.sum())
    denom = weight_sum if weight_sum > 0 else 1.0
    x_mean = np.asarray(X.T @ w).ravel() / denom
    y_mean = (w @ y) / denom
    XtW = (X.multiply(w[:, None])).T.tocsr()
    gram = np.asarray((XtW @ X).todense())
    if centered and np.any(weight_sum * x_mean**2 > 0.5 * np.diag(gram)):
        return None
    if centered:
        gram -= weight_sum * np.outer(x_mean, x_mean)
        gram = (gram + gram.T) / 2
        yc = y - y_mean
        moment = np.asarray(XtW @ yc)
        target_ss = w @ (yc * yc)
    else:
        moment = np.asarray(XtW @ y)
        target_ss = w @ (y * y)
    return weight_sum, x_mean, y_mean, gram, moment.reshape(X.shape[1], y.shape[1]), target_ss


def _factor_statistics(X, y, sample_weight, centered, rows):
    """Factor-form statistics: ``(weight_sum, mean of [x, y], R)``.

    Blocks of rows are gathered into a float64 work array ``[x, y]``,
    centered on their own weighted mean (refined once, so the mean's
    rounding leaves no first-order trace), scaled by ``sqrt(w)`` and reduced
    by one QR together with the running ``R`` and the Chan mean-shift row
    ``sqrt(W W_b / (W + W_b)) (mean_b - mean)``: the TSQR form of the Gram
    path's pairwise merge. Rows of weight zero are left out.
    """
    d, t = X.shape[1], y.shape[1]
    p = d + t
    if sp.issparse(X):
        X = _DenseRows(sp.csr_matrix(X))
    block = max(1, _BLOCK_BYTES // (8 * p))
    triangle = np.zeros((0, p))
    mean = np.zeros(p)
    weight_sum = 0.0
    for take in _blocks(rows, X.shape[0], block):
        Xb = X[take]
        work = np.empty((Xb.shape[0], p))
        work[:, :d] = Xb
        work[:, d:] = y[take]
        w = None if sample_weight is None else sample_weight[take]
        if w is not None:
            keep = w > 0
            work, w = work[keep], w[keep]
        block_weight = float(work.shape[0] if w is None else w.sum())
        if block_weight == 0:
            continue
        block_mean = np.average(work, axis=0, weights=w)
        if centered:
            work -= block_mean
            correction = np.average(work, axis=0, weights=w)
            work -= correction
            block_mean += correction
        root = None if w is None else np.sqrt(w)
        if root is not None:
            work *= root[:, None]
        parts = [triangle]
        if centered:
            if len(work) <= p:  # sqrt(w) @ work == 0: one row fewer has the same Gram
                work = drop_direction(work, np.ones(len(work)) if root is None else root)
            parts.append(work)
            if weight_sum > 0:
                scale = np.sqrt(weight_sum * block_weight / (weight_sum + block_weight))
                parts.append(scale * (block_mean - mean)[None, :])
        else:
            parts.append(work)
        stacked = np.vstack(parts)
        if stacked.shape[0]:
            triangle = _triangular_factor(stacked)
        total = weight_sum + block_weight
        mean = mean + (block_weight / total) * (block_mean - mean)
        weight_sum = total
    return weight_sum, mean, triangle
