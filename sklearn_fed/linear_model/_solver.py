"""The ridge solver: ridge on merged statistics, by their form (Gram or factor).

Free of the protocol and of the estimators, so that everything that solves
ridge (the estimators' servers, FederatedRidgeCV's paths, robust
aggregation's held-out check) sits above it.
"""

import numpy as np
from scipy import linalg
from scipy.linalg.lapack import get_lapack_funcs

from ..statistics._inplace import lend_upper as _lend_upper
from ..statistics._inplace import lendable as _lendable
from ..statistics._inplace import restore_upper as _restore_upper

__all__ = [
    "GRAM_MAX_CONDITION",
    "factor_range",
    "numerical_range",
    "solve_ridge",
    "solve_ridge_factor",
    "solve_statistics",
]


#: The Gram path solves ``(G + alpha I) w = h`` by Cholesky while the estimated
#: condition number of ``G + alpha I`` scaled to a unit diagonal is at most
#: this: Cholesky's error does not depend on the features' scales (van der
#: Sluis), and it is then about ``eps * condition``, i.e. at most ~2e-10 (see
#: the User Guide's "Numerical accuracy" page for the measurements behind it).
GRAM_MAX_CONDITION = 1e6

_EPS = np.finfo(np.float64).eps


def solve_ridge(gram, moment, alpha):
    """Solve ``(gram + alpha I) w = moment`` for each target (the Gram path).

    Cholesky, for each distinct alpha, while the estimated condition number
    of ``gram + alpha I`` scaled to a unit diagonal is at most
    :data:`GRAM_MAX_CONDITION`; otherwise
    (only with ``alpha`` small against ``gram``, on rank-deficient or
    ill-conditioned statistics) an eigendecomposition ``gram = Q L Q^T`` in
    which eigenvalues at the round-off level (``<= d eps max(L)``) are
    dropped together with the components of ``moment`` along them: in
    exact arithmetic ``moment = X^T y`` lies in the range of ``gram``, so
    those components are round-off. As ``alpha -> 0`` this gives the
    minimum-norm least-squares solution, like scikit-learn's ``Ridge``.

    Parameters
    ----------
    gram : ndarray of shape (n_features, n_features)
        Symmetric positive semi-definite matrix.
    moment : ndarray of shape (n_features, n_targets)
        Right-hand sides.
    alpha : float or ndarray of shape (n_targets,)
        Non-negative regularization, one per target or shared.

    Returns
    -------
    coef : ndarray of shape (n_targets, n_features)

    See Also
    --------
    solve_ridge_factor : The same solution from a triangular factor (more accurate).

    Examples
    --------
    >>> import numpy as np
    >>> solve_ridge(np.eye(2), np.array([[2.0], [4.0]]), 1.0)
    array([[1., 2.]])
    >>> solve_ridge(np.diag([1.0, 0.0]), np.array([[2.0], [0.0]]), 0.0)  # singular
    array([[2., 0.]])
    """
    return _solve_gram(gram, moment, alpha)[0]


def _solve_gram(gram, moment, alpha, *, cholesky_only=False, in_place=False, spectrum=None):
    """``(coef, path)`` of the Gram path; ``path`` is "cholesky" or "eigen".

    ``spectrum``: :func:`numerical_range` of ``gram`` when known already
    (an alpha that the factorization does not trust is solved on it).

    With ``cholesky_only``, returns ``(None, "eigen")`` as soon as one alpha
    needs the eigendecomposition (the caller will ask for factors instead).
    With ``in_place`` (a Gram no one else reads meanwhile), a Gram symmetric
    bit for bit lends its upper triangle to the factorization and gets it
    back unchanged (no d x d work array; the same bits).
    """
    d, t = moment.shape
    alphas = np.broadcast_to(np.asarray(alpha, dtype=np.float64), (t,))
    coef = np.empty((t, d))
    path = "cholesky"
    for value in np.unique(alphas):  # one factorization per distinct alpha
        targets = np.flatnonzero(alphas == value)
        solved = _cholesky_in_place(gram, moment[:, targets], value) if (
            in_place and _lendable(gram)) else _ASYMMETRIC
        if solved is _ASYMMETRIC:
            system = np.array(gram, dtype=np.float64)  # gram + value I, without a d x d eye
            system[np.diag_indices(d)] += value
            solved = _trusted_cholesky(system, moment[:, targets])  # consumes system
        if solved is not None:
            coef[targets] = solved
            continue
        if cholesky_only:
            return None, "eigen"
        if spectrum is None:
            spectrum = numerical_range(gram)
        eigenvalues, Q = spectrum
        projected = Q.T @ moment[:, targets]
        coef[targets] = (Q @ (projected / (eigenvalues + value)[:, None])).T
        path = "eigen"
    return coef, path


def _trusted_cholesky(system, moment):
    """:func:`_scaled_solve` of ``system``, scaled to a unit diagonal (``scale = 1 /
    sqrt(diag(system))``) and factored in place (no d x d temporary), or None when
    :func:`_well_conditioned_factor` does not trust the factor."""
    diag = np.diag(system)
    d = len(diag)
    if not np.all(diag > 0):
        return None
    scale = 1.0 / np.sqrt(diag)
    scaled = system
    scaled *= scale[:, None]
    scaled *= scale[None, :]
    # Its 1-norm (the largest row sum: it is symmetric), a chunk of about 2**17 entries
    # at a time.
    step = max(1, 2**17 // d)
    norm = max(np.abs(scaled[start : start + step]).sum(axis=1).max()
               for start in range(0, d, step))
    # The transpose of the symmetric system is Fortran-ordered: LAPACK
    # factors it in place (lower L = U^T), no d x d copy.
    factor = _well_conditioned_factor(scaled.T, norm)
    return None if factor is None else _scaled_solve(factor, scale, moment)


#: What :func:`_cholesky_in_place` returns for a Gram that cannot lend its triangle.
_ASYMMETRIC = object()


def _cholesky_in_place(gram, moment, value):
    """:func:`_trusted_cholesky` of ``gram + value I`` in the
    upper triangle of ``gram`` (restored after): ``coef`` rows, None when not trusted,
    or ``_ASYMMETRIC`` (``gram`` not symmetric bit for bit, untouched)."""
    diag = np.diag(gram) + value
    if not np.all(diag > 0):
        return None
    scale = 1.0 / np.sqrt(diag)
    norms = []

    def fill(rows, part):
        # The same operations, entry by entry, as _solve_gram's copy and _trusted_cholesky.
        np.einsum("ii->i", part[:, rows])[...] += value
        part *= scale[rows, None]
        part *= scale[None, :]
        norms.append(np.abs(part).sum(axis=1).max())  # the whole rows: its 1-norm

    saved = _lend_upper(gram, fill)
    if saved is None:
        return _ASYMMETRIC
    try:
        factor = _well_conditioned_factor(gram.T, max(norms))
        return None if factor is None else _scaled_solve(factor, scale, moment)
    finally:
        _restore_upper(gram, saved)


def _well_conditioned_factor(scaled, norm):
    """The lower Cholesky factor of the Fortran-ordered ``scaled`` (made in its lower
    triangle; the upper one is not touched), or None if it fails or LAPACK's
    ``pocon`` estimates the condition number (from the 1-norm ``norm``) above
    :data:`GRAM_MAX_CONDITION`."""
    try:
        factor, _ = linalg.cho_factor(scaled, lower=True, overwrite_a=True, check_finite=False)
    except linalg.LinAlgError:
        return None
    pocon = get_lapack_funcs("pocon", (factor,))
    rcond, info = pocon(factor, norm, uplo="L")
    if info != 0 or not rcond * GRAM_MAX_CONDITION >= 1.0:
        return None
    return factor


def _scaled_solve(factor, scale, moment):
    """``coef`` rows ``(t, d)`` of ``diag(1/scale) factor factor^T diag(1/scale) w = moment``."""
    rhs = scale[:, None] * moment
    return (scale[:, None] * linalg.cho_solve((factor, True), rhs, check_finite=False)).T


def numerical_range(gram, *, eigenpairs=None):
    """Eigenpairs of a symmetric PSD ``gram`` above the round-off level.

    Returns ``(eigenvalues, Q)`` with the eigenvalues ``> d eps max(eigenvalues)``
    (ascending) and their eigenvectors as columns: the numerical range of
    ``gram``, on which ridge with any ``alpha >= 0`` is solved. ``eigenpairs``:
    ``gram``'s eigenvalues (ascending) and eigenvectors, when already known.
    """
    # Divide and conquer (syevd: as accurate as the default driver, and faster)
    # in numpy's OpenBLAS, which runs the products around it: scipy's copy, right
    # after a numpy product, competes with numpy's spinning threads (d = 500 on
    # two cores: 56 ms against 15; benchmarks/bench_blas_switch.py).
    eigenvalues, Q = np.linalg.eigh(gram) if eigenpairs is None else eigenpairs
    floor = gram.shape[0] * _EPS * max(eigenvalues[-1], 0.0)
    keep = eigenvalues > floor
    return eigenvalues[keep], Q[:, keep]


def factor_range(factor, n_features):
    """Singular triplets of the feature block of a factor, above the round-off level.

    ``factor`` is the triangular factor ``R`` of sqrt-weighted rows
    ``[x, y]`` (:attr:`ClientStatistics.factor
    <sklearn_fed.ClientStatistics.factor>`). Returns ``(s, Vt, projected)``:
    the singular values ``s > max(shape) eps max(s)`` of ``R_x`` (its first
    ``n_features`` columns), the matching right singular vectors as rows, and
    ``U^T R_y``; ridge is then ``V diag(s / (s^2 + alpha)) U^T R_y``.
    """
    rx, ry = factor[:, :n_features], factor[:, n_features:]
    if rx.shape[0] == 0:
        return np.zeros(0), np.zeros((0, n_features)), np.zeros((0, ry.shape[1]))
    try:
        U, s, Vt = linalg.svd(rx, full_matrices=False, check_finite=False)
    except linalg.LinAlgError:  # gesdd did not converge: the slower, sturdier driver
        U, s, Vt = linalg.svd(rx, full_matrices=False, check_finite=False,
                              lapack_driver="gesvd")
    keep = s > max(rx.shape) * _EPS * (s[0] if s.size else 0.0)
    return s[keep], Vt[keep], U[:, keep].T @ ry


def solve_ridge_factor(factor, n_features, alpha):
    """Ridge from the triangular factor of the pooled rows (the factor path).

    ``R^T R`` holds the products of the sqrt-weighted rows ``[x, y]``, so
    ridge on the rows is ridge on ``(R_x, R_y)``: ``min |R_x w - R_y|^2 +
    alpha |w|^2``, solved as scikit-learn's ``svd`` solver does, by an SVD of
    ``R_x`` (singular values at the round-off level dropped). The condition
    number of ``X`` is never squared, and ``alpha -> 0`` gives the
    minimum-norm least-squares solution.

    Parameters
    ----------
    factor : ndarray of shape (n_rows, n_features + n_targets)
        Upper trapezoidal factor.
    n_features : int
    alpha : float or ndarray of shape (n_targets,)

    Returns
    -------
    coef : ndarray of shape (n_targets, n_features)

    Examples
    --------
    >>> import numpy as np
    >>> from scipy.linalg import qr
    >>> X, y = np.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]]), np.array([1.0, 2.0, 2.0])
    >>> R = qr(np.column_stack([X, y]), mode="economic")[1]
    >>> bool(np.allclose(solve_ridge_factor(R, 2, 0.5), solve_ridge(X.T @ X, (X.T @ y)[:, None], 0.5)))
    True
    """
    t = factor.shape[1] - n_features
    alphas = np.broadcast_to(np.asarray(alpha, dtype=np.float64), (t,))
    s, Vt, projected = factor_range(factor, n_features)
    coef = np.empty((t, n_features))
    for value in np.unique(alphas):
        targets = np.flatnonzero(alphas == value)
        scale = s / (s * s + value)
        coef[targets] = (Vt.T @ (scale[:, None] * projected[:, targets])).T
    return coef


def solve_statistics(stats, alpha):
    """``(coef, solver)`` of ridge on merged statistics, by their form.

    Factor form: :func:`solve_ridge_factor` (``solver="svd"``); Gram form:
    :func:`solve_ridge` (``"cholesky"``, or ``"eigen"`` when the system is too
    ill-conditioned for Cholesky).
    """
    if stats.factor is not None:
        return solve_ridge_factor(stats.factor, stats.n_features, alpha), "svd"
    return _solve_gram(stats.gram, stats.moment, alpha)
