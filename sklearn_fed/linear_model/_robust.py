"""Robust aggregation: options for federations that do not trust every site.

Validation (:meth:`ClientStatistics.validate <sklearn_fed.ClientStatistics.validate>`)
guarantees that a message could have come from *some* rows, which protects the
server; it cannot tell a site's real rows from rows it made up. The options
here bound what a dishonest site can do to the model. They change the exact
answer when they refuse an honest site, so they are off by default; see the
"Security and robustness" page for the attack each one stops, the ones it does
not, and measured effects.
"""

import dataclasses
import math
from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp

from ..protocol import InvalidClientMessage, sorted_labels
from ..protocol._errors import failing
from ..protocol._fields import server_error
from ._ridge_cv_algebra import _complements, _held_out_sums, _ridge_path

__all__ = ["RobustAggregation"]


@dataclasses.dataclass(frozen=True)
class RobustAggregation:
    """Limits a server puts on the statistics it accepts from each site.

    Pass it to ``make_server(robust=...)`` of a ridge estimator. A site that
    breaks a limit gets an :class:`~sklearn_fed.InvalidClientMessage`; with
    ``make_server(on_invalid="drop")`` it is left out of the round instead (as
    dropout) and listed in ``server.dropped_``.

    Parameters
    ----------
    max_rows : int, default=None
        Most rows one site may claim. Stops a site that claims a huge count
        to outweigh every other site.
    max_weight : float, default=None
        Largest weight sum (sum of sample weights) one site may claim.
    feature_bound : float, default=None
        Every row must have ``||x||_2 <= feature_bound``. Declared in the
        task (an honest site whose rows break it gets a clear error before
        sending) and enforced on the statistics: ``sum w ||x||^2 <= W B^2``.
        Stops scaled or shifted features.
    target_bound : float, default=None
        Likewise ``||y||_2 <= target_bound`` per row.
    reject_duplicates : bool, default=False
        Refuse a site whose statistics are identical to another site's in
        the same round (a replayed or copied message under a second label).
    outlier_threshold : float, default=None
        Refuse sites whose data the other sites' model explains badly: each
        site's held-out mean squared error under ridge fitted on all other
        sites (each weighted equally, so no single site dominates) is
        compared with the other sites' on a log scale; a site more than
        this many robust standard deviations (1.4826 MAD) above the median
        is refused. Needs at least 3 sites; 3.5 is a common choice.
    outlier_alpha : float, default=1.0
        Penalty of the leave-one-out models of the outlier test.

    Examples
    --------
    >>> from sklearn_fed import FederatedRidge
    >>> from sklearn_fed.linear_model import RobustAggregation
    >>> server = FederatedRidge().make_server(
    ...     robust=RobustAggregation(max_rows=10_000, outlier_threshold=3.5),
    ...     on_invalid="drop")
    """

    max_rows: int = None
    max_weight: float = None
    feature_bound: float = None
    target_bound: float = None
    reject_duplicates: bool = False
    outlier_threshold: float = None
    outlier_alpha: float = 1.0

    def __post_init__(self):
        for name, kind in (
            ("max_rows", Integral),
            ("max_weight", Real),
            ("feature_bound", Real),
            ("target_bound", Real),
            ("outlier_threshold", Real),
        ):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, kind) and value > 0):
                raise ValueError(
                    f"{name} must be a positive number or None; got {value!r}."
                )
        if not (isinstance(self.outlier_alpha, Real) and self.outlier_alpha > 0):
            raise ValueError(
                f"outlier_alpha must be positive; got {self.outlier_alpha!r}."
            )

    def task_fields(self):
        """Bounds the task declares to every site (the site checks its rows)."""
        return {name: float(getattr(self, name)) for name in ("feature_bound", "target_bound")
                if getattr(self, name) is not None}

    def check(self, site, stats):
        """Per-site limits on one validated message."""
        fail = failing(site)
        if self.max_rows is not None and stats.n_samples > self.max_rows:
            fail(f"claims {stats.n_samples} rows, more than max_rows={self.max_rows}.")
        if self.max_weight is not None and stats.weight_sum > self.max_weight:
            fail(
                f"claims a weight sum of {stats.weight_sum:g}, more than "
                f"max_weight={self.max_weight:g}."
            )
        # the sums of squares are read only for a bound (factor-form statistics form them)
        for name, bound, norm, second_moments, mean in (
            ("feature_bound", self.feature_bound, "||x||", lambda: np.trace(stats.gram),
             stats.x_mean),
            ("target_bound", self.target_bound, "||y||", lambda: np.sum(stats.target_ss),
             stats.y_mean),
        ):
            if bound is None:
                continue
            squared = float(second_moments())  # sum w ||v||^2 (the centered sum plus W ||mean||^2)
            if stats.centered:
                squared += stats.weight_sum * float(np.dot(mean, mean))
            if squared > stats.weight_sum * bound**2 * (1 + 1e-9):
                fail(f"its rows cannot all have {norm} <= {name}={bound:g} (mean {norm}^2 is "
                     f"{squared / max(stats.weight_sum, 1e-300):.4g}).")

    def cross_check(self, replies):
        """Limits that compare the sites of one round: duplicates and outliers."""
        failures = {}
        if self.reject_duplicates:
            failures = refuse_copies(replies, _fingerprint, lambda first: (
                f"its statistics are identical to site {first!r}'s (a copied or replayed "
                "message)."))
        if self.outlier_threshold is not None:
            rest = {site: stats for site, stats in replies.items() if site not in failures}
            failures.update(self._outliers(rest))
        return failures

    def _outliers(self, replies):
        labels = [label for label in sorted_labels(replies) if replies[label].weight_sum > 0]
        if len(labels) < 3:
            return {}
        statistics = [replies[label] for label in labels]
        # each site counts once in the others' models, whatever weight it claims
        equal = [
            dataclasses.replace(
                s,
                weight_sum=1.0,
                gram=s.gram / s.weight_sum,
                moment=s.moment / s.weight_sum,
                target_ss=s.target_ss / s.weight_sum,
            )
            for s in statistics
        ]
        alphas = np.array([float(self.outlier_alpha)])
        errors = []
        for held, rest in zip(statistics, _complements(equal)):
            sse = _held_out_sums(held, *_ridge_path(rest, alphas)).e2
            errors.append(float(sse.sum()) / (held.weight_sum * held.n_targets))
        log_error = np.log(np.maximum(errors, 1e-300))
        center = float(np.median(log_error))
        spread = max(1.4826 * float(np.median(np.abs(log_error - center))), 0.05)
        failures = {}
        for label, value, error in zip(labels, log_error, errors):
            score = (value - center) / spread
            if score > self.outlier_threshold:
                failures[label] = InvalidClientMessage(
                    f"client {label!r}: the other sites' model explains its data badly "
                    f"(held-out MSE {error:.4g}, {score:.1f} robust standard deviations "
                    f"above the median; outlier_threshold={self.outlier_threshold:g}).",
                    label,
                )
        return failures


def refuse_copies(replies, fingerprint, reason):
    """``{site: InvalidClientMessage}`` for each site whose ``fingerprint(reply)`` is an
    earlier site's (in label order); ``reason(earlier site)`` says why."""
    refused, seen = {}, {}
    for site in sorted_labels(replies):
        data = fingerprint(replies[site])
        if data in seen:
            refused[site] = InvalidClientMessage(f"client {site!r}: {reason(seen[data])}", site)
        else:
            seen[data] = site
    return refused


def _fingerprint(stats):
    parts = [np.float64(stats.weight_sum).tobytes(), str(stats.n_samples).encode()]
    parts += [
        np.ascontiguousarray(getattr(stats, name)).tobytes()
        for name in ("x_mean", "y_mean", "gram", "moment", "target_ss")
    ]
    return b"".join(parts)


def check_rows_within_bounds(task_fields, X, y, site):
    """At the site: refuse to answer when its rows break the declared bounds."""
    for name, field, values in (("X", "feature_bound", X), ("y", "target_bound", y)):
        bound = task_fields.get(field)
        if bound is None:
            continue
        if not (isinstance(bound, Real) and bound > 0 and math.isfinite(bound)):
            server_error(f"malformed {name} bound {bound!r}.")
        norms = _row_norms(values)
        over = int(np.count_nonzero(norms > bound * (1 + 1e-12)))
        if over:
            raise ValueError(
                f"site {site!r}: {over} rows have ||{name}|| above the federation's declared "
                f"bound {bound:g} (largest {norms.max():.4g}); clip or rescale them first."
            )


def _row_norms(values):
    if sp.issparse(values):
        return np.sqrt(np.asarray(values.multiply(values).sum(axis=1)).ravel())
    values = np.asarray(values, dtype=np.float64)
    return np.abs(values) if values.ndim == 1 else np.linalg.norm(values, axis=1)
