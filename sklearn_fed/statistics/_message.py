"""The statistics message: :class:`ClientStatistics`, computed, merged, serialized.

Its two forms (Gram and factor), and why they are computed as they are, are
told in the docstring of :mod:`sklearn_fed.statistics`. The row kernels are
in :mod:`~sklearn_fed.statistics._kernels`, the checks of an untrusted
message in :mod:`~sklearn_fed.statistics._validation`. Also here: many
messages merged along a balanced tree, which keeps round-off at O(log K), as
they stream in (:func:`merge_statistics`, :class:`StreamingMerge`), and the
reader of the format-1 message of sklearn-fed 0.1.
"""

import dataclasses
import hashlib
import hmac
import math
import struct
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from ..protocol._errors import InvalidClientMessage, failing
from ..protocol._errors import who as _who
from ..protocol._schema import check_site_data, count_rows
from ..protocol._wire import Frame, SymmetricMatrix, _unpack_upper, decode, encode
from ._inplace import _update_by_outer, upper_mask
from ._kernels import (
    _chan_statistics,
    _DenseRows,
    _factor_statistics,
    _shifted_statistics,
    _sparse_statistics,
    _triangular_factor,
)
from ._validation import _ARRAYS, _FACTOR_ARRAYS, validate_statistics

__all__ = ["FORMS", "STATISTICS_KIND", "ClientStatistics", "StreamingMerge", "merge_statistics"]

#: Message kind of a statistics reply (the payload of :class:`ClientStatistics`).
STATISTICS_KIND = "ridge.statistics/reply"
_FIELDS = {"n_samples", "weight_sum", "centered", "single_target"}
_FACTOR_FIELDS = _FIELDS | {"factor_rows"}
#: Values of ``ClientStatistics.form``.
FORMS = ("gram", "factor")


class _FactorProduct:
    """A Gram-form field (``gram``, ``moment`` or ``target_ss``) of :class:`ClientStatistics`.

    Statistics in factor form compute all three from ``R^T R`` on first use
    (a server merging factors never needs them); the values are cached but
    not pickled, so reading them does not change a fitted estimator's state.
    """

    def __set_name__(self, owner, name):
        self.slot = "_" + name

    def __get__(self, stats, owner=None):
        if stats is None:
            return None  # the dataclass default: not given
        value = stats.__dict__.get(self.slot)
        if value is None and stats.__dict__.get("factor") is not None:
            d, products = stats.n_features, stats.factor.T @ stats.factor  # all three at once
            stats.__dict__.update(
                _gram=np.ascontiguousarray(products[:d, :d]),
                _moment=np.ascontiguousarray(products[:d, d:]),
                _target_ss=np.maximum(np.diag(products)[d:].copy(), 0.0))
            value = stats.__dict__[self.slot]
        return value

    def __set__(self, stats, value):
        # __init__ passes the field's default, this descriptor, when not given.
        stats.__dict__[self.slot] = None if isinstance(value, _FactorProduct) else value


@dataclass(eq=False)
class ClientStatistics:
    """Sufficient statistics of one client's rows for ridge regression.

    With ``centered=True`` (used when an intercept is fitted) the matrices are
    taken around the client's weighted means; with ``centered=False`` they are
    the raw weighted products. ``sw`` is the sample weight of each row.

    The statistics come in one of two forms (see :mod:`sklearn_fed.statistics`):
    the *Gram form* holds ``gram``, ``moment`` and ``target_ss``; the *factor
    form* holds ``factor``, and ``gram``, ``moment`` and ``target_ss`` are
    computed from it when read.

    Parameters
    ----------
    n_samples : int
        Number of rows.
    weight_sum : float
        ``W = sum(sw)``.
    x_mean : ndarray of shape (n_features,)
        Weighted feature means.
    y_mean : ndarray of shape (n_targets,)
        Weighted target means.
    gram : ndarray of shape (n_features, n_features)
        ``sum(sw * (x - x_mean)(x - x_mean)^T)`` (raw ``X^T diag(sw) X`` when not
        centered). Symmetric; only its upper triangle travels.
    moment : ndarray of shape (n_features, n_targets)
        ``sum(sw * (x - x_mean)(y - y_mean)^T)`` (raw ``X^T diag(sw) y``).
    target_ss : ndarray of shape (n_targets,)
        ``sum(sw * (y - y_mean)^2)`` per target (raw ``sum(sw * y^2)``).
    centered : bool
        Whether the statistics are centered.
    single_target : bool
        Whether ``y`` was one-dimensional.
    factor : ndarray of shape (n_rows, n_features + n_targets), default=None
        Factor form: an upper trapezoidal ``R`` with ``R^T R`` equal to the
        (centered) products of the sqrt-weighted rows ``[x, y]``, i.e.
        ``[[gram, moment], [moment^T, Y^T Y]]``; ``n_rows`` is at most
        ``n_features + n_targets`` (fewer for clients with fewer rows). Give
        either ``factor`` or ``gram``, ``moment`` and ``target_ss`` (given
        both, as ``dataclasses.replace`` does, the statistics are in Gram form).

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_fed.statistics import ClientStatistics
    >>> X = np.array([[1.0, 2.0], [3.0, 5.0], [4.0, 4.0]])
    >>> y = np.array([1.0, 2.0, 4.0])
    >>> stats = ClientStatistics.from_data(X, y)
    >>> stats.x_mean
    array([2.66666667, 3.66666667])
    >>> message = stats.to_bytes()
    >>> len(message) == stats.nbytes
    True
    >>> ClientStatistics.from_bytes(message).gram
    array([[4.66666667, 3.66666667],
           [3.66666667, 4.66666667]])
    >>> factored = ClientStatistics.from_data(X, y, factor=True)
    >>> factored.form, factored.factor.shape
    ('factor', (2, 3))
    >>> bool(np.allclose(factored.gram, stats.gram))
    True
    """

    n_samples: int
    weight_sum: float
    x_mean: np.ndarray
    y_mean: np.ndarray
    gram: np.ndarray = field(default=_FactorProduct(), repr=False)
    moment: np.ndarray = field(default=_FactorProduct(), repr=False)
    target_ss: np.ndarray = field(default=_FactorProduct(), repr=False)
    centered: bool = True
    single_target: bool = True
    factor: np.ndarray = field(default=None, repr=False)

    def __post_init__(self):
        given = self.__dict__
        if (given["_gram"] is not None and given["_moment"] is not None
                and given["_target_ss"] is not None):
            # Given both (e.g. by dataclasses.replace of a factor form, which passes
            # the products read from the factor): the given products win.
            self.factor = None
        elif self.factor is None:
            raise ValueError("ClientStatistics needs gram, moment and target_ss, or factor.")

    @property
    def n_features(self):
        return self.x_mean.shape[0]

    @property
    def n_targets(self):
        return self.y_mean.shape[0]

    @property
    def form(self):
        """``"factor"`` when the statistics hold ``factor``, else ``"gram"``."""
        return "gram" if self.factor is None else "factor"

    def __getstate__(self):
        state = dict(self.__dict__)
        if self.factor is not None:  # derived, recomputed on demand
            for name in ("_gram", "_moment", "_target_ss"):
                state.pop(name, None)
        return state

    def to_gram_form(self):
        """The same statistics in Gram form (``self`` if already in it)."""
        return self if self.factor is None else dataclasses.replace(self)

    # ------------------------------------------------------------------ compute
    @classmethod
    def from_data(cls, X, y, sample_weight=None, *, centered=True, rows=None, factor=False,
                  check_input=True):
        """Compute the statistics of one client's rows.

        Parameters
        ----------
        X : {array-like, sparse matrix, DataFrame} of shape (n_samples, n_features)
            Features; float32 is accepted, statistics are accumulated in
            float64. Sparse input is never densified as a whole (the factor
            form, and centering columns with offsets, densify one block of
            rows at a time).
        y : array-like of shape (n_samples,) or (n_samples, n_targets), or None
            Targets. ``None``: no targets (``n_targets == 0``), for models of
            ``X`` alone such as PCA; such statistics are read back only by a
            server that asks for ``n_targets=0``.
        sample_weight : ndarray of shape (n_samples,), default=None
            Non-negative row weights; ``None`` means all ones.
        centered : bool, default=True
            Center around the weighted means (needed to fit an intercept).
        rows : slice or ndarray of int, default=None
            Use only these rows of ``X``, ``y`` and ``sample_weight``. Dense rows
            are then gathered block by block, so a client's rows are never
            copied out of a shared ``X`` as a whole.
        factor : bool, default=False
            Return the factor form (a QR of the rows, about twice the
            floating-point work of the Gram form) instead of the Gram form.
        check_input : bool, default=True
            Validate the inputs like scikit-learn does (lists, DataFrames and
            Series are converted; 1-D ``X``, NaN or infinity, mismatched
            lengths and negative weights raise ``ValueError``). Set to False
            only for rows already validated (as ``fit`` does once for all).

        Returns
        -------
        stats : ClientStatistics
        """
        if check_input:
            X, y, sample_weight, _ = check_site_data(X, y, sample_weight)
        if y is None:  # no targets: the weighted mean and centered Gram of X alone
            y = np.empty((X.shape[0], 0))
        y = np.asarray(y)
        single_target = y.ndim == 1
        y2 = y.reshape(y.shape[0], -1)
        rows = slice(0, X.shape[0]) if rows is None else rows
        if sample_weight is not None:
            sample_weight = np.asarray(sample_weight, dtype=np.float64)
            if np.any(sample_weight[rows] < 0):
                raise ValueError("sample_weight must be non-negative.")
        n_samples = count_rows(X.shape[0], rows)
        if factor:
            weight_sum, mean, triangle = _factor_statistics(X, y2, sample_weight, centered, rows)
            d = X.shape[1]
            return cls(n_samples, weight_sum, mean[:d], mean[d:], centered=centered,
                       single_target=single_target, factor=triangle)
        if sp.issparse(X):
            X = sp.csr_matrix(X)
            sw = None if sample_weight is None else sample_weight[rows]
            parts = _sparse_statistics(X[rows], y2[rows], sw, centered)
            if parts is None:  # offsets: centering the products would cancel digits
                parts = _chan_statistics(_DenseRows(X), y2, sample_weight, centered, rows)
        else:  # unweighted rows in one pass, unless a single shift would cancel digits
            parts = None
            if sample_weight is None and isinstance(X, np.ndarray):
                parts = _shifted_statistics(X, y2, centered, rows)
            if parts is None:
                parts = _chan_statistics(X, y2, sample_weight, centered, rows)
        return cls(n_samples, *parts, centered=centered, single_target=single_target)

    # -------------------------------------------------------------------- merge
    def merge(self, other):
        """Statistics of the union of both clients' rows (a new object).

        Centered statistics are combined with the pairwise update of Chan et al.,
        raw ones by plain addition; either way the result is exact. Two factor
        forms give a factor form (the ``R`` of a QR of both factors and the
        mean-shift row); if either is in Gram form, so is the result.
        """
        return self._merge(other, reuse=False)

    def _merge(self, other, *, reuse):
        """:meth:`merge`; with ``reuse``, the result takes over ``self``'s Gram and
        adds ``other``'s into it in place (same bits, no d x d allocation): only for
        a ``self`` that nothing else will read."""
        for what, a, b in (("features", self.n_features, other.n_features),
                           ("targets", self.n_targets, other.n_targets)):
            if a != b:
                raise ValueError(f"cannot merge statistics with {a} and {b} {what}.")
        if self.centered != other.centered:
            raise ValueError("cannot merge centered with uncentered statistics.")
        wa, wb = self.weight_sum, other.weight_sum
        w = wa + wb
        if w > 0:
            x_mean = self.x_mean + (wb / w) * (other.x_mean - self.x_mean)
            y_mean = self.y_mean + (wb / w) * (other.y_mean - self.y_mean)
        else:
            x_mean, y_mean = self.x_mean.copy(), self.y_mean.copy()
        shifted = self.centered and wa > 0 and wb > 0
        scale = wa * wb / w if shifted else 0.0
        dx = other.x_mean - self.x_mean
        dy = other.y_mean - self.y_mean
        common = {"centered": self.centered, "single_target": self.single_target}
        if self.factor is not None and other.factor is not None:
            parts = [self.factor, other.factor]
            if shifted:
                parts.append(np.sqrt(scale) * np.concatenate([dx, dy])[None, :])
            triangle = _triangular_factor(np.vstack(parts))
            return type(self)(self.n_samples + other.n_samples, w, x_mean, y_mean,
                              factor=triangle, **common)
        gram = np.add(self.gram, other.gram, out=self.gram if reuse else None)
        moment = self.moment + other.moment
        target_ss = self.target_ss + other.target_ss
        if shifted:  # scale * (dx_i dx_j) keeps the symmetry bit for bit
            _update_by_outer(gram, dx, dx, np.multiply, scale, np.add)
            moment += scale * np.outer(dx, dy)
            target_ss += scale * dy * dy
        return type(self)(
            self.n_samples + other.n_samples, w, x_mean, y_mean, gram, moment, target_ss,
            **common,
        )

    # -------------------------------------------------------------- serialize
    def to_payload(self):
        """``(fields, arrays)`` of the statistics message (see :mod:`sklearn_fed.protocol`).

        Gram form: the fields ``n_samples``, ``weight_sum``, ``centered``,
        ``single_target`` and the float64 arrays ``x_mean``, ``y_mean``,
        ``gram`` (a :class:`~sklearn_fed.protocol.SymmetricMatrix`),
        ``moment`` and ``target_ss``. Factor form: the same fields plus
        ``factor_rows`` (the number of rows ``p`` of ``R``), and the arrays
        ``x_mean``, ``y_mean`` and ``factor``, the upper trapezoid of ``R``
        packed row by row (``p (d + t) - p (p - 1) / 2`` values).
        """
        fields = {
            "n_samples": int(self.n_samples),
            "weight_sum": float(self.weight_sum),
            "centered": bool(self.centered),
            "single_target": bool(self.single_target),
        }
        arrays = {
            "x_mean": np.asarray(self.x_mean, dtype=np.float64),
            "y_mean": np.asarray(self.y_mean, dtype=np.float64),
        }
        if self.factor is not None:
            fields["factor_rows"] = int(self.factor.shape[0])
            arrays["factor"] = _pack_trapezoid(self.factor)
            return fields, arrays
        arrays.update(
            gram=SymmetricMatrix(self.gram),
            moment=np.asarray(self.moment, dtype=np.float64),
            target_ss=np.asarray(self.target_ss, dtype=np.float64),
        )
        return fields, arrays

    @classmethod
    def from_payload(cls, fields, arrays, *, client=None, validate=True, psd=True,
                     n_features=None, n_targets=None):
        """Statistics from a message's fields and arrays; untrusted, so checked.

        Accepts both forms (see :meth:`to_payload`). ``n_features``: the
        number of features the server expects (``None``: any);
        ``n_targets``: the number of targets it expects (``0`` for
        statistics of ``X`` alone); ``None`` accepts any positive number.

        Raises
        ------
        InvalidClientMessage
            Naming ``client``, when a field or array is missing, of the wrong
            type or shape, or when :meth:`validate` fails.
        """
        fail = failing(client)
        if not (isinstance(fields, dict) and isinstance(arrays, dict)):
            fail("statistics must be a mapping of fields and a mapping of arrays.")
        factored = "factor" in arrays
        names = _FACTOR_ARRAYS if factored else _ARRAYS
        expected_fields = _FACTOR_FIELDS if factored else _FIELDS
        if fields.keys() != expected_fields:
            fail(f"statistics fields must be {sorted(expected_fields)}; got {sorted(fields)}.")
        if arrays.keys() != set(names):
            fail(f"statistics arrays must be {list(names)}; got {sorted(arrays)}.")
        # The count, the flags and the dimensions are checked by validate; the weight
        # sum's type here, before it is read as a float.
        n_samples, weight_sum = fields["n_samples"], fields["weight_sum"]
        if not (type(weight_sum) in (int, float) and math.isfinite(weight_sum)):
            fail(f"weight_sum must be a finite number, got {weight_sum!r}.")
        values = {}
        # A Gram handed over in process as a SymmetricMatrix is symmetric by construction.
        symmetric = isinstance(arrays.get("gram"), SymmetricMatrix)
        for name in names:
            array = arrays[name]
            if isinstance(array, SymmetricMatrix):  # handed over in process, not packed
                array = array.matrix
            if not (isinstance(array, np.ndarray) and array.dtype == np.float64):
                fail(f"{name} must be a float64 array.")
            values[name] = array
        # ndim first: a 0-d array has no shape[0] (an IndexError would name no site)
        if values["x_mean"].ndim != 1 or values["y_mean"].ndim != 1:
            fail("x_mean and y_mean must be non-empty vectors.")
        d, t = values["x_mean"].shape[0], values["y_mean"].shape[0]
        if factored:
            p, packed = fields["factor_rows"], values["factor"]
            if not (type(p) is int and 0 <= p <= d + t):
                fail(f"factor_rows must be an integer in [0, {d + t}], got {p!r}.")
            if packed.shape != (_trapezoid_size(p, d + t),):
                fail(f"factor has shape {packed.shape}, expected "
                     f"({_trapezoid_size(p, d + t)},) for {p} rows of {d + t} columns.")
            values["factor"] = _unpack_trapezoid(packed, p, d + t)
        stats = cls(n_samples, float(weight_sum), **values, centered=fields["centered"],
                    single_target=fields["single_target"])
        if validate:
            validate_statistics(stats, client, n_features, n_targets, psd, symmetric=symmetric)
        return stats

    @property
    def nbytes(self):
        """Size in bytes of :meth:`to_bytes`."""
        return self._frame().nbytes

    def _frame(self):
        fields, arrays = self.to_payload()
        schema = {"n_features": self.n_features, "names": None,
                  "n_targets": self.n_targets, "dtype": "float64"}
        return Frame(kind=STATISTICS_KIND, schema=schema, fields=fields, arrays=arrays)

    def to_bytes(self, key=None):
        """Serialize as a statistics message in the common wire format (no pickle).

        The frame (see :mod:`sklearn_fed.protocol`) has kind
        ``"ridge.statistics/reply"``, the fields ``n_samples``, ``weight_sum``,
        ``centered``, ``single_target`` and the float64 arrays ``x_mean``,
        ``y_mean``, ``gram`` (packed upper triangle), ``moment`` and
        ``target_ss``. It is not bound to a federation or round: inside a
        federation, sites answer tasks with :meth:`Client.respond
        <sklearn_fed.protocol.Client.respond>` instead.

        Parameters
        ----------
        key : bytes, default=None
            Authenticate with HMAC-SHA256 under this shared key.
        """
        return encode(self._frame(), key=key)

    @classmethod
    def from_bytes(cls, data, *, client=None, validate=True, key=None):
        """Parse (and by default validate) a message made by :meth:`to_bytes`.

        Format-1 messages (magic ``SKFEDSTA``, written by sklearn-fed 0.1)
        are still read.

        Parameters
        ----------
        data : bytes-like
            The message.
        client : hashable, default=None
            Label used in error messages.
        validate : bool, default=True
            Run :meth:`validate` on the parsed statistics.
        key : bytes, default=None
            The shared key the message must be authenticated with.

        Raises
        ------
        InvalidClientMessage
            If the message is truncated, corrupted, of an unknown version, or
            fails validation. Nothing is returned from a bad message.
        """
        if isinstance(data, (bytes, bytearray, memoryview)) and bytes(data[:8]) == _V1_MAGIC:
            return _from_v1_bytes(cls, bytes(data), client=client, validate=validate)
        frame = decode(data, key=key, client=client)
        if frame.kind != STATISTICS_KIND:
            raise InvalidClientMessage(
                f"{_who(client)}: expected a statistics message, got {frame.kind!r}.", client
            )
        return cls.from_payload(frame.fields, frame.arrays, client=client, validate=validate)

    # --------------------------------------------------------------- validate
    def validate(self, *, client=None, n_features=None, n_targets=None, psd=True):
        """Check that the statistics could have come from real rows.

        Messages are untrusted, so every check a server relies on is here:
        types (real float64 arrays, integer count), shapes (and, if given,
        ``n_features`` and ``n_targets``), a positive row count and a
        non-negative weight sum, finite values within the magnitude caps that
        make merging and solving overflow-free, symmetry, non-negative
        diagonals and target sums of squares, the Cauchy-Schwarz bounds
        ``gram_ij^2 <= gram_ii gram_jj`` and ``moment_ij^2 <= gram_ii
        target_ss_j``, zero second moments when the weight is zero (or, for
        centered statistics, when there is one row), and with ``psd`` positive
        semi-definiteness of ``gram``. Statistics without targets are valid
        only when ``n_targets=0`` is asked for.

        Everything but ``psd`` costs O(d^2). The PSD test is made on the
        Jacobi-scaled Gram (unit diagonal), so its tolerance is relative to
        each pair of features and cannot be loosened by one large entry;
        servers run it once on the merged statistics instead of per message
        (see :func:`check_aggregate`).

        Returns
        -------
        self : ClientStatistics

        Raises
        ------
        InvalidClientMessage
            Naming the client and the first check that failed.
        """
        return validate_statistics(self, client, n_features, n_targets, psd,
                                   symmetric=False)


# ------------------------------------------------- many messages along one tree
def merge_statistics(statistics):
    """Merge any number of client statistics (pairwise tree, exact).

    Parameters
    ----------
    statistics : iterable of ClientStatistics or of ColumnMoments
        At least one.

    Returns
    -------
    merged : ClientStatistics or ColumnMoments

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_fed.statistics import ClientStatistics, merge_statistics
    >>> rng = np.random.default_rng(0)
    >>> X, y = rng.normal(size=(30, 3)), rng.normal(size=30)
    >>> parts = [ClientStatistics.from_data(X[i::3], y[i::3]) for i in range(3)]
    >>> whole = ClientStatistics.from_data(X, y)
    >>> np.allclose(merge_statistics(parts).gram, whole.gram)
    True
    """
    merger = StreamingMerge()
    for stats in statistics:
        merger.add(stats)
    if not merger:
        raise ValueError("merge_statistics needs at least one ClientStatistics.")
    return merger.result()


class StreamingMerge:
    """:func:`merge_statistics` fed one message at a time: the same tree, the same bits.

    A balanced tree keeps round-off at O(log K). It is built as a binary
    counter over the stream: at most log2(K) partial merges are held at
    once, so a server can fold each message as soon as it has read it
    instead of holding all K.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_fed.statistics import ClientStatistics, StreamingMerge
    >>> rng = np.random.default_rng(0)
    >>> X, y = rng.normal(size=(30, 3)), rng.normal(size=30)
    >>> merger = StreamingMerge()
    >>> for i in range(3):
    ...     merger.add(ClientStatistics.from_data(X[i::3], y[i::3]))
    >>> parts = [ClientStatistics.from_data(X[i::3], y[i::3]) for i in range(3)]
    >>> bool(np.array_equal(merger.result().gram, merge_statistics(parts).gram))
    True
    """

    def __init__(self, *, owned=False):
        self._pending = []  # (number of messages, their merge), sizes decreasing
        self._done = False
        # Partial merges are always the stream's own; the messages only if ``owned``
        # (a server's freshly parsed replies): then a pair merges into the first.
        self._owned = owned
        self._count = 0

    def __len__(self):
        """Number of partial merges held (0 before the first message)."""
        return len(self._pending)

    def add(self, stats):
        """Fold the next message (in the order the merge must follow)."""
        if self._done:
            raise ValueError("StreamingMerge.add after result(): the stream has ended.")
        self._count += 1
        size = 1
        while self._pending and self._pending[-1][0] == size:
            stats = _merge_pair(self._pending.pop()[1], stats, own=size > 1 or self._owned)
            size *= 2
        self._pending.append((size, stats))

    @property
    def owns_result(self):
        """Whether no one else holds the arrays of :meth:`result`: a merge of two or more
        messages, or an ``owned`` message (so its Gram may lend work space)."""
        return self._owned or self._count > 1

    def result(self):
        """The merge of every message added; ends the stream (the partial merges are freed)."""
        if not self._pending:
            raise ValueError("StreamingMerge.result needs at least one message.")
        merged = self._pending.pop()[1]
        while self._pending:
            size, first = self._pending.pop()
            merged = _merge_pair(first, merged, own=size > 1 or self._owned)
        self._pending, self._done = [(None, merged)], True
        return merged


def _merge_pair(first, second, *, own):
    """``first.merge(second)``; when ``first`` is the caller's ``own`` (read by no one
    else), its Gram takes ``second``'s in place: no d x d allocation."""
    if own and isinstance(first, ClientStatistics) and first.gram.flags.writeable:
        return first._merge(second, reuse=True)
    return first.merge(second)


def _trapezoid_size(n_rows, n_cols):
    """Number of entries on or above the diagonal of an (n_rows, n_cols) matrix."""
    return n_rows * n_cols - n_rows * (n_rows - 1) // 2


def _pack_trapezoid(factor):
    """The upper trapezoid of ``factor``, row by row, as one float64 vector.

    (A boolean mask selects in row-major order, as ``np.triu_indices`` lists.)
    """
    return np.ascontiguousarray(factor[upper_mask(*factor.shape)], dtype=np.float64)


def _unpack_trapezoid(packed, n_rows, n_cols):
    factor = np.zeros((n_rows, n_cols))
    factor[upper_mask(n_rows, n_cols)] = packed
    return factor


# Format 1 (sklearn-fed 0.1, before the common framing of sklearn_fed.protocol): a
# fixed header, the float64 values and a SHA-256 checksum. Still read, so that
# statistics saved by earlier releases stay usable; nothing writes it any more.
_V1_MAGIC = b"SKFEDSTA"
_V1_VERSION = 1
# magic, version, flags, n_features, n_targets, n_samples, weight_sum
_V1_HEADER = struct.Struct("<8sHHIIQd")
_V1_CHECKSUM_BYTES = 32  # SHA-256 of header and payload
_V1_FLAG_CENTERED = 1
_V1_FLAG_SINGLE_TARGET = 2
_V1_FLAGS = _V1_FLAG_CENTERED | _V1_FLAG_SINGLE_TARGET
_MAX_FEATURES = 2**20  # refuse to even size a message that claims more


def _from_v1_bytes(cls, data, *, client, validate):
    """A format-1 message (``data`` starts with ``_V1_MAGIC``) read as ``cls``.

    ``cls`` is :class:`~sklearn_fed.statistics.ClientStatistics` (or a subclass);
    the statistics are validated when ``validate`` is true.

    Raises
    ------
    InvalidClientMessage
        Naming ``client``: a truncated or padded message, an unknown version
        or flag, an implausible shape, a checksum mismatch, or invalid statistics.
    """
    fail = failing(client)
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
    stats = cls(int(n_samples), float(weight_sum), x_mean, y_mean, _unpack_upper(packed, d),
                moment.reshape(d, t), target_ss, centered=bool(flags & _V1_FLAG_CENTERED),
                single_target=bool(flags & _V1_FLAG_SINGLE_TARGET))
    if validate:
        stats.validate(client=client)
    return stats
