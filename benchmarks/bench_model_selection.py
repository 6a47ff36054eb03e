"""Federated model selection against scikit-learn's on the pooled rows, side by side (issue 29).

Times, interleaved in one process with 1 BLAS thread, each federated search
(simulated: every site in this process) and its scikit-learn equivalent on
the pooled rows with the same folds (``PredefinedSplit`` of the sites' own
KFolds), checks that they choose the same candidate, and prints the median
wall and user-CPU times and their ratio (federated / scikit-learn: below 1,
the simulation is faster). Also prints the load average: on a shared machine
the ratios, interleaved, are what to read.

Usage::

    python benchmarks/bench_model_selection.py                  # 20,000 x 30, 10 sites
    python benchmarks/bench_model_selection.py --n 5000 --repeats 3
"""

import argparse
import gc
import os
import resource
import time

import numpy as np
from sklearn.linear_model import LogisticRegression, LogisticRegressionCV, Ridge
from sklearn.model_selection import GridSearchCV, PredefinedSplit
from threadpoolctl import threadpool_limits

from sklearn_fed import (
    FederatedGridSearchCV,
    FederatedLogisticRegression,
    FederatedLogisticRegressionCV,
    FederatedRidge,
)
from sklearn_fed.model_selection import SiteKFold


def _timed(fit):
    gc.collect()
    wall, user = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF).ru_utime
    result = fit()
    return (time.perf_counter() - wall,
            resource.getrusage(resource.RUSAGE_SELF).ru_utime - user, result)


def _cases(X, y_reg, y_cls, sites, cv, tol):
    split = PredefinedSplit(cv.pooled_test_fold(sites))
    alphas = {"alpha": list(np.logspace(-3, 3, 10))}
    Cs = list(np.logspace(-3, 2, 6))
    return [
        ("ridge, 10 alphas",
         lambda: FederatedGridSearchCV(FederatedRidge(), alphas, cv=cv).fit(
             X, y_reg, clients=sites).best_params_["alpha"],
         lambda: GridSearchCV(Ridge(), alphas, cv=split).fit(X, y_reg).best_params_["alpha"]),
        ("logistic, 6 Cs (grid search)",
         lambda: FederatedGridSearchCV(FederatedLogisticRegression(tol=tol), {"C": Cs},
                                       cv=cv, scoring="neg_log_loss").fit(
             X, y_cls, clients=sites).best_params_["C"],
         lambda: GridSearchCV(LogisticRegression(solver="newton-cholesky", tol=tol),
                              {"C": Cs}, cv=split, scoring="neg_log_loss").fit(
             X, y_cls).best_params_["C"]),
        ("LogisticRegressionCV, 6 Cs",
         lambda: float(FederatedLogisticRegressionCV(Cs=Cs, cv=cv, tol=tol).fit(
             X, y_cls, clients=sites).C_[0]),
         lambda: float(LogisticRegressionCV(Cs=Cs, cv=split, solver="newton-cholesky",
                                            tol=tol, l1_ratios=(0,), scoring="accuracy",
                                            use_legacy_attributes=True).fit(
             X, y_cls).C_[0])),
    ]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--d", type=int, default=30)
    parser.add_argument("--sites", type=int, default=10)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tol", type=float, default=1e-8)
    args = parser.parse_args(argv)

    rng = np.random.default_rng(0)
    X = rng.normal(size=(args.n, args.d))
    w = rng.normal(size=args.d)
    y_reg = X @ w + rng.normal(size=args.n)
    y_cls = (X @ w + rng.logistic(size=args.n) * 2 > 0).astype(int)
    sites = rng.permutation(np.arange(args.n) % args.sites)
    cv = SiteKFold(args.folds, shuffle=True, random_state=0)
    print(f"{args.n} rows x {args.d} features, {args.sites} sites, {args.folds} folds at the "
          f"sites, 1 BLAS thread, load average {os.getloadavg()[0]:.1f}")
    print(f"{'case':32s} {'federated s':>12s} {'sklearn s':>10s} {'wall ratio':>11s} "
          f"{'CPU ratio':>10s}  same choice")
    with threadpool_limits(1):
        for name, federated, pooled in _cases(X, y_reg, y_cls, sites, cv, args.tol):
            times = {"fed": [], "skl": []}
            for _ in range(args.repeats):  # interleaved: both see the same machine load
                wall_f, user_f, choice_f = _timed(federated)
                wall_s, user_s, choice_s = _timed(pooled)
                times["fed"].append((wall_f, user_f))
                times["skl"].append((wall_s, user_s))
            fed, skl = np.median(times["fed"], axis=0), np.median(times["skl"], axis=0)
            print(f"{name:32s} {fed[0]:12.3f} {skl[0]:10.3f} {fed[0] / skl[0]:11.2f} "
                  f"{fed[1] / max(skl[1], 1e-9):10.2f}  {np.isclose(choice_f, choice_s)}")


if __name__ == "__main__":
    main()
