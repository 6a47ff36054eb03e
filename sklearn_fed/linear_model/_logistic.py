"""FederatedLogisticRegression: exact Newton rounds from the sites' gradients and Hessians.

L2-penalized logistic regression (binary and multinomial) has a smooth,
strictly convex objective whose Hessian at any point is a weighted Gram
matrix of the rows. So each round the server broadcasts the current model,
every site sends its loss, gradient and Hessian there (aggregates of its
rows, computed in one blocked pass over them), and the server
takes one Newton step on their sum. Newton's method converges quadratically:
a handful of rounds reach the pooled optimum to machine precision, where
FedAvg needs hundreds (see the user guide's comparison).
"""

from numbers import Integral, Real
from typing import ClassVar

import numpy as np
import scipy.sparse as sp
from scipy.special import expit, log_expit, logsumexp, softmax
from sklearn.base import BaseEstimator
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model._base import LinearClassifierMixin, SparseCoefMixin

from .._compat import (
    Interval,
    StrOptions,
    _encode,
    _unique,
    check_is_fitted,
)
from ..base import FederatedEstimatorMixin, fit_method, set_federation_attributes
from ..protocol import (
    InvalidClientMessage,
    Server,
    SymmetricMatrix,
    decode_values,
    encode_values,
    sorted_labels,
)
from ..protocol._errors import failing
from ..protocol._fields import reply_error, server_error
from ..statistics import (
    ClientStatistics,
    ColumnMoments,
    check_aggregate,
    merge_statistics,
)
from ..utils._warnings import warn
from ._base import task_field
from ._classes import (
    ClassesClient,
    ClassesServerMixin,
    validate_classification,
)
from ._newton import (
    ROUND_OFF,
    SiteBounds,
    check_reply_terms,
    curvature_model,
    is_psd,
    loss_bracket,
    non_psd_sites,
)
from ._solver import solve_ridge

__all__ = ["FederatedLogisticRegression"]

# Armijo constant of the backtracking line search (sufficient decrease).
_ARMIJO = 1e-4
_STATISTICS = ("x_mean", "y_mean", "gram", "moment", "target_ss")


def _on_classes(stats, site_classes, classes):
    """A site's statistics with one indicator target per class of the federation.

    A class the site does not have is a target that is zero on every row:
    mean, moment and sum of squares 0. Merging the widened statistics is exact.
    """
    columns = _encode(site_classes, uniques=classes)
    t = classes.shape[0]
    y_mean, moment, target_ss = np.zeros(t), np.zeros((stats.n_features, t)), np.zeros(t)
    y_mean[columns], moment[:, columns], target_ss[columns] = (
        stats.y_mean, stats.moment, stats.target_ss)
    return ClientStatistics(stats.n_samples, stats.weight_sum, stats.x_mean, y_mean, stats.gram,
                            moment, target_ss, centered=True, single_target=False)


# Rows per block of a site's Newton terms: a block of centered rows (and, for
# several classes, its scaled copy) stays in a core's cache while it is read.
_BLOCK_BYTES = 2**19


def site_newton_terms(X, rows, index, weight, coef, center, fit_intercept, n_classes):
    """A site's loss, gradient and Hessian of its summed weighted log-loss at ``coef``.

    One pass over the site's rows in blocks: each block is gathered and
    centered into a cache-sized buffer, where its logits, loss, gradient and
    Hessian terms are computed before the next block is read.

    Parameters
    ----------
    X : {ndarray, sparse matrix} of shape (n_samples, n_features)
    rows : slice, ndarray or None
        The site's rows of ``X`` (None: all of them).
    index : ndarray of shape (n_site_rows,)
        Each of the site's rows' class position.
    weight : ndarray of shape (n_site_rows,)
        Sample weight times class weight.
    coef : ndarray of shape (n_outputs, n_features + 1)
        The model in centered coordinates, one row ``[w, b]`` per output
        (one output for two classes: the logit of ``classes_[1]``).
    center : ndarray of shape (n_features,)
        Features are taken as ``x - center`` (the pooled mean: no digits
        lost to offsets).
    fit_intercept : bool
    n_classes : int

    Returns
    -------
    loss : float
    gradient : ndarray of shape (n_outputs * (n_features + fit_intercept),)
    hessian : ndarray of shape (len(gradient), len(gradient))
    """
    if rows is not None and not (isinstance(X, np.ndarray) and X.dtype == np.float64
                                 and isinstance(rows, np.ndarray) and rows.dtype.kind in "iu"):
        X, rows = X[rows], None  # a view of a slice, or a copy that each block reads
    n = X.shape[0] if rows is None else rows.shape[0]
    d = X.shape[1]
    k = coef.shape[0]
    p = d + 1 if fit_intercept else d
    # At least p rows a block: each block adds a p x p product to the Hessian.
    size = max(1, min(n, max(_BLOCK_BYTES // (8 * d), p)))
    centered = np.empty((size, d))
    scaled = np.empty((size, d)) if k > 1 else None
    directions = coef[:, :d].T.copy()
    offset = coef[:, d] if fit_intercept else 0.0
    loss = 0.0
    gradient = np.zeros((k, p))
    hessian = np.zeros((k * p, k * p))
    block = np.empty((p, p))
    for start in range(0, n, size):
        m = min(size, n - start)
        Xc = centered[:m]
        if rows is None:
            part = X[start : start + m]
            np.subtract(part.toarray() if sp.issparse(part) else part, center, out=Xc)
        else:  # gathered straight into the block: no copy of the site's rows
            np.take(X, rows[start : start + m], axis=0, out=Xc, mode="clip")
            Xc -= center
        eta = Xc @ directions + offset  # (m, k)
        y, w = index[start : start + m], weight[start : start + m]
        if n_classes == 2:
            z, positive = eta[:, 0], y == 1
            # -log p on a positive row, -log(1 - p) on a negative one
            loss -= float(w @ log_expit(np.where(positive, z, -z)))
            probability = expit(z)[:, None]
            others = expit(-z)[:, None]  # 1 - p, with its digits when p is close to 1
            residual = probability - positive[:, None]
        else:
            loss += float(w @ (logsumexp(eta, axis=1) - eta[np.arange(m), y]))
            probability = softmax(eta, axis=1)
            residual = probability.copy()
            residual[np.arange(m), y] -= 1.0
            # 1 - p_j as the sum of the other classes' probabilities (prefix plus
            # suffix sums), not as sum - p_j: when p_j is close to 1 the
            # difference is 0 or round-off, and the diagonal block would lose
            # what the off-diagonal blocks keep (Cauchy-Schwarz would fail).
            before = np.zeros_like(probability)
            before[:, 1:] = np.cumsum(probability[:, :-1], axis=1)
            after = np.zeros_like(probability)
            after[:, :-1] = np.cumsum(probability[:, :0:-1], axis=1)[:, ::-1]
            others = before + after
        weighted = residual * w[:, None]
        gradient[:, :d] += weighted.T @ Xc
        if fit_intercept:
            gradient[:, d] += w @ residual
        # Block (j, i) of the Hessian is the Gram of [x - center, 1] weighted by
        # w p_j (1 - p_j) on the diagonal and -w p_j p_i off it: positive weights,
        # each block accurate on its own, from one syrk of the rows scaled by the
        # weights' square roots (the last block scales the centered rows in place).
        for j in range(k):
            for i in range(j, k):
                root = np.sqrt(w * probability[:, j] * (
                    others[:, j] if i == j else probability[:, i]))
                design = Xc if i == j == k - 1 else scaled[:m]
                np.multiply(Xc, root[:, None], out=design)
                np.matmul(design.T, design, out=block[:d, :d])  # numpy runs syrk
                if fit_intercept:
                    block[d, :d] = block[:d, d] = root @ design
                    block[d, d] = root @ root
                if i == j:
                    hessian[j * p : (j + 1) * p, j * p : (j + 1) * p] += block
                else:
                    hessian[j * p : (j + 1) * p, i * p : (i + 1) * p] -= block
                    hessian[i * p : (i + 1) * p, j * p : (j + 1) * p] -= block.T
    return loss, gradient.ravel(), hessian


class LogisticClient(ClassesClient):
    """A site of :class:`FederatedLogisticRegression`.

    Classes round: its labels and its feature means (the center of the
    model's coordinates). Newton rounds: its loss, gradient and Hessian at
    the broadcast model, nothing else.
    """

    protocol = "linear_model.logistic"

    def _classes_extra(self, task, X, y, sample_weight):
        if "class_weight" not in task.fields:  # balanced: only the center now
            fields, arrays = ColumnMoments.from_data(X, order=1).to_payload()
            return {"moments": fields}, {f"m.{name}": value for name, value in arrays.items()}
        # The statistics of X and of each local class indicator, weighted by
        # sample and class weight: the whole first Newton step from the origin.
        labels = decode_values(task.fields["class_weight"], task.arrays, server_error)
        factors = task.arrays.get("class_factors")
        if not (isinstance(factors, np.ndarray) and factors.dtype == np.float64
                and factors.shape == labels.shape and np.all(np.isfinite(factors))
                and np.all(factors >= 0)):
            server_error("class weights must be one finite non-negative float per label.")
        weight_of = dict(zip(labels.tolist(), factors.tolist()))
        classes, index = _unique(y, return_inverse=True)
        factor = np.array([weight_of.get(c, 1.0) for c in classes.tolist()])
        weight = None if np.all(factor == 1.0) else factor[index]  # None: the unweighted kernel
        if sample_weight is not None:
            weight = sample_weight if weight is None else weight * sample_weight
        indicators = np.zeros((y.shape[0], classes.shape[0]))
        indicators[np.arange(y.shape[0]), index] = 1.0
        stats = ClientStatistics.from_data(X, indicators, weight, check_input=False)
        fields, arrays = stats.to_payload()
        return {"statistics": fields}, {f"s.{name}": value for name, value in arrays.items()}

    def replies_are_independent(self, tasks):
        # A reply reads its task and its rows only: simulated sites may answer on threads.
        return True

    def compute(self, task, X, y, sample_weight, rows):
        if rows is None or task_field(task, "step", str) == "classes":
            return super().compute(task, X, y, sample_weight, rows)
        # A Newton round reads the site's features block by block (the kernel
        # gathers each block into cache): only its labels and weights are taken here.
        labels = self._encode_labels(
            task, y[rows], None if sample_weight is None else sample_weight[rows])
        return self._compute_encoded(task, X, *labels, rows=rows)

    def _compute_encoded(self, task, X, index, weight, classes, rows=None):
        coef = task.arrays.get("coef")
        center = task.arrays.get("center")
        fit_intercept = task_field(task, "fit_intercept", bool)
        d = X.shape[1]
        k = 1 if classes.shape[0] == 2 else classes.shape[0]
        if not (isinstance(coef, np.ndarray) and coef.shape == (k, d + 1)
                and isinstance(center, np.ndarray) and center.shape == (d,)
                and np.all(np.isfinite(coef)) and np.all(np.isfinite(center))):
            raise InvalidClientMessage("server: malformed Newton task (coef, center).", "server")
        loss, gradient, hessian = site_newton_terms(
            X, rows, index, weight, coef, center, fit_intercept, classes.shape[0]
        )
        fields = {"step": "newton", "loss": float(loss), "weight_sum": float(weight.sum())}
        return fields, {"gradient": gradient, "hessian": SymmetricMatrix(hessian)}


def origin_terms(stats, center, n_outputs, n_classes, fit_intercept):
    """Loss, gradient, design Gram and curvature at ``coef = 0`` from (widened) statistics.

    At the origin every row has the probabilities ``1 / n_classes``, so the
    summed log-loss is ``W log(n_classes)``, the gradient is made of each
    class's weighted feature sums, and the Hessian is
    ``kron(curvature, block)`` with ``block`` the weighted Gram of the
    design ``[x - center, 1]``: all in the statistics of the classes round.
    For the pooled statistics with an intercept, ``center`` is their mean
    and the offsets below are exact zeros (the same bits as without them).

    Returns
    -------
    loss : float
    gradient : ndarray of shape (n_outputs * n_columns,)
    block : ndarray of shape (n_columns, n_columns)
    curvature : ndarray of shape (n_outputs, n_outputs)
    """
    d, W, k = stats.n_features, stats.weight_sum, n_outputs
    targets = slice(1, 2) if k == 1 else slice(None)
    share = stats.y_mean[targets]  # weighted share of each output's class
    probability = 1.0 / n_classes
    offset = stats.x_mean - center
    sums = W * offset  # sum s (x - center)
    gram = stats.gram + np.outer(sums, offset)  # about center (Huygens)
    # sum s (p - y_k)(x - center) = (p - share_k) sum s (x - center) - moment_k
    feature_gradient = (probability - share)[:, None] * sums - stats.moment[:, targets].T
    p = d + 1 if fit_intercept else d
    block = np.zeros((p, p))
    block[:d, :d] = gram
    gradient = np.zeros((k, p))
    gradient[:, :d] = feature_gradient
    if fit_intercept:
        block[:d, d] = block[d, :d] = sums
        block[d, d] = W
        gradient[:, d] = W * (probability - share)
    curvature = np.full((1, 1), 0.25) if k == 1 else (
        np.eye(k) / n_classes - 1.0 / n_classes**2)
    return W * np.log(n_classes), gradient.ravel(), block, curvature


class LogisticServer(ClassesServerMixin, Server):
    """Server of :class:`FederatedLogisticRegression`: safeguarded Newton steps.

    Each round the sites evaluate the model broadcast. Every reply is
    checked against its site's own earlier messages (caps from its first
    message, the convexity bracket of its loss; see
    :mod:`sklearn_fed.linear_model._newton`) and the summed Hessian is
    checked positive semi-definite (one Cholesky). If the summed objective
    did not decrease enough (Armijo), the step is halved and broadcast
    again; otherwise the summed gradient and Hessian give the next Newton
    step. The fit stops once a Newton step has no entry larger than
    ``tol`` (that step is taken: it leaves an error of about its square),
    or once the gradient and the Newton decrement per unit weight are below
    ``tol ** 2`` (the loss is flat: steps need not shrink, e.g. on
    separable rows with a tiny penalty). It also stops, at the last
    accepted point and with a warning, after ``max_iter`` rounds, when the
    line search finds no decrease, or when no finite step is left.
    """

    protocol = "linear_model.logistic"
    _balance_by = "weights"  # LogisticRegression balances classes by their sample weight
    #: The log-loss' constants for :mod:`._newton`'s caps and bracket.
    _residual_bound = 1.0
    _curvature_bound = 0.25
    #: Halvings of one step before the line search gives up.
    _max_halvings = 30

    def __init__(self, estimator, **kwargs):
        super().__init__(estimator, **kwargs)
        self.coef = None  # the point broadcast this round, centered coordinates
        self._accepted = None  # (coef, objective, slope, step, members) of the last accepted point
        self._step_size = 1.0
        self._halvings = 0
        self._iterations = 0
        self._done = False
        self._known = ()  # the sites of the classes round: only they are asked
        self._bounds = {}  # site -> SiteBounds, from its first message
        self._last = {}  # site -> (point, loss, gradient) of its last message
        self._excluded = {}  # site -> why: its Newton message was refused
        self._aggregate_psd = None  # (members, verdict) of cross_check's factorization
        self._refused_now = {}  # site -> error, of the round being checked
        # Without "balanced" weights, each site can weight its rows in the
        # classes round already, and its statistics give the first Newton step.
        self._first_step = not isinstance(estimator.class_weight, str)

    # ------------------------------------------------------------- classes
    def _classes_task_extra(self):
        if not self._first_step:
            return {}, {}
        weights = self.estimator.class_weight or {}
        arrays = {"class_factors": np.array(list(weights.values()), dtype=np.float64)}
        labels = np.empty(len(weights), dtype=object)
        labels[:] = list(weights)
        if len(weights) and all(isinstance(k, (int, np.integer)) for k in weights):
            labels = labels.astype(np.int64)
        return {"class_weight": encode_values(labels, "class_labels", arrays)}, arrays

    def _classes_extra_keys(self):
        if self._first_step:
            return frozenset({"statistics"}), frozenset(f"s.{name}" for name in _STATISTICS)
        return frozenset({"moments"}), frozenset({"m.n_samples", "m.weight_sum", "m.mean"})

    def _read_classes_extra(self, site, frame, classes):
        prefix = "s." if self._first_step else "m."
        arrays = {name[2:]: v for name, v in frame.arrays.items() if name.startswith(prefix)}
        if not self._first_step:
            return ColumnMoments.from_payload(
                frame.fields["moments"], arrays, client=site,
                n_features=frame.schema["n_features"], order=1,
            )
        stats = ClientStatistics.from_payload(frame.fields["statistics"], arrays, client=site,
                                              psd=False)
        if stats.n_features != frame.schema["n_features"] or not stats.centered or (
                stats.n_targets != classes.shape[0] or stats.single_target):
            reply_error(site, "first-step statistics must be centered, with one "
                              "indicator target per class of the site.")
        return stats

    def _after_classes(self, replies, ledger):
        if self.classes_.shape[0] < 2:
            raise ValueError(
                "This solver needs samples of at least 2 classes in the data, but the data "
                f"contains only one class: {self.classes_[0]!r}."
            )
        labels = sorted_labels(replies)
        n_classes = self.classes_.shape[0]
        k = 1 if n_classes == 2 else n_classes
        fit_intercept = self.estimator.fit_intercept
        # Balanced: bounds from each site's first Newton reply, at the origin.
        bounds, last = {}, {}
        if not self._first_step:
            moments = merge_statistics(replies[site][2] for site in labels)
            d = moments.n_features
            center = moments.mean if fit_intercept else np.zeros(d)
        else:
            widened = {site: _on_classes(replies[site][2], replies[site][0], self.classes_)
                       for site in labels}
            stats = merge_statistics(widened[site] for site in labels)
            check_aggregate(stats, {site: replies[site][2] for site in labels})
            d = stats.n_features
            center = stats.x_mean if fit_intercept else np.zeros(d)
            # Each site's own terms at the origin: the reference its later
            # Newton replies are checked against (caps and bracket).
            for site in labels:
                loss, gradient, block, _ = origin_terms(
                    widened[site], center, k, n_classes, fit_intercept)
                bounds[site] = SiteBounds(float(widened[site].weight_sum), np.diag(block).copy())
                last[site] = (np.zeros((k, d + 1)), float(loss), gradient)
        self.center = center
        self.coef = np.zeros((k, d + 1))
        self._known = tuple(labels)
        self._bounds, self._last = bounds, last
        if self.estimator.max_iter == 0:  # scikit-learn's state before any update
            self._next(self.coef, replies, ledger, done=False)
        elif self._first_step:
            loss, gradient, block, curvature = origin_terms(
                stats, center, k, n_classes, fit_intercept)
            self._aggregate_psd = None
            self._newton(loss, stats.weight_sum, gradient, np.kron(curvature, block),
                         frozenset(labels), replies, ledger)

    # ------------------------------------------------------------- Newton
    def _plan_classified(self, sites):
        if self._done:
            return {}
        # Only the sites of the classes round (the classes and bounds are
        # theirs), less those whose Newton messages were refused.
        wanted = [site for site in sites if site in self._known and site not in self._excluded
                  and (self._bounds.get(site) is not None or not np.any(self.coef))]
        if not wanted:
            return {}
        fields, arrays = self._classes_task()
        fields.update(step="newton", fit_intercept=bool(self.estimator.fit_intercept))
        arrays.update(coef=self.coef, center=self.center)
        return {site: (dict(fields), dict(arrays)) for site in wanted}

    def _read_classified(self, site, frame):
        fail = failing(site)
        fields = frame.fields
        loss, weight = fields.get("loss"), fields.get("weight_sum")
        if set(fields) != {"step", "loss", "weight_sum"} or fields["step"] != "newton" or not (
                all(type(v) is float and np.isfinite(v) and v >= 0 for v in (loss, weight))):
            fail("malformed Newton reply (loss and weight_sum must be finite, >= 0).")
        k, p = self.coef.shape[0], self.coef.shape[1] - (not self.estimator.fit_intercept)
        size = k * p
        gradient, hessian = frame.arrays.get("gradient"), frame.arrays.get("hessian")
        if isinstance(hessian, SymmetricMatrix):  # handed over in process
            hessian = hessian.matrix
        if set(frame.arrays) != {"gradient", "hessian"} or not (
                isinstance(gradient, np.ndarray) and gradient.shape == (size,)
                and isinstance(hessian, np.ndarray) and hessian.shape == (size, size)
                and gradient.dtype == np.float64 and hessian.dtype == np.float64
                and np.all(np.isfinite(gradient)) and np.all(np.isfinite(hessian))):
            fail(f"gradient and Hessian must be finite float64 of sizes {size} and {size}^2.")
        bounds = self._bounds.get(site)
        n_classes = self.classes_.shape[0]
        if bounds is None:  # balanced: its first Newton reply, at the origin
            expected = weight * np.log(n_classes)
            if np.any(self.coef) or not abs(loss - expected) <= ROUND_OFF * expected + 1e-290:
                fail(f"its loss at the origin must be weight_sum * log({n_classes}).")
            bounds = SiteBounds.from_origin_hessian(
                hessian, weight, k, (1.0 / n_classes) * (1.0 - 1.0 / n_classes))
        reason = check_reply_terms(
            loss, weight, gradient, hessian, bounds, k,
            residual_bound=self._residual_bound, curvature_bound=self._curvature_bound)
        if reason is not None:
            fail(reason)
        if site in self._last:
            point, previous_loss, previous_gradient = self._last[site]
            delta = (self.coef - point)[:, :p].ravel()
            curvature = curvature_model(delta, bounds, k, 0.25 if k == 1 else 0.5)
            low, high, slope_change, slack = loss_bracket(
                previous_loss, previous_gradient, gradient, delta, curvature)
            if not low - slack <= loss <= high + slack:
                fail(f"its loss {loss!r} is inconsistent with its own earlier messages: "
                     f"convexity puts it in [{low!r}, {high!r}].")
            if not -slack <= slope_change <= curvature + slack:
                fail("its gradient is inconsistent with its own earlier messages: the change "
                     "along the step must lie in [0, B(step)].")
        return float(loss), float(weight), gradient, hessian, bounds

    def check_round(self, frames, failures=None):
        parsed, failures = super().check_round(frames, failures)
        if self.classes_ is not None:
            self._refused_now = dict(failures)  # read by this round's apply (on_invalid="drop")
        return parsed, failures

    def cross_check(self, replies):
        """The summed Hessian is positive semi-definite: one Cholesky of the aggregate.

        Only if it is not are the sites' own Hessians factored, to name the
        ones that are not (a sum of positive semi-definite matrices is one).
        """
        if self.classes_ is None or not replies:
            return {}
        labels = sorted_labels(replies)
        hessian = sum(replies[site][3] for site in labels)
        if is_psd(0.5 * (hessian + hessian.T)):
            self._aggregate_psd = (frozenset(labels), True)
            return {}
        culprits = non_psd_sites({site: replies[site][3] for site in labels})
        # Without the culprits (dropped), every Hessian left passed alone, so their
        # sum is positive semi-definite; with none, the failure is unexplained.
        self._aggregate_psd = (frozenset(set(labels) - set(culprits)), bool(culprits))
        return {site: InvalidClientMessage(
            f"client {site!r}: its Hessian is not positive semi-definite.", site)
            for site in culprits}

    def _apply_classified(self, replies, ledger):
        labels = sorted_labels(replies)
        for site, reason in self._refused_now.items():
            self._excluded[site] = str(reason)
        self._refused_now = {}
        for site in labels:
            loss, _, gradient, _, bounds = replies[site]
            self._bounds[site] = bounds
            self._last[site] = (self.coef, loss, gradient)
        loss, weight_sum, gradient, hessian = (
            sum(replies[site][i] for site in labels) for i in range(4))
        # symmetric to round-off at every site: the same bits where exactly symmetric
        hessian = 0.5 * (hessian + hessian.T)
        self._newton(loss, weight_sum, gradient, hessian, frozenset(labels), replies, ledger)

    def _newton(self, loss, weight_sum, gradient, hessian, members, replies, ledger):
        """One Newton iteration at the broadcast point, from the summed loss terms."""
        estimator = self.estimator
        d = self.coef.shape[1] - 1
        coef = self.coef if estimator.fit_intercept else self.coef[:, :d]
        alpha = 1.0 / estimator.C
        objective = loss + 0.5 * alpha * np.sum(self.coef[:, :d] ** 2)
        penalty = np.zeros_like(coef)
        penalty[:, :d] = alpha * self.coef[:, :d]
        gradient = gradient + penalty.ravel()
        self._iterations += 1
        accepted = self._accepted
        if accepted is not None and accepted[4] == members:
            previous, previous_objective, slope, full_step, _ = accepted
            tolerance = 16 * np.finfo(float).eps * abs(previous_objective)
            if objective > previous_objective + _ARMIJO * self._step_size * slope + tolerance:
                # not enough decrease: back off along the same step
                self._halvings += 1
                if self._halvings > self._max_halvings:
                    self._stop(previous, replies, ledger, "the line search found no decrease "
                               f"in {self._max_halvings} halvings of the Newton step")
                    return
                self._step_size /= 2
                self._next(previous + self._step_size * full_step, replies, ledger, done=False)
                return
        # Accepted (or the sites changed, and with them the objective: start again here).
        verdict = self._aggregate_psd
        self._aggregate_psd = None
        if verdict is not None and verdict[0] == members and not verdict[1]:
            self._stop(self.coef, replies, ledger, "the summed Hessian is not positive "
                       "semi-definite, though each site's is")
            return
        step = self._newton_step(hessian, gradient, coef.shape, alpha, estimator.fit_intercept)
        if not np.all(np.isfinite(step)):
            self._stop(self.coef, replies, ledger, "the Newton step is not finite")
            return
        # Newton converges quadratically: after a step of size s, the error is about s^2.
        converged = np.max(np.abs(step), initial=0.0) <= estimator.tol
        # Scale-aware, as scikit-learn's newton-cholesky: per unit weight, the
        # gradient and the Newton decrement are below tol^2 (the loss is flat
        # whatever the size of the steps).
        scale = max(weight_sum, np.finfo(float).tiny)
        flat = (np.max(np.abs(gradient), initial=0.0) <= estimator.tol**2 * scale
                and 0.5 * float(-gradient @ step) <= estimator.tol**2 * scale)
        full_step = np.zeros_like(self.coef)
        full_step[:, : coef.shape[1]] = step.reshape(coef.shape)
        if flat and not converged:
            self._next(self.coef, replies, ledger, done=True)
            return
        target = self.coef + full_step
        if not np.all(np.isfinite(target)):
            self._stop(self.coef, replies, ledger, "the Newton step leaves the finite numbers")
            return
        self._accepted = (self.coef, objective, float(gradient @ step), full_step, members)
        self._step_size = 1.0
        self._halvings = 0
        self._next(target, replies, ledger, done=converged)

    @staticmethod
    def _newton_step(hessian, gradient, shape, alpha, fit_intercept):
        """``-H^{-1} g`` of the penalized objective (Cholesky).

        With an intercept and several classes, adding the same constant to
        every intercept changes nothing: ``H`` is singular along that
        direction ``e``, and ``g`` is orthogonal to it. ``H + e e^T`` is then
        invertible and gives the step orthogonal to ``e``: intercepts that
        sum to zero, as scikit-learn's solvers (started at zero) keep them.
        A singular system (no penalty, ``C=inf`` or huge, on rows that do
        not determine the model) gets the minimum-norm step.
        """
        k, p = shape
        d = p - 1 if fit_intercept else p
        system = hessian.copy()
        diagonal = np.zeros((k, p))
        diagonal[:, :d] = alpha
        system[np.diag_indices_from(system)] += diagonal.ravel()
        if fit_intercept and k > 1:
            e = np.zeros((k, p))
            e[:, d] = 1.0 / np.sqrt(k)
            e = e.ravel()
            system += np.outer(e, e) * max(np.max(np.diag(system)), 1.0)
        return -solve_ridge(system, gradient[:, None], 0.0)[0]

    def _stop(self, coef, replies, ledger, why):
        """Commit the last good iterate ``coef`` with a warning saying why (and whom)."""
        self._done = True
        warn(f"FederatedLogisticRegression stopped at its last good iterate: {why}."
             f"{self._excluded_note()}", ConvergenceWarning)
        self.estimator._commit_model(self, coef, replies, ledger)

    def _excluded_note(self):
        if not self._excluded:
            return ""
        return (f" Sites left out of the fit, their Newton messages inconsistent with their "
                f"own earlier messages: {sorted(self._excluded, key=repr)!r} (see dropped_).")

    def _next(self, coef, replies, ledger, *, done):
        """Broadcast ``coef`` next; when done or out of rounds, commit the model instead."""
        estimator = self.estimator
        out_of_rounds = self._iterations >= estimator.max_iter
        if not (done or out_of_rounds):
            self.coef = coef
            return
        if done:
            final = coef
            if self._excluded:
                warn(f"FederatedLogisticRegression:{self._excluded_note()}", UserWarning)
        else:
            final = self._accepted[0] if self._accepted is not None else self.coef
            warn(
                f"FederatedLogisticRegression did not converge in max_iter="
                f"{estimator.max_iter} Newton iterations; increase max_iter or check the data "
                f"(separable classes with a large C?).{self._excluded_note()}",
                ConvergenceWarning,
            )
        self._done = True
        estimator._commit_model(self, final, replies, ledger)


class FederatedLogisticRegression(
    FederatedEstimatorMixin, LinearClassifierMixin, SparseCoefMixin, BaseEstimator
):
    """:class:`~sklearn.linear_model.LogisticRegression` (L2) by exact federated Newton rounds.

    The objective is LogisticRegression's, ``C * sum_i s_i loss_i +
    ||W||^2 / 2`` with an unpenalized intercept (two classes: sigmoid; more:
    multinomial), and Newton's method minimizes it exactly:

    - Round 1: each site sends its classes and the statistics
      (:class:`~sklearn_fed.ClientStatistics`) of its features and class
      indicators, rows weighted by sample and class weight. At the origin
      every probability is ``1 / n_classes``, so these give the gradient and
      the Hessian there: the server takes the first Newton step at once.
    - Each later round broadcasts the model; every site sends its weighted
      log-loss, gradient and Hessian there (a weighted Gram matrix of its
      rows, computed in one blocked pass over them: ``(d + 1)(d + 2) / 2``
      values for two classes), and the server takes
      a Newton step on the sum, halved while the loss does not drop enough.

    Every Newton reply is checked against its site's own earlier messages
    (caps from its first message, the convexity bracket of its loss), the
    summed Hessian by one Cholesky per round, and the server's own step
    (finite, decreasing the checked objective); see the security page's
    "Newton safeguards". A refused site is named (``on_invalid="raise"``) or
    left out of the rest of the fit (``"drop"``, with a warning naming it).

    Newton's method converges quadratically: the fit reaches
    ``LogisticRegression(C=C)``'s pooled solution to about 1e-8, typically
    in 6 to 9 rounds on standardized features. With
    ``class_weight="balanced"`` the weights need the pooled class counts,
    so round 1 only collects classes and counts, and Newton starts in round 2.

    Read more in the :ref:`User Guide <federated_pipelines>`.

    Parameters
    ----------
    C : float, default=1.0
        Inverse of the L2 penalty strength, as in LogisticRegression;
        ``np.inf`` fits without a penalty (a singular system then gets the
        minimum-norm Newton step).
    fit_intercept : bool, default=True
    class_weight : dict or "balanced", default=None
    tol : float, default=1e-4
        Stop once a Newton step has no entry (coefficient or intercept
        change) larger than ``tol``. That last step is taken: Newton's
        method converges quadratically, so it leaves an error of about
        ``tol ** 2`` (1e-8 by default), with no round spent to check it.
        Also stop, at the current point, once the gradient and the Newton
        decrement per unit weight are below ``tol ** 2`` (the loss is flat
        although steps need not shrink: separable rows, a tiny penalty).
    max_iter : int, default=50
        Newton iterations at most; reaching it gives a
        :class:`~sklearn.exceptions.ConvergenceWarning`. ``0``: no update
        (zero coefficients and intercepts, after the classes round).
    verbose : int, default=0
        Print one line per round (sites answered, bytes each way, seconds).

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    coef_ : ndarray of shape (1, n_features) or (n_classes, n_features)
    intercept_ : ndarray of shape (1,) or (n_classes,)
    n_iter_ : ndarray of shape (1,)
        Newton iterations (the first one from round 1's statistics).
    n_features_in_, feature_names_in_
        As in LogisticRegression.
    clients_ : ndarray of shape (`n_clients_`,)
    n_clients_ : int
    communication_ : CommunicationLedger
        Bytes of every round (classes round included).

    See Also
    --------
    FederatedRidgeClassifier : One statistics round, a least-squares classifier.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.linear_model import LogisticRegression
    >>> from sklearn_fed import FederatedLogisticRegression
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 3))
    >>> y = (X @ [1.0, -2.0, 0.5] + rng.logistic(size=200) > 0).astype(int)
    >>> fed = FederatedLogisticRegression().fit(X, y, clients=np.arange(200) % 4)
    >>> pooled = LogisticRegression(tol=1e-10).fit(X, y)
    >>> bool(np.abs(fed.coef_ - pooled.coef_).max() < 1e-6), fed.communication_.rounds
    (True, 6)
    """

    _parameter_constraints: ClassVar[dict] = {
        "C": [Interval(Real, 0, None, closed="right")],
        "fit_intercept": ["boolean"],
        "class_weight": [dict, StrOptions({"balanced"}), None],
        "tol": [Interval(Real, 0, None, closed="left")],
        "max_iter": [Interval(Integral, 0, None, closed="left")],
        "verbose": ["verbose"],
    }
    _server_role = LogisticServer
    _client_role = LogisticClient
    _exact_federation = True

    def __init__(self, C=1.0, *, fit_intercept=True, class_weight=None, tol=1e-4, max_iter=50,
                 verbose=0):
        self.C = C
        self.fit_intercept = fit_intercept
        self.class_weight = class_weight
        self.tol = tol
        self.max_iter = max_iter
        self.verbose = verbose

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags

    @fit_method(y=("array-like of shape (n_samples,)", "Class labels."),
                clients="Site label of each row. ``None``: one site.")
    def fit(self, X, y, sample_weight=None, clients=None):
        """Fit by Newton rounds over rows split among sites by ``clients``."""
        return self._fit(X, y, sample_weight, clients)

    def _validate_fit_data(self, X, y, sample_weight, *, reset):
        return validate_classification(self, X, y, sample_weight, reset=reset)

    def _commit_model(self, server, coef, replies, ledger):
        """Set the fitted attributes from the final centered model (the server calls it)."""
        d = coef.shape[1] - 1
        dtype = server.round_dtype.type
        weights = coef[:, :d]
        intercept = coef[:, d] - weights @ server.center if self.fit_intercept else (
            np.zeros(coef.shape[0]))
        ledger.n_parameters = int(coef.size)
        self.classes_ = server.classes_
        self.coef_ = weights.astype(dtype)
        self.intercept_ = intercept.astype(dtype)
        self.n_iter_ = np.array([server._iterations], dtype=np.int32)
        set_federation_attributes(self, server.schema, ledger, replies)

    def predict_proba(self, X):
        """Class probabilities: the sigmoid (two classes) or softmax of the decision values.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)

        Returns
        -------
        proba : ndarray of shape (n_samples, n_classes)
        """
        check_is_fitted(self)
        scores = self.decision_function(X)
        if scores.ndim == 1:
            positive = expit(scores)
            return np.column_stack([1 - positive, positive])
        return softmax(scores, axis=1)

    def predict_log_proba(self, X):
        """Logarithm of :meth:`predict_proba`.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)

        Returns
        -------
        log_proba : ndarray of shape (n_samples, n_classes)
        """
        return np.log(self.predict_proba(X))
