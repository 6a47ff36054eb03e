"""The one wire format of sklearn-fed: every task and every reply is a :class:`Frame`.

Layout of a frame's bytes (all integers little-endian)::

    offset  size  field
    0       8     magic b"SKFEDMSG"
    8       2     format version (uint16), currently 2
    10      2     flags (uint16): bit 0 set = the trailer is an HMAC-SHA256
                  under the site's key; every other bit must be 0
    12      4     length L of the metadata (uint32), at most 1 MiB
    16      L     metadata: a UTF-8 JSON object (see below)
    16+L    P     payload: the arrays named in the metadata, in order, each
                  little-endian and C-ordered
    end-32  32    trailer: HMAC-SHA256(key, everything before) when keyed,
                  else SHA-256(everything before)

The metadata object has exactly the keys ``kind`` (the message kind, e.g.
``"ridge.statistics/reply"``), ``federation`` (32 hex digits, random per
federation), ``round`` (the round id), ``site`` (the site's label as JSON),
``schema`` (the feature schema, see :mod:`~sklearn_fed.protocol._schema`),
``fields`` (kind-specific JSON scalars) and ``arrays`` (a list of ``[name,
dtype, shape, layout]``; ``layout`` ``"sym"`` means a symmetric ``(d, d)``
matrix sent as its packed upper triangle, row by row).

Decoding checks, in this order and before allocating anything larger than the
message itself: the length against the caller's cap, magic, version, flags,
the metadata length, the trailer (constant-time compare), the metadata's keys
and types, and that the declared array sizes add up to exactly the payload's
length. JSON is parsed by the standard library; nothing is ever unpickled.
"""

import functools
import hashlib
import hmac
import json
import math
import struct
from dataclasses import dataclass, field
from json.encoder import c_make_encoder

import numpy as np

from ._errors import failing

__all__ = [
    "Frame",
    "SymmetricMatrix",
    "decode",
    "encode",
    "label_key",
    "nest",
    "plain_label",
    "sorted_labels",
    "unnest",
]

MAGIC = b"SKFEDMSG"
FORMAT_VERSION = 2
_HEADER = struct.Struct("<8sHHI")
FLAG_KEYED = 1
_KNOWN_FLAGS = FLAG_KEYED
TRAILER_BYTES = 32
MAX_META_BYTES = 1 << 20
#: Default cap on one message; a server can lower or raise it.
DEFAULT_MAX_MESSAGE_BYTES = 1 << 31
#: The dtypes an array may have on the wire.
WIRE_DTYPES = {"<f8", "<f4", "<i8", "<i4", "<u8", "|u1", "|i1"}
_MAX_NDIM = 4
_META_KEYS = {"kind", "federation", "round", "site", "schema", "fields", "arrays"}
_NESTED_KEYS = {"kind", "federation", "round", "schema", "fields"}
_JSON = json.JSONEncoder(separators=(",", ":"))
# The C encoder JSONEncoder.encode uses, built once: building it is half of a frame's encode
# (json.encoder's c_make_encoder is None without CPython's C accelerator).
if c_make_encoder is not None:
    _C_JSON = c_make_encoder(None, _JSON.default, json.encoder.encode_basestring_ascii, None,
                             _JSON.key_separator, _JSON.item_separator, False, False, True)

    def _json(value):
        return "".join(_C_JSON(value, 0))
else:  # pragma: no cover
    _json = _JSON.encode
#: The federation id of a message made outside any federation (e.g. ``to_bytes``).
STANDALONE = "0" * 32


class SymmetricMatrix:
    """A symmetric matrix that travels as its packed upper triangle.

    In-process the full matrix is passed as is (no packing); :func:`encode`
    packs it and :func:`decode` unpacks it, so both paths carry the same values.
    """

    __slots__ = ("matrix",)

    def __init__(self, matrix):
        self.matrix = matrix

    @property
    def n_values(self):
        d = self.matrix.shape[0]
        return d * (d + 1) // 2


@dataclass
class Frame:
    """One message: its header fields and its named arrays.

    Attributes
    ----------
    kind : str
        Message kind, ``"<protocol>/task"`` or ``"<protocol>/reply"``.
    federation : str
        32 hex digits identifying the federation (random per federation).
    round : int
        Round id; a reply echoes its task's.
    site : JSON value
        Label of the site the task is for, or that sends the reply.
    schema : dict or None
        The feature schema (tasks) or its fingerprint (replies).
    fields : dict
        Kind-specific JSON values (counts, seeds, epsilon, ...).
    arrays : dict
        Name -> ndarray (or :class:`SymmetricMatrix`).
    """

    kind: str
    federation: str = STANDALONE
    round: int = 0
    site: object = None
    schema: object = None
    fields: dict = field(default_factory=dict)
    arrays: dict = field(default_factory=dict)

    def _meta(self):
        table = []
        for name, value in self.arrays.items():
            if isinstance(value, SymmetricMatrix):
                table.append([name, "<f8", list(value.matrix.shape), "sym"])
            elif (code := _dtype_code(value.dtype)) in WIRE_DTYPES:
                table.append([name, code, list(value.shape), ""])
            else:
                raise TypeError(
                    f"array {name!r} has dtype {value.dtype}, which the wire format cannot carry.")
        meta = {
            "kind": self.kind,
            "federation": self.federation,
            "round": int(self.round),
            "site": plain_label(self.site),
            "schema": self.schema,
            "fields": self.fields,
            "arrays": table,
        }
        return _json(meta).encode("utf-8")

    @property
    def payload_bytes(self):
        return sum(8 * value.n_values if isinstance(value, SymmetricMatrix) else value.nbytes
                   for value in self.arrays.values())

    @property
    def nbytes(self):
        """Exact length of :func:`encode` of this frame (computed without encoding)."""
        return _HEADER.size + len(self._meta()) + self.payload_bytes + TRAILER_BYTES


def frame_sizes(frame, label_lengths, fields_lengths=None):
    """Exact :attr:`Frame.nbytes` of ``frame`` sent to or by each of many sites, as an array.

    Frames that differ from ``frame`` only in their site label (and in their
    fields) differ in size only by the length of its JSON (and of theirs),
    because JSON encodes a nested value exactly as on its own: O(1) per site
    instead of one header per site.

    Parameters
    ----------
    frame : Frame
        The frame of one of the sites.
    label_lengths : ndarray of int
        Length of the JSON of each site's label: of its :func:`label_key`
        (the same text, but for the order of a label's dict keys).
    fields_lengths : ndarray of int, default=None
        Length of the JSON of each site's own fields (same keys and arrays
        as ``frame``'s); None: the sites share ``frame``'s fields.

    Examples
    --------
    >>> task = Frame("ridge.statistics/task", site=0, fields={"centered": True})
    >>> sites = [7, "site-b"]
    >>> lengths = np.array([len(key) for key in label_keys(sites)])
    >>> frame_sizes(task, lengths).tolist() == [
    ...     Frame("ridge.statistics/task", site=s, fields={"centered": True}).nbytes
    ...     for s in sites]
    True
    """
    base = frame.nbytes - len(_json(plain_label(frame.site)))
    if fields_lengths is not None:
        base -= len(_json(frame.fields))
        label_lengths = label_lengths + fields_lengths
    return label_lengths + base


def json_length(value):
    """Length of the JSON of ``value`` as a frame's header encodes it."""
    return len(_json(value))


@functools.lru_cache(maxsize=64)
def _dtype_code(dtype):
    dtype = np.dtype(dtype)
    return dtype.newbyteorder("<").str if dtype.byteorder not in "|" else dtype.str


def plain_label(label):
    """A site label as a JSON value: numpy scalars unwrapped, tuples as lists.

    Labels of other types travel as ``{"repr": repr(label)}``.

    Examples
    --------
    >>> plain_label(np.int64(3)), plain_label(("a", 1))
    (3, ['a', 1])
    """
    if isinstance(label, np.generic):
        label = label.item()
    if label is None or isinstance(label, (str, bool, int)):
        return label
    if isinstance(label, float):
        return label if math.isfinite(label) else {"repr": repr(label)}
    if isinstance(label, (tuple, list)):
        return [plain_label(item) for item in label]
    return {"repr": repr(label)}


def label_key(label):
    """Canonical text of a label: two labels are the same site iff their keys match.

    Examples
    --------
    >>> label_key(1) == label_key(np.int64(1)) != label_key("1")
    True
    """
    if type(label) is int:  # the usual labels, asked for every site of every round
        return str(label)
    if type(label) is str:
        return _json(label)
    return json.dumps(plain_label(label), sort_keys=True, separators=(",", ":"))


def label_keys(labels):
    """``[label_key(label) for label in labels]``, without a Python call per plain label.

    Examples
    --------
    >>> label_keys([3, 10]), label_keys(["a", "b"])
    (['3', '10'], ['"a"', '"b"'])
    """
    types = set(map(type, labels))
    if types == {int}:
        return list(map(str, labels))
    if types == {str}:
        return list(map(json.encoder.encode_basestring_ascii, labels))
    return list(map(label_key, labels))


def distinct_labels(labels):
    """Whether no two of ``labels`` are the same site (have the same :func:`label_key`).

    Examples
    --------
    >>> distinct_labels([1, 2, "1"]), distinct_labels([1, np.int64(1)])
    (True, False)
    """
    labels = list(labels)
    if plain_keys(labels):
        return len(set(labels)) == len(labels)
    return len(set(map(label_key, labels))) == len(labels)


def plain_keys(labels):
    """Whether ``labels`` are all ints or all strings: then equal as labels iff equal as keys."""
    return set(map(type, labels)) in ({int}, {str})


def sorted_labels(labels):
    """Labels in their natural order when they can be compared, else by :func:`label_key`.

    The server processes replies in this order, so a round's result does not
    depend on the order in which replies arrive.

    Examples
    --------
    >>> sorted_labels([10, 2, 1]), sorted_labels(["b", 1])
    ([1, 2, 10], ['b', 1])
    """
    labels = list(labels)
    try:
        return sorted(labels)
    except TypeError:
        return sorted(labels, key=label_key)


def _as_key(key):
    if key is None:
        return None
    if isinstance(key, str):
        key = key.encode("utf-8")
    key = bytes(key)
    if len(key) < 16:
        raise ValueError(
            f"a site key must have at least 16 bytes (128 bits); got {len(key)}. "
            "Use secrets.token_bytes(32)."
        )
    return key


def _trailer(body, key):
    if key is None:
        return hashlib.sha256(body).digest()
    return hmac.new(key, body, hashlib.sha256).digest()


def encode(frame, key=None):
    """Serialize a :class:`Frame`; with ``key``, authenticate it by HMAC-SHA256.

    Parameters
    ----------
    frame : Frame
    key : bytes or str, default=None
        The site's shared key (at least 16 bytes). ``None``: the trailer is
        a plain SHA-256, which detects corruption but not forgery.

    Returns
    -------
    data : bytes
    """
    key = _as_key(key)
    meta = frame._meta()
    if len(meta) > MAX_META_BYTES:
        raise ValueError(f"message metadata of {len(meta)} bytes exceeds {MAX_META_BYTES}.")
    parts = [_HEADER.pack(MAGIC, FORMAT_VERSION, FLAG_KEYED if key else 0, len(meta)), meta]
    for value in frame.arrays.values():
        if isinstance(value, SymmetricMatrix):
            matrix = np.asarray(value.matrix, dtype=np.float64)
            parts.append(_pack_upper(matrix))
        else:
            array = np.ascontiguousarray(value)
            parts.append(array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes())
    body = b"".join(parts)
    return body + _trailer(body, key)


def decode(data, *, key=None, client=None, max_bytes=DEFAULT_MAX_MESSAGE_BYTES):
    """Parse and authenticate bytes made by :func:`encode`.

    Parameters
    ----------
    data : bytes-like
    key : bytes or str, default=None
        The key the sender must have used; ``None``: the sender must not
        have used one.
    client : hashable, default=None
        Who sent it, for error messages.
    max_bytes : int
        Refuse longer messages before reading them.

    Returns
    -------
    frame : Frame
        Arrays are read-only views of ``data`` (symmetric ones are unpacked).

    Raises
    ------
    InvalidClientMessage
        Naming ``client`` and what is wrong.
    """
    fail = failing(client)
    if not isinstance(data, (bytes, bytearray, memoryview)):
        fail(f"expected bytes, got {type(data).__name__}.")
    data = bytes(data)
    if len(data) > max_bytes:
        fail(f"message of {len(data)} bytes exceeds the limit of {max_bytes} bytes.")
    if len(data) < _HEADER.size + TRAILER_BYTES:
        fail(f"message is truncated ({len(data)} bytes is shorter than the fixed header).")
    magic, version, flags, meta_length = _HEADER.unpack_from(data)
    if magic != MAGIC:
        fail("not a sklearn-fed message (bad magic bytes).")
    if version != FORMAT_VERSION:
        fail(
            f"unsupported message format version {version} (this build reads version "
            f"{FORMAT_VERSION})."
        )
    if flags & ~_KNOWN_FLAGS:
        fail(f"unknown header flags {flags:#06x}.")
    if meta_length > MAX_META_BYTES or _HEADER.size + meta_length + TRAILER_BYTES > len(data):
        fail(f"metadata length {meta_length} does not fit in a {len(data)}-byte message.")
    key = _as_key(key)
    keyed = bool(flags & FLAG_KEYED)
    if keyed and key is None:
        fail("message is authenticated with a key, but no key is configured for this site.")
    if key is not None and not keyed:
        fail("message is not authenticated, but this site must sign its messages (key set).")
    body, trailer = data[:-TRAILER_BYTES], data[-TRAILER_BYTES:]
    if not hmac.compare_digest(_trailer(body, key), trailer):
        if keyed:
            fail("authentication failed (wrong key, or the message was truncated or altered).")
        fail("checksum mismatch (the message was truncated, altered or corrupted).")
    try:
        meta = json.loads(body[_HEADER.size : _HEADER.size + meta_length].decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        fail(f"metadata is not valid JSON ({exc}).")
    if not isinstance(meta, dict) or set(meta) != _META_KEYS:
        fail("metadata does not have the keys of a sklearn-fed message.")
    frame = _header_frame(meta, meta["site"], fail)
    frame.arrays = _read_arrays(meta["arrays"], body, _HEADER.size + meta_length, fail)
    return frame


def _header_frame(meta, site, fail, nested=""):
    """The frame of ``meta`` (a message's or a :func:`nest`-ed one's), its arrays not yet
    read, once the types of its header are checked; ``fail(reason)`` raises."""
    kind, federation, round_id = meta["kind"], meta["federation"], meta["round"]
    if not (isinstance(kind, str) and 0 < len(kind) <= 64):
        fail(f"{nested}message kind is missing or too long.")
    if not (isinstance(federation, str) and len(federation) == 32
            and all(c in "0123456789abcdef" for c in federation)):
        fail(f"{nested}federation id must be 32 hex digits.")
    if not (type(round_id) is int and 0 <= round_id < 2**63):
        fail(f"{nested}round id must be a non-negative integer, got {round_id!r}.")
    if not isinstance(meta["fields"], dict):
        fail(f"{nested}fields must be a JSON object.")
    return Frame(kind, federation, round_id, site, meta["schema"], meta["fields"])


def nest(frame, prefix, arrays):
    """The header and fields of ``frame``, its arrays added to ``arrays`` under ``prefix``.

    How a composite protocol (a pipeline) carries its steps' messages: the
    outer frame's fields hold the inner frame's header and fields, its arrays
    the inner frame's arrays under a prefix. The outer frame is what is
    authenticated and counted; :func:`unnest` rebuilds the inner one, which
    the step's own roles check, so a step validates its messages the same
    way inside a pipeline as alone.

    Parameters
    ----------
    frame : Frame
    prefix : str
        Distinct per nested frame of one message, e.g. ``"t."``.
    arrays : dict
        The outer frame's arrays.

    Returns
    -------
    meta : dict
        JSON value for the outer frame's fields.

    Examples
    --------
    >>> arrays = {}
    >>> meta = nest(Frame(kind="a/task", arrays={"x": np.zeros(2)}), "t.", arrays)
    >>> sorted(meta), list(arrays)
    (['federation', 'fields', 'kind', 'round', 'schema'], ['t.x'])
    >>> unnest(meta, arrays, "t.", site=3, fail=print).arrays["x"]
    array([0., 0.])
    """
    for name, value in frame.arrays.items():
        arrays[prefix + name] = value
    return {
        "kind": frame.kind,
        "federation": frame.federation,
        "round": int(frame.round),
        "schema": frame.schema,
        "fields": frame.fields,
    }


def unnest(meta, arrays, prefix, *, site, fail):
    """Rebuild a frame nested by :func:`nest`; ``fail(reason)`` raises on a malformed one.

    Only the types are checked here; the inner protocol's own role checks
    the rest (kind, federation, round, schema, fields and arrays).
    """
    if not (isinstance(meta, dict) and set(meta) == _NESTED_KEYS):
        fail("the nested message is malformed.")
    if not (meta["schema"] is None or isinstance(meta["schema"], dict)):
        fail("the nested schema is malformed.")
    frame = _header_frame(meta, site, fail, nested="the nested ")
    frame.arrays = {name[len(prefix):]: value for name, value in arrays.items()
                    if name.startswith(prefix)}
    return frame


def _pack_upper(matrix):
    """The upper triangle of ``matrix``, row by row, as little-endian float64 bytes.

    Row slices instead of ``triu_indices``: no index arrays twice the size
    of the triangle (this runs for every message a server reads).
    """
    d = matrix.shape[0]
    packed = np.empty(d * (d + 1) // 2, dtype="<f8")
    start = 0
    for i in range(d):
        packed[start : start + d - i] = matrix[i, i:]
        start += d - i
    return packed.tobytes()


def _unpack_upper(values, d):
    """The symmetric ``d x d`` matrix whose upper triangle ``values`` holds row by row."""
    matrix = np.empty((d, d))
    start = 0
    for i in range(d):
        matrix[i, i:] = values[start : start + d - i]
        matrix[i:, i] = values[start : start + d - i]
        start += d - i
    return matrix


def _read_arrays(table, body, offset, fail):
    """Views of the payload's arrays; every size is checked before any is read."""
    if not isinstance(table, list):
        fail("array table must be a list.")
    specs, total = [], 0
    for entry in table:
        if not (isinstance(entry, list) and len(entry) == 4):
            fail("malformed array table entry.")
        name, dtype, shape, layout = entry
        if not (isinstance(name, str) and 0 < len(name) <= 64) or any(s[0] == name for s in specs):
            fail(f"bad or repeated array name {name!r}.")
        if dtype not in WIRE_DTYPES:
            fail(f"array {name!r} has an unsupported dtype {dtype!r}.")
        if not (
            isinstance(shape, list)
            and len(shape) <= _MAX_NDIM
            and all(type(s) is int and 0 <= s < 2**40 for s in shape)
            and math.prod(s for s in shape if s) < 2**40  # numpy must be able to shape it
        ):
            fail(f"array {name!r} has a malformed shape {shape!r}.")
        if layout == "sym":
            if dtype != "<f8" or len(shape) != 2 or shape[0] != shape[1]:
                fail(f"symmetric array {name!r} must be a float64 square matrix.")
            count = shape[0] * (shape[0] + 1) // 2
        elif layout == "":
            count = math.prod(shape)
        else:
            fail(f"array {name!r} has an unknown layout {layout!r}.")
        size = count * np.dtype(dtype).itemsize
        specs.append((name, dtype, shape, layout, count))
        total += size
        if offset + total > len(body):
            fail(
                f"array {name!r} declares {size} bytes, more than the message holds "
                "(truncated message or forged shape)."
            )
    if offset + total != len(body):
        fail(
            f"payload has {len(body) - offset} bytes but the array table declares {total} "
            "(padded or truncated message)."
        )
    arrays = {}
    for name, dtype, shape, layout, count in specs:
        values = np.frombuffer(body, dtype=dtype, count=count, offset=offset)
        offset += values.nbytes
        if layout == "sym":
            arrays[name] = _unpack_upper(values, shape[0])
        else:
            arrays[name] = values.reshape(shape)
    return arrays
