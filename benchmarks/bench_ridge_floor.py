"""FederatedRidge.fit against the BLAS floor and Ridge, side by side (issue 19).

The *floor* is one ``X.T @ X`` of the same ``X`` (numpy runs it as ``syrk``):
no fit of ridge on these rows can read them with less work. For each shape
of the issue's table, and for 1 and 2 BLAS threads (threadpoolctl), the
script times, interleaved in one process, the floor, ``FederatedRidge.fit``
with contiguous and with shuffled integer client labels, and
``Ridge(solver="cholesky").fit``; it prints the median of the ratios with
their min-max, for wall time and for user-CPU time, the load average before
and after each shape, and the extra peak memory of each fit as a share of
``X`` (tracemalloc, in separate untimed runs).

Usage::

    python benchmarks/bench_ridge_floor.py                 # the issue's shapes
    python benchmarks/bench_ridge_floor.py --quick         # shapes / 10, seconds
    python benchmarks/bench_ridge_floor.py --shapes 1e6x100x100 --threads 1
    python benchmarks/bench_ridge_floor.py --weighted    # with sample weights (sites one by one)
"""

import argparse
import gc
import os
import resource
import time
import tracemalloc

import numpy as np
from sklearn.linear_model import Ridge
from threadpoolctl import threadpool_limits

from sklearn_fed import FederatedRidge

#: (n, d, K) of the issue's table.
SHAPES = [
    (1_000_000, 100, 100),
    (100_000, 1_000, 100),
    (200_000, 300, 10),
    (10_000, 2_000, 10),
    (1_000_000, 20, 1_000),
    (100_000, 100, 10_000),
    (200_000, 50, 100_000),
]


def _user_seconds():
    return resource.getrusage(resource.RUSAGE_SELF).ru_utime


def _timed(fit):
    """``(wall, user CPU)`` seconds of one call."""
    gc.collect()
    wall, user = time.perf_counter(), _user_seconds()
    fit()
    return time.perf_counter() - wall, _user_seconds() - user


def _extra_memory(fit, X):
    """Peak bytes allocated during ``fit`` as a share of ``X.nbytes`` (untimed run)."""
    gc.collect()
    tracemalloc.start()
    fit()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / X.nbytes


def _load():
    return "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg())


def _summary(values):
    values = np.asarray(values)
    return f"{np.median(values):6.2f} ({values.min():.2f}-{values.max():.2f})"


def bench(n, d, n_clients, repeats, rng, memory=True, weighted=False):
    """Ratios of one shape: ``{name: {"wall": [...], "user": [...]}}`` and extra memory."""
    X = rng.standard_normal((n, d))
    y = X @ rng.standard_normal(d) + rng.standard_normal(n)
    w = rng.uniform(0.5, 2.0, size=n) if weighted else None
    layouts = {
        "contiguous": np.repeat(np.arange(n_clients), -(-n // n_clients))[:n],
        "shuffled": rng.permutation(np.arange(n) % n_clients),
    }
    fits = {
        "floor": lambda: X.T @ X,
        "ridge": lambda: Ridge(alpha=1.0, solver="cholesky").fit(X, y, sample_weight=w),
        **{
            name: (lambda c=clients: FederatedRidge(alpha=1.0).fit(X, y, w, clients=c))
            for name, clients in layouts.items()
        },
    }
    times = {name: {"wall": [], "user": []} for name in fits}
    for _ in range(repeats):  # interleaved: every fit sees the same machine state
        for name, fit in fits.items():
            wall, user = _timed(fit)
            times[name]["wall"].append(wall)
            times[name]["user"].append(user)
    names = ("contiguous", "shuffled", "ridge")
    memory = {name: _extra_memory(fits[name], X) if memory else np.nan for name in names}
    return times, memory


def _ratios(times, numerator, denominator, kind):
    return np.asarray(times[numerator][kind]) / np.maximum(times[denominator][kind], 1e-9)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="every shape's n divided by 10")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--no-memory", action="store_true", help="skip the tracemalloc runs")
    parser.add_argument("--weighted", action="store_true",
                        help="sample weights (uniform in [0.5, 2]) for FederatedRidge and Ridge")
    parser.add_argument("--shapes", nargs="+", default=None,
                        help="shapes as NxDxK, e.g. 1e6x100x100 (default: the issue's table)")
    args = parser.parse_args(argv)
    shapes = SHAPES
    if args.shapes:
        shapes = [tuple(int(float(v)) for v in s.split("x")) for s in args.shapes]
    if args.quick:
        shapes = [(max(n // 10, d + 1), d, min(k, max(n // 10 // 2, 1))) for n, d, k in shapes]
    rng = np.random.default_rng(0)
    print(f"median (min-max) of {args.repeats} interleaved runs; ratios per run; "
          "mem = extra peak memory / X (tracemalloc)"
          + ("; sample weights in [0.5, 2]" if args.weighted else ""))
    header = (f"{'thr':>3} {'n':>8} {'d':>5} {'K':>7} | {'fed/floor contig':>19} "
              f"{'fed/floor shuffled':>19} | {'fed/ridge contig':>19} {'fed/ridge shuf':>19} | "
              f"{'mem fed':>7} {'shuf':>6} {'ridge':>6} | {'floor s':>7} | load before / after")
    print(header)
    print("-" * len(header))
    for threads in args.threads:
        with threadpool_limits(limits=threads):
            for n, d, k in shapes:
                before = _load()
                times, memory = bench(n, d, k, args.repeats, rng, memory=not args.no_memory,
                                      weighted=args.weighted)
                for kind in ("wall", "user"):
                    cells = [
                        _summary(_ratios(times, "contiguous", "floor", kind)),
                        _summary(_ratios(times, "shuffled", "floor", kind)),
                        _summary(_ratios(times, "contiguous", "ridge", kind)),
                        _summary(_ratios(times, "shuffled", "ridge", kind)),
                    ]
                    mem = (f"{memory['contiguous']:7.1%} {memory['shuffled']:6.1%} "
                           f"{memory['ridge']:6.1%}" if kind == "wall" else " " * 22)
                    print(f"{threads:>3} {n:>8} {d:>5} {k:>7} | {cells[0]:>19} {cells[1]:>19} | "
                          f"{cells[2]:>19} {cells[3]:>19} | {mem} | "
                          f"{np.median(times['floor'][kind]):7.3f} | "
                          f"{kind}{'  ' + before + ' / ' + _load() if kind == 'wall' else ''}",
                          flush=True)


if __name__ == "__main__":
    main()
