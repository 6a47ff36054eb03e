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
"""

import dataclasses
import hashlib
import hmac
import math
import struct
import threading
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
from scipy import linalg
from scipy.linalg.lapack import get_lapack_funcs

from ._clients import count_rows
from ._compat import _get_mask
from .protocol._errors import InvalidClientMessage, who as _who
from .protocol._schema import check_site_data
from .protocol._wire import Frame, SymmetricMatrix, decode, encode

__all__ = [
    "ClientStatistics",
    "ColumnMoments",
    "InvalidClientMessage",
    "StreamingMerge",
    "check_aggregate",
    "merge_statistics",
    "most_extreme_client",
]

#: Message kind of a statistics reply (the payload of :class:`ClientStatistics`).
STATISTICS_KIND = "ridge.statistics/reply"
_ARRAYS = ("x_mean", "y_mean", "gram", "moment", "target_ss")
_FACTOR_ARRAYS = ("x_mean", "y_mean", "factor")
_FIELDS = {"n_samples", "weight_sum", "centered", "single_target"}
#: Values of ``ClientStatistics.form``.
FORMS = ("gram", "factor")

# Rows per block are chosen so one centered float64 block takes about this much
# memory: large enough for BLAS to run at full speed, small next to X.
_BLOCK_BYTES = 2 * 2**20

# The format-1 message (before the common framing of sklearn_fed.protocol): still
# read by from_bytes so that statistics saved by earlier releases stay usable.
_V1_MAGIC = b"SKFEDSTA"
_V1_VERSION = 1
# magic, version, flags, n_features, n_targets, n_samples, weight_sum
_V1_HEADER = struct.Struct("<8sHHIIQd")
_V1_CHECKSUM_BYTES = 32  # SHA-256 of header and payload
_V1_FLAG_CENTERED = 1
_V1_FLAG_SINGLE_TARGET = 2
_V1_FLAGS = _V1_FLAG_CENTERED | _V1_FLAG_SINGLE_TARGET
_MAX_FEATURES = 2**20  # refuse to even size a message that claims more
_workspace = threading.local()

# Magnitude caps of a message. No real data comes near them, and they make the
# server safe: merging up to 2**32 messages (Chan terms <= W * (2 * mean)^2 <=
# 4.3e84 * 4e150) and solving cannot overflow float64 (max ~1.8e308).
_MAX_MEAN = 1e75
_MAX_WEIGHT = 1e75
_MAX_SECOND = 1e200
# Relative round-off allowed in a computed Gram entry (far above what a
# blocked float64 computation loses, far below any real inconsistency).
_RELATIVE_SLACK = 1e-6
# Round-off allowed in a centered entry relative to its raw (uncentered) scale:
# thousands of times what blocked float64 sums lose, a billionth of any real signal.
_ROUNDOFF = 1e-12
_TINY = 1e-300
# A Gram is accepted as PSD when its Jacobi-scaled form (unit diagonal) plus
# this times the identity has a Cholesky factor.
_PSD_TOLERANCE = 1e-7


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
            stats._expand_factor()
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

    The statistics come in one of two forms (see the module docstring):
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
        gram_form = [self.__dict__.get(f"_{name}") is not None for name in _ARRAYS[2:]]
        if all(gram_form):
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

    def _expand_factor(self):
        """Fill the Gram-form fields from ``R^T R`` (one product)."""
        d = self.n_features
        products = self.factor.T @ self.factor
        self.__dict__["_gram"] = np.ascontiguousarray(products[:d, :d])
        self.__dict__["_moment"] = np.ascontiguousarray(products[:d, d:])
        self.__dict__["_target_ss"] = np.maximum(np.diag(products)[d:].copy(), 0.0)

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
                parts = _dense_statistics(_DenseRows(X), y2, sample_weight, centered, rows)
        else:
            parts = _dense_statistics(X, y2, sample_weight, centered, rows)
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
        _check_compatible(self, other)
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
        common = dict(centered=self.centered, single_target=self.single_target)
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
                     n_targets=None):
        """Statistics from a message's fields and arrays; untrusted, so checked.

        Accepts both forms (see :meth:`to_payload`). ``n_targets``: the
        number of targets the server expects (``0`` for statistics of ``X``
        alone); ``None`` accepts any positive number.

        Raises
        ------
        InvalidClientMessage
            Naming ``client``, when a field or array is missing, of the wrong
            type or shape, or when :meth:`validate` fails.
        """
        who = _who(client)

        def fail(reason):
            raise InvalidClientMessage(f"{who}: {reason}", client)

        if not (isinstance(fields, dict) and isinstance(arrays, dict)):
            fail("statistics must be a mapping of fields and a mapping of arrays.")
        factored = "factor" in arrays
        names = _FACTOR_ARRAYS if factored else _ARRAYS
        expected_fields = _FIELDS | {"factor_rows"} if factored else _FIELDS
        if set(fields) != expected_fields:
            fail(f"statistics fields must be {sorted(expected_fields)}; got {sorted(fields)}.")
        if set(arrays) != set(names):
            fail(f"statistics arrays must be {list(names)}; got {sorted(arrays)}.")
        n_samples, weight_sum = fields["n_samples"], fields["weight_sum"]
        if not (type(n_samples) is int and 0 < n_samples < 2**63):
            fail(f"n_samples must be a positive integer, got {n_samples!r}.")
        if not (type(weight_sum) in (int, float) and math.isfinite(weight_sum)):
            fail(f"weight_sum must be a finite number, got {weight_sum!r}.")
        if not all(type(fields[k]) is bool for k in ("centered", "single_target")):
            fail("centered and single_target must be booleans.")
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
        d, t = values["x_mean"].shape[0], values["y_mean"].shape[0]
        if values["x_mean"].ndim != 1 or values["y_mean"].ndim != 1 or not (
            0 < d and (0 < t or n_targets == 0)
        ):
            fail("x_mean and y_mean must be non-empty vectors.")
        if fields["single_target"] and t != 1:
            fail(f"declares a single target but has {t}.")
        common = dict(centered=fields["centered"], single_target=fields["single_target"])
        if factored:
            p, packed = fields["factor_rows"], values["factor"]
            if not (type(p) is int and 0 <= p <= d + t):
                fail(f"factor_rows must be an integer in [0, {d + t}], got {p!r}.")
            if packed.shape != (_trapezoid_size(p, d + t),):
                fail(f"factor has shape {packed.shape}, expected "
                     f"({_trapezoid_size(p, d + t)},) for {p} rows of {d + t} columns.")
            stats = cls(n_samples, float(weight_sum), values["x_mean"], values["y_mean"],
                        factor=_unpack_trapezoid(packed, p, d + t), **common)
        else:
            stats = cls(
                n_samples,
                float(weight_sum),
                values["x_mean"],
                values["y_mean"],
                values["gram"],
                values["moment"],
                values["target_ss"],
                **common,
            )
        if validate:
            stats._validate(client, None, n_targets, psd, symmetric=symmetric)
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
            return cls._from_v1_bytes(bytes(data), client=client, validate=validate)
        frame = decode(data, key=key, client=client)
        if frame.kind != STATISTICS_KIND:
            raise InvalidClientMessage(
                f"{_who(client)}: expected a statistics message, got {frame.kind!r}.", client
            )
        return cls.from_payload(frame.fields, frame.arrays, client=client, validate=validate)

    @classmethod
    def _from_v1_bytes(cls, data, *, client, validate):
        who = _who(client)
        if len(data) < _V1_HEADER.size + _V1_CHECKSUM_BYTES:
            raise InvalidClientMessage(
                f"{who}: message is truncated ({len(data)} bytes is shorter than "
                "the fixed header).",
                client,
            )
        magic, version, flags, d, t, n_samples, weight_sum = _V1_HEADER.unpack_from(data)
        if version != _V1_VERSION or flags & ~_V1_FLAGS:
            raise InvalidClientMessage(
                f"{who}: unsupported statistics message (version {version}, flags "
                f"{flags:#x}).",
                client,
            )
        if not (0 < d <= _MAX_FEATURES and 0 < t <= _MAX_FEATURES):
            raise InvalidClientMessage(
                f"{who}: implausible shape n_features={d}, n_targets={t}.", client
            )
        n_values = d + t + d * (d + 1) // 2 + d * t + t
        expected = _V1_HEADER.size + 8 * n_values + _V1_CHECKSUM_BYTES
        if len(data) != expected:
            raise InvalidClientMessage(
                f"{who}: message has {len(data)} bytes but its header announces "
                f"{expected} (truncated or padded).",
                client,
            )
        body, checksum = data[:-_V1_CHECKSUM_BYTES], data[-_V1_CHECKSUM_BYTES:]
        if not hmac.compare_digest(hashlib.sha256(body).digest(), checksum):
            raise InvalidClientMessage(
                f"{who}: checksum mismatch (the message was altered or corrupted).",
                client,
            )
        values = np.frombuffer(body, dtype="<f8", offset=_V1_HEADER.size).astype(np.float64)
        sizes = np.cumsum([d, t, d * (d + 1) // 2, d * t])
        x_mean, y_mean, packed, moment, target_ss = np.split(values, sizes)
        gram = np.empty((d, d))
        upper = np.triu_indices(d)
        gram[upper] = packed
        gram.T[upper] = packed
        stats = cls(
            int(n_samples),
            float(weight_sum),
            x_mean,
            y_mean,
            gram,
            moment.reshape(d, t),
            target_ss,
            centered=bool(flags & _V1_FLAG_CENTERED),
            single_target=bool(flags & _V1_FLAG_SINGLE_TARGET),
        )
        if validate:
            stats.validate(client=client)
        return stats

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
        return self._validate(client, n_features, n_targets, psd, symmetric=False)

    def _validate(self, client, n_features, n_targets, psd, *, symmetric):
        """:meth:`validate`; ``symmetric``: the Gram is known to be symmetric bit for bit
        (it came as a :class:`~sklearn_fed.protocol.SymmetricMatrix`)."""
        who = _who(client)

        def fail(reason):
            raise InvalidClientMessage(f"{who}: {reason}", client)

        n = self.n_samples
        if isinstance(n, np.integer):
            n = int(n)
        if not (type(n) is int and 0 < n < 2**63):
            fail(f"n_samples must be a positive integer below 2**63, got {self.n_samples!r}.")
        weight = self.weight_sum
        if not (isinstance(weight, (int, float, np.floating, np.integer))
                and not isinstance(weight, bool)
                and math.isfinite(weight) and 0 <= weight <= _MAX_WEIGHT):
            fail(f"weight_sum must be a finite number in [0, {_MAX_WEIGHT:g}], got {weight!r}.")
        if not (type(self.centered) is bool and type(self.single_target) is bool):
            fail("centered and single_target must be booleans.")
        for name in _ARRAYS if self.factor is None else _FACTOR_ARRAYS:
            value = getattr(self, name)
            if not (isinstance(value, np.ndarray) and value.dtype == np.float64):
                fail(f"{name} must be a float64 ndarray, got "
                     f"{getattr(value, 'dtype', type(value).__name__)}.")
        if self.x_mean.ndim != 1 or self.y_mean.ndim != 1:
            fail("x_mean and y_mean must be vectors.")
        d, t = self.n_features, self.n_targets
        if d == 0 or (t == 0 and n_targets != 0):  # no targets only when asked for
            fail("has no features or no targets.")
        if self.single_target and t != 1:
            fail(f"declares a single target but has {t}.")
        if n_features is not None and d != n_features:
            fail(f"has {d} features, expected {n_features}.")
        if n_targets is not None and t != n_targets:
            fail(f"has {t} targets, expected {n_targets}.")
        if self.factor is not None:
            return self._validate_factor(fail, weight, n)
        shapes = {
            "gram": (self.gram.shape, (d, d)),
            "moment": (self.moment.shape, (d, t)),
            "target_ss": (self.target_ss.shape, (t,)),
        }
        for name, (got, want) in shapes.items():
            if got != want:
                fail(f"{name} has shape {got}, expected {want}.")
        self._check_caps(fail, x_mean=_MAX_MEAN, y_mean=_MAX_MEAN, moment=_MAX_SECOND,
                         target_ss=_MAX_SECOND)
        diag = np.diag(self.gram)
        if not _gram_plainly_valid(self.gram, diag, symmetric):
            self._check_gram(fail, diag)
        target_ss = self.target_ss
        if np.any(target_ss < -_RELATIVE_SLACK * np.max(target_ss, initial=0.0) - _TINY):
            fail("target_ss is negative.")
        root = np.sqrt(np.maximum(diag, 0.0))
        raw_x, raw_y = self._raw_scales()
        target_root = np.sqrt(np.maximum(target_ss, 0.0))
        bound = np.outer(root, target_root)
        roundoff = _ROUNDOFF * np.outer(raw_x, raw_y)
        if np.any(np.abs(self.moment) > bound * (1 + _RELATIVE_SLACK) + roundoff + _TINY):
            fail("moment violates the Cauchy-Schwarz bound of gram and target_ss.")
        if weight == 0 or (self.centered and n == 1):
            # One row minus its own mean is zero up to the round-off of that mean.
            why = "a zero weight sum" if weight == 0 else "one centered row"
            x_room = weight * (_RELATIVE_SLACK * self.x_mean) ** 2 + _TINY
            y_room = weight * (_RELATIVE_SLACK * self.y_mean) ** 2 + _TINY
            if np.any(diag > x_room) or np.any(target_ss > y_room):
                fail(f"has {why} but non-zero second moments.")
        if psd and not _is_psd(self.gram):
            fail("gram is not positive semi-definite.")
        return self

    def _check_gram(self, fail, diag):
        """The Gram's caps, symmetry, diagonal and Cauchy-Schwarz bounds, each with its
        round-off allowance (what :func:`_gram_plainly_valid` could not prove)."""
        self._check_caps(fail, gram=_MAX_SECOND)
        root = np.sqrt(np.maximum(diag, 0.0))
        raw_x, _ = self._raw_scales()
        # d x d work in place: three temporaries.
        limit = np.outer(root, root)
        # Round-off allowance of a computed Gram entry: relative to its own pair,
        # and to the pair's raw magnitudes (a column constant at a site has a zero
        # centered variance but cross-products at the round-off of its mean).
        slack = np.multiply(limit, _RELATIVE_SLACK)
        slack += _TINY
        work = np.outer(raw_x, raw_x, out=np.empty_like(limit))
        work *= _ROUNDOFF
        slack += work
        np.subtract(self.gram, self.gram.T, out=work)
        if np.any(np.abs(work, out=work) > slack):
            fail("gram is not symmetric.")
        if np.any(diag < -_RELATIVE_SLACK * np.max(diag, initial=0.0) - _TINY):
            fail("gram has a negative diagonal entry.")
        limit += slack
        if np.any(np.abs(self.gram, out=work) > limit):
            fail("gram violates the Cauchy-Schwarz bound gram_ij^2 <= gram_ii gram_jj.")

    def _check_caps(self, fail, **caps):
        """Finite values within the magnitude caps that keep merging overflow-free."""
        for name, cap in caps.items():
            value = getattr(self, name)
            largest = _max_abs(value)  # NaN if any entry is NaN
            if largest <= cap:  # the common case: one reduction
                continue
            if not np.all(np.isfinite(value)):
                fail(f"{name} contains NaN or infinity.")
            if largest > cap:
                fail(f"{name} has entries beyond {cap:g} in magnitude (no real data does; "
                     "such values could overflow the merge).")

    def _validate_factor(self, fail, weight, n):
        """The checks of the factor form. ``R^T R`` is positive semi-definite and
        obeys Cauchy-Schwarz by construction; what remains is its shape, finite
        values within the caps (``|R| <= sqrt(cap)`` bounds ``R^T R``), and
        no second moments from a zero weight sum or a single centered row."""
        width = self.n_features + self.n_targets
        shape = self.factor.shape
        if len(shape) != 2 or shape[1] != width or shape[0] > width:
            fail(f"factor has shape {shape}, expected (n_rows <= {width}, {width}).")
        self._check_caps(fail, x_mean=_MAX_MEAN, y_mean=_MAX_MEAN,
                         factor=math.sqrt(_MAX_SECOND))
        if weight == 0 or (self.centered and n == 1):
            room = math.sqrt(weight) * _RELATIVE_SLACK * max(
                float(np.max(np.abs(self.x_mean), initial=0.0)),
                float(np.max(np.abs(self.y_mean), initial=0.0))) + _TINY
            if np.max(np.abs(self.factor), initial=0.0) > room:
                why = "a zero weight sum" if weight == 0 else "one centered row"
                fail(f"has {why} but non-zero second moments.")
        return self

    def _raw_scales(self):
        """Square roots of the raw (uncentered) second moments of each feature and target."""
        with np.errstate(over="ignore", invalid="ignore"):
            if self.centered:
                raw_x = np.diag(self.gram) + self.weight_sum * self.x_mean**2
                raw_y = self.target_ss + self.weight_sum * self.y_mean**2
            else:
                raw_x, raw_y = np.diag(self.gram), self.target_ss
        return np.sqrt(np.maximum(raw_x, 0.0)), np.sqrt(np.maximum(raw_y, 0.0))


@dataclass(eq=False)
class ColumnMoments:
    """Per-column statistics of one client's rows: counts, weights, means, sums of squares.

    The message of the per-column transformers (scalers, the mean imputer),
    which need neither targets nor cross-products: ``O(d)`` values instead of
    the ``O(d^2)`` of :class:`ClientStatistics`. Missing entries (NaN, or
    ``missing_values``) are skipped column by column, as scikit-learn's
    scalers and imputers skip them, so every column has its own count and
    weight. ``order`` says how much is sent: 0 counts and weights, 1 also
    the means, 2 also the centered sums of squares (no more than the model
    needs). Two messages merge exactly with the pairwise update of Chan et
    al., column by column.

    Parameters
    ----------
    n_samples : ndarray of shape (n_features,), dtype int64
        Rows with a value (not missing) in each column.
    weight_sum : ndarray of shape (n_features,)
        Sum of the sample weights of those rows.
    mean : ndarray of shape (n_features,) or None
        Weighted mean of each column's values (``order >= 1``; 0 for a
        column without weight).
    m2 : ndarray of shape (n_features,) or None
        ``sum(sw * (x - mean)^2)`` per column (``order == 2``).

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_fed.statistics import ColumnMoments
    >>> X = np.array([[1.0, np.nan], [3.0, 4.0], [5.0, 6.0]])
    >>> a, b = ColumnMoments.from_data(X[:1]), ColumnMoments.from_data(X[1:])
    >>> merged = a.merge(b)
    >>> merged.n_samples, merged.mean, merged.m2
    (array([3, 2]), array([3., 5.]), array([8., 2.]))
    """

    n_samples: np.ndarray
    weight_sum: np.ndarray
    mean: np.ndarray = None
    m2: np.ndarray = None

    @property
    def order(self):
        return 0 if self.mean is None else 1 if self.m2 is None else 2

    @property
    def n_features(self):
        return self.n_samples.shape[0]

    @classmethod
    def from_data(cls, X, sample_weight=None, *, order=2, missing_values=np.nan, rows=None):
        """Compute the per-column statistics of one client's (validated) rows.

        Parameters
        ----------
        X : {ndarray, sparse matrix} of shape (n_samples, n_features)
            Numeric for ``order >= 1``; any dtype for ``order=0``. Sparse
            columns count their implicit zeros as values. Accumulated in
            float64, in blocks of rows.
        sample_weight : ndarray of shape (n_samples,), default=None
        order : {0, 1, 2}, default=2
        missing_values : scalar, default=np.nan
            Entries equal to it are skipped (as scikit-learn's ``_get_mask``).
        rows : slice or ndarray of int, default=None
            Use only these rows.

        Returns
        -------
        moments : ColumnMoments
        """
        if order not in (0, 1, 2):
            raise ValueError(f"order must be 0, 1 or 2; got {order!r}.")
        if rows is not None:
            X = X[rows]
            sample_weight = None if sample_weight is None else sample_weight[rows]
        if sp.issparse(X):
            return cls._from_sparse(sp.csc_matrix(X), sample_weight, order, missing_values)
        block = max(1, _BLOCK_BYTES // (8 * max(X.shape[1], 1)))
        parts = [
            cls._from_dense(
                X[start : start + block],
                None if sample_weight is None else sample_weight[start : start + block],
                order,
                missing_values,
            )
            for start in range(0, X.shape[0], block)
        ]
        if not parts:
            parts = [cls._from_dense(X, sample_weight, order, missing_values)]
        return merge_statistics(parts)

    @classmethod
    def _from_dense(cls, X, sample_weight, order, missing_values):
        present = ~_get_mask(X, missing_values)
        counts = present.sum(axis=0).astype(np.int64)
        w = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
        if w is None:
            weights = counts.astype(np.float64)
        else:  # complete columns share one sum, bit for bit
            weights = np.where(counts == X.shape[0], w.sum(), w @ present)
        if order == 0:
            return cls(counts, weights)
        values = np.where(present, X, 0.0).astype(np.float64, copy=False)
        sums = values.sum(axis=0) if w is None else w @ values
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(weights > 0, sums / weights, 0.0)
        if order == 1:
            return cls(counts, weights, mean)
        # Two passes, with the correction term of scikit-learn's
        # _incremental_mean_and_var: exact for offsets as large as the data allow.
        deviation = np.where(present, values - mean, 0.0)
        correction = deviation.sum(axis=0) if w is None else w @ deviation
        deviation **= 2
        squares = deviation.sum(axis=0) if w is None else w @ deviation
        with np.errstate(invalid="ignore", divide="ignore"):
            m2 = np.where(weights > 0, squares - correction**2 / weights, 0.0)
        return cls(counts, weights, mean, np.maximum(m2, 0.0))

    @classmethod
    def _from_sparse(cls, X, sample_weight, order, missing_values):
        n, d = X.shape
        w = np.ones(n) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
        column = np.repeat(np.arange(d), np.diff(X.indptr))  # column of each stored entry
        entry_w = w[X.indices]
        missing = _get_mask(X.data, missing_values)
        counts = (n - np.bincount(column[missing], minlength=d)).astype(np.int64)
        kept, kept_w = column[~missing], entry_w[~missing]
        stored_weight = np.bincount(kept, kept_w, minlength=d)
        # Implicit zeros are values; their weight is computed only where there are any,
        # so a column stored in full has no round-off from a subtraction.
        implicit = np.diff(X.indptr) < n
        implicit_weight = np.where(
            implicit, np.maximum(w.sum() - np.bincount(column, entry_w, minlength=d), 0.0), 0.0
        )
        weights = stored_weight + implicit_weight
        if order == 0:
            return cls(counts, weights)
        values = X.data[~missing].astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(
                weights > 0, np.bincount(kept, kept_w * values, minlength=d) / weights, 0.0
            )
        if order == 1:
            return cls(counts, weights, mean)
        m2 = np.bincount(kept, kept_w * (values - mean[kept]) ** 2, minlength=d)
        m2 += implicit_weight * mean**2
        return cls(counts, weights, mean, m2)

    def merge(self, other):
        """Statistics of the union of both clients' rows (a new object), column by column."""
        if self.n_features != other.n_features or self.order != other.order:
            raise ValueError(
                f"cannot merge column statistics of {self.n_features} and "
                f"{other.n_features} features, orders {self.order} and {other.order}."
            )
        wa, wb = self.weight_sum, other.weight_sum
        w = wa + wb
        n = self.n_samples + other.n_samples
        if self.order == 0:
            return type(self)(n, w)
        delta = other.mean - self.mean
        with np.errstate(invalid="ignore", divide="ignore"):
            share = np.where(w > 0, wb / w, 0.0)
            mean = np.where(wa > 0, self.mean + share * delta, other.mean)
            if self.order == 1:
                return type(self)(n, w, mean)
            pair = np.where((wa > 0) & (wb > 0), wa * wb / w, 0.0)
        return type(self)(n, w, mean, self.m2 + other.m2 + pair * delta**2)

    # -------------------------------------------------------------- serialize
    def to_payload(self):
        """``(fields, arrays)`` of the message: the order and the per-column arrays."""
        arrays = {"n_samples": self.n_samples.astype(np.int64),
                  "weight_sum": np.asarray(self.weight_sum, dtype=np.float64)}
        if self.order >= 1:
            arrays["mean"] = np.asarray(self.mean, dtype=np.float64)
        if self.order == 2:
            arrays["m2"] = np.asarray(self.m2, dtype=np.float64)
        return {"order": self.order}, arrays

    @classmethod
    def from_payload(cls, fields, arrays, *, client=None, n_features=None, order=None):
        """Column statistics from a message; untrusted, so every value is checked.

        Raises
        ------
        InvalidClientMessage
            Naming ``client``: wrong names, types or shapes; a negative or
            inconsistent count or weight; non-finite or huge values; a
            negative sum of squares; or a column without weight whose mean
            or sum of squares is not zero.
        """
        who = _who(client)

        def fail(reason):
            raise InvalidClientMessage(f"{who}: {reason}", client)

        level = fields.get("order") if isinstance(fields, dict) else None
        if type(level) is not int or set(fields) != {"order"} or level not in (0, 1, 2):
            fail(f"column statistics need one field 'order' in 0, 1, 2; got {fields!r}.")
        if order is not None and level != order:
            fail(f"sent statistics of order {level}, the task asked for {order}.")
        names = ("n_samples", "weight_sum", "mean", "m2")[: level + 2]
        if set(arrays) != set(names):
            fail(f"column statistics arrays must be {list(names)}; got {sorted(arrays)}.")
        counts = arrays["n_samples"]
        if not (isinstance(counts, np.ndarray) and counts.dtype == np.int64 and counts.ndim == 1):
            fail("n_samples must be a vector of int64 counts.")
        d = counts.shape[0]
        if d == 0 or (n_features is not None and d != n_features):
            fail(f"has {d} features, expected {n_features}.")
        values = []
        for name in names[1:]:
            value = arrays[name]
            if not (isinstance(value, np.ndarray) and value.dtype == np.float64
                    and value.shape == (d,)):
                fail(f"{name} must be a float64 vector of length {d}.")
            cap = _MAX_SECOND if name == "m2" else _MAX_MEAN
            if not np.all(np.isfinite(value)) or np.max(np.abs(value), initial=0.0) > cap:
                fail(f"{name} must be finite and at most {cap:g} in magnitude.")
            values.append(np.array(value))
        weight_sum = values[0]
        if np.any(counts < 0) or np.any(counts >= 2**62):
            fail("n_samples must be non-negative counts.")
        if np.any(weight_sum < 0) or np.any((counts == 0) & (weight_sum != 0)):
            fail("weight_sum must be non-negative, and zero in a column without values.")
        empty = weight_sum == 0
        if level >= 1 and np.any(empty & (values[1] != 0)):
            fail("a column without weight must have a zero mean.")
        if level == 2:
            m2 = values[2]
            if np.any(m2 < 0) or np.any(empty & (m2 != 0)):
                fail("m2 must be non-negative, and zero in a column without weight.")
        return cls(np.array(counts), *values)


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


def _is_psd(gram, *, in_place=False):
    """PSD test on the Jacobi-scaled Gram: a tolerance relative to every pair of features.

    Features with a zero variance are scaled by 1, so a non-zero entry in
    their row fails unless it is negligible against the other feature.

    With ``in_place`` (for a Gram no one else reads meanwhile), a Gram that
    is symmetric bit for bit lends its upper triangle as the work array (see
    :func:`_lend_upper`) and gets it back unchanged: no d x d allocation.
    """
    diag = np.diag(gram)
    inverse = 1.0 / np.sqrt(np.where(diag > 0, diag, 1.0))

    def scale(rows, part, mirror):
        # The upper part of these rows of the scaled, symmetrized Gram (all that
        # the factorization reads); ``part`` holds gram[rows], ``mirror`` the
        # same entries of gram.T.
        upper = slice(rows.start, None)
        np.add(part[:, upper], mirror, out=part[:, upper])
        part[:, upper] *= 0.5 * inverse[rows, None]
        part[:, upper] *= inverse[upper]
        np.einsum("ii->i", part[:, rows])[...] += _PSD_TOLERANCE  # the diagonal

    if in_place and _lendable(gram):
        # _lend_upper checked that the rows equal their mirror: add them to themselves
        # (the same bits), without reading the mirror again.
        saved = _lend_upper(gram, lambda rows, part: scale(rows, part, part[:, rows.start:]))
        if saved is not None:
            try:
                return _cholesky_succeeds(gram.T)
            finally:
                _restore_upper(gram, saved)
    # One d x d work array, made row chunk by row chunk.
    scaled = np.empty_like(gram, dtype=np.float64)
    for rows, part in _row_chunks(gram):
        np.copyto(part, gram[rows])
        scale(rows, part, gram[rows.start:, rows].T)
        scaled[rows, rows.start:] = part[:, rows.start:]
    return _cholesky_succeeds(scaled.T)


def _cholesky_succeeds(matrix):
    """Whether LAPACK factors the lower triangle of the Fortran-ordered ``matrix`` (in place)."""
    try:
        # cho_factor leaves the other triangle alone (cholesky would zero it).
        linalg.cho_factor(matrix, lower=True, overwrite_a=True, check_finite=False)
    except linalg.LinAlgError:
        return False
    return True


def check_aggregate(aggregate, messages, *, in_place=False):
    """Check merged statistics once before solving; blame the message that broke them.

    The server validates each message in O(d^2) (:meth:`ClientStatistics.validate`
    with ``psd=False``) and the merge once here: finite and positive
    semi-definite. When the merge is not PSD, the messages are tested one by
    one so the error names the client responsible.

    Parameters
    ----------
    aggregate : ClientStatistics
    messages : dict
        Client label -> ClientStatistics that were merged.
    in_place : bool, default=False
        Whether the aggregate's Gram is the caller's own (no one else reads
        it meanwhile): the PSD test then borrows its upper triangle as work
        space and restores it, instead of allocating a d x d array.

    Raises
    ------
    InvalidClientMessage
    """
    if aggregate.factor is not None:  # R^T R is PSD by construction
        arrays = (aggregate.factor, aggregate.x_mean, aggregate.y_mean)
    else:
        arrays = (aggregate.gram, aggregate.moment, aggregate.x_mean, aggregate.y_mean,
                  aggregate.target_ss)
    # _max_abs is NaN or inf exactly when an entry is: no d x d boolean temporary.
    finite = all(np.isfinite(_max_abs(a)) for a in arrays) and math.isfinite(aggregate.weight_sum)
    if finite and (aggregate.factor is not None
                   or _is_psd(aggregate.gram, in_place=in_place)):
        return
    for label, stats in messages.items():
        if stats.factor is None and not _is_psd(stats.gram):
            raise InvalidClientMessage(
                f"{_who(label)}: gram is not positive semi-definite.", label
            )
    label = most_extreme_client(messages)
    raise InvalidClientMessage(
        f"{_who(label)}: the merged statistics are not finite and positive semi-definite "
        "(this client's message has the largest entries).",
        label,
    )


def _parts_within_caps(stats, fewest_weight):
    """Whether the statistics of any part of these rows, of weight at least ``fewest_weight``,
    pass the magnitude caps of :meth:`ClientStatistics.validate` (Gram form, already valid).

    The caps are the only per-message checks real, finite rows can fail
    while their union passes: a part's centered second moments are at most
    the whole's (the whole adds positive semi-definite mean-shift terms, and
    ``|moment_jt| <= sqrt(gram_jj target_ss_t)`` for the part), and a part's
    mean is within ``sqrt(gram_jj / weight)`` of the whole's (its shift term
    ``weight (mean - whole mean)^2`` is one of those terms; uncentered: of
    zero). Half of each cap is kept as room for round-off.

    Examples
    --------
    >>> import numpy as np
    >>> def stats(*column):
    ...     return ClientStatistics.from_data(np.array(column)[:, None], np.zeros(len(column)))
    >>> _parts_within_caps(stats(1.0, 3.0), 1)
    True

    The two rows below average to 0, but a site holding one of them sends
    a mean beyond the cap of 1e75:

    >>> _parts_within_caps(stats(2e75, -2e75), 1)
    False
    """
    if stats.factor is not None:
        return False
    second = (stats.gram, stats.moment, stats.target_ss)
    if any(_max_abs(value) > _MAX_SECOND / 2 for value in second):
        return False
    x_room = np.sqrt(np.maximum(np.diag(stats.gram), 0.0) / fewest_weight)
    y_room = np.sqrt(np.maximum(stats.target_ss, 0.0) / fewest_weight)
    if stats.centered:
        x_room += np.abs(stats.x_mean)
        y_room += np.abs(stats.y_mean)
    return bool(np.all(x_room <= _MAX_MEAN / 2) and np.all(y_room <= _MAX_MEAN / 2))


def most_extreme_client(messages):
    """The label whose statistics hold the largest magnitude (whom to blame for overflow)."""

    def magnitude(stats):
        return max(float(_max_abs(getattr(stats, name))) for name in _ARRAYS)

    return max(messages, key=lambda label: magnitude(messages[label]))


def _check_compatible(a, b):
    if a.n_features != b.n_features:
        raise ValueError(
            f"cannot merge statistics with {a.n_features} and {b.n_features} features."
        )
    if a.n_targets != b.n_targets:
        raise ValueError(
            f"cannot merge statistics with {a.n_targets} and {b.n_targets} targets."
        )
    if a.centered != b.centered:
        raise ValueError("cannot merge centered with uncentered statistics.")


def _trapezoid_size(n_rows, n_cols):
    """Number of entries on or above the diagonal of an (n_rows, n_cols) matrix."""
    return n_rows * n_cols - n_rows * (n_rows - 1) // 2


def _pack_trapezoid(factor):
    """The upper trapezoid of ``factor``, row by row, as one float64 vector."""
    n_rows, n_cols = factor.shape
    return np.ascontiguousarray(factor[np.triu_indices(n_rows, m=n_cols)], dtype=np.float64)


def _unpack_trapezoid(packed, n_rows, n_cols):
    factor = np.zeros((n_rows, n_cols))
    factor[np.triu_indices(n_rows, m=n_cols)] = packed
    return factor


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


def _drop_direction(M, s):
    """Rows with the Gram of ``M`` and one row fewer, given ``s @ M == 0``.

    A Householder reflection maps ``s`` to a multiple of ``e_1``; the
    reflected first row is ``(s / |s|) @ M = 0``, so it is dropped. It keeps
    the row count of a centered block honest (``r`` sqrt-weighted centered
    rows ``M`` satisfy ``sqrt(w) @ M = 0``, so they have rank ``r - 1``), and
    turns the ``K`` Chan mean-shift rows of ``K`` groups into ``K - 1``.
    """
    norm = np.linalg.norm(s)
    if M.shape[0] <= 1 or norm == 0:
        return M[:0]
    v = s / norm
    v[0] += 1.0 if v[0] >= 0 else -1.0
    reflected = M - np.outer(v, (v @ M) * (2.0 / (v @ v)))
    return reflected[1:]


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


def _gram_plainly_valid(gram, diag, symmetric):
    """Whether ``gram`` passes every Gram check of :meth:`ClientStatistics.validate`
    with no round-off allowance needed: a fast sufficient test (False proves nothing).

    Positive finite diagonal well within the cap, exact symmetry (skipped
    when ``symmetric`` says it holds by construction), and
    ``|gram_ij| <= c_i c_j`` with ``c = sqrt(diag (1 + slack / 2))``, read
    row by row as ``max_j |gram_ij| / c_j <= c_i``: three passes over one
    temporary instead of the dozen of the full check. Any NaN fails it.
    """
    if not (np.all(diag > 0) and np.max(diag) <= _MAX_SECOND / 2):
        return False
    if not (symmetric or np.array_equal(gram, gram.T)):
        return False
    scale = np.sqrt(diag * (1 + _RELATIVE_SLACK / 2))
    for rows, ratios in _row_chunks(gram):
        np.divide(gram[rows], scale, out=ratios)
        if not np.all(np.abs(ratios, out=ratios).max(axis=1) <= scale[rows]):
            return False
    return True


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


def _max_abs(values):
    """``np.max(np.abs(values), initial=0.0)`` (NaN if any entry is NaN) without the
    array-sized temporary of ``np.abs``: a Gram's would be one more d x d matrix."""
    return np.maximum(values.max(initial=0.0), -values.min(initial=0.0))


def _lendable(matrix):
    """Whether ``matrix`` can lend its upper triangle to LAPACK (:func:`_lend_upper`)."""
    return (isinstance(matrix, np.ndarray) and matrix.dtype == np.float64
            and matrix.ndim == 2 and matrix.shape[0] == matrix.shape[1] > 0
            and matrix.flags.c_contiguous and matrix.flags.writeable)


def _lend_upper(gram, fill):
    """Write another matrix into the upper triangle of an exactly symmetric ``gram``.

    A symmetric Gram holds all its values in its lower triangle (and a
    diagonal saved aside), so its upper triangle can serve as the d x d work
    array of a factorization: LAPACK reads it as the lower triangle of the
    Fortran-ordered ``gram.T`` (``lower=True``). Row chunk by row chunk from
    the top, ``fill(rows, part)`` gets ``part``, a copy of ``gram[rows]``, and
    turns its upper part (columns from ``rows.start`` on) into those rows of
    the wanted matrix, which are then written into ``gram``. Undo with
    :func:`_restore_upper`.

    Parameters
    ----------
    gram : ndarray of shape (n, n)
        C-ordered, writeable (see :func:`_lendable`).
    fill : callable

    Returns
    -------
    diagonal : ndarray of shape (n,) or None
        ``gram``'s diagonal, for :func:`_restore_upper`; None when ``gram`` is
        not symmetric bit for bit (its upper triangle could not be restored
        from the lower one), and ``gram`` is then unchanged (as it is when
        ``fill`` raises).
    """
    diagonal = np.diag(gram).copy()
    masks = {}
    for rows, part in _row_chunks(gram):
        start, stop = rows.start, rows.stop
        np.copyto(part, gram[rows])
        # Checked as we go: the rows above were checked, so they can be restored.
        # Bit for bit (as integers: -0.0 is not 0.0), in the mirror's memory order.
        mirror, upper = gram[start:, rows].view(np.int64), part[:, start:].T.view(np.int64)
        if not (mirror == upper).all():
            _restore_upper(gram, diagonal, stop=start)
            return None
        try:
            fill(rows, part)
        except BaseException:
            _restore_upper(gram, diagonal, stop=start)
            raise
        gram[rows, stop:] = part[:, stop:]
        np.copyto(gram[rows, rows], part[:, rows], where=_upper_mask(stop - start, 0, masks))
    return diagonal


def _restore_upper(gram, diagonal, stop=None):
    """Undo :func:`_lend_upper`: the upper triangle of ``gram`` (in rows before ``stop``)
    copied back from its lower one, and its diagonal from ``diagonal``."""
    n = gram.shape[0]
    step = max(1, _CHUNK_BYTES // (8 * n))  # the row chunks of _row_chunks
    masks = {}
    for start in range(0, n if stop is None else stop, step):
        rows = slice(start, min(start + step, n))
        gram[rows, rows.stop:] = gram[rows.stop:, rows].T
        block = gram[rows, rows]
        np.copyto(block, block.T.copy(), where=_upper_mask(block.shape[0], 1, masks))
        np.einsum("ii->i", block)[...] = diagonal[rows]


def _upper_mask(n, k, cache):
    """Boolean mask of the entries of an n x n matrix on and above its ``k``-th diagonal
    (kept in the dict ``cache``: the row chunks but the last have one size)."""
    mask = cache.get(n)
    if mask is None:
        mask = cache[n] = np.triu(np.ones((n, n), dtype=bool), k)
    return mask


def _update_by_outer(matrix, u, v, scale_op, scale, update_op):
    """``matrix = update_op(matrix, scale_op(u_i v_j, scale))`` in place, row chunk by row chunk.

    The same bits as forming ``np.outer(u, v)`` first, without a d x d temporary.
    """
    for rows, part in _row_chunks(matrix):
        np.multiply.outer(u[rows], v, out=part)
        scale_op(part, scale, out=part)
        update_op(matrix[rows], part, out=matrix[rows])


def _chan_add(total, mean, weight, block_products, block_mean, block_weight, centered):
    """Add one block's (centered) products to the running ones (Chan et al.)."""
    new_weight = weight + block_weight
    if centered and weight > 0:
        delta = block_mean - mean
        block_products = block_products + (weight * block_weight / new_weight) * np.outer(
            delta, delta
        )
    return total + block_products, mean + (block_weight / new_weight) * (block_mean - mean), new_weight


def _dense_statistics(X, y, sample_weight, centered, rows):
    """Statistics of dense rows: one shift and one accumulator, else the Chan path.

    Unweighted float rows take :func:`_shifted_statistics`; weighted rows,
    and the rare rows on which one shift would cancel digits, the blocked
    Chan path :func:`_chan_statistics`.
    """
    if sample_weight is None and isinstance(X, np.ndarray):
        parts = _shifted_statistics(X, y, centered, rows)
        if parts is not None:
            return parts
    return _chan_statistics(X, y, sample_weight, centered, rows)


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
    if isinstance(rows, slice):
        first, stop, _ = rows.indices(X.shape[0])
        index, n = None, max(stop - first, 0)
    else:
        index, n = np.asarray(rows), len(rows)
    if n == 0:
        return None
    d, t = X.shape[1], y.shape[1]
    p = d + t

    def block_of(start, stop, out):
        """Rows start:stop of the client: X's (C-ordered, float64 if in place) and y's."""
        if index is None:
            Xb, yb = X[first + start : first + stop], y[first + start : first + stop]
            if out is not None and not Xb.flags.c_contiguous:
                Xb = np.copyto(out, Xb) or out  # BLAS always sees one layout
            return Xb, yb
        take = index[start:stop]
        if out is None:
            return X[take], y[take]
        return np.take(X, take, axis=0, out=out, mode="clip"), y[take]

    head_X, head_y = block_of(0, min(_HEAD_ROWS, n), None)
    # C order: the reductions below then add in the same order for any layout of X.
    head = np.array(np.hstack([head_X, head_y]), dtype=np.float64, order="C")
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
    if in_place and block == p and index is None and X.flags.c_contiguous:
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
    for start in range(0, n, block):
        m = min(block, n - start)
        if in_place:
            gather = None if index is None and X.flags.c_contiguous else _scratch(m, d, "rows")
            Xb, yb = block_of(start, start + m, gather)
            targets = _scratch(t + 1, m, "targets")  # rows: y - s_y per target, then ones
            np.subtract(yb.T, shift[d:, None], out=targets[:t])
            targets[t] = 1.0
            # numpy runs syrk: one read of the rows in place
            np.matmul(Xb.T, Xb, out=gram if start == 0 else out)
            if start:
                gram += out
            side += _rows_times(targets, Xb, out=side_block)
            np.matmul(targets, targets.T, out=corner_block)
            corner += corner_block
        else:
            work = _scratch(m, p + 1)
            Xb, yb = block_of(start, start + m, None)
            np.subtract(Xb, shift[:d], out=work[:, :d])
            np.subtract(yb, shift[d:], out=work[:, d:p])
            work[:, p] = 1.0
            np.matmul(work.T, work, out=total if start == 0 else out)
            if start:
                total += out
    if in_place:
        return _centered_parts(gram, side[:t].T, corner[:t, :t], side[t], corner[:t, t],
                               shift, n, centered)
    return _centered_parts(total[:d, :d], total[:d, d:p], total[d:p, d:p], total[:d, p],
                           total[d:p, p], shift, n, centered)


def _rows_times(rows, X, *, out):
    """``rows @ X`` into ``out``, for a few ``rows`` (targets, a row of ones) and a tall ``X``.

    Moments and column sums while a block is in cache: up to four
    matrix-vector products read it once each, faster than one matrix
    product, which packs it first (d = 100: 25 against 33 ms per 500,000 rows).
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
    """Blocked, single-pass statistics of dense rows (see module docstring).

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
    contiguous = isinstance(rows, slice)
    if contiguous:
        first, stop, _ = rows.indices(X.shape[0])
        n = max(stop - first, 0)
    else:
        n = len(rows)
    d, t = X.shape[1], y.shape[1]
    p = d + t
    # At least p rows per block, as in the in-place path: each block's merge is
    # O(p^2) work, which 2 MiB blocks of few wide rows would repeat every few
    # hundred rows (a weighted fit at 1e5 x 1,000: 2.14 -> 1.45 of the floor).
    block = max(1, _BLOCK_BYTES // (8 * (p + 1)), p)
    total = np.zeros((p, p))  # centered (or raw) products of [x, y]
    weight_sum = 0.0
    mean = np.zeros(p)
    for start in range(0, n, block):
        if contiguous:  # a view: nothing is copied until the shift below
            take = slice(first + start, first + min(start + block, n))
        else:
            take = rows[start : start + block]
        if contiguous or not (isinstance(X, np.ndarray) and X.dtype == np.float64):
            Xv = X[take]
        else:  # gathered into reused memory (np.take is ~1.6x faster than X[take])
            Xv = np.take(X, take, axis=0, out=_scratch(len(take), d, "rows"), mode="clip")
        yv = y[take]
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
        total, mean, weight_sum = _chan_add(
            total, mean, weight_sum, block_products, shift + sums / wsum, wsum, centered
        )
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
    if isinstance(rows, slice):
        first, stop, _ = rows.indices(X.shape[0])
        index = range(first, max(stop, first))
    else:
        index = rows
    n = len(index)
    d, t = X.shape[1], y.shape[1]
    p = d + t
    sparse = sp.issparse(X)
    if sparse:
        X = sp.csr_matrix(X)
    block = max(1, _BLOCK_BYTES // (8 * p))
    triangle = np.zeros((0, p))
    mean = np.zeros(p)
    weight_sum = 0.0
    for start in range(0, n, block):
        take = index[start : start + block]
        take = slice(take.start, take.stop) if isinstance(take, range) else take
        Xb = X[take].toarray() if sparse else X[take]
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
        if centered:
            block_mean = np.average(work, axis=0, weights=w)
            work -= block_mean
            correction = np.average(work, axis=0, weights=w)
            work -= correction
            block_mean += correction
        else:
            block_mean = np.average(work, axis=0, weights=w)
        root = None if w is None else np.sqrt(w)
        if root is not None:
            work *= root[:, None]
        parts = [triangle]
        if centered:
            if len(work) <= p:  # sqrt(w) @ work == 0: one row fewer has the same Gram
                work = _drop_direction(work, np.ones(len(work)) if root is None else root)
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
