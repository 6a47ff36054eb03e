"""The format-1 statistics message of sklearn-fed 0.1, still read.

Before the common framing of :mod:`sklearn_fed.protocol`, statistics
travelled as a fixed header, the float64 values and a SHA-256 checksum;
:meth:`ClientStatistics.from_bytes <sklearn_fed.statistics.ClientStatistics.from_bytes>`
still reads such messages so that statistics saved by earlier releases stay
usable. Nothing writes them any more.
"""

import hashlib
import hmac
import struct

import numpy as np

from ..protocol._errors import InvalidClientMessage
from ..protocol._errors import who as _who

__all__ = ["V1_MAGIC", "from_v1_bytes"]

#: The first 8 bytes of a format-1 message.
V1_MAGIC = b"SKFEDSTA"
_V1_VERSION = 1
# magic, version, flags, n_features, n_targets, n_samples, weight_sum
_V1_HEADER = struct.Struct("<8sHHIIQd")
_V1_CHECKSUM_BYTES = 32  # SHA-256 of header and payload
_V1_FLAG_CENTERED = 1
_V1_FLAG_SINGLE_TARGET = 2
_V1_FLAGS = _V1_FLAG_CENTERED | _V1_FLAG_SINGLE_TARGET
_MAX_FEATURES = 2**20  # refuse to even size a message that claims more


def from_v1_bytes(cls, data, *, client, validate):
    """A format-1 message (``data`` starts with :data:`V1_MAGIC`) read as ``cls``.

    ``cls`` is :class:`~sklearn_fed.statistics.ClientStatistics` (or a subclass);
    the statistics are validated when ``validate`` is true.

    Raises
    ------
    InvalidClientMessage
        Naming ``client``: a truncated or padded message, an unknown version
        or flag, an implausible shape, a checksum mismatch, or invalid statistics.
    """
    def fail(reason):
        raise InvalidClientMessage(f"{_who(client)}: {reason}", client)

    if len(data) < _V1_HEADER.size + _V1_CHECKSUM_BYTES:
        fail(f"message is truncated ({len(data)} bytes is shorter than the fixed header).")
    _, version, flags, d, t, n_samples, weight_sum = _V1_HEADER.unpack_from(data)
    if version != _V1_VERSION or flags & ~_V1_FLAGS:
        fail(f"unsupported statistics message (version {version}, flags {flags:#x}).")
    if not (0 < d <= _MAX_FEATURES and 0 < t <= _MAX_FEATURES):
        fail(f"implausible shape n_features={d}, n_targets={t}.")
    n_values = d + t + d * (d + 1) // 2 + d * t + t
    expected = _V1_HEADER.size + 8 * n_values + _V1_CHECKSUM_BYTES
    if len(data) != expected:
        fail(f"message has {len(data)} bytes but its header announces {expected} "
             "(truncated or padded).")
    body, checksum = data[:-_V1_CHECKSUM_BYTES], data[-_V1_CHECKSUM_BYTES:]
    if not hmac.compare_digest(hashlib.sha256(body).digest(), checksum):
        fail("checksum mismatch (the message was altered or corrupted).")
    values = np.frombuffer(body, dtype="<f8", offset=_V1_HEADER.size).astype(np.float64)
    sizes = np.cumsum([d, t, d * (d + 1) // 2, d * t])
    x_mean, y_mean, packed, moment, target_ss = np.split(values, sizes)
    gram = np.empty((d, d))
    upper = np.triu_indices(d)
    gram[upper] = packed
    gram.T[upper] = packed
    stats = cls(int(n_samples), float(weight_sum), x_mean, y_mean, gram, moment.reshape(d, t),
                target_ss, centered=bool(flags & _V1_FLAG_CENTERED),
                single_target=bool(flags & _V1_FLAG_SINGLE_TARGET))
    if validate:
        stats.validate(client=client)
    return stats
