"""Rademacher directions of the MPDD codec: generation and the two inner loops.

Directions come in groups of 8. Group ``q`` is one row of ``d`` bytes: bit
``t`` (big-endian) of byte ``k`` is the sign of direction ``8 q + t`` at
coordinate ``k`` (1 -> +1, 0 -> -1). The row is the little-endian bytes of
64-bit words ``q W .. q W + W - 1`` (``W = ceil(d / 8)``, the last word's
spare bytes unused) of a counter-based SplitMix64 stream keyed by the seed:
word ``c`` is ``mix(seed + (c + 1) * golden)``, Java's ``SplittableRandom``
sequence. Counter-based means any row, and any stretch of a row, can be made
on its own, so a client and the server produce exactly the same bits whatever
block size they work in, and no more than one row ever needs to exist at a time.

The two operations, for many participants at once (each with its own seed):

* encode: ``s[i, 8q + t] = sum_k sign_i(q, t, k) g[i, k]`` -- one pass over the
  row builds a 256-bin histogram of ``g[i]`` by byte value; the 256 x 8 sign
  table turns it into the group's 8 derivatives. Every ``(i, q)`` is
  independent, so the pairs are split among threads.
* decode: ``out[k] += sum_i sum_q sum_t sign_i(q, t, k) s[i, 8q + t]`` -- a
  256-entry table of signed sums of each group's 8 values, then one lookup per
  byte. The coordinates ``k`` are split into stretches, one per thread, and
  every coordinate adds its terms in the same order (participant, then group)
  as a serial loop would: the result is the same bits whatever the number of
  threads.

Tables stay in L1 cache. With numba installed (part of the ``nn`` extra) the
generation is fused into compiled loops; otherwise numpy does the same
arithmetic on blocks of rows (about 5x slower, one core). Both paths give the
same bits; sums agree to float64 round-off.
"""

import os

import numpy as np

__all__ = [
    "HAVE_NUMBA",
    "SIGNS",
    "decode_many",
    "encode_many",
    "sign_rows",
]

#: ``SIGNS[v, t]`` is +1 if bit ``t`` (big-endian) of byte value ``v`` is set, else -1.
SIGNS = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1) * 2.0 - 1.0

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_ONE, _S27, _S30, _S31 = np.uint64(1), np.uint64(27), np.uint64(30), np.uint64(31)

#: Rows generated at once by the numpy path (about 1 MiB of signs).
_NUMPY_BLOCK_BYTES = 1 << 17
#: Decode tables (256 float64 per group and participant) made at once: 16 MiB.
_TABLE_BYTES = 1 << 24


def sign_rows(seed, d, first, stop):
    """Sign bytes of groups ``first .. stop - 1``: uint8 array of shape ``(stop - first, d)``.

    Examples
    --------
    >>> rows = sign_rows(7, 10, 0, 3)
    >>> rows.shape, rows.dtype.name
    ((3, 10), 'uint8')
    >>> bool((sign_rows(7, 10, 1, 3) == rows[1:]).all())   # any row on its own
    True
    """
    width = (int(d) + 7) // 8
    counter = np.arange(first * width, stop * width, dtype=np.uint64)
    with np.errstate(over="ignore"):  # arithmetic modulo 2**64 is the point
        z = np.uint64(seed) + (counter + _ONE) * _GOLDEN
        z = (z ^ (z >> _S30)) * _MIX1
        z = (z ^ (z >> _S27)) * _MIX2
    z ^= z >> _S31
    rows = z.astype("<u8", copy=False).view(np.uint8).reshape(stop - first, 8 * width)
    return rows[:, :int(d)]


def _numpy_blocks(seed, d, groups):
    """Yield ``(first, n, index)``: groups ``first .. first + n - 1``, sign bytes + 256 q."""
    step = max(1, _NUMPY_BLOCK_BYTES // max(int(d), 1))
    for first in range(0, groups, step):
        packed = sign_rows(seed, d, first, min(groups, first + step))
        n = packed.shape[0]
        yield first, n, packed + (np.arange(n, dtype=np.intp) * 256)[:, None]


def _encode_numpy(seeds, G, S):
    for seed, g, s in zip(seeds, G, S):
        for first, n, index in _numpy_blocks(int(seed), G.shape[1], s.shape[0] // 8):
            hist = np.bincount(index.ravel(), weights=np.tile(g, n), minlength=n * 256)
            s[8 * first:8 * (first + n)] = (hist.reshape(n, 256) @ SIGNS).ravel()


def _decode_numpy(seeds, S, out):
    for seed, s in zip(seeds, S):
        for first, n, index in _numpy_blocks(int(seed), out.shape[0], s.shape[0] // 8):
            table = (s[8 * first:8 * (first + n)].reshape(n, 8) @ SIGNS.T).ravel()
            out += np.take(table, index).sum(0)


def _split(n, parts):
    """``parts`` contiguous ranges covering ``0..n`` (some may be empty)."""
    bounds = np.linspace(0, n, parts + 1).astype(np.int64)
    return list(zip(bounds[:-1].tolist(), bounds[1:].tolist()))


def _in_threads(fn, ranges, work):
    """Run ``fn(start, stop)`` over ``ranges``, on worker threads when ``work`` is large.

    The compiled loops release the GIL. Plain threads (not numba's OpenMP
    layer, whose idle threads spin for a while after each call and starve
    torch's) keep the two libraries from fighting over the cores.
    """
    if len(ranges) == 1 or work < _THREADED_WORK:
        for start, stop in ranges:
            fn(start, stop)
        return
    list(_executor().map(lambda bounds: fn(*bounds), ranges))


def _workers():
    """Threads for the compiled loops: the cores this process may use.

    (Not ``numba.get_num_threads()``: asking starts numba's OpenMP layer,
    which resets the thread count of the OpenMP runtime torch shares.)
    """
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


_pool = None


def _executor():
    """A pool of ``_workers()`` threads, made again after a fork (whose child has no threads)."""
    global _pool
    if _pool is None or _pool[0] != (os.getpid(), _workers()):
        from concurrent.futures import ThreadPoolExecutor

        _pool = ((os.getpid(), _workers()),
                 ThreadPoolExecutor(max_workers=_workers(), thread_name_prefix="sklearn-fed-mpdd"))
    return _pool[1]


#: Below this many inner-loop steps a call stays on the calling thread.
_THREADED_WORK = 1 << 18

try:
    from numba import njit
except ImportError:  # the numpy path gives the same bits, only slower
    njit = None
# The compiled loops read 64-bit words as bytes in place: little-endian hosts only.
HAVE_NUMBA = njit is not None and np.little_endian

if not HAVE_NUMBA:
    _encode, _decode = _encode_numpy, _decode_numpy
else:

    @njit(cache=True, boundscheck=False, nogil=True)
    def _fill_row(seed, first_word, words):  # pragma: no cover - compiled
        for w in range(words.shape[0]):
            z = seed + (first_word + np.uint64(w) + _ONE) * _GOLDEN
            z = (z ^ (z >> _S30)) * _MIX1
            z = (z ^ (z >> _S27)) * _MIX2
            words[w] = z ^ (z >> _S31)

    @njit(cache=True, boundscheck=False, nogil=True)
    def _encode_jobs(seeds, G, S, first, stop):  # pragma: no cover - compiled
        d = G.shape[1]
        groups = S.shape[1] // 8
        width = (d + 7) // 8
        words = np.empty(width, dtype=np.uint64)
        row = words.view(np.uint8)  # little-endian hosts only (checked at import)
        hist = np.empty(256)
        for job in range(first, stop):  # job = one (participant, group)
            i = job // groups
            q = job - i * groups
            _fill_row(seeds[i], np.uint64(q * width), words)
            hist[:] = 0.0
            for k in range(d):
                hist[row[k]] += G[i, k]
            for t in range(8):
                acc = 0.0
                for v in range(256):
                    acc += hist[v] * SIGNS[v, t]
                S[i, 8 * q + t] = acc

    @njit(cache=True, boundscheck=False, nogil=True)
    def _table_jobs(S, tables, first, stop):  # pragma: no cover - compiled
        groups = S.shape[1] // 8
        for job in range(first, stop):
            i = job // groups
            q = job - i * groups
            for v in range(256):
                acc = 0.0
                for t in range(8):
                    acc += SIGNS[v, t] * S[i, 8 * q + t]
                tables[i, q, v] = acc

    @njit(cache=True, boundscheck=False, nogil=True)
    def _decode_columns(seeds, tables, out, start, stop):  # pragma: no cover - compiled
        # start is a multiple of 8: the words of this stretch of every row
        n_part, groups = tables.shape[0], tables.shape[1]
        width = (out.shape[0] + 7) // 8
        words = np.empty((stop - start + 7) // 8, dtype=np.uint64)
        row = words.view(np.uint8)
        for i in range(n_part):  # the same order for every coordinate
            for q in range(groups):
                _fill_row(seeds[i], np.uint64(q * width + start // 8), words)
                for k in range(start, stop):
                    out[k] += tables[i, q, row[k - start]]

    def _encode(seeds, G, S):
        jobs = G.shape[0] * (S.shape[1] // 8)
        _in_threads(lambda a, b: _encode_jobs(seeds, G, S, a, b),
                    _split(jobs, min(jobs, _workers())), jobs * G.shape[1])

    def _decode(seeds, S, out):
        d, groups = out.shape[0], S.shape[1] // 8
        n_threads = _workers()
        # Coordinates in stretches of a multiple of 8, one per thread; the
        # stretches do not change the bits (every coordinate adds in order).
        columns = [(8 * a, min(d, 8 * b)) for a, b in _split(-(-d // 8), n_threads)]
        chunk = max(1, _TABLE_BYTES // (8 * 256 * max(groups, 1)))
        for first in range(0, S.shape[0], chunk):  # bounds the tables' memory
            block = S[first:first + chunk]
            tables = np.empty((block.shape[0], groups, 256))
            jobs = block.shape[0] * groups
            _in_threads(lambda a, b: _table_jobs(block, tables, a, b),
                        _split(jobs, min(jobs, n_threads)), jobs * 2048)
            _in_threads(lambda a, b: _decode_columns(seeds[first:first + chunk], tables, out, a, b),
                        columns, jobs * d)


def _seed_array(seeds):
    seeds = np.asarray(seeds, dtype=object).ravel()
    if not all(isinstance(s, (int, np.integer)) and 0 <= s < 2**64 for s in seeds):
        raise ValueError("seeds must be integers in [0, 2**64).")
    return np.array([int(s) for s in seeds], dtype=np.uint64)


def encode_many(seeds, G, S):
    """``S[i] = U_i^T G[i]`` for every participant ``i``, in one call.

    Parameters
    ----------
    seeds : sequence of int
        One seed per participant, in ``[0, 2**64)``.
    G : ndarray of shape (n_participants, d), float64, C-contiguous
        The gradients.
    S : ndarray of shape (n_participants, 8 * groups), float64, C-contiguous
        Filled with the derivatives along the first ``8 * groups`` directions.

    Examples
    --------
    >>> import numpy as np
    >>> G, S = np.ones((2, 5)), np.empty((2, 8))
    >>> encode_many([3, 4], G, S)
    >>> bool(np.allclose(S[0], SIGNS[sign_rows(3, 5, 0, 1)[0]].sum(0)))
    True
    """
    _encode(_seed_array(seeds), G, S)


def decode_many(seeds, S, out):
    """``out += sum_i U_i S[i]`` over every participant ``i``, in one call.

    The sum for each coordinate is taken in participant order, then group
    order, so the result does not depend on how the work is split.

    Parameters
    ----------
    seeds : sequence of int
    S : ndarray of shape (n_participants, 8 * groups), float64, C-contiguous
        Derivatives; entries past a participant's ``m`` must be 0.
    out : ndarray of shape (d,), float64
        Added to in place.

    Examples
    --------
    >>> import numpy as np
    >>> out = np.zeros(5)
    >>> decode_many([3], np.eye(8)[:1], out)   # out += direction 0 of seed 3
    >>> bool((out == SIGNS[sign_rows(3, 5, 0, 1)[0], 0]).all())
    True
    """
    _decode(_seed_array(seeds), S, out)

