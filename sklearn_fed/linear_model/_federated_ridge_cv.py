"""FederatedRidgeCV: RidgeCV's interface, every mode a run of the protocol.

Three ways to hold data out, all computed by the sites from their own rows:

- ``cv=None``: leave-one-*row*-out, as :class:`sklearn.linear_model.RidgeCV`
  (its "GCV" mode). After the statistics round the server sends every site
  the spectrum of the pooled problem; each site returns, per alpha, sums of
  its rows' leave-one-out residuals (closed form, no refit).
- ``cv="clients"``: leave-one-*client*-out (Proposition 5 of the one-shot
  paper) from the statistics round alone: the model without client k is a
  merge of the other clients' messages, and client k's held-out error
  follows from its own statistics.
- ``cv`` an int, splitter or iterable (as in RidgeCV): the server gives each
  site the fold membership of its rows; sites return the statistics of
  their rows in each fold's training and test sets.

Scores that are sums over rows (squared error, R^2, explained variance) are
computed from those sums; any other scorer needs every held-out row's
prediction and target at the server, which a further round collects.
"""

import numbers
import warnings
from numbers import Real

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin, is_classifier
from sklearn.metrics import (
    check_scoring,
    explained_variance_score,
    get_scorer_names,
    mean_squared_error,
    r2_score,
    root_mean_squared_error,
)
from sklearn.model_selection import check_cv
from sklearn.utils import check_scalar
from sklearn.utils.extmath import safe_sparse_dot

from .._compat import Interval, StrOptions, _fit_context, scorer_parts
from ..protocol import (
    BlockwiseClient,
    CommunicationLedger,
    InvalidClientMessage,
    atomic,
    label_key,
    run_simulation,
    sorted_labels,
)
from ..statistics import (
    ClientStatistics,
    check_aggregate,
    merge_statistics,
)
from ..statistics._validation import MAX_WEIGHT as _MAX_WEIGHT
from ._base import (
    BaseFederatedRidge,
    StatisticsServer,
    _solve_gram,
    factor_range,
    numerical_range,
    requested_form,
    solve_statistics,
    task_field,
)

__all__ = ["FederatedRidgeCV"]

# Scorers whose value on a set of rows follows from sums over those rows.
_DECOMPOSABLE = {
    mean_squared_error: "mse",
    root_mean_squared_error: "rmse",
    r2_score: "r2",
    explained_variance_score: "explained_variance",
}
#: Value of ``criterion`` for the one-shot paper's pooled criterion.
POOLED = "pooled_squared_error"
_MEAN = "mean_fold_score"


# ------------------------------------------------------------------ scoring
class _IdentityRegressor(RegressorMixin, BaseEstimator):
    """Scores held-out predictions with a scorer: ``predict(P)`` returns ``P``."""

    def fit(self, X, y=None):
        return self

    def predict(self, X):
        return X


def _scorer_kind(scorer):
    """``"default"``, a decomposable kind (``"mse"``, ...) or None for any other scorer."""
    if scorer is None:
        return "default"
    score_func, _, kwargs, response = scorer_parts(scorer)
    kind = _DECOMPOSABLE.get(score_func)
    if kind is None or response != "predict" or set(kwargs) - {"multioutput"}:
        return None
    if kwargs.get("multioutput", "uniform_average") != "uniform_average":
        return None
    return kind


class _Sums:
    """Sums over held-out rows from which decomposable scores follow.

    ``count`` rows, ``weight`` their weight; per target and alpha ``e1`` the
    weighted sum and ``e2`` the weighted sum of squares of the residuals;
    per target ``sst`` the weighted sum of squares of the targets around
    their (weighted) mean.
    """

    def __init__(self, count, weight, e1, e2, sst):
        self.count, self.weight = int(count), float(weight)
        self.e1, self.e2, self.sst = e1, e2, sst

    def __add__(self, other):  # rows of both sets; sst needs the pooled mean
        return _Sums(self.count + other.count, self.weight + other.weight,
                     self.e1 + other.e1, self.e2 + other.e2, self.sst + other.sst)

    def scores(self, kind, sign, per_target):
        """Scores of shape (n_targets, n_alphas), or (n_alphas,) averaged over targets.

        As scikit-learn's metrics with ``multioutput="uniform_average"``, and
        their conventions for constant targets (``force_finite``) and for
        R^2 on fewer than two rows (NaN).
        """
        W = self.weight
        if kind == "mse":
            values = self.e2 / W
        elif kind == "rmse":
            values = np.sqrt(self.e2 / W)
        else:
            numerator = self.e2 if kind == "r2" else self.e2 - self.e1**2 / W
            denominator = np.broadcast_to(self.sst[:, None], numerator.shape)
            values = np.ones_like(numerator)
            valid = (denominator != 0) & (numerator != 0)
            values[valid] = 1 - numerator[valid] / denominator[valid]
            values[(numerator != 0) & (denominator == 0)] = 0.0
            if kind == "r2" and self.count < 2:
                values = np.full_like(numerator, np.nan)
        return sign * (values if per_target else values.mean(axis=0))


def _held_out_sums(held, coef, intercept):
    """:class:`_Sums` of a model (per alpha) on the rows of ``held`` (statistics).

    ``coef`` is (n_features, n_targets, n_alphas), ``intercept`` (n_targets,
    n_alphas). Centered statistics: ``sum w e^2 = SSE around the held-out
    means + W gap^2`` with ``gap`` the mean residual; the SSE is
    ``|R_x c - R_y|^2`` from a factor, ``S_yy - 2 c.h + c^T G c`` from a Gram.
    """
    W = held.weight_sum
    d, t, n_alphas = coef.shape
    flat = coef.reshape(d, t * n_alphas)  # matrix products (BLAS), not einsum loops
    mean_residual = held.y_mean[:, None] - intercept - (held.x_mean @ flat).reshape(t, n_alphas)
    if held.factor is not None:
        residual = (held.factor[:, :d] @ flat).reshape(-1, t, n_alphas) - held.factor[:, d:, None]
        spread = np.sum(residual * residual, axis=0)
    else:
        spread = (
            held.target_ss[:, None]
            - 2 * np.sum(held.moment[:, :, None] * coef, axis=0)
            + np.sum(flat * (held.gram @ flat), axis=0).reshape(t, n_alphas)
        )
    if held.centered:
        e2 = spread + W * mean_residual**2
        sst = held.target_ss
    else:  # raw statistics (fit_intercept=False): the intercept is 0
        e2 = spread
        sst = held.target_ss - W * held.y_mean**2
    return _Sums(held.n_samples, W, W * mean_residual, np.maximum(e2, 0.0), np.maximum(sst, 0.0))


def _held_out_sse(held, rest, alphas):
    """Weighted squared error (n_targets, n_alphas) on ``held``'s rows of ridge fitted on ``rest``."""
    coef = _coef_path(_spectrum(rest), alphas)
    return _held_out_sums(held, coef, _intercepts(rest, coef)).e2


# ------------------------------------------------------------------ algebra
def _spectrum(stats):
    """``(eigenvalues, basis, projected)`` of ridge on ``stats``, for any number of alphas.

    ``coef(alpha) = basis @ (projected / (eigenvalues + alpha))``: from the
    numerical range of the Gram, or from the SVD of a factor (eigenvalues
    ``s^2``, ``projected = s U^T R_y``, never squaring ``X``'s condition).
    """
    if stats.factor is not None:
        s, Vt, projected = factor_range(stats.factor, stats.n_features)
        return s * s, Vt.T, s[:, None] * projected
    eigenvalues, Q = numerical_range(stats.gram)
    return eigenvalues, Q, Q.T @ stats.moment


def _coef_path(spectrum, alphas):
    """Coefficients (n_features, n_targets, n_alphas) and their intercept rule."""
    eigenvalues, basis, projected = spectrum
    scaled = projected[:, :, None] / (eigenvalues[:, None, None] + alphas)
    return (basis @ scaled.reshape(scaled.shape[0], -1)).reshape(basis.shape[0], *scaled.shape[1:])


def _intercepts(stats, coef):
    if not stats.centered:
        return np.zeros(coef.shape[1:])
    return stats.y_mean[:, None] - (stats.x_mean @ coef.reshape(coef.shape[0], -1)).reshape(
        coef.shape[1:])


def _complements(statistics):
    """For each client, the merged statistics of all the others, in order.

    Divide and conquer: the complement of a half is the complement of the
    whole merged with the other half. Every step is an exact merge, never a
    subtraction, in ``O(d^2 log K)`` memory.
    """

    def recurse(lo, hi, outside):
        if hi - lo == 1:
            yield outside
            return
        mid = (lo + hi) // 2
        left = merge_statistics(statistics[lo:mid])
        right = merge_statistics(statistics[mid:hi])
        yield from recurse(lo, mid, right if outside is None else outside.merge(right))
        yield from recurse(mid, hi, left if outside is None else outside.merge(left))

    yield from recurse(0, len(statistics), None)


def _leave_one_out(task, X, y, sample_weight):
    """A site's leave-one-out predictions (n_rows, n_targets, n_alphas), in closed form.

    With ``z = Q^T (x - x_mean)``: the full-data prediction is ``y_mean +
    z . (Q^T h / (l + alpha))``, the leverage ``h = w sum z^2 / (l + alpha)
    (+ w / W with an intercept)``, and the leave-one-out residual is the
    residual divided by ``1 - h`` (exact for ridge, no refit).

    When the pooled rows are linearly independent (``interpolating``: as
    many nonzero eigenvalues as rows, less one with an intercept, e.g. wide
    data), every row has leverage 1 at ``alpha = 0`` and fits exactly, so
    residual and ``1 - h`` are both ``O(alpha)``: computed as differences
    they would lose ``log10(l / alpha)`` digits. Their exact expansions
    ``alpha sum z p / (l (l + alpha))`` and ``alpha w sum z^2 / (l (l +
    alpha))`` are used instead, and ``alpha`` cancels in the ratio.
    """
    arrays = task.arrays
    alphas = np.asarray(arrays["alphas"])
    centered = task_field(task, "centered", bool)
    eigenvalues, basis, projected = arrays["eigenvalues"], arrays["basis"], arrays["projected"]
    Z = safe_sparse_dot(X, basis, dense_output=True)
    if centered:
        Z = Z - arrays["x_mean"] @ basis
    w = np.ones(X.shape[0]) if sample_weight is None else sample_weight
    inverse = 1.0 / (eigenvalues[:, None] + alphas)  # (k, n_alphas)
    fitted = _through_spectrum(Z, projected, inverse)
    if centered:
        fitted += arrays["y_mean"][None, :, None]
    leverage = w[:, None] * ((Z * Z) @ inverse)
    if centered:
        leverage += (w / task_field(task, "weight_sum", float))[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):  # leverage 1: as RidgeCV, inf/NaN
        residual = (y[:, :, None] - fitted) / (1.0 - leverage[:, None, :])
    small = alphas <= (eigenvalues.min() if eigenvalues.size else 0.0)
    if task.fields.get("interpolating") is True and np.any(small):
        # For alpha below the spectrum the differences lose the most digits.
        inverse = 1.0 / (eigenvalues[:, None] * (eigenvalues[:, None] + alphas[small]))
        residual[:, :, small] = _through_spectrum(Z, projected, inverse) / (
            w[:, None, None] * ((Z * Z) @ inverse)[:, None, :])
    return y[:, :, None] - residual


def _through_spectrum(Z, projected, inverse):
    """``sum_k Z[n, k] projected[k, t] inverse[k, a]`` as one matrix product: (n, t, a)."""
    k, t = projected.shape
    weights = (projected[:, :, None] * inverse[:, None, :]).reshape(k, -1)
    return (Z @ weights).reshape(Z.shape[0], t, inverse.shape[1])


# ------------------------------------------------------------- messages
def _pack(named):
    """Several statistics in one message: fields and arrays prefixed by name."""
    fields, arrays = {}, {}
    for name, stats in named.items():
        f, a = stats.to_payload()
        fields.update({f"{name}.{k}": v for k, v in f.items()})
        arrays.update({f"{name}.{k}": v for k, v in a.items()})
    return fields, arrays


def _unpack(fields, arrays, site):
    """The statistics of a reply made by :func:`_pack`, validated, by name."""
    unprefixed = sorted(key for key in list(fields) + list(arrays) if "." not in key)
    if unprefixed:
        raise InvalidClientMessage(
            f"client {site!r}: unexpected entries {unprefixed} (every entry is "
            "'<statistics>.<name>').", site)
    names = {key.split(".", 1)[0] for key in list(fields) + list(arrays)}
    named = {}
    for name in sorted(names):
        part = {k.split(".", 1)[1]: v for k, v in fields.items() if k.split(".", 1)[0] == name}
        data = {k.split(".", 1)[1]: v for k, v in arrays.items() if k.split(".", 1)[0] == name}
        named[name] = ClientStatistics.from_payload(part, data, client=site, psd=False)
    return named


def _checked_array(frame, name, shape, site):
    array = frame.arrays.get(name)
    if not (isinstance(array, np.ndarray) and array.dtype == np.float64 and array.shape == shape
            and np.all(np.isfinite(array))):
        raise InvalidClientMessage(
            f"client {site!r}: {name} must be a finite float64 array of shape {shape}.", site
        )
    return array


class _Block:
    """A :class:`CVClient` answer over one block of a site's rows, before packing.

    ``named`` holds the statistics of a statistics step; otherwise
    ``fields`` (row count and weight, which add) and ``arrays``: those in
    ``_SUMMED`` add over blocks, the others hold one entry per row and
    follow in row order. ``whole``: the task indexed the site's rows, so
    the block must be all of them.
    """

    def __init__(self, fields=None, arrays=None, *, named=None, whole=False):
        self.fields, self.arrays, self.named, self.whole = fields, arrays, named, whole

    def merge(self, other):
        if self.whole or other.whole:
            raise ValueError(
                "the task indexes the site's rows (fold membership or held-out rows), so "
                "they must come in one block; put each site's rows in one partition.")
        if self.named is not None:
            return _Block(named={name: stats.merge(other.named[name])
                                 for name, stats in self.named.items()})
        fields = {name: value + other.fields[name] for name, value in self.fields.items()}
        arrays = {
            name: value + other.arrays[name] if name in _SUMMED
            else np.concatenate([value, other.arrays[name]])
            for name, value in self.arrays.items()
        }
        return _Block(fields, arrays)


#: Arrays of a leave-one-out answer that are sums over rows.
_SUMMED = ("e1", "e2", "sst")


class CVClient(BlockwiseClient):
    """A site of :class:`FederatedRidgeCV`: statistics, leave-one-out sums, predictions.

    Task steps: ``"statistics"`` (the site's statistics, or with a
    ``folds`` array (n_rows, n_folds) of codes 1 = train, 2 = test, also
    those of each fold's training rows and test rows);
    ``"leave_one_out"`` (given the pooled spectrum: per alpha, sums of the
    leave-one-out residuals, and on request every row's value);
    ``"predict"`` (given models: predictions and targets of the rows each
    model holds out).

    Every answer is a reduction over the site's rows (statistics merge,
    sums add, per-row values follow in row order), so the rows may come in
    blocks (Dask partitions), except for tasks whose arrays index the
    site's rows (``folds``, a predict task's ``rows``), which need one block.
    """

    protocol = "ridge.cv"

    def replies_are_independent(self, tasks):
        # Every step reads only the task and the site's rows (no state kept).
        return type(self) is CVClient

    def summarize(self, task, X, y, sample_weight, rows):
        step = task_field(task, "step", str)
        if rows is not None:
            X, y = X[rows], y[rows]
            sample_weight = None if sample_weight is None else sample_weight[rows]
        y = np.asarray(y, dtype=np.float64)
        y2 = y.reshape(y.shape[0], -1)
        if step == "statistics":
            named = self._statistics(task, X, y, sample_weight)
            return _Block(named=named, whole="folds" in task.arrays)
        if step == "leave_one_out":
            return _Block(*self._leave_one_out(task, X, y2, sample_weight))
        if step == "predict":
            fields, arrays = self._predict(task, X, y2, sample_weight)
            whole = any(name.startswith("rows") for name in task.arrays)
            return _Block(fields, arrays, whole=whole)
        raise InvalidClientMessage(f"server: unknown task step {step!r}.", "server")

    def merge(self, first, second):
        return first.merge(second)

    def finish(self, task, summary):
        if summary.named is not None:
            return _pack(summary.named)
        return summary.fields, summary.arrays

    def _statistics(self, task, X, y, sample_weight):
        centered = task_field(task, "centered", bool)
        factor = requested_form(task) == "factor"

        def stats(index=None):
            return ClientStatistics.from_data(
                X, y, sample_weight, centered=centered, rows=index, factor=factor,
                check_input=False,
            )

        named = {"all": stats()}
        folds = task.arrays.get("folds")
        if folds is not None:
            if not (isinstance(folds, np.ndarray) and folds.ndim == 2
                    and folds.shape[0] == X.shape[0] and np.isin(folds, (0, 1, 2)).all()):
                raise InvalidClientMessage("server: malformed fold membership.", "server")
            for j in range(folds.shape[1]):
                for code, part in ((1, "train"), (2, "test")):
                    index = np.flatnonzero(folds[:, j] == code)
                    if index.size:
                        named[f"{part}{j}"] = stats(index)
        return named

    def _leave_one_out(self, task, X, y, sample_weight):
        arrays = task.arrays
        d, t = X.shape[1], y.shape[1]
        alphas = arrays.get("alphas")
        basis = arrays.get("basis")
        if not (isinstance(basis, np.ndarray) and basis.ndim == 2 and basis.shape[0] == d
                and isinstance(alphas, np.ndarray) and alphas.ndim == 1
                and arrays.get("projected") is not None
                and arrays["projected"].shape == (basis.shape[1], t)):
            raise InvalidClientMessage("server: malformed leave-one-out task.", "server")
        predictions = _leave_one_out(task, X, y, sample_weight)
        w = np.ones(X.shape[0]) if sample_weight is None else sample_weight
        residual = y[:, :, None] - predictions
        y_mean = arrays["y_mean"]
        sums = {
            "e1": np.tensordot(w, residual, axes=1),
            "e2": np.tensordot(w, residual**2, axes=1),
            "sst": w @ (y - y_mean) ** 2,
        }
        fields = {"count": int(X.shape[0]), "weight": float(w.sum())}
        kept = task.fields.get("keep_rows")
        if kept == "squared_errors":
            sums["rows"] = w[:, None, None] * residual**2
        elif kept in ("predictions", "scoring"):
            sums["rows"] = predictions
        if kept == "scoring":
            sums["targets"] = y
            sums["weights"] = w
        return fields, sums

    def _predict(self, task, X, y, sample_weight):
        d = X.shape[1]
        fields, arrays = {}, {}
        for name, coef in task.arrays.items():
            if not name.startswith("coef"):
                continue
            key = name[len("coef"):]
            intercept = task.arrays.get(f"intercept{key}")
            if not (coef.ndim == 3 and coef.shape[0] == d and intercept is not None
                    and intercept.shape == coef.shape[1:]):
                raise InvalidClientMessage("server: malformed predict task.", "server")
            index = task.arrays.get(f"rows{key}")
            index = np.arange(X.shape[0]) if index is None else index
            if not (index.ndim == 1 and np.all((0 <= index) & (index < X.shape[0]))):
                raise InvalidClientMessage("server: malformed predict task.", "server")
            flat = safe_sparse_dot(X[index], coef.reshape(d, -1), dense_output=True)
            arrays[f"predictions{key}"] = flat.reshape(index.size, *coef.shape[1:]) + intercept
            arrays[f"targets{key}"] = y[index]
            arrays[f"weights{key}"] = (
                np.ones(index.size) if sample_weight is None else sample_weight[index]
            )
        return fields, arrays


# --------------------------------------------------------------- the server
class FederatedRidgeCVServer(StatisticsServer):
    """Server of :class:`FederatedRidgeCV` (the rounds are in the module docstring).

    Round 1 collects statistics (again as factors if ``solver="auto"`` finds
    the pooled Gram too ill-conditioned for the smallest alpha); then
    ``cv=None`` takes a leave-one-out round, and a scorer that is not a sum
    over rows takes a prediction round. The model is committed only after
    the last round.

    Attributes
    ----------
    folds : dict or None
        ``{site: ndarray (n_rows, n_folds)}``: for ``cv`` a splitter, each
        site's rows' membership in each fold (0 none, 1 train, 2 test).
        ``fit`` sets it from the splitter run on the pooled rows; a
        deployment sets it from the folds the sites' rows belong to.
    positions : dict or None
        ``{site: ndarray}``: each site's rows' positions in ``X``, so that
        per-row results are in ``X``'s order (``fit`` sets it; otherwise
        rows are in site-label order).
    """

    protocol = "ridge.cv"

    def __init__(self, estimator, **kwargs):
        super().__init__(estimator, **kwargs)
        self.step = "statistics"
        self.folds = None
        self.positions = None
        self.test_order = None
        self._site_arrays = None
        self._sent = {}

    # ---------------------------------------------------------------- plan
    def _request(self, step, fields=None, site_arrays=None):
        """Ask for one more round of ``step``; ``site_arrays(site)`` gives each task's arrays."""
        self.step = step
        self._sent = dict(fields or {})
        self._site_arrays = site_arrays
        self.request_round(step=step, form=self.form, **self._sent)

    def plan(self, sites):
        if self._next_round != self.round:
            return {}
        splitter = self.estimator.cv is not None and not isinstance(self.estimator.cv, str)
        if self.step == "statistics" and splitter:
            self._plan_folds(sites)
            self._site_arrays = lambda site: {"folds": self.folds[label_key(site)]}
        fields = {"step": self.step, "centered": bool(self.estimator.fit_intercept)}
        if self.step == "statistics" and self.robust is not None:
            fields.update(self.robust.task_fields())
        fields.update((k, v) for k, v in self._next.items()
                      if k != "step" and (k, v) != ("form", "gram"))
        plan = {}
        for site in sites:
            if self.step != "statistics" and label_key(site) not in self._statistics:
                continue  # only sites whose statistics were merged take part later
            arrays = {} if self._site_arrays is None else self._site_arrays(site)
            if arrays is not None:
                plan[site] = (dict(fields), arrays)
        return plan

    # ---------------------------------------------------------------- read
    def read_reply(self, site, frame):
        if self.step == "statistics":
            return self._read_statistics(site, frame)
        if self.step == "leave_one_out":
            return self._read_sums(site, frame)
        return self._read_predictions(site, frame)

    def _read_statistics(self, site, frame):
        named = _unpack(frame.fields, frame.arrays, site)
        if "all" not in named:
            raise InvalidClientMessage(f"client {site!r}: no statistics of its rows.", site)
        for stats in named.values():
            problem = None
            if stats.n_features != frame.schema["n_features"]:
                problem = (f"statistics have {stats.n_features} features, expected "
                           f"{frame.schema['n_features']}")
            elif stats.n_targets != self._expected_targets(frame):
                problem = f"statistics have {stats.n_targets} targets, its schema says otherwise"
            elif stats.centered != bool(self.estimator.fit_intercept):
                problem = (f"statistics are {'centered' if stats.centered else 'uncentered'} "
                           f"but the task asked for fit_intercept="
                           f"{self.estimator.fit_intercept}")
            if problem:
                raise InvalidClientMessage(f"client {site!r}: {problem}.", site)
            if self.robust is not None:
                self.robust.check(site, stats)
        if self.folds is not None:
            membership = self.folds[label_key(site)]
            expected = {"all"}
            for j in range(membership.shape[1]):
                for code, part in ((1, "train"), (2, "test")):
                    count = int(np.sum(membership[:, j] == code))
                    stats = named.get(f"{part}{j}")
                    if (0 if stats is None else stats.n_samples) != count:
                        raise InvalidClientMessage(
                            f"client {site!r}: its {part} statistics of fold {j} do not "
                            f"cover its {count} {part} rows.", site)
                    if count:
                        expected.add(f"{part}{j}")
            if set(named) != expected:
                raise InvalidClientMessage(
                    f"client {site!r}: unexpected statistics {sorted(set(named) - expected)}.",
                    site)
        elif set(named) != {"all"}:
            raise InvalidClientMessage(f"client {site!r}: unexpected fold statistics.", site)
        return named

    def _expected_targets(self, frame):
        """Number of targets the statistics of a reply must have: its schema's."""
        return frame.schema.get("n_targets")

    def _read_sums(self, site, frame):
        t, A = self._aggregate.n_targets, len(self._alphas)
        count, weight = frame.fields.get("count"), frame.fields.get("weight")
        if type(weight) is int:
            weight = float(weight) if abs(weight) <= _MAX_WEIGHT else float("inf")
        if not (type(count) is int and type(weight) is float and 0 <= weight <= _MAX_WEIGHT):
            raise InvalidClientMessage(f"client {site!r}: malformed row count or weight.", site)
        rows_of_site = self._statistics[label_key(site)]["all"].n_samples
        if count != rows_of_site:
            raise InvalidClientMessage(
                f"client {site!r}: sums over {count} rows, but its statistics had "
                f"{rows_of_site}.", site)
        sums = _Sums(count, weight, _checked_array(frame, "e1", (t, A), site),
                     _checked_array(frame, "e2", (t, A), site),
                     _checked_array(frame, "sst", (t,), site))
        if np.any(sums.e2 < 0) or np.any(sums.sst < 0):
            raise InvalidClientMessage(f"client {site!r}: negative sums of squares.", site)
        kept = self._sent.get("keep_rows")
        rows = targets = weights = None
        if kept is not None:
            rows = _checked_array(frame, "rows", (count, t, A), site)
        if kept == "scoring":
            targets = _checked_array(frame, "targets", (count, t), site)
            weights = _checked_array(frame, "weights", (count,), site)
        return sums, rows, targets, weights

    def _read_predictions(self, site, frame):
        t, A = self._aggregate.n_targets, len(self._alphas)
        parsed = {}
        for key, count in self._expected_predictions[label_key(site)].items():
            parsed[key] = tuple(
                _checked_array(frame, f"{name}{key}", shape, site)
                for name, shape in (("predictions", (count, t, A)), ("targets", (count, t)),
                                    ("weights", (count,)))
            )
        return parsed

    def cross_check(self, replies):
        """Robust aggregation's checks across sites, on each site's statistics of all its rows."""
        if self.step != "statistics":
            return {}
        return super().cross_check({site: named["all"] for site, named in replies.items()})

    # --------------------------------------------------------------- apply
    def apply(self, replies, ledger):
        if self.step == "statistics":
            self._after_statistics(replies, ledger)
        elif self.step == "leave_one_out":
            self._after_leave_one_out(replies, ledger)
        else:
            self._after_predictions(replies, ledger)

    def _after_statistics(self, replies, ledger):
        estimator = self.estimator
        labels = sorted_labels(replies)
        statistics = {label_key(site): replies[site] for site in labels}
        messages = {site: replies[site]["all"] for site in labels}
        aggregate = merge_statistics(messages[site] for site in labels)
        owned = len(messages) > 1  # a merge is new: its Gram may lend work space
        # finite and PSD, once, before any solve
        check_aggregate(aggregate, messages, in_place=owned)
        alphas = estimator._checked_alphas()
        if (estimator.solver == "auto" and aggregate.factor is None and self.form == "gram"
                and (self.max_rounds is None or self.round + 1 < self.max_rounds)
                and _solve_gram(aggregate.gram, aggregate.moment, alphas.min(),
                                cholesky_only=True, in_place=owned)[0] is None):
            self.form = "factor"  # the statistics round once more, as factors
            self._request("statistics")
            return
        self._labels, self._statistics, self._aggregate = labels, statistics, aggregate
        self._messages = messages
        self._alphas = alphas
        self._scorer = estimator._scorer()
        self._kind = _scorer_kind(self._scorer)
        if estimator.cv is None:
            self._start_leave_one_out()
        elif isinstance(estimator.cv, str):
            self._leave_one_client_out(ledger)
        else:
            self._split_folds(ledger)

    def _plan_folds(self, sites):
        if self.folds is None:
            raise ValueError(
                "cv is a splitter: set server.folds to each site's rows' fold membership "
                "before the first round (fit derives it from the pooled rows).")
        missing = [site for site in sites if label_key(site) not in self.folds]
        if missing:
            raise ValueError(f"server.folds has no fold membership for sites {missing}.")

    # leave one row out ------------------------------------------------------
    def _start_leave_one_out(self):
        aggregate = self._aggregate
        if aggregate.n_samples < 2:
            raise ValueError(
                "leave-one-out cross-validation needs at least 2 samples; got "
                f"{aggregate.n_samples} sample.")
        eigenvalues, basis, projected = _spectrum(aggregate)
        arrays = {
            "alphas": np.asarray(self._alphas, dtype=np.float64),
            "eigenvalues": eigenvalues,
            "basis": np.ascontiguousarray(basis),
            "projected": np.ascontiguousarray(projected),
            "x_mean": aggregate.x_mean,
            "y_mean": aggregate.y_mean,
        }
        fields = {
            "weight_sum": float(aggregate.weight_sum),
            "interpolating": len(eigenvalues) == aggregate.n_samples - aggregate.centered,
        }
        if self._kind is None:
            fields["keep_rows"] = "scoring"
        elif self.estimator.store_cv_results:
            fields["keep_rows"] = "squared_errors" if self._kind == "default" else "predictions"
        self._request("leave_one_out", fields, lambda site: arrays)

    def _after_leave_one_out(self, replies, ledger):
        estimator = self.estimator
        per_target = estimator.alpha_per_target
        labels = sorted_labels(replies)
        total = replies[labels[0]][0]
        for site in labels[1:]:
            total = total + replies[site][0]
        total.sst = self._pooled_sst()
        kind = self._kind
        if estimator.criterion == POOLED:
            scores = -total.e2 / total.weight
            scores = scores if per_target else scores.mean(axis=0)
        elif kind == "default":  # RidgeCV: -mean of w e^2 over rows (and targets)
            scores = -total.e2 / total.count
            scores = scores if per_target else scores.mean(axis=0)
        elif kind is not None:
            scores = total.scores(kind, scorer_parts(self._scorer)[1], per_target)
        else:
            predictions, targets, weights = (self._in_row_order(replies, i) for i in (1, 2, 3))
            scores = self._score_rows(predictions, targets, weights, per_target)
        results = self._in_row_order(replies, 1) if estimator.store_cv_results else None
        self.finish(scores, results, ledger)

    def _pooled_sst(self):
        """Weighted sum of squares of all targets around their pooled mean."""
        aggregate = self._aggregate
        if aggregate.centered:
            return aggregate.target_ss
        return np.maximum(aggregate.target_ss - aggregate.weight_sum * aggregate.y_mean**2, 0)

    def _in_row_order(self, replies, index):
        """Per-row arrays of all sites, in the rows' order in ``X`` (site-label order otherwise)."""
        labels = sorted_labels(replies)
        stacked = np.concatenate([replies[site][index] for site in labels])
        if self.positions is None:
            return stacked
        order = np.concatenate([self.positions[label_key(site)] for site in labels])
        result = np.empty_like(stacked)
        result[np.argsort(np.argsort(order))] = stacked
        return result

    def _score_rows(self, predictions, targets, weights, per_target):
        """A scorer on held-out predictions, as RidgeCV scores them.

        ``sample_weight`` is passed only when some row's weight is not 1.
        """
        kwargs = {} if np.all(weights == 1) else {"sample_weight": weights}
        single = self._aggregate.single_target
        scores = []
        for a in range(len(self._alphas)):
            P = predictions[:, :, a]
            if per_target:
                scores.append([self._scorer(_IdentityRegressor(), P[:, j], targets[:, j], **kwargs)
                               for j in range(P.shape[1])])
            elif single:
                scores.append(self._scorer(_IdentityRegressor(), P[:, 0], targets[:, 0], **kwargs))
            else:
                scores.append(self._scorer(_IdentityRegressor(), P, targets, **kwargs))
        scores = np.asarray(scores, dtype=np.float64)
        return scores.T if per_target else scores

    # held-out folds -------------------------------------------------------
    def _fold_model(self, train):
        coef = _coef_path(_spectrum(train), self._alphas)
        return coef, _intercepts(train, coef)

    def _leave_one_client_out(self, ledger):
        labels = self._labels
        if len(labels) < 2:
            raise ValueError(
                "leave-one-client-out cross-validation (cv='clients') needs at least 2 "
                f"clients; got {len(labels)}.")
        statistics = [self._statistics[label_key(s)]["all"] for s in labels]
        models = [self._fold_model(rest) for rest in _complements(statistics)]
        if self._kind is None:
            self._expected_predictions = {
                label_key(s): {"": st.n_samples} for s, st in zip(labels, statistics)}
            by_site = {label_key(s): m for s, m in zip(labels, models)}
            self._request("predict", site_arrays=lambda site: dict(
                zip(("coef", "intercept"), by_site[label_key(site)])))
            return
        sums = [_held_out_sums(held, *model) for held, model in zip(statistics, models)]
        self._finish_folds(sums, ledger)

    def _split_folds(self, ledger):
        labels = self._labels
        n_folds = next(iter(self.folds.values())).shape[1]
        models, sums = [], []
        self._expected_predictions = {label_key(s): {} for s in labels}
        for j in range(n_folds):
            parts = [self._statistics[label_key(s)] for s in labels]
            train = [p[f"train{j}"] for p in parts if f"train{j}" in p]
            test = [p[f"test{j}"] for p in parts if f"test{j}" in p]
            if not train or not test:
                raise ValueError(f"fold {j} of cv has no training or no test rows.")
            models.append(self._fold_model(merge_statistics(train)))
            sums.append(_held_out_sums(merge_statistics(test), *models[-1]))
            for site, p in zip(labels, parts):
                if f"test{j}" in p:
                    self._expected_predictions[label_key(site)][str(j)] = p[f"test{j}"].n_samples
        if self._kind is None:

            def fold_models(site):
                membership = self.folds[label_key(site)]
                arrays = {}
                for key in self._expected_predictions[label_key(site)]:
                    j = int(key)
                    arrays[f"coef{key}"], arrays[f"intercept{key}"] = models[j]
                    arrays[f"rows{key}"] = np.flatnonzero(membership[:, j] == 2)
                return arrays

            self._request("predict", site_arrays=fold_models)
            return
        self._finish_folds(sums, ledger)

    def _after_predictions(self, replies, ledger):
        estimator = self.estimator
        labels = sorted_labels(replies)
        folds = []
        if isinstance(estimator.cv, str):  # one fold per client, in label order
            folds = [replies[site][""] for site in labels]
        else:
            n_folds = next(iter(self.folds.values())).shape[1]
            for j in range(n_folds):
                key = str(j)
                holders = [site for site in labels if key in replies[site]]
                parts = [replies[site][key] for site in holders]
                fold = [np.concatenate([p[i] for p in parts]) for i in range(3)]
                if self.positions is not None and self.test_order is not None:
                    where = np.concatenate([
                        self.positions[label_key(site)][self.folds[label_key(site)][:, j] == 2]
                        for site in holders])
                    rank = np.searchsorted(np.sort(where), self.test_order[j])
                    order = np.argsort(where)[rank]
                    fold = [part[order] for part in fold]
                folds.append(fold)
        scores = np.asarray([self._score_rows(P, Y, W, estimator.alpha_per_target)
                             for P, Y, W in folds])
        self._finish_scores(scores, ledger)

    def _finish_folds(self, sums, ledger):
        """Choose alpha from per-fold sums: mean of fold scores, or the pooled error."""
        estimator = self.estimator
        per_target = estimator.alpha_per_target
        if estimator.criterion == POOLED:
            total = sums[0]
            for part in sums[1:]:
                total = total + part
            pooled = -total.e2 / total.weight
            results = np.stack([part.e2 for part in sums])  # held-out weighted SSE
            self.finish(pooled if per_target else pooled.mean(axis=0), results, ledger)
            return
        kind, sign = self._kind, 1.0
        if kind == "default":
            kind = "r2"  # GridSearchCV scores with the estimator's score: R^2
        else:
            sign = scorer_parts(self._scorer)[1]
        scores = np.asarray([part.scores(kind, sign, per_target) for part in sums])
        self._finish_scores(scores, ledger)

    def _finish_scores(self, fold_scores, ledger):
        """Mean of the per-fold scores, as GridSearchCV; per-client results for cv='clients'."""
        results = fold_scores if self.estimator.store_cv_results else None
        self.finish(fold_scores.mean(axis=0), results, ledger)

    def finish(self, scores, results, ledger):
        """Pick alpha as RidgeCV does (first best, per target if asked), refit, commit."""
        estimator = self.estimator
        alphas, aggregate = self._alphas, self._aggregate
        scores = np.asarray(scores, dtype=np.float64)
        # Non-finite scores (a one-row fold's R^2, a hostile message) never win, as
        # in RidgeCV; a hostile message is caught by the model check below.
        if estimator.alpha_per_target and aggregate.n_targets > 1:
            best = np.array([_first_best(row) for row in scores])
            best_alpha = alphas[best]
            best_score = scores[np.arange(scores.shape[0]), best]
        else:
            scores = scores.reshape(-1)  # alpha_per_target with one target: (1, n_alphas)
            best = _first_best(scores)
            best_alpha, best_score = float(alphas[best]), np.float64(scores[best])
        coef, solver = solve_statistics(aggregate, best_alpha)
        self._check_model(coef, aggregate, self._messages)
        labels = estimator._known_labels([], self._labels)
        if results is not None:
            results = np.asarray(results, dtype=np.float64)
            if results.ndim == 3 and aggregate.single_target:
                results = results[:, 0, :]  # RidgeCV: (n, n_alphas) for one-dimensional y
        # commit: nothing above touched the estimator
        estimator.alpha_ = best_alpha
        estimator.best_score_ = best_score
        if results is not None:
            estimator.cv_results_ = results
        else:
            estimator.__dict__.pop("cv_results_", None)
        estimator._commit_solution(self, aggregate, coef, solver, ledger, labels)


def _first_best(scores):
    """The first alpha whose score no later one beats (RidgeCV's rule; NaN never wins)."""
    best = 0
    for i in range(1, len(scores)):
        if scores[i] > scores[best]:
            best = i
    return best


# ------------------------------------------------------------------ estimator
class FederatedRidgeCV(BaseFederatedRidge):
    """Federated ridge with alpha chosen by cross-validation; RidgeCV's interface.

    Every mode is a run of the protocol: sites compute everything from their
    own rows (statistics, held-out sums, predictions), the server only
    merges and chooses. The choice rule is :class:`sklearn.linear_model.RidgeCV`'s
    for the same ``cv`` and ``scoring``: with ``cv=None`` the scorer (by
    default the negative mean squared error) of all leave-one-out
    predictions; otherwise the mean over folds of the per-fold score (by
    default R^2), the first best alpha winning ties.

    - ``cv=None``: leave-one-row-out, with any clients: two rounds (the
      statistics, then every site evaluates its rows' leave-one-out residuals
      in closed form given the pooled spectrum, d^2 numbers per task).
    - ``cv="clients"``: leave-one-client-out from the statistics round alone
      (Proposition 5 of the one-shot paper): client k's held-out score comes
      from its own statistics against the merge of the others'.
    - ``cv`` an int, splitter or iterable (``clients`` is passed to it as
      ``groups``): the splitter runs on the pooled rows, and each site gets
      its rows' fold membership in its task and returns the statistics of
      its rows in each fold's training and test sets (weighted, as
      GridSearchCV weights both the fits and the scores).

    Scorers that are sums over rows (``neg_mean_squared_error``,
    ``neg_root_mean_squared_error``, ``r2``, ``explained_variance`` and
    ``make_scorer`` of their functions) are computed from sums the sites
    send. Any other scorer (a callable, ...) takes a further round in which
    sites send every held-out row's prediction, target and weight: the
    server then sees row-level data, so prefer a decomposable scorer.

    Read more in the :ref:`User Guide <federated_ridge_cv>`.

    Parameters
    ----------
    alphas : array-like of shape (n_alphas,), default=(0.1, 1.0, 10.0)
        Candidate penalties; positive with ``cv=None`` (as RidgeCV), else
        non-negative.
    fit_intercept : bool, default=True
        Whether to fit an intercept.
    scoring : str, callable or None, default=None
        As in RidgeCV. ``None``: the negative mean of the (weighted) squared
        leave-one-out errors with ``cv=None``, R^2 per fold otherwise.
    cv : int, cross-validation generator, iterable, "clients" or None, default=None
        How rows are held out (see above).
    store_cv_results : bool, default=False
        Store ``cv_results_`` (only with ``cv=None`` or ``"clients"``, as
        RidgeCV stores them only for ``cv=None``). With ``cv=None`` sites
        then send one value per row and alpha.
    alpha_per_target : bool, default=False
        Choose one alpha per target (only with ``cv=None`` or ``"clients"``).
    solver : {"auto", "cholesky", "svd"}, default="auto"
        The form of the statistics, as in :class:`FederatedRidge`: ``"auto"``
        repeats the statistics round as factors when the pooled Gram is too
        ill-conditioned for the smallest alpha.
    criterion : {"mean_fold_score", "pooled_squared_error"}, default="mean_fold_score"
        ``"mean_fold_score"``: RidgeCV's rule, above. ``"pooled_squared_error"``:
        the one-shot paper's criterion, the weighted squared error of all
        held-out rows over their weight, whatever the fold sizes (``scoring``
        must be None); with ``cv="clients"`` this is Proposition 5. The two
        differ when clients differ in size or in how well they are predicted
        (see the User Guide for an example).

    Attributes
    ----------
    alpha_ : float or ndarray of shape (n_targets,)
        Selected penalty (per target with ``alpha_per_target``).
    best_score_ : float or ndarray of shape (n_targets,)
        Score of ``alpha_`` under the rule above.
    cv_results_ : ndarray
        With ``store_cv_results=True``. ``cv=None``: as RidgeCV, one value per
        row, ``(n_samples, n_alphas)`` for one-dimensional ``y`` and
        ``(n_samples, n_targets, n_alphas)`` otherwise: the weighted squared
        leave-one-out error (``scoring=None``) or the leave-one-out prediction.
        ``cv="clients"``: one value per client (in ``clients_`` order): its
        score, ``(n_clients, n_alphas)`` (``(n_clients, n_targets, n_alphas)``
        with ``alpha_per_target``), or with ``criterion="pooled_squared_error"``
        its held-out weighted squared error (shaped like the ``cv=None`` case).
    solver_ : {"cholesky", "eigen", "svd"}
        How the final model was solved (see :class:`FederatedRidge`).
    coef_, intercept_, n_features_in_, feature_names_in_, clients_, n_clients_, communication_
        As in :class:`FederatedRidge`, for the final fit with ``alpha_``.

    See Also
    --------
    FederatedRidge : The same model with a fixed alpha.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.linear_model import RidgeCV
    >>> from sklearn_fed import FederatedRidgeCV
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(90, 4))
    >>> y = X @ [1.0, -2.0, 0.0, 0.5] + 0.5 * rng.normal(size=90)
    >>> clients = np.arange(90) % 3
    >>> loo = FederatedRidgeCV(alphas=[0.1, 10.0, 100.0]).fit(X, y, clients=clients)
    >>> ridge_cv = RidgeCV(alphas=[0.1, 10.0, 100.0]).fit(X, y)
    >>> loo.alpha_ == ridge_cv.alpha_, bool(np.isclose(loo.best_score_, ridge_cv.best_score_))
    (True, True)
    >>> loo.communication_.rounds
    2
    >>> loco = FederatedRidgeCV(alphas=[0.1, 10.0, 100.0], cv="clients").fit(X, y, clients=clients)
    >>> loco.alpha_, loco.communication_.rounds
    (0.1, 1)
    """

    _parameter_constraints: dict = {
        "alphas": ["array-like", Interval(Real, 0, None, closed="neither")],
        "fit_intercept": ["boolean"],
        "scoring": [StrOptions(set(get_scorer_names())), callable, None],
        "cv": ["cv_object", StrOptions({"clients"})],
        "store_cv_results": ["boolean"],
        "alpha_per_target": ["boolean"],
        "solver": [StrOptions({"auto", "cholesky", "svd"})],
        "criterion": [StrOptions({_MEAN, POOLED})],
    }

    _server_role = FederatedRidgeCVServer
    _client_role = CVClient

    @property
    def _exact_federation(self):
        # Leave-one-row-out and folds of rows do not depend on how rows are
        # split among clients; leave-one-client-out does, by definition.
        return self.cv != "clients"

    # Without clients, cv="clients" refuses to fit (it needs two): no warning needed.
    _without_clients = None

    def __init__(
        self,
        alphas=(0.1, 1.0, 10.0),
        *,
        fit_intercept=True,
        scoring=None,
        cv=None,
        store_cv_results=False,
        alpha_per_target=False,
        solver="auto",
        criterion=_MEAN,
    ):
        self.alphas = alphas
        self.fit_intercept = fit_intercept
        self.scoring = scoring
        self.cv = cv
        self.store_cv_results = store_cv_results
        self.alpha_per_target = alpha_per_target
        self.solver = solver
        self.criterion = criterion

    def _checked_alphas(self):
        """``alphas`` as a float64 array, checked as RidgeCV checks them (same messages)."""
        lower = "neither" if self.cv is None else "left"
        alphas = self.alphas
        if isinstance(alphas, (np.ndarray, list, tuple)) and np.ndim(alphas) > 0:
            values = list(alphas) if len(alphas) != 1 else [alphas[0]]
            names = [f"alphas[{i}]" for i in range(len(values))] if len(values) != 1 else ["alphas"]
        else:
            values, names = [alphas], ["alphas"]
        for value, name in zip(values, names):
            check_scalar(value, name, target_type=numbers.Real, min_val=0.0,
                         include_boundaries=lower)
        return np.asarray(values, dtype=np.float64).reshape(-1)

    def _check_options(self):
        splitter = self.cv is not None and not isinstance(self.cv, str)
        if splitter and self.store_cv_results:
            raise ValueError("cv!=None and store_cv_results=True are incompatible")
        if splitter and self.alpha_per_target:
            raise ValueError("cv!=None and alpha_per_target=True are incompatible")
        if self.criterion == POOLED and self.scoring is not None:
            raise ValueError(
                "criterion='pooled_squared_error' is the squared error itself; scoring must "
                f"be None, got {self.scoring!r}.")

    def _keeps_rows(self):
        """Whether leave-one-out results come back per row (to be put in ``X``'s order)."""
        return self.cv is None and (
            self.store_cv_results or _scorer_kind(self._scorer()) is None)

    def _scorer(self):
        return check_scoring(self, scoring=self.scoring, allow_none=True) if self.scoring else None

    @_fit_context(prefer_skip_nested_validation=True)
    @atomic
    def fit(self, X, y, sample_weight=None, clients=None):
        """Choose alpha by cross-validation, then fit on all rows.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Training rows.
        y : array-like of shape (n_samples,) or (n_samples, n_targets)
            Targets.
        sample_weight : float or array-like of shape (n_samples,), default=None
            Non-negative row weights.
        clients : array-like of shape (n_samples,), default=None
            Client label of each row (``None``: one client). Passed to a
            ``cv`` splitter as ``groups``.

        Returns
        -------
        self : FederatedRidgeCV
        """
        self._check_options()
        self._checked_alphas()
        X, y, sample_weight, labels, rows = self._validate_rows(
            X, y, sample_weight, clients, reset=True
        )
        server, names = self._cv_server(X, y, clients, labels, rows)
        run_simulation(server, self.make_client(), X, y, sample_weight, labels, rows, names)
        return self

    def _cv_server(self, X, y, clients, labels, rows):
        """The server of a fit, told each site's rows' positions and, for a splitter, folds.

        The splitter runs on the pooled rows (stratified for a classifier, as
        in scikit-learn), with the clients as its groups. Returns ``(server,
        feature names)``.
        """
        names = getattr(self, "feature_names_in_", None)
        names = None if names is None else [str(name) for name in names]
        server = self.make_server(feature_names=names)
        if hasattr(X, "_row_positions"):  # Dask partitions: read only for per-row results
            server.positions = X._row_positions() if self._keeps_rows() else None
        else:
            everything = np.arange(X.shape[0])
            server.positions = {label_key(label): everything[r] for label, r in zip(labels, rows)}
        if self.cv is not None and not isinstance(self.cv, str):
            groups = None
            if clients is not None:  # the clients, as checked and aligned, are the groups
                groups = np.empty(X.shape[0], dtype=np.intp)
                for index, client_rows in enumerate(rows):
                    groups[client_rows] = index
            with warnings.catch_warnings():  # clients always go in as groups
                warnings.filterwarnings("ignore", "The groups parameter is ignored")
                splitter = check_cv(self.cv, y, classifier=is_classifier(self))
                splits = list(splitter.split(X, y, groups=groups))
            codes = np.zeros((X.shape[0], len(splits)), dtype=np.int8)
            for j, (train, test) in enumerate(splits):
                codes[train, j] = 1
                codes[test, j] = 2
            server.folds = {key: codes[where] for key, where in server.positions.items()}
            server.test_order = [np.asarray(test) for _, test in splits]
        return server, names

    @_fit_context(prefer_skip_nested_validation=True)
    @atomic
    def fit_statistics(self, messages):
        """Leave-one-client-out CV and the fit from client messages alone (no rows).

        Only ``cv="clients"`` with a decomposable scorer is computable from
        the messages; each message is one client's statistics (see
        :meth:`FederatedRidge.fit_statistics`).

        Parameters
        ----------
        messages : list or dict
            At least two clients' :class:`~sklearn_fed.statistics.ClientStatistics`
            or their bytes.

        Returns
        -------
        self : FederatedRidgeCV
        """
        if self.cv != "clients":
            raise ValueError(
                "fit_statistics holds out one client at a time from the messages; set "
                f"cv='clients' (got cv={self.cv!r}).")
        self._check_options()
        self._checked_alphas()
        if _scorer_kind(self._scorer()) is None:
            raise ValueError(
                f"scoring={self.scoring!r} needs every held-out row's prediction; "
                "fit_statistics has only the messages.")
        parsed = self._read_messages(messages)
        ledger = CommunicationLedger()
        ledger.record_round({}, {label: stats.nbytes for label, stats in parsed})
        server = self.make_server(max_rounds=1)
        server.apply({label: {"all": stats} for label, stats in parsed}, ledger)
        return self
