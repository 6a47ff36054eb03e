"""Uplink codecs: what a client sends instead of its gradient, and how the server reads it.

Every codec turns a flat float32 gradient ``g`` of length ``d`` into the
fields and arrays of a :class:`~sklearn_fed.protocol.Frame` and back into an
estimate of ``g``. On its own a codec message is a frame of kind
``"codec.<name>"`` (:meth:`encode`; :func:`sklearn_fed.protocol.encode` turns
it into bytes); inside :class:`FedMPDDClassifier`'s protocol the same fields
and arrays are a site's reply. The payload, in bytes (the frame adds its
header, JSON metadata and 32-byte trailer):

========================  =========================================  ==========
codec                     payload arrays (+ JSON fields)             bytes
========================  =========================================  ==========
``MPDDCodec`` (m)         ``s``: m float32 derivatives (+ ``seed``)  4 m
``FullCodec``             ``g``: d float32                           4 d
``QSGDCodec`` (s levels)  ``norm``: float32; ``bits``: per            4 + ceil(d (1 + ceil(log2(s + 1))) / 8)
                          coordinate a sign bit and a level in 0..s
``TopKCodec`` (k)         ``values``: k float32, ``indices``: k      8 k
                          int32, increasing
``LDPCodec``              ``g``: d float32 (gradient plus noise)     4 d
========================  =========================================  ==========

Messages from sites are untrusted: :meth:`read` checks every field and array
(names, dtypes, shapes, finiteness, seed range, index range and order, level
range, padding bits) and raises :class:`~sklearn_fed.InvalidClientMessage`
naming the client before anything is decoded.

The MPDD directions are never stored as one ``m x d`` float matrix: their
Rademacher signs are made from the seed, and applied, by
:mod:`~sklearn_fed.neural_network._sign_kernels` (its docstring has the layout).
"""

import functools
import math
from abc import ABC, abstractmethod
from numbers import Integral, Real

import numpy as np
import torch

from ..protocol import Frame
from ..protocol._errors import failing
from ._sign_kernels import decode_many, encode_many, sign_rows

__all__ = [
    "BLOCK_ELEMENTS",
    "FullCodec",
    "LDPCodec",
    "MPDDCodec",
    "QSGDCodec",
    "TopKCodec",
    "UPLINKS",
    "codec_from_settings",
    "derive_seed",
    "make_codec",
]

#: Largest number of direction entries held in memory at once (4 MiB of float32).
BLOCK_ELEMENTS = 1 << 20

_FLOAT32 = 4
_INT32 = 4
#: Seeds are 63-bit, as made by :func:`derive_seed`.
SEED_LIMIT = 1 << 63
# Caps on what a task may ask of a site (a hostile server must not make it allocate).
_MAX_DIRECTIONS = 1 << 24
_MAX_LEVELS = 1 << 16


def derive_seed(random_state, round_index, client_index, stream=0):
    """The 63-bit seed of one client in one round, from ``(random_state, round, client)``.

    Uses :class:`numpy.random.SeedSequence`, so nearby triples give
    unrelated streams; ``stream`` separates seeds drawn for different
    purposes from the same triple.

    Examples
    --------
    >>> derive_seed(0, 3, 7) == derive_seed(0, 3, 7) != derive_seed(0, 3, 8)
    True
    >>> derive_seed(0, 3, 7) != derive_seed(0, 3, 7, stream=1)
    True
    """
    entropy = [int(random_state), int(round_index), int(client_index)]
    if stream:
        entropy.append(int(stream))
    state = np.random.SeedSequence(entropy).generate_state(1, dtype=np.uint64)[0]
    return int(state >> np.uint64(1))


def _is_seed(seed):
    return isinstance(seed, Integral) and not isinstance(seed, bool) and 0 <= seed < SEED_LIMIT


def _check_seed(seed):
    if not _is_seed(seed):
        raise ValueError(f"a seed must be an integer in [0, 2**63), got {seed!r}")
    return int(seed)


def _as_array(g, ndim, error):
    if isinstance(g, torch.Tensor):
        g = g.detach().cpu().numpy()
    g = np.asarray(g)
    if g.ndim != ndim:
        raise ValueError(f"{error}, got shape {g.shape}")
    return g


class _Codec(ABC):
    """What every codec shares: standalone frames, validation, averaging on the server.

    Subclasses implement ``_check``, and ``_payload`` and ``_add_one`` for one
    message (or ``_payloads`` and ``_add`` for many at once).
    """

    name = None
    #: JSON fields a message carries besides its arrays.
    fields = ()
    #: Names of the arrays a message carries.
    array_names = ()
    #: Whether the estimate depends on the seed: MPDD's directions do; the
    #: other codecs use it only for their own randomness.
    seeded = False

    @property
    def kind(self):
        """Kind of a standalone message of this codec."""
        return f"codec.{self.name}"

    def settings(self):
        """The codec's configuration as JSON fields (what a task tells a site)."""
        names = _SETTINGS[self.name][1]
        return {"uplink": self.name, **{name: getattr(self, name) for name in names}}

    def encode(self, g, *, seed=None):
        """One gradient's message, as a standalone :class:`~sklearn_fed.protocol.Frame`.

        Parameters
        ----------
        g : array-like or tensor of shape (d,)
        seed : int, default=None
            In ``[0, 2**63)``: the directions' seed (MPDD, required) or the
            seed of the client's own randomness (QSGD rounding, local noise;
            ``None`` draws it from the operating system).
        """
        fields, arrays = self.encode_many(
            _as_array(g, 1, "a gradient must be a flat vector")[None], [seed])[0]
        return Frame(kind=self.kind, fields=fields, arrays=arrays)

    def encode_many(self, G, seeds):
        """Messages of many gradients: a list of ``(fields, arrays)``, one per row of ``G``.

        Parameters
        ----------
        G : array-like or tensor of shape (n, d)
            Float32 gradients, one per row.
        seeds : sequence of int
            One seed per row (see :meth:`encode`).
        """
        G = _as_array(G, 2, "encode_many needs a 2-D array of gradients, one per row")
        # float32 values, as a C-contiguous float64 array
        G = np.ascontiguousarray(G.astype(np.float32, copy=False), dtype=np.float64)
        seeds = [seed if seed is None and not self.seeded else _check_seed(seed)
                 for seed in seeds]
        if len(seeds) != G.shape[0]:
            raise ValueError(f"{G.shape[0]} gradients but {len(seeds)} seeds")
        if not np.isfinite(G).all():
            raise ValueError("gradients must be finite")
        return self._payloads(G, seeds)

    def read(self, frame, d, *, client=None):
        """Check an untrusted message for a model of ``d`` parameters; return it.

        Raises
        ------
        InvalidClientMessage
            Naming ``client`` and the field that is wrong.
        """

        fail = failing(client, f"{self.name} message ")
        fields, arrays = frame.fields, frame.arrays
        if not isinstance(fields, dict) or set(fields) != set(self.fields):
            fail(f"must have the fields {sorted(self.fields)}, got "
                 f"{sorted(fields) if isinstance(fields, dict) else fields!r}.")
        if not isinstance(arrays, dict):
            fail("has no arrays.")
        if set(arrays) != set(self.array_names):
            fail(f"must have the arrays {sorted(self.array_names)}, got {sorted(arrays)}.")
        self._check(fields, arrays, int(d), fail)
        return frame

    def decode(self, frame, d):
        """The server's estimate of the gradient in one message (checked first)."""
        return self.decode_mean([frame], d)

    def decode_mean(self, frames, d):
        """Average of the estimates of ``frames``, accumulated in float64; float32 tensor.

        Every message is checked before any is decoded.
        """
        frames = list(frames)
        if not frames:
            raise ValueError("decode_mean needs at least one message")
        for i, frame in enumerate(frames):
            self.read(frame, d, client=i)
        out = np.zeros(int(d))
        self._add(frames, out)
        out /= self._divisor() * len(frames)
        return torch.from_numpy(out.astype(np.float32))

    def _divisor(self):
        return 1.0

    def _payloads(self, G, seeds):
        """The client: one ``(fields, arrays)`` per row of ``G`` (float64 of float32 values)."""
        return [self._payload(g, seed) for g, seed in zip(G, seeds)]

    @abstractmethod
    def _check(self, fields, arrays, d, fail):
        """The server: validate one message's fields and arrays; ``fail(reason)`` raises."""

    def _add(self, frames, out):
        """``out += `` the sum of the decoded estimates of checked ``frames`` (float64)."""
        for frame in frames:
            self._add_one(frame.arrays, out)


def _checked_array(arrays, name, shape, fail, dtype=np.float32):
    """``arrays[name]``, a finite array of ``dtype`` and ``shape``."""
    value = arrays.get(name)
    if not isinstance(value, np.ndarray) or value.dtype != dtype:
        fail(f"array {name!r} must be {np.dtype(dtype)}, got "
             f"{getattr(value, 'dtype', type(value).__name__)}.")
    if value.shape != shape:
        fail(f"array {name!r} must have shape {shape}, got {value.shape}.")
    if not np.isfinite(value).all():
        fail(f"array {name!r} holds non-finite values.")
    return value


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
    >>> message = codec.encode(g, seed=123)
    >>> message.fields, message.arrays["s"].shape
    ({'seed': 123}, (50,))
    >>> codec.decode(message, d=200).shape
    torch.Size([200])
    """

    name = "mpdd"
    fields = ("seed",)
    array_names = ("s",)
    seeded = True

    def __init__(self, n_directions, direction="rademacher"):
        if not (isinstance(n_directions, Integral) and 1 <= n_directions <= _MAX_DIRECTIONS):
            raise ValueError(
                f"n_directions must be an integer in [1, {_MAX_DIRECTIONS}], got {n_directions!r}"
            )
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

    def directions(self, seed, d):
        """Yield ``(start, U_block)`` with float32 ``U_block`` of shape ``(rows, d)``.

        Used by the Gaussian variant and to inspect directions; the Rademacher
        encoder and decoder work on the packed bits directly (direction ``j``
        is the same whatever the block size).
        """
        d = int(d)
        if self.direction == "rademacher":
            rows = self.block_rows(d)
            for start in range(0, self.n_directions, rows):
                n = min(rows, self.n_directions - start)
                packed = sign_rows(seed, d, start // 8, start // 8 + (n + 7) // 8)
                bits = np.unpackbits(packed.T[:, :, None], axis=2).reshape(d, -1)[:, :n]
                yield start, torch.from_numpy(bits.T.astype(np.float32) * 2.0 - 1.0)
            return
        rows = max(1, min(self.n_directions, BLOCK_ELEMENTS // max(d, 1)))
        gen = torch.Generator()
        for b, start in enumerate(range(0, self.n_directions, rows)):
            n = min(rows, self.n_directions - start)
            gen.manual_seed((int(seed) + b) % SEED_LIMIT)
            yield start, torch.randn((n, d), generator=gen, dtype=torch.float32)

    def _padded(self):
        return 8 * ((self.n_directions + 7) // 8)  # the last group may be partial

    def nbytes(self, d):
        """Payload bytes of one message: ``4 m`` (the seed travels as a JSON field)."""
        return _FLOAT32 * self.n_directions

    def _payloads(self, G, seeds):
        m = self.n_directions
        if self.direction == "rademacher":
            S = np.empty((G.shape[0], self._padded()))
            encode_many(seeds, G, S)
            S = S[:, :m]
        else:
            S = np.empty((G.shape[0], m))
            for s, g, seed in zip(S, G, seeds):
                for start, block in self.directions(seed, G.shape[1]):
                    s[start:start + block.shape[0]] = block.double().numpy() @ g
        return [({"seed": seed}, {"s": s.astype(np.float32)}) for s, seed in zip(S, seeds)]

    def _check(self, fields, arrays, d, fail):
        if not _is_seed(fields["seed"]):
            fail(f"seed must be an integer in [0, 2**63), got {fields['seed']!r}.")
        _checked_array(arrays, "s", (self.n_directions,), fail)

    def _add(self, frames, out):
        seeds = [frame.fields["seed"] for frame in frames]
        if self.direction == "rademacher":
            S = np.zeros((len(frames), self._padded()))  # directions past m count 0
            for row, frame in zip(S, frames):
                row[:self.n_directions] = frame.arrays["s"]
            decode_many(seeds, S, out)
            return
        for seed, frame in zip(seeds, frames):
            s = frame.arrays["s"].astype(np.float64)
            for start, block in self.directions(seed, out.shape[0]):
                out += block.double().T.numpy() @ s[start:start + block.shape[0]]

    def _divisor(self):
        return float(self.n_directions)


class FullCodec(_Codec):
    """The raw float32 gradient (FedSGD).

    Examples
    --------
    >>> import torch
    >>> FullCodec().encode(torch.ones(10)).arrays["g"].nbytes
    40
    """

    name = "full"
    array_names = ("g",)

    def nbytes(self, d):
        """Payload bytes of one message: ``4 d``."""
        return _FLOAT32 * int(d)

    def _payload(self, g, seed):
        return {}, {"g": g.astype(np.float32)}

    def _check(self, fields, arrays, d, fail):
        _checked_array(arrays, "g", (d,), fail)

    def _add_one(self, arrays, out):
        out += arrays["g"]


class QSGDCodec(_Codec):
    """QSGD stochastic quantization with ``s`` levels (unbiased).

    Coordinate ``i`` is sent as a sign bit and a level ``l_i`` in ``{0..s}``
    with ``E[l_i / s] = |g_i| / ||g||``, packed in ``1 + ceil(log2(s + 1))``
    bits (big-endian, coordinate after coordinate, the last byte padded with
    zeros); the norm goes as one float32.

    Parameters
    ----------
    levels : int, default=255
        Number of quantization levels ``s`` (``s=255`` is 8-bit QSGD).

    Examples
    --------
    >>> import torch
    >>> QSGDCodec(levels=15).nbytes(100)   # 1 sign bit + 4 level bits each
    67
    """

    name = "qsgd"
    array_names = ("norm", "bits")

    def __init__(self, levels=255):
        if not (isinstance(levels, Integral) and 1 <= levels < _MAX_LEVELS):
            raise ValueError(
                f"QSGD levels must be an integer in [1, {_MAX_LEVELS}), got {levels!r}"
            )
        self.levels = int(levels)

    def bits_per_coordinate(self):
        return 1 + math.ceil(math.log2(self.levels + 1))

    def nbytes(self, d):
        """Payload bytes of one message."""
        return _FLOAT32 + math.ceil(int(d) * self.bits_per_coordinate() / 8)

    def _shifts(self):
        return np.arange(self.bits_per_coordinate() - 1, -1, -1, dtype=np.uint32)

    def _payload(self, g, seed):
        norm = np.float32(np.sqrt(g @ g))
        level = np.zeros(g.shape[0], dtype=np.uint32)
        if norm > 0:
            scaled = np.minimum(np.abs(g) / float(norm) * self.levels, self.levels)
            low = np.floor(scaled)
            up = np.random.default_rng(seed).random(g.shape[0]) < scaled - low
            level = (low + up).astype(np.uint32)
        code = ((g < 0).astype(np.uint32) << np.uint32(self.bits_per_coordinate() - 1)) | level
        bits = ((code[:, None] >> self._shifts()) & 1).astype(np.uint8)
        return {}, {"norm": np.array([norm], dtype=np.float32), "bits": np.packbits(bits.ravel())}

    def _check(self, fields, arrays, d, fail):
        norm = _checked_array(arrays, "norm", (1,), fail)
        if norm[0] < 0:
            fail("norm must be non-negative.")
        bits = arrays["bits"]
        n_bytes = self.nbytes(d) - _FLOAT32
        if not isinstance(bits, np.ndarray) or bits.dtype != np.uint8 or bits.shape != (n_bytes,):
            fail(f"array 'bits' must be {n_bytes} bytes (uint8) for d={d}.")
        if np.unpackbits(bits)[d * self.bits_per_coordinate():].any():
            fail("has non-zero padding bits.")
        if (self._unpack(bits, d)[1] > self.levels).any():
            fail(f"has a level above {self.levels}.")

    def _unpack(self, bits, d):
        """Sign bits (1: negative) and levels of ``d`` coordinates."""
        b = self.bits_per_coordinate() - 1
        weights = np.uint32(1) << self._shifts()
        code = np.unpackbits(bits)[:d * (b + 1)].reshape(d, -1).astype(np.uint32) @ weights
        return code >> np.uint32(b), code & np.uint32((1 << b) - 1)

    def _add_one(self, arrays, out):
        negative, level = self._unpack(arrays["bits"], out.shape[0])
        out += float(arrays["norm"][0]) * (1.0 - 2.0 * negative) * level / self.levels


class TopKCodec(_Codec):
    """Top-k sparsification: the ``k`` largest-magnitude entries and their indices.

    Examples
    --------
    >>> import torch
    >>> codec = TopKCodec(k=2)
    >>> codec.decode(codec.encode(torch.tensor([0.1, -3.0, 2.0, 0.5])), 4)
    tensor([ 0., -3.,  2.,  0.])
    """

    name = "topk"
    array_names = ("values", "indices")

    def __init__(self, k=400):
        if not (isinstance(k, Integral) and 1 <= k < 2**31):
            raise ValueError(f"top-k k must be an integer in [1, 2**31), got {k!r}")
        self.k = int(k)

    def nbytes(self, d):
        """Payload bytes of one message: ``8 min(k, d)``."""
        return (_FLOAT32 + _INT32) * min(self.k, int(d))

    def _payload(self, g, seed):
        k = min(self.k, g.shape[0])
        idx = np.sort(np.argpartition(-np.abs(g), k - 1)[:k])
        return {}, {"values": g[idx].astype(np.float32), "indices": idx.astype(np.int32)}

    def _check(self, fields, arrays, d, fail):
        k = min(self.k, d)
        _checked_array(arrays, "values", (k,), fail)
        idx = _checked_array(arrays, "indices", (k,), fail, np.int32)
        if k and (idx[0] < 0 or idx[-1] >= d or (np.diff(idx) <= 0).any()):
            fail(f"indices must be increasing and in [0, {d}).")

    def _add_one(self, arrays, out):
        out[arrays["indices"]] += arrays["values"]


class LDPCodec(FullCodec):
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
    >>> LDPCodec("laplace", scale=0.5).encode(torch.zeros(3), seed=1).arrays["g"].shape
    (3,)
    """

    def __init__(self, noise, scale=0.1):
        if noise not in ("gaussian", "laplace"):
            raise ValueError(f"noise must be 'gaussian' or 'laplace', got {noise!r}")
        if not (isinstance(scale, Real) and 0 <= scale < math.inf):
            raise ValueError(f"noise scale must be finite and >= 0, got {scale!r}")
        self.name = noise
        self.noise_scale = float(scale)

    def _payload(self, g, seed):
        rng = np.random.default_rng(seed)
        if self.name == "gaussian":
            noise = rng.standard_normal(g.shape[0]) * self.noise_scale
        else:
            noise = rng.laplace(0.0, self.noise_scale, g.shape[0])
        return {}, {"g": (g + noise).astype(np.float32)}


#: Each uplink's codec class and the settings (``make_codec``'s arguments, the codec's
#: attributes) it is built from, in order, and that its ``settings()`` gives a task.
_SETTINGS = {
    "mpdd": (MPDDCodec, ("n_directions", "direction")),
    "full": (FullCodec, ()),
    "qsgd": (QSGDCodec, ("levels",)),
    "topk": (TopKCodec, ("k",)),
    "gaussian": (functools.partial(LDPCodec, "gaussian"), ("noise_scale",)),
    "laplace": (functools.partial(LDPCodec, "laplace"), ("noise_scale",)),
}
UPLINKS = tuple(_SETTINGS)


def make_codec(uplink, *, n_directions=400, direction="rademacher", levels=255, k=400,
               noise_scale=0.1):
    """Build the codec named by ``uplink`` (one of :data:`UPLINKS`).

    Examples
    --------
    >>> make_codec("mpdd", n_directions=10).nbytes(1000)
    40
    """
    settings = locals()
    if uplink not in UPLINKS:
        raise ValueError(f"uplink must be one of {UPLINKS}, got {uplink!r}")
    codec, names = _SETTINGS[uplink]
    return codec(*(settings[name] for name in names))


def codec_from_settings(settings):
    """The codec a task's fields describe (the inverse of ``codec.settings()``).

    Raises ``ValueError`` when the settings are malformed or out of range.

    Examples
    --------
    >>> codec_from_settings(MPDDCodec(12).settings()).n_directions
    12
    """
    uplink = settings.get("uplink")
    if uplink not in UPLINKS:  # a tuple: an unhashable value is not a TypeError
        raise ValueError(f"unknown uplink {uplink!r}")
    names = _SETTINGS[uplink][1]
    missing = [name for name in names if name not in settings]
    if missing:
        raise ValueError(f"the {uplink!r} codec needs the settings {missing}")
    kwargs = {name: settings[name] for name in names}
    for name in ("n_directions", "levels", "k"):
        if name in kwargs and (not isinstance(kwargs[name], int) or isinstance(kwargs[name], bool)):
            raise ValueError(f"codec setting {name!r} must be an integer, got {kwargs[name]!r}")
    return make_codec(uplink, **kwargs)
