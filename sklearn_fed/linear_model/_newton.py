"""Newton safeguards: what a federated Newton server checks before it trusts a site or a step.

The extension point of every iterative exact estimator (logistic regression
now, the generalized linear models next). Each round a site sends its loss,
gradient and Hessian at the broadcast point; the sum is the objective's.
One hostile site can send anything, so the server checks, with the
functions below:

1. **Each reply against the site's own earlier messages** (never against
   other sites): finite values; a Hessian symmetric to round-off whose
   entries obey Cauchy-Schwarz; every gradient and Hessian entry within a
   cap derived from the site's first message (:class:`SiteBounds`, the
   weighted second moments of its design columns); the weight sum it
   declared; and its loss within the **convexity bracket** of its previous
   message (:func:`loss_bracket`): for a convex loss ``L`` with gradient
   ``g`` between two points ``a`` and ``b = a + delta``,

   ``L(a) + g(a).delta <= L(b) <= L(a) + g(b).delta`` and
   ``L(b) <= L(a) + g(a).delta + B(delta) / 2``, ``0 <= (g(b) - g(a)).delta <= B(delta)``,

   where ``B`` is the curvature bound of :func:`curvature_model`. An honest
   site satisfies every one of these (to round-off) whatever its rows, so
   a site that fails one is inconsistent with its own earlier messages and
   is the one named; a site that passes is never named.
2. **The aggregate**: one Cholesky factorization per round of the summed
   Hessian scaled to a unit diagonal (:func:`is_psd`), a full positive
   semi-definiteness check to round-off. Only when it fails are the sites'
   Hessians factored one by one (:func:`non_psd_sites`) to name the culprits.
3. **The server's own step**: the server moves only to finite points, and
   accepts a point only if the summed, bracketed objective decreased
   (Armijo); a self-reported loss therefore never decides alone: it is
   believed only inside the bracket its sender's own gradients allow.

The estimator supplies the loss' constants: ``residual_bound`` (a bound on
``|d loss_i / d eta_i|`` per unit weight: 1 for the log-loss, in every
output) and ``curvature_bound`` (a bound on every entry of the loss'
second derivative in ``eta`` per unit weight, 1/4 for the log-loss) for the
entry caps, and ``model_curvature`` (the largest eigenvalue of that second
derivative: 1/4 for two classes, 1/2 for the multinomial loss, Böhning's
bound) for the bracket. A family with unbounded residuals (Poisson, Gamma)
needs data-dependent constants; these functions take them as arguments.

Everything here is a pure function of arrays: no protocol, no estimator.
"""

from dataclasses import dataclass

import numpy as np
from scipy import linalg

__all__ = [
    "ROUND_OFF",
    "SiteBounds",
    "check_reply_terms",
    "curvature_model",
    "is_psd",
    "loss_bracket",
    "non_psd_sites",
]

#: Relative slack for round-off in a site's sums over its rows (losses,
#: gradients, products): 1e-8 of the magnitudes involved. A float64 sum of
#: ``n`` terms errs by at most ``n * 2.2e-16`` relatively; 1e-8 covers sites
#: of tens of millions of rows, and what a liar can hide in it is a change of
#: the objective at the 1e-8 level, which moves no step.
ROUND_OFF = 1e-8

#: Smallest magnitude taken into account (denormal products are round-off).
_TINY = 1e-290


@dataclass(frozen=True)
class SiteBounds:
    """What a site's first message says about the size of its later ones.

    Parameters
    ----------
    weight_sum : float
        ``W``, the sum of the site's row weights.
    column_ss : ndarray of shape (n_columns,)
        ``Q_j = sum_i w_i x_ij^2`` for each column of the design (features
        about the server's center, then the intercept's column of ones,
        whose ``Q`` is ``W``).

    Notes
    -----
    By Cauchy-Schwarz, for any residuals ``|r_i| <= rho`` and curvatures
    ``|c_i| <= kappa``: ``|sum_i w_i r_i x_ij| <= rho sqrt(W Q_j)`` and
    ``|sum_i w_i c_i x_ij x_il| <= kappa sqrt(Q_j Q_l)``. These are the caps
    of :func:`check_reply_terms`, exact bounds for any rows the site may
    hold, derived from its own statistics and not from the server's
    guesses about the features.
    """

    weight_sum: float
    column_ss: np.ndarray

    @classmethod
    def from_origin_hessian(cls, hessian, weight_sum, n_outputs, curvature_at_origin):
        """Bounds from a site's Hessian at the origin, where every curvature is known.

        At ``coef = 0`` every row's curvature is the constant
        ``curvature_at_origin`` (``1/4`` for two classes, ``(1/K)(1 - 1/K)`` on the
        diagonal blocks for ``K`` classes), so the first diagonal block of
        the Hessian is that constant times the weighted second moments.
        """
        p = hessian.shape[0] // n_outputs
        column_ss = np.maximum(np.diag(hessian)[:p], 0.0) / curvature_at_origin
        return cls(float(weight_sum), column_ss)

    def gradient_cap(self, n_outputs, residual_bound):
        """Cap on each gradient entry, ``rho sqrt(W Q_j)`` for every output."""
        cap = residual_bound * np.sqrt(self.weight_sum * self.column_ss)
        return np.tile(cap, n_outputs)

    def hessian_cap(self, n_outputs, curvature_bound):
        """Cap on each Hessian entry, ``kappa sqrt(Q_j Q_l)`` in every block."""
        root = np.tile(np.sqrt(self.column_ss), n_outputs)
        return curvature_bound * np.outer(root, root)


def curvature_model(delta, bounds, n_outputs, model_curvature):
    """``B(delta)``: a bound on ``delta^T H(c) delta`` at every point ``c``, for any rows.

    A move ``delta`` of the coefficients (``n_outputs`` blocks, one per
    design column) changes row ``i``'s output ``k`` by ``x_i . delta_k``, and
    ``sum_i w_i (x_i . delta_k)^2 <= (sum_j |delta_kj| sqrt(Q_j))^2``
    (Minkowski). With the loss' largest curvature ``model_curvature``,
    ``delta^T H delta <= model_curvature * sum_k (sum_j |delta_kj| sqrt(Q_j))^2``.

    Parameters
    ----------
    delta : ndarray of shape (n_outputs * n_columns,)
    bounds : SiteBounds
    n_outputs : int
    model_curvature : float

    Returns
    -------
    bound : float

    Examples
    --------
    >>> bounds = SiteBounds(4.0, np.array([4.0, 4.0]))  # 4 rows of weight 1, |x| <= 1
    >>> curvature_model(np.array([1.0, 0.0]), bounds, 1, 0.25)
    1.0
    """
    reach = np.abs(delta).reshape(n_outputs, -1) @ np.sqrt(bounds.column_ss)
    return float(model_curvature * np.sum(reach**2))


def loss_bracket(previous_loss, previous_gradient, gradient, delta, curvature):
    """Where a convex loss may be at ``b = a + delta``, from its messages at ``a`` and ``b``.

    Parameters
    ----------
    previous_loss : float
        ``L(a)``.
    previous_gradient, gradient : ndarray
        ``g(a)`` and ``g(b)``.
    delta : ndarray
        ``b - a``, in the gradient's coordinates.
    curvature : float
        ``B(delta)`` of :func:`curvature_model`.

    Returns
    -------
    low, high : float
        ``L(b)`` must lie in ``[low, high]``, to round-off (``slack``).
    slope_change : float
        ``(g(b) - g(a)).delta``, which must lie in ``[0, B(delta)]``.
    slack : float
        Round-off of these sums: :data:`ROUND_OFF` times their magnitude.

    Examples
    --------
    >>> loss_bracket(1.0, np.array([-1.0]), np.array([0.0]), np.array([1.0]), 2.0)[:2]
    (0.0, 1.0)
    """
    before = float(previous_gradient @ delta)
    after = float(gradient @ delta)
    low = previous_loss + before
    high = min(previous_loss + after, previous_loss + before + 0.5 * curvature)
    magnitude = (abs(previous_loss) + float(np.abs(previous_gradient * delta).sum())
                 + float(np.abs(gradient * delta).sum()) + curvature)
    return low, high, after - before, ROUND_OFF * magnitude + _TINY


def check_reply_terms(loss, weight_sum, gradient, hessian, bounds, n_outputs, *,
                      residual_bound, curvature_bound):
    """Why one reply's loss, gradient and Hessian cannot be a site's with these bounds, or None.

    Checks, against the site's own :class:`SiteBounds`: its declared weight
    sum, a non-negative loss, every gradient and Hessian entry within its
    cap, the Hessian symmetric to round-off and obeying Cauchy-Schwarz
    (non-negative diagonal, ``|H_jl| <= sqrt(H_jj H_ll)``).

    Returns
    -------
    reason : str or None

    Examples
    --------
    >>> bounds = SiteBounds(4.0, np.array([4.0, 4.0]))
    >>> print(check_reply_terms(1.0, 4.0, np.array([1e308, 0.0]), np.eye(2), bounds, 1,
    ...                         residual_bound=1.0, curvature_bound=0.25))
    a gradient entry exceeds its cap sqrt(W Q_j) (4) from the site's first message.
    """
    scale = 1.0 + ROUND_OFF
    if not abs(weight_sum - bounds.weight_sum) <= ROUND_OFF * abs(bounds.weight_sum):
        return (f"its weight sum {weight_sum!r} is not the {bounds.weight_sum!r} of its "
                "first message.")
    if not loss >= 0:
        return "its loss is negative."
    gradient_cap = bounds.gradient_cap(n_outputs, residual_bound)
    if np.any(np.abs(gradient) > gradient_cap * scale + _TINY):
        worst = int(np.argmax(np.abs(gradient) - gradient_cap))
        return (f"a gradient entry exceeds its cap sqrt(W Q_j) ({gradient_cap[worst]:.3g}) "
                "from the site's first message.")
    magnitude = np.abs(hessian)
    if np.any(magnitude > bounds.hessian_cap(n_outputs, curvature_bound) * scale + _TINY):
        return "a Hessian entry exceeds its cap from the site's first message."
    diagonal = np.diag(hessian)
    root = np.sqrt(np.maximum(diagonal, 0.0))
    if np.any(diagonal < -ROUND_OFF * np.max(diagonal, initial=0.0) - _TINY):
        return "the Hessian is not positive semi-definite (a negative diagonal entry)."
    cauchy = np.outer(root, root)
    if np.any(np.abs(hessian - hessian.T) > ROUND_OFF * cauchy + _TINY):
        return "the Hessian is not symmetric."
    if np.any(magnitude > cauchy * scale + ROUND_OFF * np.max(diagonal, initial=0.0) + _TINY):
        return "the Hessian is not positive semi-definite (Cauchy-Schwarz fails)."
    return None


def is_psd(matrix, slack=ROUND_OFF):
    """Whether a symmetric matrix is positive semi-definite to round-off: one Cholesky.

    The matrix is scaled to a unit diagonal first (so the test does not
    depend on the columns' scales) and ``slack`` is added to the diagonal:
    an eigenvalue of the scaled matrix above ``-slack`` is taken as
    round-off of a positive semi-definite one.

    Examples
    --------
    >>> is_psd(np.array([[1.0, 1.0], [1.0, 1.0]])), is_psd(np.array([[1.0, 2.0], [2.0, 1.0]]))
    (True, False)
    """
    diagonal = np.diag(matrix)
    if not np.all(np.isfinite(matrix)) or np.any(diagonal < -_TINY):
        return False
    positive = diagonal > _TINY
    # a (numerically) zero diagonal entry needs a zero row: |H_jl| <= sqrt(H_jj H_ll)
    if np.max(np.abs(matrix[~positive]), initial=0.0) > np.sqrt(
            _TINY * np.max(diagonal, initial=0.0)) + _TINY:
        return False
    inverse_root = 1.0 / np.sqrt(diagonal[positive])
    scaled = matrix[np.ix_(positive, positive)] * np.outer(inverse_root, inverse_root)
    scaled[np.diag_indices_from(scaled)] += slack
    try:
        linalg.cholesky(scaled, lower=True, check_finite=False, overwrite_a=True)
    except linalg.LinAlgError:
        return False
    return True


def non_psd_sites(hessians):
    """The sites whose own Hessian is not positive semi-definite (one Cholesky each).

    Called only when the aggregate fails :func:`is_psd`: the sum of
    positive semi-definite matrices is positive semi-definite, so some
    site's is not, and only such a site is named.

    Parameters
    ----------
    hessians : dict
        ``{site: ndarray}``.

    Returns
    -------
    sites : list
    """
    return [site for site, hessian in hessians.items() if not is_psd(hessian)]
