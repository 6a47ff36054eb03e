"""Uplink codecs: what a client sends instead of its gradient, and how the server reads it.

Every codec turns a flat float32 gradient ``g`` of length ``d`` into a
:class:`Message` and back into an estimate of ``g``. ``Message.nbytes`` is the
exact size of what goes over the wire, so ledgers count real bytes:

========================  =========================================  ==========
codec                     payload                                    bytes
========================  =========================================  ==========
``MPDDCodec`` (m)         m float32 directional derivatives + seed   4 m + 8
``FullCodec``             d float32                                  4 d
``QSGDCodec`` (s levels)  float32 norm + per coordinate sign and      4 + ceil(d (1 + ceil(log2(s + 1))) / 8)
                          level in {0..s}
``TopKCodec`` (k)         k float32 values + k int32 indices          8 k
``LDPCodec``              d float32 (gradient plus noise)             4 d
========================  =========================================  ==========

The MPDD directions are never stored as one ``m x d`` float matrix:
Rademacher signs are packed bits (one byte holds the signs of 8 directions at
one coordinate) from a counter-based SplitMix64 stream keyed by the 8-byte
seed, made one group of 8 directions at a time and applied through 256-entry
histograms and lookup tables that stay in cache
(:mod:`~sklearn_fed.neural_network._sign_kernels`). Direction ``j`` depends
only on ``(seed, j, d)``, so the server regenerates exactly the client's
directions from the seed alone.
"""

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from ._sign_kernels import decode_groups, encode_groups, sign_rows

__all__ = [
    "BLOCK_ELEMENTS",
    "FullCodec",
    "LDPCodec",
    "MPDDCodec",
    "Message",
    "QSGDCodec",
    "TopKCodec",
    "derive_seed",
    "make_codec",
]

#: Largest number of direction entries held in memory at once (4 MiB of float32).
BLOCK_ELEMENTS = 1 << 20

_FLOAT32 = 4
_INT32 = 4
_SEED = 8


def derive_seed(random_state, round_index, client_index):
    """The 63-bit seed of one client in one round, from ``(random_state, round, client)``.

    Uses :class:`numpy.random.SeedSequence`, so nearby triples give
    unrelated streams.

    Examples
    --------
    >>> derive_seed(0, 3, 7) == derive_seed(0, 3, 7) != derive_seed(0, 3, 8)
    True
    """
    entropy = [int(random_state), int(round_index), int(client_index)]
    state = np.random.SeedSequence(entropy).generate_state(1, dtype=np.uint64)[0]
    return int(state >> np.uint64(1))


@dataclass
class Message:
    """One client's upload.

    Attributes
    ----------
    codec : str
        Name of the codec that wrote it.
    payload : dict
        Tensors and integers; exactly what the client sends.
    nbytes : int
        Size of the payload on the wire, in bytes.
    """

    codec: str
    payload: dict = field(default_factory=dict)
    nbytes: int = 0


def _as_flat(g):
    g = torch.as_tensor(g)
    if g.ndim != 1:
        raise ValueError(
            f"a gradient must be a flat vector, got shape {tuple(g.shape)}"
        )
    return g.to(torch.float32)


class _Codec:
    """What every codec shares: averaging decoded messages on the server."""

    def decode_mean(self, messages, d):
        """Average of the decoded estimates of ``messages`` (the server's aggregate)."""
        out = torch.zeros(int(d), dtype=torch.float64)
        for message in messages:
            out += self.decode(message, d)
        return (out / len(messages)).to(torch.float32)


class MPDDCodec(_Codec):
    """Multi-projected directional derivatives (FedMPDD, Alg. 2; FedPDD when m=1).

    The client sends ``s = U^T g`` (m values) and the seed of ``U``; the server
    decodes ``(1/m) U s``. Unbiased, with relative squared error
    ``(d - 1)/m`` for Rademacher directions and ``(d + 1)/m`` for Gaussian ones.

    Parameters
    ----------
    n_directions : int
        Number of directions ``m``.
    direction : {"rademacher", "gaussian"}, default="rademacher"
        Distribution of the direction entries.

    Examples
    --------
    >>> import torch
    >>> codec = MPDDCodec(n_directions=50)
    >>> g = torch.linspace(-1, 1, 200)
    >>> msg = codec.encode(g, seed=123)
    >>> msg.nbytes
    208
    >>> codec.decode(msg, d=200).shape
    torch.Size([200])
    """

    name = "mpdd"

    def __init__(self, n_directions, direction="rademacher"):
        if int(n_directions) < 1:
            raise ValueError(f"n_directions must be >= 1, got {n_directions}")
        if direction not in ("rademacher", "gaussian"):
            raise ValueError(
                f"direction must be 'rademacher' or 'gaussian', got {direction!r}"
            )
        self.n_directions = int(n_directions)
        self.direction = direction

    def block_rows(self, d):
        """Directions per generated block for a model of size ``d`` (a multiple of 64)."""
        groups = (BLOCK_ELEMENTS // 8) // max(int(d), 1) // 8 * 8
        return 8 * max(8, groups)

    def direction_bytes(self, seed, d):
        """Yield ``(start, C)``: Rademacher signs packed 8 directions per byte.

        ``C`` has shape ``(groups, d)``; bit ``t`` (big-endian, as
        :func:`numpy.unpackbits`) of ``C[q, k]`` is 1 when entry ``k`` of
        direction ``start + 8 q + t`` is ``+1`` and 0 when it is ``-1``
        (see :mod:`~sklearn_fed.neural_network._sign_kernels`). Each group is
        generated on its own from the seed, so direction ``j`` is the same
        whatever the block size.
        """
        d = int(d)
        rows = self.block_rows(d)
        for start in range(0, self.n_directions, rows):
            first = start // 8
            stop = first + (min(rows, self.n_directions - start) + 7) // 8
            yield start, sign_rows(seed, d, first, stop)

    def directions(self, seed, d):
        """Yield ``(start, U_block)`` with float32 ``U_block`` of shape ``(rows, d)``.

        Used by the Gaussian variant and to inspect directions; the Rademacher
        encoder and decoder work on the packed bits directly.
        """
        d = int(d)
        if self.direction == "rademacher":
            for start, packed in self.direction_bytes(seed, d):
                n = min(8 * packed.shape[0], self.n_directions - start)
                bits = np.unpackbits(packed.T[:, :, None], axis=2).reshape(d, -1)[:, :n]
                yield start, torch.from_numpy(bits.T.astype(np.float32) * 2.0 - 1.0)
            return
        rows = max(1, min(self.n_directions, BLOCK_ELEMENTS // max(d, 1)))
        gen = torch.Generator()
        for b, start in enumerate(range(0, self.n_directions, rows)):
            n = min(rows, self.n_directions - start)
            gen.manual_seed((int(seed) + b) % (1 << 63))
            yield start, torch.randn((n, d), generator=gen, dtype=torch.float32)

    def _groups(self):
        return (self.n_directions + 7) // 8

    def nbytes(self, d):
        """Bytes of one message: ``4 m + 8``."""
        return _FLOAT32 * self.n_directions + _SEED

    # Rademacher: the loops of _sign_kernels generate and use one row of sign
    # bytes at a time, so no float U (nor the whole packed U) is ever formed.
    def encode(self, g, *, seed):
        """Directional derivatives ``s = U^T g`` of a flat gradient ``g``."""
        g = _as_flat(g)
        d = g.shape[0]
        s = np.empty(self.n_directions, dtype=np.float64)
        if self.direction == "rademacher":
            padded = np.empty(8 * self._groups())  # the last group may be partial
            encode_groups(seed, g.detach().cpu().numpy().astype(np.float64), padded)
            s[:] = padded[:self.n_directions]
        else:
            for start, block in self.directions(seed, d):
                s[start:start + block.shape[0]] = (block.double() @ g.double()).numpy()
        s = torch.from_numpy(s.astype(np.float32))
        return Message(self.name, {"s": s, "seed": int(seed)}, self.nbytes(d))

    def _checked_values(self, message):
        s = torch.as_tensor(message.payload["s"], dtype=torch.float32)
        if s.shape != (self.n_directions,) or not torch.isfinite(s).all():
            raise ValueError(
                f"MPDD message must hold {self.n_directions} finite values, got shape "
                f"{tuple(s.shape)}"
            )
        return s.numpy().astype(np.float64)

    def _add_decoded(self, message, out):
        """``out += U s`` (float64), with ``U`` regenerated from the message's seed."""
        s = self._checked_values(message)
        d = out.shape[0]
        seed = message.payload["seed"]
        if self.direction == "rademacher":
            padded = np.zeros(8 * self._groups())  # directions past m count 0
            padded[:self.n_directions] = s
            decode_groups(seed, padded, out)
        else:
            for start, block in self.directions(seed, d):
                out += block.double().T.numpy() @ s[start:start + block.shape[0]]

    def decode(self, message, d):
        """The server's estimate ``(1/m) U s``, with ``U`` regenerated from the seed."""
        return self.decode_mean([message], d)

    def decode_mean(self, messages, d):
        """Average of the decoded estimates of ``messages``, accumulated in float64."""
        out = np.zeros(int(d), dtype=np.float64)
        for message in messages:
            self._add_decoded(message, out)
        out /= self.n_directions * len(messages)
        return torch.from_numpy(out.astype(np.float32))


class FullCodec(_Codec):
    """The raw float32 gradient (FedSGD).

    Examples
    --------
    >>> import torch
    >>> FullCodec().encode(torch.ones(10), seed=0).nbytes
    40
    """

    name = "full"

    def nbytes(self, d):
        """Bytes of one message: ``4 d``."""
        return _FLOAT32 * int(d)

    def encode(self, g, *, seed=None):
        g = _as_flat(g)
        return Message(self.name, {"g": g.clone()}, self.nbytes(g.shape[0]))

    def decode(self, message, d):
        return torch.as_tensor(message.payload["g"], dtype=torch.float32).clone()


class QSGDCodec(_Codec):
    """QSGD stochastic quantization with ``s`` levels (unbiased).

    Coordinate ``i`` is sent as its sign and a level ``l_i`` in ``{0..s}`` with
    ``E[l_i / s] = |g_i| / ||g||``; the norm goes as one float32.

    Parameters
    ----------
    levels : int, default=256
        Number of quantization levels ``s`` (``s=255`` is 8-bit QSGD).

    Examples
    --------
    >>> import torch
    >>> QSGDCodec(levels=15).nbytes(100)   # 1 sign bit + 4 level bits each
    67
    """

    name = "qsgd"

    def __init__(self, levels=255):
        if int(levels) < 1:
            raise ValueError(f"QSGD levels must be >= 1, got {levels}")
        self.levels = int(levels)

    def bits_per_coordinate(self):
        return 1 + math.ceil(math.log2(self.levels + 1))

    def nbytes(self, d):
        return _FLOAT32 + math.ceil(int(d) * self.bits_per_coordinate() / 8)

    def encode(self, g, *, seed):
        g = _as_flat(g)
        norm = torch.linalg.vector_norm(g)
        gen = torch.Generator().manual_seed(int(seed))
        if norm == 0:
            level = torch.zeros_like(g)
        else:
            scaled = g.abs() / norm * self.levels
            low = torch.floor(scaled)
            level = low + (torch.rand(g.shape, generator=gen) < (scaled - low)).float()
        return Message(
            self.name,
            {"norm": float(norm), "sign": torch.sign(g).to(torch.int8),
             "level": level.to(torch.int32)},
            self.nbytes(g.shape[0]),
        )

    def decode(self, message, d):
        p = message.payload
        return p["norm"] * p["sign"].float() * p["level"].float() / self.levels


class TopKCodec(_Codec):
    """Top-k sparsification: the ``k`` largest-magnitude entries and their indices.

    Examples
    --------
    >>> import torch
    >>> codec = TopKCodec(k=2)
    >>> codec.decode(codec.encode(torch.tensor([0.1, -3.0, 2.0, 0.5]), seed=0), 4)
    tensor([ 0., -3.,  2.,  0.])
    """

    name = "topk"

    def __init__(self, k=400):
        if int(k) < 1:
            raise ValueError(f"top-k k must be >= 1, got {k}")
        self.k = int(k)

    def nbytes(self, d):
        return (_FLOAT32 + _INT32) * min(self.k, int(d))

    def encode(self, g, *, seed=None):
        g = _as_flat(g)
        k = min(self.k, g.shape[0])
        idx = torch.topk(g.abs(), k).indices
        payload = {"values": g[idx].clone(), "indices": idx.to(torch.int32)}
        return Message(self.name, payload, self.nbytes(g.shape[0]))

    def decode(self, message, d):
        out = torch.zeros(int(d), dtype=torch.float32)
        out[message.payload["indices"].long()] = message.payload["values"]
        return out


class LDPCodec(_Codec):
    """FedSGD with local noise: the client adds Gaussian or Laplace noise before sending.

    Parameters
    ----------
    noise : {"gaussian", "laplace"}
        Noise distribution.
    scale : float, default=0.1
        Standard deviation (Gaussian) or scale ``b`` (Laplace, variance ``2 b^2``).

    Examples
    --------
    >>> import torch
    >>> LDPCodec("laplace", scale=0.5).encode(torch.zeros(3), seed=1).nbytes
    12
    """

    def __init__(self, noise, scale=0.1):
        if noise not in ("gaussian", "laplace"):
            raise ValueError(f"noise must be 'gaussian' or 'laplace', got {noise!r}")
        if not float(scale) >= 0:
            raise ValueError(f"noise scale must be >= 0, got {scale}")
        self.name = noise
        self.noise = noise
        self.scale = float(scale)

    def nbytes(self, d):
        return _FLOAT32 * int(d)

    def encode(self, g, *, seed):
        g = _as_flat(g)
        gen = torch.Generator().manual_seed(int(seed))
        if self.noise == "gaussian":
            noise = torch.randn(g.shape, generator=gen) * self.scale
        else:
            u = torch.rand(g.shape, generator=gen).clamp_(1e-7, 1 - 1e-7) - 0.5
            noise = -self.scale * torch.sign(u) * torch.log1p(-2 * u.abs())
        return Message(self.name, {"g": g + noise}, self.nbytes(g.shape[0]))

    def decode(self, message, d):
        return torch.as_tensor(message.payload["g"], dtype=torch.float32).clone()


UPLINKS = ("mpdd", "full", "qsgd", "topk", "gaussian", "laplace")


def make_codec(uplink, *, n_directions=400, direction="rademacher", levels=255, k=400,
               noise_scale=0.1):
    """Build the codec named by ``uplink`` (one of :data:`UPLINKS`).

    Examples
    --------
    >>> make_codec("mpdd", n_directions=10).nbytes(1000)
    48
    """
    if uplink == "mpdd":
        return MPDDCodec(n_directions, direction)
    if uplink == "full":
        return FullCodec()
    if uplink == "qsgd":
        return QSGDCodec(levels)
    if uplink == "topk":
        return TopKCodec(k)
    if uplink in ("gaussian", "laplace"):
        return LDPCodec(uplink, noise_scale)
    raise ValueError(f"uplink must be one of {UPLINKS}, got {uplink!r}")
