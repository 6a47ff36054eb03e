"""Precision of FederatedRidge's solve paths and of scikit-learn's Ridge, per regime.

For each regime, the relative error ``|coef - reference| / |reference|`` of
the coefficients against a 60-digit reference (mpmath: the normal equations
of the centered, sqrt-weighted rows solved in exact-enough arithmetic), for
FederatedRidge with ``solver="auto"`` (its path and rounds in brackets),
``"cholesky"`` (Gram messages only) and ``"svd"`` (factor messages), each
over 7 clients, and for ``Ridge(solver="cholesky")`` and
``Ridge(solver="svd")``. The table in docs/user_guide/numerical_accuracy.rst
is this script's output.

Usage::

    python benchmarks/numerical_accuracy.py [--california PATH/TO/housing.csv]

``--california`` adds the raw (unscaled) California housing features, whose
scales span 1 to 1e3: badly scaled but not ill-conditioned, so the Gram path
is exact there.
"""

import argparse
import warnings

import mpmath
import numpy as np
from sklearn.datasets import make_regression
from sklearn.linear_model import Ridge

from sklearn_fed import FederatedRidge

mpmath.mp.dps = 60


def reference(X, y, alpha, fit_intercept):
    """Ridge coefficients to ~50 digits (mpmath)."""
    n, d = X.shape
    Xm, ym = mpmath.matrix(X.tolist()), mpmath.matrix(y.reshape(-1, 1).tolist())
    if fit_intercept:
        for j in range(d):
            mean = mpmath.fsum(Xm[i, j] for i in range(n)) / n
            for i in range(n):
                Xm[i, j] -= mean
        mean = mpmath.fsum(ym[i, 0] for i in range(n)) / n
        for i in range(n):
            ym[i, 0] -= mean
    A = Xm.T * Xm
    for j in range(d):
        A[j, j] += alpha
    w = mpmath.lu_solve(A, Xm.T * ym)
    return np.array([float(w[j]) for j in range(d)])


def regimes(california=None):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(500, 20))
    yield "well conditioned, 500 x 20, alpha=1", X, X @ rng.normal(size=20) + rng.normal(
        size=500), 1.0, True
    Xw, yw = make_regression(n_samples=50, n_features=100, noise=0, bias=10, random_state=42)
    yield "wide 50 x 100, alpha=1e-16, no intercept", Xw, yw, 1e-16, False
    yield "wide 50 x 100, alpha=1e-16, intercept", Xw, yw, 1e-16, True
    yield "wide 50 x 100, alpha=1e-8, intercept", Xw, yw, 1e-8, True
    Xs, ys = make_regression(n_samples=50, n_features=50, noise=0, bias=10, random_state=42)
    yield "centered square 50 x 50, alpha=1e-16", Xs, ys, 1e-16, True
    X0 = rng.normal(size=(98, 26))
    X0[:, 7:] = rng.normal(size=19)
    y0 = X0 @ rng.normal(size=26) + 0.5 * rng.normal(size=98)
    yield "98 x 26, 19 constant columns, offsets 1e6, no intercept", X0 + 1e6, y0, 1.0, False
    yield "1 x 2, offsets 1e6, no intercept", np.array([[1e6 + 0.3, 1e6 - 0.7]]), np.array(
        [2.0]), 1.0, False
    Xo = rng.normal(size=(300, 8)) + 1e6
    yield "300 x 8, offsets 1e6, intercept", Xo, (Xo - 1e6) @ rng.normal(size=8) + rng.normal(
        size=300), 1.0, True
    U = np.linalg.qr(rng.normal(size=(200, 12)))[0]
    V = np.linalg.qr(rng.normal(size=(12, 12)))[0]
    Xk = (U * np.logspace(0, -6, 12)) @ V.T
    yield "200 x 12, cond(X)=1e6, alpha=1e-14", Xk, Xk @ rng.normal(size=12) + 1e-6 * rng.normal(
        size=200), 1e-14, False
    if california is not None:
        import pandas as pd

        table = pd.read_csv(california).dropna()
        Xc = table.drop(columns=["median_house_value", "ocean_proximity"]).to_numpy(float)
        yc = table["median_house_value"].to_numpy(float)
        yield f"California housing raw {Xc.shape[0]} x {Xc.shape[1]}, alpha=1", Xc, yc, 1.0, True


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--california", help="path to California housing's housing.csv")
    args = parser.parse_args(argv)
    header = (f"{'regime':<56} | {'auto [path, rounds]':>22} {'cholesky':>9} {'svd':>9} | "
              f"{'Ridge chol':>10} {'Ridge svd':>9}")
    print(header)
    print("-" * len(header))
    for name, X, y, alpha, fit_intercept in regimes(args.california):
        exact = reference(X, y, alpha, fit_intercept)
        scale = np.linalg.norm(exact)
        clients = np.arange(X.shape[0]) % 7
        cells = []
        for solver in ("auto", "cholesky", "svd"):
            fed = FederatedRidge(alpha=alpha, fit_intercept=fit_intercept, solver=solver)
            fed.fit(X, y, clients=clients)
            error = np.linalg.norm(fed.coef_ - exact) / scale
            if solver == "auto":
                cells.append(f"{error:8.1e} [{fed.solver_}, {fed.communication_.rounds}]")
            else:
                cells.append(f"{error:9.1e}")
        for solver in ("cholesky", "svd"):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                ridge = Ridge(alpha=alpha, fit_intercept=fit_intercept, solver=solver).fit(X, y)
            cells.append(f"{np.linalg.norm(ridge.coef_ - exact) / scale:9.1e}")
        print(f"{name:<56} | {cells[0]:>22} {cells[1]:>9} {cells[2]:>9} | "
              f"{cells[3]:>10} {cells[4]:>9}", flush=True)


if __name__ == "__main__":
    main()
