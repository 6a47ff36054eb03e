"""Wall time of a fit through a real Flower federation vs the same fit in process.

Starts one SuperLink and three SuperNodes on 127.0.0.1 (LocalFederation),
runs each estimator through it (one ``flwr run`` each), and fits the same
estimator in process on the same per-site rows (median of 5). Checks that
both give identical coefficients (or network parameters) and prints a
markdown table. The Flower time is end to end: building and submitting the
app, the ServerApp process, one ClientApp process per message (a roll call,
then one per protocol round and site), and saving the model.

Usage::

    python benchmarks/bench_flower.py
"""

import os
import statistics
import time

import numpy as np
from sklearn.base import clone
from sklearn.datasets import load_digits

from sklearn_fed import FederatedRidge, FederatedRidgeCV, ProjectedFederatedRidge
from sklearn_fed.flower import LocalFederation
from sklearn_fed.utils.estimator_checks import _model_state

ESTIMATORS = [
    FederatedRidge(alpha=1.0),
    FederatedRidgeCV(alphas=(0.1, 1.0, 10.0)),
    ProjectedFederatedRidge(n_components=16, random_state=0),
]


def main():
    X, y = load_digits(return_X_y=True)
    X, y = X[:600], y[:600]
    clients = np.array(["a", "b", "c"])[np.arange(600) % 3]
    sites = {s: (X[clients == s], y[clients == s]) for s in ("a", "b", "c")}
    order = np.concatenate([np.flatnonzero(clients == s) for s in sites])
    start = time.perf_counter()
    with LocalFederation(sites) as federation:
        print(f"federation started in {time.perf_counter() - start:.1f} s "
              f"(SuperLink + 3 SuperNodes online); {os.cpu_count()} CPUs, load average "
              f"{os.getloadavg()[0]:.1f}\n")
        print("| estimator | rounds | Flower run (s) | in process (ms) | identical |")
        print("|---|---|---|---|---|")
        for estimator in ESTIMATORS:
            start = time.perf_counter()
            flower = federation.fit(estimator)
            flower_s = time.perf_counter() - start
            local_times = []
            for _ in range(5):
                start = time.perf_counter()
                local = clone(estimator).fit(X[order], y[order], clients=clients[order])
                local_times.append(time.perf_counter() - start)
            same = all(np.array_equal(a, b)
                       for a, b in zip(_model_state(flower), _model_state(local)))
            print(f"| {type(estimator).__name__} | {flower.communication_.rounds} | "
                  f"{flower_s:.1f} | {1000 * statistics.median(local_times):.1f} | {same} |")
        print(f"\nload average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
