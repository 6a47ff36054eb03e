"""What the framework costs: federated fits in process beside scikit-learn on the pooled rows.

FederatedLogisticRegression, FederatedStandardScaler and FederatedPCA fitted
with ``clients`` (K sites) against LogisticRegression(solver="newton-cholesky"),
StandardScaler and PCA(svd_solver="covariance_eigh") on the same rows,
interleaved, median of several runs, in one process (issue 26's target: a
ratio of at most 1.0 at 2e5 x 50, 10 sites).

Usage::

    python benchmarks/bench_framework.py                  # 2e5 x 50, 10 sites, 7 runs
    python benchmarks/bench_framework.py --rows 50000 --runs 3
    python benchmarks/bench_framework.py --blas-threads 1   # both sides on one BLAS thread
    python benchmarks/bench_framework.py --only Logistic

``--blas-threads`` limits BLAS on both sides (threadpoolctl): on a loaded
machine, threaded BLAS waits for cores it cannot get, and the ratio then
measures the load more than the code.
"""

import argparse
import statistics
import time

import numpy as np
from sklearn.decomposition import PCA
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

from sklearn_fed import (
    FederatedLogisticRegression,
    FederatedPCA,
    FederatedStandardScaler,
)


def _pairs(X, y, clients):
    return {
        "FederatedLogisticRegression": (
            lambda: FederatedLogisticRegression().fit(X, y, clients=clients),
            lambda: LogisticRegression(solver="newton-cholesky").fit(X, y),
        ),
        "FederatedStandardScaler": (
            lambda: FederatedStandardScaler().fit(X, clients=clients),
            lambda: StandardScaler().fit(X),
        ),
        "FederatedPCA": (
            lambda: FederatedPCA(n_components=10).fit(X, clients=clients),
            lambda: PCA(n_components=10, svd_solver="covariance_eigh").fit(X),
        ),
    }


def _seconds(call):
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--features", type=int, default=50)
    parser.add_argument("--sites", type=int, default=10)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--blas-threads", type=int, default=None,
                        help="BLAS threads for both sides (default: the library's own)")
    parser.add_argument("--only", default="",
                        help="only the estimators whose name contains this (e.g. Logistic)")
    args = parser.parse_args(argv)
    with threadpool_limits(args.blas_threads):
        _compare(args)


def _compare(args):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(args.rows, args.features))
    y = (X @ rng.normal(size=args.features) + rng.normal(size=args.rows) > 0).astype(int)
    clients = rng.integers(0, args.sites, size=args.rows)
    threads = "" if args.blas_threads is None else f", {args.blas_threads} BLAS thread(s)"
    print(f"{args.rows} x {args.features}, {args.sites} sites, median of {args.runs} "
          f"interleaved runs{threads}")
    print(f"{'estimator':<29} | {'federated ms':>12} | {'sklearn ms':>10} | ratio")
    for name, (federated, pooled) in _pairs(X, y, clients).items():
        if args.only not in name:
            continue
        federated(), pooled()  # warm up (imports, BLAS threads)
        times = [(_seconds(federated), _seconds(pooled)) for _ in range(args.runs)]
        fed = statistics.median(t for t, _ in times)
        ref = statistics.median(t for _, t in times)
        ratio = statistics.median(t / r for t, r in times)
        print(f"{name:<29} | {fed * 1e3:>12.1f} | {ref * 1e3:>10.1f} | {ratio:.2f}")


if __name__ == "__main__":
    main()
