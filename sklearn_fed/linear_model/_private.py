"""PrivateFederatedRidge: one-shot ridge from Gaussian-noised client statistics.

What each site releases (per row ``x`` clipped to ``||x|| <= B_x`` and target
``y`` clipped to ``||y|| <= B_y``, summed with sample weights):

* with an intercept, the raw sums of the augmented vector ``(1, x, y)``:
  ``[sum 1, sum x, sum y, upper(sum x x^T), sum x y^T]``; the server derives
  the means and centered statistics from them;
* without one, ``[upper(sum x x^T), sum x y^T]``.

Adding or removing one row (weight 1) changes that vector by
``[1, x, y, upper(x x^T), x y^T]``, whose squared norm is at most

    1 + B_x^2 + B_y^2 + B_x^4 + B_x^2 B_y^2

because ``||upper(x x^T)||^2 = sum_{i<=j} x_i^2 x_j^2 <= ||x||^4`` (equality
for ``x`` along an axis, where every term is at its maximum simultaneously, so
the bound is attained). That square root is the single joint L2 sensitivity of
everything released; one Gaussian mechanism calibrated to it covers Gram,
moment, counts and sums together (the paper's Algorithm 2 instead spends the
full epsilon on the Gram and again on the moment).

The protocol (``"ridge.private"``): with ``noise="local"`` one round, in which
each site sends its sums on a grid plus integer noise
(:mod:`sklearn_fed.privacy._noise`); with ``noise="distributed"`` a first
round collects each site's X25519 public key and a second one has every site
send its sums masked for secure aggregation
(:mod:`sklearn_fed.privacy._secure_aggregation`). A site derives its noise
from the task's epsilon, delta and bounds itself, so a server cannot ask for
less noise than the epsilon it announces.
"""

import functools
import math
import types
from numbers import Real

import numpy as np
import scipy.sparse as sp
from scipy import linalg

from .._clients import count_rows
from .._compat import Interval, Options, StrOptions, _fit_context
from ..privacy import PrivacyLedger, gaussian_noise_std
from ..privacy._bounds import CLIPPED_SHARE_WARNING, ClippingWarning
from ..privacy._noise import (
    discretized_sensitivity,
    grid_exponent,
    release_generator,
    rounded_gaussian,
)
from ..privacy._secure_aggregation import (
    MaskingKey,
    check_public_keys,
    fixed_point_decode,
    fixed_point_encode,
    mask_vector,
    max_abs_encoded,
    unmask_sum,
)
from ..protocol import (
    BlockwiseClient,
    InvalidClientMessage,
    Server,
    atomic,
    label_key,
    sorted_labels,
)
from ..statistics._kernels import rows_times as _rows_times
from ..utils._warnings import warn
from ._base import BaseFederatedRidge, _solve_gram, numerical_range, task_field

__all__ = ["PrivateFederatedRidge"]

# Rows per block of the clipped products: one float64 work block of about
# this size (the rows are scaled into it, never copied as a whole).
_BLOCK_BYTES = 4 * 2**20
# A block read in place corrects its clipped rows with a gather and a GEMM
# (twice syrk's work per row); scaling it into the work array costs a pass
# over the block. Measured crossover (d = 20 to 1,000): about a fifth of the
# rows clipped, so blocks with more than an eighth are scaled.
_MAX_CORRECTED_SHARE = 1 / 8


def clip_rows(X, y, feature_bound, target_bound):
    """Scale each row so ``||x||_2 <= feature_bound`` and ``||y_row||_2 <= target_bound``.

    Rows already inside the bounds are unchanged; ``y`` of one target is
    clipped to ``[-target_bound, target_bound]``. Returns new arrays (a
    reference for tests: sites clip block by block without a copy).
    """
    cx = _clip_factors(X, feature_bound)
    y = np.asarray(y, dtype=np.float64)
    cy = _clip_factors(y.reshape(y.shape[0], -1), target_bound)
    if sp.issparse(X):
        X = sp.csr_matrix(sp.diags(cx) @ sp.csr_matrix(X, dtype=np.float64))
    else:
        X = np.asarray(X, dtype=np.float64) * cx[:, None]
    return X, (y * cy if y.ndim == 1 else y * cy[:, None])


def _clip_factors(A, bound):
    """Per-row factors ``min(1, bound / ||row||)`` (1 for a zero row)."""
    if sp.issparse(A):
        squares = np.asarray(A.multiply(A).sum(axis=1), dtype=np.float64).ravel()
    elif A.dtype == np.float64 and hasattr(np, "vecdot"):  # numpy >= 2: ~30% faster
        squares = np.vecdot(A, A)
    else:
        squares = np.einsum("ij,ij->i", A, A, dtype=np.float64)
    norms = np.sqrt(squares)
    factors = np.ones_like(norms)
    outside = norms > bound
    factors[outside] = bound / norms[outside]
    return factors


def joint_sensitivity(feature_bound, target_bound, fit_intercept=True):
    """L2 sensitivity of the whole released vector under add/remove-one-row.

    ``sqrt(1 + B_x^2 + B_y^2 + B_x^4 + B_x^2 B_y^2)`` with an intercept,
    ``sqrt(B_x^4 + B_x^2 B_y^2)`` without (see the module docstring).
    """
    bx2, by2 = feature_bound**2, target_bound**2
    squared = bx2 * bx2 + bx2 * by2
    if fit_intercept:
        squared += 1.0 + bx2 + by2
    return math.sqrt(squared)


def n_released(n_features, n_targets, fit_intercept):
    """Length ``p`` of the released vector."""
    d, t = n_features, n_targets
    return (1 + d + t if fit_intercept else 0) + d * (d + 1) // 2 + d * t


@functools.lru_cache(maxsize=4)
def _upper_positions(d):
    """Flat positions of a ``d x d`` upper triangle, in ``np.triu_indices`` order.

    Cached: ``gram.take(positions)`` is ~30x faster than
    ``gram[np.triu_indices(d)]``, which each site would rebuild for each release.
    """
    positions = np.flatnonzero(np.triu(np.ones((d, d), dtype=bool)))
    positions.flags.writeable = False
    return positions


def _upper(matrix):
    """The upper triangle of a square C-ordered matrix, row by row."""
    return np.ascontiguousarray(matrix).take(_upper_positions(matrix.shape[0]))


def released_sums(stats, fit_intercept):
    """Pack uncentered :class:`~sklearn_fed.statistics.ClientStatistics` into the released vector."""
    parts = [_upper(stats.gram), stats.moment.ravel()]
    if fit_intercept:
        w = stats.weight_sum
        parts = [[w], w * stats.x_mean, w * stats.y_mean] + parts
    return np.concatenate(parts)


def clipped_sums(X, y, sample_weight, rows, feature_bound, target_bound, fit_intercept):
    """A site's released vector from its clipped rows, and how many rows were clipped.

    Dense rows are read block by block, and ``X`` is never copied. BLAS
    ``syrk`` (numpy's ``B.T @ B``, into one reused ``d x d`` buffer) gives
    each block's ``sum c_x^2 w x x^T`` and one product with
    ``[c_y y, 1] c_x w`` gives the other sums. Scattered rows are first
    gathered into one reused block. An unweighted float64 block is read where
    it is and only its clipped rows are corrected (``(c_x^2 - 1) x x^T``)
    when they are few; other blocks are scaled first (a gathered block where
    it is, a view of ``X`` into one small work array).

    Returns
    -------
    vector : ndarray of shape (p,)
        As :func:`released_sums` lays it out.
    n_clipped : int
        Rows whose features or targets were scaled onto the bounds.
    """
    y = np.asarray(y)
    y2 = y.reshape(y.shape[0], -1)
    rows = slice(0, X.shape[0]) if rows is None else rows
    d, t = X.shape[1], y2.shape[1]
    if sp.issparse(X):
        return _sparse_sums(X, y2, sample_weight, rows, feature_bound, target_bound,
                            fit_intercept)
    gram = np.zeros((d, d))  # sum c_x^2 w x x^T
    products = np.empty((d, d))  # one block's share of it
    side = np.zeros((t + 1, d))  # rows: sum c_x c_y w y_j x per target, then sum c_x w x
    side_block = np.empty((t + 1, d))
    target_sums = np.zeros(t + 1)  # [sum c_y w y, sum w]
    n_clipped = 0
    positions = range(X.shape[0])[rows] if isinstance(rows, slice) else rows
    block = max(1, _BLOCK_BYTES // (8 * (d + t + 1)))
    work_memory = gathered = None
    for start in range(0, len(positions), block):
        take = positions[start : start + block]
        if isinstance(take, range):
            take = slice(take.start, take.stop)  # a view, not a gather
            Xb, copied = X[take], False
        elif not isinstance(X, np.ndarray):
            Xb, copied = X[take], False
        else:  # into one reused block: np.take is ~1.6x faster than X[take] here
            if gathered is None:
                gathered = np.empty((min(block, len(positions)), d), dtype=X.dtype)
            Xb, copied = np.take(X, take, axis=0, out=gathered[: len(take)], mode="clip"), True
        yb = y2[take]
        cx = _clip_factors(Xb, feature_bound)
        cy = _clip_factors(yb, target_bound)
        n_clipped += int(np.count_nonzero((cx < 1) | (cy < 1)))
        root = None if sample_weight is None else np.sqrt(sample_weight[take])
        targets = np.empty((t + 1, Xb.shape[0]))  # rows: c_y y per target, then 1 (times sqrt(w))
        np.multiply(yb.T, cy, out=targets[:t])
        targets[t] = 1.0
        if root is not None:
            targets *= root
        target_sums += targets.sum(axis=1) if root is None else targets @ root
        clipped = np.flatnonzero(cx < 1)
        if (root is None and Xb.dtype == np.float64 and Xb.flags.c_contiguous
                and clipped.size <= _MAX_CORRECTED_SHARE * Xb.shape[0]):
            # Read in place; the few clipped rows are corrected afterwards.
            # numpy runs syrk on the view (faster here than scipy's dsyrk).
            gram += np.matmul(Xb.T, Xb, out=products)
            if clipped.size:
                Xc = Xb[clipped]
                gram += (Xc * (cx[clipped] ** 2 - 1)[:, None]).T @ Xc
                targets *= cx
            side += _rows_times(targets, Xb, out=side_block)
            continue
        if copied and Xb.dtype == np.float64:
            scaled = Xb  # a copy of the site's rows: scaled where it is (the same bits)
        else:
            if work_memory is None:
                work_memory = np.empty(min(block, len(positions)) * d)
            scaled = work_memory[: Xb.shape[0] * d].reshape(Xb.shape[0], d)
        np.multiply(Xb, (cx if root is None else cx * root)[:, None], out=scaled)
        gram += np.matmul(scaled.T, scaled, out=products)
        side += _rows_times(targets, scaled, out=side_block)
    parts = [_upper(gram), side[:t].T.ravel()]
    if fit_intercept:
        parts = [[target_sums[t]], side[t], target_sums[:t]] + parts
    return np.concatenate(parts), n_clipped


def _sparse_sums(X, y, sample_weight, rows, feature_bound, target_bound, fit_intercept):
    """:func:`clipped_sums` of sparse rows (the site's rows, scaled, stay sparse)."""
    Xs, ys = sp.csr_matrix(X[rows], dtype=np.float64), y[rows]
    cx = _clip_factors(Xs, feature_bound)
    cy = _clip_factors(ys, target_bound)
    n_clipped = int(np.count_nonzero((cx < 1) | (cy < 1)))
    w = np.ones(Xs.shape[0]) if sample_weight is None else sample_weight[rows]
    Xc = sp.csr_matrix(sp.diags(cx) @ Xs)
    Xw = sp.csr_matrix(sp.diags(w) @ Xc)
    yc = ys * cy[:, None]
    gram = (Xw.T @ Xc).toarray()
    parts = [_upper(gram), np.asarray(Xw.T @ yc).ravel()]
    if fit_intercept:
        parts = [[w.sum()], np.asarray(Xw.sum(axis=0)).ravel(), w @ yc] + parts
    return np.concatenate(parts), n_clipped


def _unpack(vector, d, t, fit_intercept):
    """Inverse of :func:`released_sums`: (W, sum x, sum y, sum xx^T, sum xy^T)."""
    start = 0
    w, sx, sy = None, None, None
    if fit_intercept:
        w, sx, sy = vector[0], vector[1 : 1 + d], vector[1 + d : 1 + d + t]
        start = 1 + d + t
    n_upper = d * (d + 1) // 2
    gram = np.zeros(d * d)
    gram[_upper_positions(d)] = vector[start : start + n_upper]
    gram = gram.reshape(d, d)
    gram = gram + np.triu(gram, 1).T  # the noise was drawn once per pair, then mirrored
    moment = vector[start + n_upper :].reshape(d, t)
    return w, sx, sy, gram, moment


def project_psd(gram):
    """Nearest (Frobenius) positive semi-definite matrix: clip negative eigenvalues."""
    return _psd_projection(gram)[0]


def _psd_projection(gram):
    """:func:`project_psd` and the eigenpairs ``(values, vectors)`` of the projection
    (None when ``gram`` was positive definite already: nothing was decomposed)."""
    gram = (gram + gram.T) / 2
    try:  # positive definite already (the usual case with enough rows): nothing to clip
        linalg.cholesky(gram, check_finite=False)
        return gram, None
    except linalg.LinAlgError:
        pass
    values, vectors = np.linalg.eigh(gram)
    negative = values < 0
    # G+ = V+ L+ V+^T = G - V- L- V-^T: one syrk over the fewer eigenvectors
    # (d^2 k flops, where V L V^T would be 2 d^3).
    if np.count_nonzero(negative) <= gram.shape[0] // 2:
        part = vectors[:, negative] * np.sqrt(-values[negative])
        projected = gram + part @ part.T
    else:
        part = vectors[:, ~negative] * np.sqrt(values[~negative])
        projected = part @ part.T
    return projected, (np.maximum(values, 0.0), vectors)


class ReleasePlan:
    """What one release adds, as both the site and the server compute it from a task.

    Everything follows from public parameters (bounds, epsilon, delta,
    calibration, the number of released values ``p`` and of sites sharing the
    noise), so the site does not need to trust a noise level sent by the server.
    """

    def __init__(self, *, epsilon, delta, calibration, feature_bound, target_bound,
                 fit_intercept, n_values, n_sharing):
        sensitivity = joint_sensitivity(feature_bound, target_bound, fit_intercept)
        noisy = epsilon != math.inf
        self.exponent = grid_exponent(sensitivity, n_values, noisy)
        self.sensitivity = (
            discretized_sensitivity(sensitivity, n_values, self.exponent) if noisy
            else sensitivity
        )
        #: Noise std on the aggregate (distributed) or on each message (local).
        self.noise_std = gaussian_noise_std(epsilon, delta, self.sensitivity,
                                            calibration=calibration)
        self.site_std = self.noise_std / math.sqrt(n_sharing)
        self.noise_multiplier = self.noise_std / self.sensitivity


def _privacy_fields(estimator, release, n_sites):
    return {
        "release": int(release),
        "n_sites": int(n_sites),
        "fit_intercept": bool(estimator.fit_intercept),
        "feature_bound": float(estimator.feature_bound),
        "target_bound": float(estimator.target_bound),
        "epsilon": float(estimator.epsilon),
        "delta": float(estimator.delta),
        "calibration": str(estimator.calibration),
        "noise": str(estimator.noise),
    }


def _context(task):
    """What a round's masks are bound to: the federation and the round."""
    return f"{task.federation}|{task.round}".encode("ascii")


class PrivateClient(BlockwiseClient):
    """A site of :class:`PrivateFederatedRidge`.

    A ``"keys"`` task (distributed noise) asks for a fresh X25519 public key;
    a ``"release"`` task has the site clip its rows, compute its sums, round
    them to the grid, add integer Gaussian noise from a fresh stream, mask
    them when the task lists the other sites' public keys, and reply. The
    site warns (:class:`~sklearn_fed.privacy.ClippingWarning`) when clipping
    changes more than 10% of its rows.

    Attributes
    ----------
    clipped_ : dict
        ``label_key(site) -> (site, rows clipped, rows)`` of its last release
        (a site-local diagnostic; it is never sent).
    """

    protocol = "ridge.private"

    def __init__(self, estimator, **kwargs):
        super().__init__(estimator, **kwargs)
        self.clipped_ = {}
        self._masking_keys = {}  # (federation, site) -> MaskingKey, until it masks
        self._pair_keys = {}  # pair keys shared by the sites this process runs

    def respond(self, task, X, y=None, sample_weight=None):
        self.clipped_.clear()
        reply = super().respond(task, X, y, sample_weight)
        for site, n_clipped, n_rows in self.clipped_.values():
            if n_rows and n_clipped / n_rows > CLIPPED_SHARE_WARNING:
                warn(_clipping_message(n_clipped / n_rows, f"site {site!r}"), ClippingWarning)
        return reply

    def replies_are_independent(self, tasks):
        # A local-noise release draws from its site's own stream and touches no
        # shared state; key rounds and masking share this process's keys.
        return all(task.fields.get("step") == "release" and task.fields.get("noise") == "local"
                   for task in tasks.values())

    # A release is _finish (grid, noise, mask: once per site) of the sum of the
    # clipped sums of the site's rows, so its rows may come in blocks.
    def reads_rows(self, task):
        return _step(task) != "keys"

    def summarize(self, task, X, y, sample_weight, rows):
        if _step(task) == "keys":
            return None  # a key depends on no row
        fields = _read_privacy_fields(task)
        sums, n_clipped = clipped_sums(
            X, y, sample_weight, rows, fields["feature_bound"], fields["target_bound"],
            fields["fit_intercept"],
        )
        return ClippedSums(sums, n_clipped, count_rows(X.shape[0], rows), y.ndim == 1)

    def merge(self, first, second):
        return None if first is None else first.merge(second)

    def finish(self, task, summary):
        if _step(task) == "keys":
            key = MaskingKey()  # always fresh OS randomness: the server must never know it
            self._masking_keys[(task.federation, label_key(task.site))] = key
            return {}, {"public_key": np.frombuffer(key.public_bytes, dtype=np.uint8)}
        fields = _read_privacy_fields(task)
        p = summary.sums.shape[0]
        public_keys, index = None, None
        if fields["noise"] == "distributed":
            public_keys = check_public_keys(task.arrays.get("public_keys"), fields["n_sites"])
            index = task_field(task, "index", int)
            if not 0 <= index < fields["n_sites"]:
                raise InvalidClientMessage("server: site index out of range.", "server")
        plan = ReleasePlan(
            epsilon=fields["epsilon"], delta=fields["delta"], calibration=fields["calibration"],
            feature_bound=fields["feature_bound"], target_bound=fields["target_bound"],
            fit_intercept=fields["fit_intercept"], n_values=p,
            n_sharing=1 if public_keys is None else fields["n_sites"],
        )
        self.clipped_[label_key(task.site)] = (task.site, summary.n_clipped, summary.n_rows)
        generator = release_generator(self.estimator.random_state, fields["release"], task.site)
        noise = rounded_gaussian(generator, math.ldexp(plan.site_std, -plan.exponent), p)
        # Each site's |sums + noise| <= floor((2^63-1)/K) grid steps: K of them cannot overflow.
        encoded = fixed_point_encode(summary.sums, plan.exponent, fields["n_sites"],
                                     party=task.site)
        encoded = _bounded(encoded + noise, fields["n_sites"], task.site)
        reply_fields = {"single_target": summary.single_target}
        if public_keys is None:
            return reply_fields, {"sums": encoded}
        key = self._masking_keys.pop((task.federation, label_key(task.site)), None)
        if key is None:
            raise InvalidClientMessage(
                "server: a masked release without this site's key round.", "server")
        local = {other.public_bytes for (federation, _), other in self._masking_keys.items()
                 if federation == task.federation}
        masked = mask_vector(encoded, key, index, public_keys, _context(task),
                             pair_keys=self._pair_keys, local_publics=local)
        if not local:
            self._pair_keys.clear()  # the last site of this process has masked
        return reply_fields, {"masked": masked}


class ClippedSums:
    """A block of a site's rows for a release: its clipped sums, before grid and noise."""

    __slots__ = ("n_clipped", "n_rows", "single_target", "sums")

    def __init__(self, sums, n_clipped, n_rows, single_target):
        self.sums = sums
        self.n_clipped = n_clipped
        self.n_rows = n_rows
        self.single_target = bool(single_target)

    def merge(self, other):
        return ClippedSums(self.sums + other.sums, self.n_clipped + other.n_clipped,
                           self.n_rows + other.n_rows, self.single_target)


def _step(task):
    step = task_field(task, "step", str)
    if step not in ("keys", "release"):
        raise InvalidClientMessage(f"server: unknown task step {step!r}.", "server")
    return step


def _bounded(encoded, n_sites, site):
    limit = max_abs_encoded(n_sites)
    if np.any(np.abs(encoded) > limit):
        raise OverflowError(
            f"site {site!r}: its noisy sums exceed the {limit} grid steps that {n_sites} "
            "sites can add without overflow in 64-bit fixed point."
        )
    return encoded


def _read_privacy_fields(task):
    """The release's parameters, checked at the site (tasks are untrusted)."""
    fields = {
        "release": task_field(task, "release", int),
        "fit_intercept": task_field(task, "fit_intercept", bool),
        "feature_bound": task_field(task, "feature_bound", float),
        "target_bound": task_field(task, "target_bound", float),
        "epsilon": task_field(task, "epsilon", float),
        "delta": task_field(task, "delta", float),
        "calibration": task_field(task, "calibration", str),
        "noise": task_field(task, "noise", str),
        "n_sites": task_field(task, "n_sites", int),
    }
    valid = (
        fields["release"] >= 0
        and 1 <= fields["n_sites"] <= 2**31
        and all(0 < fields[k] < math.inf for k in ("feature_bound", "target_bound"))
        and fields["epsilon"] > 0
        and 0 < fields["delta"] < 1
        and fields["calibration"] in ("analytic", "classic")
        and fields["noise"] in ("local", "distributed")
    )
    if not valid:
        raise InvalidClientMessage(f"server: malformed private release task {fields}.", "server")
    return fields


def _clipping_message(share, where):
    return (
        f"Clipping to feature_bound/target_bound changed {share:.0%} of the rows of "
        f"{where}: the model is fitted to clipped values. State bounds that contain the "
        "data, e.g. scale features from known ranges with "
        "sklearn_fed.privacy.RangeScaler (then feature_bound=1) and set target_bound "
        "to the known range of y."
    )


class PrivateServer(Server):
    """Server of :class:`PrivateFederatedRidge`.

    Local noise: one round of noisy sums. Distributed noise: a key round,
    then a round of masked sums that must include every site that received
    the keys (a site lost in between fails the round cleanly; the next call
    to :meth:`next_tasks` starts again with new keys among the reachable sites).
    """

    protocol = "ridge.private"

    def __init__(self, estimator, **kwargs):
        super().__init__(estimator, **kwargs)
        privacy = getattr(estimator, "_privacy", None)
        # Every release of this estimator is counted, refits by fit included.
        self.release = 0 if privacy is None else len(privacy)
        self._public_keys = None  # site key -> (site, public key), distributed mode
        self._masked_sites = None  # the sites of the open masked round
        self._stage = None  # "keys" or "release": what the open round asks for
        self._done = False

    def plan(self, sites):
        if self._done:
            return {}
        estimator = self.estimator
        fields = _privacy_fields(estimator, self.release, len(sites))
        self._stage = "release"
        if estimator.noise == "local":
            return {site: ({"step": "release", **fields}, {}) for site in sites}
        reachable = {label_key(site) for site in sites}
        if self._public_keys is None or not set(self._public_keys) <= reachable:
            # (re)start: new keys among the reachable sites
            self._public_keys, self._masked_sites, self._stage = None, None, "keys"
            return {site: ({"step": "keys", **fields}, {}) for site in sites}
        order = sorted_labels(site for site, _ in self._public_keys.values())
        table = np.array([self._public_keys[label_key(site)][1] for site in order])
        self._masked_sites = order
        fields = _privacy_fields(estimator, self.release, len(order))
        return {
            site: ({"step": "release", "index": index, **fields}, {"public_keys": table})
            for index, site in enumerate(order)
        }

    def read_reply(self, site, frame):
        def fail(reason):
            raise InvalidClientMessage(f"client {site!r}: {reason}", site)

        if self._stage == "keys":
            key = frame.arrays.get("public_key")
            if frame.fields or set(frame.arrays) != {"public_key"} or not (
                isinstance(key, np.ndarray) and key.dtype == np.uint8 and key.shape == (32,)
            ):
                fail("a key reply must be one 32-byte uint8 public key.")
            return key.copy()
        if set(frame.fields) != {"single_target"} or type(
                frame.fields["single_target"]) is not bool:
            fail("a release must say (only) whether y was one-dimensional.")
        n_targets = frame.schema.get("n_targets")
        if not (type(n_targets) is int and n_targets > 0) or (
                frame.fields["single_target"] and n_targets != 1):
            fail(f"the reply's number of targets {n_targets!r} is not valid.")
        local = self.estimator.noise == "local"
        name, dtype = ("sums", np.int64) if local else ("masked", np.uint64)
        p = n_released(frame.schema["n_features"], n_targets, self.estimator.fit_intercept)
        vector = frame.arrays.get(name)
        if set(frame.arrays) != {name} or not (
            isinstance(vector, np.ndarray) and vector.dtype == dtype and vector.shape == (p,)
        ):
            fail(f"a {self.estimator.noise} release must be one {np.dtype(dtype).name} vector "
                 f"{name!r} of length {p}.")
        if local and np.any(np.abs(vector) > max_abs_encoded(len(self._open))):
            fail(f"its sums exceed the fixed-point range of {len(self._open)} sites.")
        return frame.fields["single_target"], n_targets, vector

    def cross_check(self, replies):
        """The same vector (or public key) under two sites is a replay: refuse the second."""
        refused, seen = {}, {}
        for site in sorted_labels(replies):
            reply = replies[site]
            data = (reply if self._stage == "keys" else reply[2]).tobytes()
            if data in seen:
                refused[site] = InvalidClientMessage(
                    f"client {site!r}: sent the same {self._stage} as site {seen[data]!r} "
                    "(replayed).", site)
            else:
                seen[data] = site
        return refused

    def apply(self, replies, ledger):
        if self._stage == "keys":
            self._public_keys = {
                label_key(site): (site, replies[site]) for site in sorted_labels(replies)
            }
            return
        estimator = self.estimator
        schema = self.schema
        d = schema.n_features
        order = sorted_labels(replies)
        single_target, t, first = replies[order[0]]
        if any(replies[site][0] != single_target for site in order):
            raise InvalidClientMessage(
                "the sites disagree on whether y is one-dimensional.", order[-1])
        p = first.shape[0]
        n_sharing = 1 if self._masked_sites is None else len(self._masked_sites)
        plan = ReleasePlan(
            epsilon=float(estimator.epsilon), delta=float(estimator.delta),
            calibration=estimator.calibration, feature_bound=float(estimator.feature_bound),
            target_bound=float(estimator.target_bound), fit_intercept=estimator.fit_intercept,
            n_values=p, n_sharing=n_sharing,
        )
        vectors = {site: replies[site][2] for site in order}
        if self._masked_sites is None:
            total = np.sum([vectors[site] for site in order], axis=0, dtype=np.int64)
        else:
            masked, self._masked_sites = self._masked_sites, None
            self._public_keys = None  # keys are used for one masked round only
            total = unmask_sum(vectors, p, parties=masked)
        released = fixed_point_decode(total, plan.exponent)
        previous = getattr(estimator, "_noisy_sums", None) if self.warm_start else None
        if previous is not None:
            released = released + previous
        alpha = estimator._checked_alpha(t)
        if self.warm_start and previous is not None:
            single_target = estimator._single_target
        coef, summary = estimator._solve(released, d, t, alpha, single_target, plan)
        privacy = PrivacyLedger() if getattr(estimator, "_privacy", None) is None else (
            estimator._privacy.copy())
        privacy.record(plan.noise_multiplier)
        ledger.n_parameters = estimator._n_parameters(d, t)
        labels = estimator._known_labels(
            estimator.clients_ if previous is not None else [], replies
        )
        # commit: nothing above touched the estimator
        estimator._noisy_sums = released
        estimator._n_targets = t
        estimator._fit_intercept = estimator.fit_intercept
        estimator._single_target = single_target
        estimator._privacy = privacy
        estimator.epsilon_ = float(estimator.epsilon)
        estimator.delta_ = float(estimator.delta)
        estimator.sensitivity_ = plan.sensitivity
        estimator.noise_std_ = plan.noise_std
        estimator.n_releases_ = len(privacy)
        estimator.communication_ = ledger
        estimator.clients_ = labels
        estimator.n_clients_ = len(labels)
        estimator._set_schema(schema, d)
        estimator._set_coef(summary, coef, self.round_dtype.type)
        self._done = True


class PrivateFederatedRidge(BaseFederatedRidge):
    """Federated ridge with (epsilon, delta)-differential privacy for every row.

    Each site clips its rows to ``||x||_2 <= feature_bound`` and
    ``|y| <= target_bound`` (data-independent bounds, never read from the
    data), sums the statistics of the clipped rows, adds Gaussian noise once
    and sends the result (Algorithm 2 of the one-shot federated ridge paper,
    with a corrected sensitivity). The server sums the messages, derives the
    centered Gram and moment, optionally projects the noisy Gram onto the
    positive semi-definite cone (post-processing: free in privacy) and solves.

    Everything released (counts, sums, the packed upper triangle of the Gram,
    the moment) is covered by **one** joint L2 sensitivity under
    add/remove-one-row adjacency,
    ``sqrt(1 + Bx^2 + By^2 + Bx^4 + Bx^2 By^2)`` with an intercept and
    ``sqrt(Bx^4 + Bx^2 By^2)`` without, so one release is (epsilon, delta)-DP
    in total. Read more in the :ref:`User Guide <private_projected>`.

    Parameters
    ----------
    alpha : float or ndarray of shape (n_targets,), default=1.0
        Non-negative L2 penalty, as in :class:`~sklearn.linear_model.Ridge`.
    epsilon : float, default=1.0
        Privacy budget of one release, > 0; ``np.inf`` disables the noise
        (then the result equals FederatedRidge on the clipped rows).
    delta : float, default=1e-5
        In (0, 1).
    feature_bound : float, default=1.0
        Rows are scaled to L2 norm at most this (> 0). Choose it from domain
        knowledge, not from the data (a bound read from the data leaks it):
        :class:`~sklearn_fed.privacy.RangeScaler` maps features from known
        ranges to rows of norm at most 1, the default.
    target_bound : float, default=1.0
        Targets are clipped to ``[-target_bound, target_bound]`` (per-row L2
        norm for several targets), > 0.
    noise : {"local", "distributed"}, default="local"
        ``"local"``: each site adds noise of std ``tau`` (the paper's
        protocol; every message is private on its own). ``"distributed"``:
        each of the K sites adds std ``tau / sqrt(K)`` and the messages are
        masked for secure aggregation (X25519 key agreement between sites),
        so only the sum, whose noise has std ``tau``, is revealed. Valid
        under that protocol's trust model (the server relays keys faithfully
        and does not collude with sites).
    calibration : {"analytic", "classic"}, default="analytic"
        ``"analytic"``: the analytic Gaussian mechanism (Balle & Wang 2018)
        through ``dp-accounting`` (extra ``dp``), valid for any epsilon.
        ``"classic"``: ``tau = Delta sqrt(2 ln(1.25/delta)) / epsilon`` as in
        the paper; proved only for epsilon < 1 (a warning is issued otherwise).
    psd_projection : bool, default=True
        Project the noisy centered Gram onto the PSD cone before solving.
    fit_intercept : bool, default=True
        Fit an unpenalized intercept (sites then also release counts and sums).
    random_state : int, RandomState instance or None, default=None
        ``None`` (use it for privacy): every release of every site draws
        fresh noise from the operating system's entropy, which no seeding
        elsewhere in the program can reproduce. An integer makes runs
        reproducible (each release and site still gets its own stream), but
        **anyone who knows it can subtract the noise**: for tests only.

    Attributes
    ----------
    coef_ : ndarray of shape (n_features,) or (n_targets, n_features)
        Coefficients, in the dtype of ``X``.
    intercept_ : float or ndarray of shape (n_targets,)
        Intercept; ``0.0`` when ``fit_intercept=False``.
    epsilon_ : float
        Epsilon of the last release.
    delta_ : float
        Delta of the last release.
    sensitivity_ : float
        L2 sensitivity the last release was calibrated to: the joint
        sensitivity plus the grid's rounding (at most 2^-10 more).
    noise_std_ : float
        ``tau``: std of the noise on each coordinate of the *sum* of one
        release for ``"distributed"``, and of each site's message for
        ``"local"`` (then the sum carries ``K tau^2``).
    privacy_spent_ : tuple of (float, float)
        ``(epsilon, delta)`` of every release of this estimator so far
        (each ``fit``, refits included, and each ``partial_fit``), composed
        exactly (Gaussian releases compose to one Gaussian) at ``delta``.
    n_releases_ : int
        Number of releases composed in ``privacy_spent_``.
    clipped_share_ : float
        Share of the rows of the last ``fit``/``partial_fit`` that clipping
        changed (simulation only: in a deployment each site sees its own).
    n_features_in_ : int
        Number of features seen during fit.
    feature_names_in_ : ndarray of shape (n_features,)
        Names of features seen during fit, when ``X`` has string column names.
    clients_ : ndarray of shape (n_clients,)
        Labels of the clients whose releases were aggregated.
    n_clients_ : int
        Number of clients.
    communication_ : CommunicationLedger
        Bytes of the tasks and replies.

    See Also
    --------
    FederatedRidge : The exact, non-private estimator.
    sklearn_fed.privacy.RangeScaler : Rows of norm <= 1 from known feature ranges.
    sklearn_fed.privacy.SecureAggregator : The secure sum, run in one process.

    Notes
    -----
    ``sample_weight`` multiplies a row's contribution; the guarantee is for
    one row of weight at most 1, and a row of weight ``w > 1`` is protected
    like a group of ``ceil(w)`` rows.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_fed import PrivateFederatedRidge
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(-1, 1, size=(4000, 3)) / np.sqrt(3)
    >>> y = X @ np.array([1.0, -0.5, 0.25])
    >>> clients = np.repeat(np.arange(4), 1000)
    >>> model = PrivateFederatedRidge(alpha=1.0, epsilon=2.0, random_state=0)
    >>> model = model.fit(X, y, clients=clients)
    >>> bool(np.abs(model.coef_ - [1.0, -0.5, 0.25]).max() < 0.1)
    True
    >>> round(model.privacy_spent_[0], 3), model.privacy_spent_[1], model.clipped_share_
    (2.0, 1e-05, 0.0)
    """

    _parameter_constraints: dict = {
        **BaseFederatedRidge._parameter_constraints,
        "epsilon": [Interval(Real, 0, None, closed="neither"), Options(Real, {np.inf})],
        "delta": [Interval(Real, 0, 1, closed="neither")],
        "feature_bound": [Interval(Real, 0, None, closed="neither")],
        "target_bound": [Interval(Real, 0, None, closed="neither")],
        "noise": [StrOptions({"local", "distributed"})],
        "calibration": [StrOptions({"analytic", "classic"})],
        "psd_projection": ["boolean"],
        "random_state": ["random_state"],
    }

    _server_role = PrivateServer
    # Set by fit from the simulated sites' counts, not by the server.
    _simulation_only_attributes = ("clipped_share_",)
    _client_role = PrivateClient

    # A non-finite X reaches every clipped sum, which a site refuses to encode.
    _finite_from_statistics = True

    @property
    def _without_clients(self):  # what fit does without clients (MissingClientsWarning)
        if self.noise == "local" and self.epsilon != float("inf"):
            return ("the noise is added once, as by one site holding every row; K sites "
                    "add it K times, so the simulated accuracy is optimistic")
        return None  # the total noise does not depend on the number of sites

    _dask_rows = "partitions"

    def __init__(
        self,
        alpha=1.0,
        *,
        epsilon=1.0,
        delta=1e-5,
        feature_bound=1.0,
        target_bound=1.0,
        noise="local",
        calibration="analytic",
        psd_projection=True,
        fit_intercept=True,
        random_state=None,
    ):
        self.alpha = alpha
        self.epsilon = epsilon
        self.delta = delta
        self.feature_bound = feature_bound
        self.target_bound = target_bound
        self.noise = noise
        self.calibration = calibration
        self.psd_projection = psd_projection
        self.fit_intercept = fit_intercept
        self.random_state = random_state

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # Calibrated noise with data-independent bounds gives no R^2 guarantee
        # on data of arbitrary scale and size (scikit-learn's check asks for
        # R^2 > 0.5 on 200 standardized rows; at epsilon=1 the noise there
        # dominates the Gram). This tag is the declared way to say so.
        tags.regressor_tags.poor_score = True
        return tags

    @_fit_context(prefer_skip_nested_validation=True)
    @atomic
    def fit(self, X, y, sample_weight=None, clients=None):
        """Fit from one private release of every client's statistics.

        A refit is a new release with fresh noise, and is counted in
        ``privacy_spent_`` with every earlier release of this estimator.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
        sample_weight : array-like of shape (n_samples,), default=None
        clients : array-like of shape (n_samples,), default=None
            Client label of each row. ``None``: one client.

        Returns
        -------
        self : PrivateFederatedRidge
        """
        return self._fit(X, y, sample_weight, clients)

    @_fit_context(prefer_skip_nested_validation=True)
    @atomic
    def partial_fit(self, X, y, sample_weight=None, clients=None):
        """Add a further private release (new rows) and refit.

        The released sums add up, so the model uses all rows seen; each call
        is a new release and ``privacy_spent_`` composes all of them. A call
        that raises leaves the estimator unchanged.

        Parameters
        ----------
        X, y, sample_weight, clients
            As in :meth:`fit`.

        Returns
        -------
        self : PrivateFederatedRidge
        """
        return self._fit(X, y, sample_weight, clients, partial=True)

    @property
    def privacy_spent_(self):
        """``(epsilon, delta)`` of every release so far (computed when read)."""
        privacy = self.__dict__.get("_privacy")
        if privacy is None:
            raise AttributeError("privacy_spent_ is set by fit or partial_fit.")
        return privacy.epsilon(self.delta_), self.delta_

    def _fitted_state(self):
        """``(n_targets, centered)`` of the releases ``partial_fit`` adds to, or None."""
        if getattr(self, "_noisy_sums", None) is None:
            return None
        return self._n_targets, self._fit_intercept

    def _run_sites(self, X, y, sample_weight, labels, rows, *, warm_start=False, clients=None):
        server, client = super()._run_sites(X, y, sample_weight, labels, rows,
                                            warm_start=warm_start)
        n_clipped = sum(count for _, count, _ in client.clipped_.values())
        n_rows = sum(total for _, _, total in client.clipped_.values())
        self.clipped_share_ = n_clipped / n_rows if n_rows else 0.0
        if self.clipped_share_ > CLIPPED_SHARE_WARNING:
            warn(_clipping_message(self.clipped_share_, "the sites"), ClippingWarning)
        return server, client

    def _solve(self, total, d, t, alpha, single_target, plan):
        """Server side: derive centered statistics from the noisy sums and solve."""
        w, sx, sy, gram, moment = _unpack(total, d, t, self.fit_intercept)
        noisy = plan.noise_std > 0
        if self.fit_intercept:
            if noisy:
                # Post-processing: a noisy count below one row would blow up the means.
                w = max(w, 1.0)
            elif not w > 0:
                raise ValueError("The sum of sample weights must be positive.")
            x_mean, y_mean = sx / w, sy / w
            gram = gram - np.outer(sx, x_mean)
            moment = moment - np.outer(sx, y_mean)
        else:
            x_mean, y_mean = np.zeros(d), np.zeros(t)
        spectrum = None
        if self.psd_projection:
            gram, eigenpairs = _psd_projection(gram)
            if eigenpairs is not None:  # the eigen path needs no second decomposition
                spectrum = numerical_range(gram, eigenpairs=eigenpairs)
        coef = _solve_gram(gram, moment, alpha, spectrum=spectrum)[0]
        summary = types.SimpleNamespace(
            x_mean=x_mean, y_mean=y_mean, n_targets=t, single_target=single_target
        )
        return coef, summary
