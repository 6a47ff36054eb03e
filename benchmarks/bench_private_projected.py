"""PrivateFederatedRidge and ProjectedFederatedRidge vs FederatedRidge, side by side.

Prints, for 1 and 2 BLAS threads, the median (min-max) over interleaved
repeats of the wall and user-CPU time ratios to ``FederatedRidge.fit`` on the
same rows and clients (targets: <= 1.2) and the wall ratio to FederatedRidge's
protocol run site by site (``simulate_through_bytes``: ``fit`` pools
FederatedRidge's round, which per-site noise rules out for Private), the
extra peak memory of each fit as a share of X (tracemalloc, in a separate
untimed run; target <= 10%), and the
cost of each of 50 ``PrivateFederatedRidge.partial_fit`` releases against one
``FederatedRidge.partial_fit`` on the same batch (target <= 2). Timings on a
shared machine are indicative: read the ratios, not the seconds.

Usage::

    python benchmarks/bench_private_projected.py           # 500,000 x 100, 100 clients
    python benchmarks/bench_private_projected.py --quick   # small, seconds
"""

import argparse
import gc
import os
import sys
import time
import tracemalloc
import warnings
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

# The checkout this script is in, not whichever sklearn_fed is installed.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sklearn_fed import (  # noqa: E402
    FederatedRidge,
    PrivateFederatedRidge,
    ProjectedFederatedRidge,
)
from sklearn_fed.protocol import simulate_through_bytes  # noqa: E402


def _times(call):
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    call()
    return time.perf_counter() - wall, time.process_time() - cpu


def _peak_bytes(call):
    gc.collect()
    tracemalloc.start()
    call()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def _summary(values):
    values = np.asarray(values)
    return f"{np.median(values):6.2f} ({values.min():.2f}-{values.max():.2f})"


def bench_fit(n, d, n_clients, repeats, rng):
    X = rng.standard_normal((n, d)) / np.sqrt(d)  # rows of norm ~1: the bounds' scale
    y = X @ rng.standard_normal(d) / 3 + 0.1 * rng.standard_normal(n)
    layouts = {
        "contiguous": np.repeat(np.arange(n_clients), -(-n // n_clients))[:n],
        "shuffled": rng.integers(0, n_clients, size=n),
    }
    candidates = {
        "Private local": lambda: PrivateFederatedRidge(epsilon=1.0, feature_bound=2.0),
        # rows of norm ~1 over a bound of 0.5: nearly every row is clipped
        "Private local clipped": lambda: PrivateFederatedRidge(epsilon=1.0, feature_bound=0.5),
        "Private distributed": lambda: PrivateFederatedRidge(
            epsilon=1.0, feature_bound=2.0, noise="distributed"),
        "Projected sparse m=d/4": lambda: ProjectedFederatedRidge(
            n_components=d // 4, projection="sparse", random_state=0),
    }
    rows = []
    for layout, clients in layouts.items():
        baseline = lambda: FederatedRidge().fit(X, y, clients=clients)  # noqa: E731

        def per_site(clients=clients):  # FederatedRidge site by site (fit pools its round)
            with simulate_through_bytes():
                FederatedRidge().fit(X, y, clients=clients)

        for name, make in candidates.items():
            fit = lambda make=make: make().fit(X, y, clients=clients)  # noqa: E731
            wall, cpu, site_wall = [], [], []
            for _ in range(repeats):  # interleaved: all see the same machine state
                ours, base, sites = _times(fit), _times(baseline), _times(per_site)
                wall.append(ours[0] / base[0])
                cpu.append(ours[1] / base[1])
                site_wall.append(ours[0] / sites[0])
            memory = _peak_bytes(fit) / X.nbytes
            base_memory = _peak_bytes(baseline) / X.nbytes
            rows.append((layout, name, _summary(wall), _summary(cpu), _summary(site_wall),
                         memory, base_memory))
    return rows


def bench_stream(d, batch, n_releases, repeats, rng):
    X = rng.standard_normal((batch * n_releases, d)) / np.sqrt(d)
    y = X @ rng.standard_normal(d) / 3
    clients = np.arange(batch) % 4
    ratios = []
    for _ in range(repeats):
        private = PrivateFederatedRidge(epsilon=1.0, feature_bound=2.0, target_bound=4.0)
        exact = FederatedRidge()
        private_seconds, exact_seconds = [], []
        for k in range(n_releases):
            rows = slice(k * batch, (k + 1) * batch)
            private_seconds.append(_times(
                lambda: private.partial_fit(X[rows], y[rows], clients=clients))[0])
            exact_seconds.append(_times(
                lambda: exact.partial_fit(X[rows], y[rows], clients=clients))[0])
        ratios.append(np.median(private_seconds) / np.median(exact_seconds))
        last = private_seconds[-1] / exact_seconds[-1]
    return _summary(ratios), last


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small shapes, seconds")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")  # clipping warnings of random rows: not the point here
    n, d, k = (50_000, 40, 10) if args.quick else (500_000, 100, 100)
    rng = np.random.default_rng(0)
    print(f"load average {os.getloadavg()[0]:.2f}; X {n} x {d}, {k} clients; "
          f"median (min-max) of {args.repeats} interleaved repeats")
    for threads in (1, 2):
        with threadpool_limits(threads):
            print(f"\n{threads} BLAS thread(s): fit / FederatedRidge.fit (pooled), and / its "
                  "per-site run (through bytes)")
            print(f"{'layout':>10} {'estimator':>24} | {'wall ratio':>18} | "
                  f"{'user-CPU ratio':>18} | {'wall / per-site':>18} | "
                  f"{'extra mem':>9} {'(FedRidge)':>10}")
            for layout, name, wall, cpu, site_wall, memory, base in bench_fit(
                    n, d, k, args.repeats, rng):
                print(f"{layout:>10} {name:>24} | {wall:>18} | {cpu:>18} | {site_wall:>18} | "
                      f"{memory:>9.1%} {base:>10.1%}", flush=True)
            stream, last = bench_stream(d, 1000, 50, max(1, args.repeats // 2), rng)
            print(f"50 releases of PrivateFederatedRidge.partial_fit (1000 rows, d={d}) / "
                  f"FederatedRidge.partial_fit, per call: {stream} (last call {last:.2f})")
            load = os.getloadavg()
            print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}", flush=True)


if __name__ == "__main__":
    main()
