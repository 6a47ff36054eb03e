"""Property tests: FederatedRidge equals Ridge on random hard problems, to a justified tolerance.

Problems (drawn by hypothesis, fixed seed): 1-200 rows, 1-60 features (often
more features than rows), constant and duplicated columns, offsets up to 1e6,
tiny and large scales, zero weights, one or several targets, 1-50 clients,
with and without an intercept, and alpha from 1e-10 to 1e2 times the
largest eigenvalue of the (centered, weighted) Gram.

The reference is the ridge solution refined in long double (80-bit): from
the float64 answer, residuals of the normal equations ``X^T (y - X w) -
alpha w`` are computed in long double straight from the rows (no Gram) and
corrected until the correction is below 1e-17. Of ``Ridge(solver="cholesky")``
and ``Ridge(solver="svd")`` the one closer to the reference is the one we
must match.

The tolerance is the forward-error bound of the path FederatedRidge took,
with ``kappa = sqrt((s_1^2 + alpha) / (s_r^2 + alpha))`` the condition
number of the regularized problem on the numerical range of ``X`` (``s_r``
its smallest singular value above ``max(n, d) eps s_1``) and ``rho =
|residual| / (s_1 |w|)``: ``C eps (kappa + kappa^2 rho)`` for the factor
path (a backward-stable least-squares solve, as Ridge's ``svd``) and
``2 C eps kappa_G`` for the Gram path (taken only when ``kappa_G <= 1e6``),
where ``kappa_G = (s_1^2 + alpha) / (s_min^2 + alpha)`` is the condition
number of ``G + alpha I`` itself (``s_min = 0`` when ``X`` has fewer
nonzero singular values than columns: Cholesky does see the null space),
``C = 64 sqrt(d)``; ``eps`` is inflated by the centering (a design rounded
around means of size ``|x_mean|`` is perturbed by ``eps |x_mean| sqrt(W)``,
the targets by ``eps |y_mean| sqrt(W)``). The intercept ``y_mean - x_mean .
w`` adds ``|x_mean| |dw|`` and the rounding of both means.

``SKLEARN_FED_PROPERTY_EXAMPLES`` sets the number of examples per test (4
tests; default 500, so 2,000 in all); ``make property`` runs 25,000.
"""

import os
import warnings

import numpy as np
import pytest
from sklearn.linear_model import Ridge

from sklearn_fed import FederatedRidge

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

EPS = np.finfo(np.float64).eps
EXAMPLES = int(os.environ.get("SKLEARN_FED_PROPERTY_EXAMPLES", "500"))
SETTINGS = settings(
    max_examples=EXAMPLES,
    derandomize=True,  # a fixed sequence of examples: CI is reproducible
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@st.composite
def problems(draw, fit_intercept, multi_target):
    wide = draw(st.booleans())
    d = draw(st.integers(1, 60))
    n = draw(st.integers(1, max(1, d - 1))) if wide and d > 1 else draw(st.integers(1, 200))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    X = rng.normal(size=(n, d)) * draw(st.sampled_from([1.0, 1e-6, 1e-3, 1e3]))
    if d > 1 and draw(st.booleans()):  # constant columns
        columns = rng.choice(d, size=draw(st.integers(1, d - 1)), replace=False)
        X[:, columns] = rng.normal(size=columns.size)
    if d > 1 and draw(st.booleans()):  # duplicated columns
        source = rng.integers(0, d)
        columns = rng.choice(d, size=draw(st.integers(1, d - 1)), replace=True)
        X[:, columns] = X[:, [source]]
    X = X + draw(st.sampled_from([0.0, 1.0, 1e3, 1e6])) * rng.uniform(0.5, 1.5, size=d)
    t = draw(st.integers(1, 3)) if multi_target else None
    coef = rng.normal(size=(d,) if t is None else (d, t))
    noise = draw(st.sampled_from([0.0, 1e-3, 1.0]))
    y = (X - X.mean(axis=0)) @ coef + noise * rng.normal(size=(n,) if t is None else (n, t))
    y = y + draw(st.sampled_from([0.0, 5.0, 1e6]))
    weights = draw(st.sampled_from(["none", "positive", "zeros"]))
    w = None
    if weights != "none":
        w = rng.uniform(0.1, 2.0, size=n)
        if weights == "zeros" and n > 1:
            w[rng.uniform(size=n) < 0.3] = 0.0
            w[rng.integers(0, n)] = 1.0
    clients = rng.integers(0, draw(st.integers(1, 50)), size=n)
    relative_alpha = 10.0 ** draw(st.floats(-10, 2))
    return X, y, w, clients, relative_alpha * _scale(X, w, fit_intercept) ** 2


def _scale(X, w, fit_intercept):
    """Largest singular value of the design, at least 1e-7 of the data's magnitude.

    Below that floor a centered column is round-off of a constant one, and
    alpha relative to it would make the problem ill-posed at the data's precision.
    """
    s = _singular_values(X, w, fit_intercept)
    top = s[0] if s.size else 0.0
    return max(top, 1e-7 * np.sqrt(X.shape[0]) * np.abs(X).max(), 1e-300)


def _design(X, w, fit_intercept):
    w = np.ones(X.shape[0]) if w is None else w
    if fit_intercept:
        X = X - np.average(X, axis=0, weights=w)
    return X * np.sqrt(w)[:, None]


def _singular_values(X, w, fit_intercept):
    return np.linalg.svd(_design(X, w, fit_intercept), compute_uv=False)


def _reference(X, y, w, alpha, fit_intercept, start):
    """Ridge by iterative refinement with long-double residuals; None if it stalls."""
    L = np.longdouble
    w = np.ones(X.shape[0]) if w is None else w
    Xl, yl, wl = X.astype(L), y.reshape(len(y), -1).astype(L), w.astype(L)
    if fit_intercept:
        x_mean, y_mean = (wl @ Xl) / wl.sum(), (wl @ yl) / wl.sum()
        Xl, yl = Xl - x_mean, yl - y_mean
        Xl[:, np.ptp(X[w > 0], axis=0) == 0] = 0  # constant columns center to exact zeros
        yl[:, np.ptp(y.reshape(len(y), -1)[w > 0], axis=0) == 0] = 0
    root = np.sqrt(wl)[:, None]
    A, b = Xl * root, yl * root
    _, s, Vt = np.linalg.svd(A.astype(np.float64), full_matrices=False)
    coef = start.T.astype(L)  # (d, t)
    for _ in range(30):
        gradient = A.T @ (b - A @ coef) - L(alpha) * coef
        step = Vt.T @ ((Vt @ gradient.astype(np.float64)) / (s**2 + alpha)[:, None])
        coef = coef + step.astype(L)
        if np.abs(step).max() <= 1e-17 * max(float(np.abs(coef).max()), 1e-300):
            break
    else:
        return None
    intercept = (y_mean - x_mean @ coef) if fit_intercept else np.zeros(coef.shape[1], dtype=L)
    return coef.T.astype(np.float64), intercept.astype(np.float64)


def _tolerances(X, y, w, alpha, fit_intercept, coef, path):
    """Bounds on the coefficient and intercept errors (see the module docstring)."""
    n, d = X.shape
    ww = np.ones(n) if w is None else w
    W = ww.sum()
    yy = y.reshape(n, -1)
    x_mean = np.average(X, axis=0, weights=ww) if fit_intercept else np.zeros(d)
    y_mean = np.average(yy, axis=0, weights=ww) if fit_intercept else np.zeros(yy.shape[1])
    A, b = _design(X, w, fit_intercept), (yy - y_mean) * np.sqrt(ww)[:, None]
    s = np.linalg.svd(A, compute_uv=False)
    s1 = max(s[0] if s.size else 0.0, 1e-300)
    kept = s[s > max(n, d) * EPS * s1]
    s_r = kept.min() if kept.size else s1
    s_min = s_r if kept.size == d else 0.0  # the Gram path also sees the null space
    kappa = np.sqrt((s1**2 + alpha) / (s_r**2 + alpha))
    kappa_gram = (s1**2 + alpha) / (s_min**2 + alpha)
    norm = np.linalg.norm(coef)
    residual = np.linalg.norm(b - A @ coef.reshape(-1, d).T)
    rho = residual / (s1 * norm) if norm > 0 else 0.0
    # Rounding the data, and centering it around means of size |x_mean|, |y_mean|,
    # perturbs the design relatively by eps_a and the targets by db.
    eps_a = EPS * (1 + np.linalg.norm(x_mean) * np.sqrt(W) / s1)
    db = EPS * (np.linalg.norm(b) + np.linalg.norm(y_mean) * np.sqrt(W))
    gain = np.max(kept / (kept**2 + alpha)) if kept.size else 0.0
    bound = 2 * kappa_gram if path != "svd" else kappa + kappa**2 * rho
    C = 64 * np.sqrt(d)
    coef_tol = C * (eps_a * bound * norm + gain * db)
    # The intercept y_mean - x_mean . w: rounding of both means (sums of |y|, |x|).
    x_size = np.average(np.abs(X), axis=0, weights=ww) if fit_intercept else np.zeros(d)
    y_size = np.average(np.abs(yy), axis=0, weights=ww).max()
    intercept_tol = np.linalg.norm(x_mean) * coef_tol + C * EPS * (
        y_size + np.linalg.norm(x_size) * norm)
    return coef_tol + 1e-300, intercept_tol + 1e-300


def _check(problem, fit_intercept):
    X, y, w, clients, alpha = problem
    fed = FederatedRidge(alpha=alpha, fit_intercept=fit_intercept).fit(X, y, w, clients=clients)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Ridge warns on ill-conditioned systems
        ridges = [Ridge(alpha=alpha, fit_intercept=fit_intercept, solver=solver).fit(X, y, w)
                  for solver in ("cholesky", "svd")]
    assert np.shape(fed.coef_) == np.shape(ridges[0].coef_)
    assert np.shape(fed.intercept_) == np.shape(ridges[0].intercept_)
    coef = np.asarray(fed.coef_)
    reference = _reference(X, y, w, alpha, fit_intercept, coef.reshape(-1, X.shape[1]))
    hypothesis.assume(reference is not None)  # refinement stalled: no reliable reference
    ref_coef, ref_intercept = reference
    ref_coef = ref_coef.reshape(coef.shape)
    coef_tol, intercept_tol = _tolerances(X, y, w, alpha, fit_intercept, coef, fed.solver_)
    errors = [np.linalg.norm(np.asarray(r.coef_) - ref_coef) for r in ridges]
    best = ridges[int(np.argmin(errors))]
    assert np.linalg.norm(coef - ref_coef) <= coef_tol, "coef is off the reference"
    assert np.linalg.norm(coef - np.asarray(best.coef_)) <= coef_tol + min(errors)
    if fit_intercept:
        ref_intercept = ref_intercept.reshape(np.shape(fed.intercept_))
        assert np.abs(np.asarray(fed.intercept_) - ref_intercept).max() <= intercept_tol


@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("multi_target", [False, True])
def test_federated_ridge_equals_ridge(fit_intercept, multi_target):
    @SETTINGS
    @given(problems(fit_intercept, multi_target))
    def check(problem):
        _check(problem, fit_intercept)

    check()
