"""Rademacher directions of the MPDD codec: generation and the two inner loops.

Directions come in groups of 8. Group ``q`` is one row of ``d`` bytes: bit
``t`` (big-endian) of byte ``k`` is the sign of direction ``8 q + t`` at
coordinate ``k`` (1 -> +1, 0 -> -1). The row is the little-endian bytes of
64-bit words ``q W .. q W + W - 1`` (``W = ceil(d / 8)``, the last word's
spare bytes unused) of a counter-based SplitMix64 stream keyed by the seed:
word ``c`` is ``mix(seed + (c + 1) * golden)``, Java's ``SplittableRandom``
sequence. Counter-based means any row can be made on its own, so a client
and the server produce exactly the same bits whatever block size they work
in, and no more than one row ever needs to exist at a time.

The two operations on a group:

* encode: ``s[8q + t] = sum_k sign(q, t, k) g[k]`` -- one pass over the row
  builds a 256-bin histogram of ``g`` by byte value; the 256 x 8 sign table
  turns it into the group's 8 derivatives;
* decode: ``out[k] += sum_t sign(q, t, k) s[8q + t]`` -- a 256-entry table of
  signed sums of the group's 8 values, then one lookup per byte.

Tables stay in L1 cache. With numba installed (part of the ``nn`` extra) the
generation is fused into compiled loops; otherwise numpy does the same
arithmetic on blocks of rows (about 5x slower). Both paths give the same bits;
sums agree to float64 round-off.
"""

import numpy as np

__all__ = ["HAVE_NUMBA", "SIGNS", "decode_groups", "encode_groups", "sign_rows"]

#: ``SIGNS[v, t]`` is +1 if bit ``t`` (big-endian) of byte value ``v`` is set, else -1.
SIGNS = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1) * 2.0 - 1.0

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_ONE, _S27, _S30, _S31 = np.uint64(1), np.uint64(27), np.uint64(30), np.uint64(31)

#: Rows generated at once by the numpy path (about 1 MiB of signs).
_NUMPY_BLOCK_BYTES = 1 << 17


def _words_per_row(d):
    return (int(d) + 7) // 8


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
    width = _words_per_row(d)
    counter = np.arange(first * width, stop * width, dtype=np.uint64)
    with np.errstate(over="ignore"):  # arithmetic modulo 2**64 is the point
        z = np.uint64(seed) + (counter + _ONE) * _GOLDEN
        z = (z ^ (z >> _S30)) * _MIX1
        z = (z ^ (z >> _S27)) * _MIX2
    z ^= z >> _S31
    rows = z.astype("<u8", copy=False).view(np.uint8).reshape(stop - first, 8 * width)
    return rows[:, :int(d)]


def _numpy_blocks(seed, d, groups):
    step = max(1, _NUMPY_BLOCK_BYTES // max(int(d), 1))
    for first in range(0, groups, step):
        yield first, sign_rows(seed, d, first, min(groups, first + step))


def _encode_numpy(seed, d, g, s):
    for first, packed in _numpy_blocks(seed, d, s.shape[0] // 8):
        n = packed.shape[0]
        index = packed + (np.arange(n, dtype=np.intp) * 256)[:, None]
        hist = np.bincount(index.ravel(), weights=np.tile(g, n), minlength=n * 256)
        s[8 * first:8 * (first + n)] = (hist.reshape(n, 256) @ SIGNS).ravel()


def _decode_numpy(seed, d, s, out):
    for first, packed in _numpy_blocks(seed, d, s.shape[0] // 8):
        n = packed.shape[0]
        table = (s[8 * first:8 * (first + n)].reshape(n, 8) @ SIGNS.T).ravel()
        index = packed + (np.arange(n, dtype=np.intp) * 256)[:, None]
        out += np.take(table, index).sum(0)


try:
    from numba import njit
except ImportError:  # the numpy path gives the same bits, only slower
    HAVE_NUMBA = False
    _encode, _decode = _encode_numpy, _decode_numpy
else:
    HAVE_NUMBA = True

    @njit(cache=True, boundscheck=False)
    def _fill_row(seed, first_word, words):  # pragma: no cover - compiled
        for w in range(words.shape[0]):
            z = seed + (first_word + np.uint64(w) + _ONE) * _GOLDEN
            z = (z ^ (z >> _S30)) * _MIX1
            z = (z ^ (z >> _S27)) * _MIX2
            words[w] = z ^ (z >> _S31)

    @njit(cache=True, boundscheck=False)
    def _encode(seed, d, g, s):  # pragma: no cover - compiled
        width = (d + 7) // 8
        words = np.empty(width, dtype=np.uint64)
        row = words.view(np.uint8)  # little-endian hosts only (checked at import)
        hist = np.empty(256)
        for q in range(s.shape[0] // 8):
            _fill_row(np.uint64(seed), np.uint64(q * width), words)
            hist[:] = 0.0
            for k in range(d):
                hist[row[k]] += g[k]
            for t in range(8):
                acc = 0.0
                for v in range(256):
                    acc += hist[v] * SIGNS[v, t]
                s[8 * q + t] = acc

    @njit(cache=True, boundscheck=False)
    def _decode(seed, d, s, out):  # pragma: no cover - compiled
        width = (d + 7) // 8
        words = np.empty(width, dtype=np.uint64)
        row = words.view(np.uint8)
        table = np.empty(256)
        for q in range(s.shape[0] // 8):
            _fill_row(np.uint64(seed), np.uint64(q * width), words)
            for v in range(256):
                acc = 0.0
                for t in range(8):
                    acc += SIGNS[v, t] * s[8 * q + t]
                table[v] = acc
            for k in range(d):
                out[k] += table[row[k]]

    if not np.little_endian:  # the compiled loops read words as bytes in place
        HAVE_NUMBA = False
        _encode, _decode = _encode_numpy, _decode_numpy


def encode_groups(seed, g, s):
    """``s = U^T g`` for the ``len(s) // 8`` groups of ``seed``; ``g`` and ``s`` float64.

    Examples
    --------
    >>> import numpy as np
    >>> g, s = np.ones(5), np.empty(8)
    >>> encode_groups(3, g, s)
    >>> signs = sign_rows(3, 5, 0, 1)
    >>> bool(np.allclose(s, SIGNS[signs[0]].sum(0)))
    True
    """
    _encode(int(seed), int(g.shape[0]), g, s)


def decode_groups(seed, s, out):
    """``out += U s`` for the ``len(s) // 8`` groups of ``seed``; float64 arrays.

    Examples
    --------
    >>> import numpy as np
    >>> out = np.zeros(5)
    >>> decode_groups(3, np.eye(8)[0], out)   # out += direction 0
    >>> bool((out == SIGNS[sign_rows(3, 5, 0, 1)[0], 0]).all())
    True
    """
    _decode(int(seed), int(out.shape[0]), s, out)
