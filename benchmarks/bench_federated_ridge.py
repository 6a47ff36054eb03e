"""FederatedRidge.fit vs sklearn Ridge(solver="cholesky").fit, side by side.

Prints, for each shape, the median over interleaved repeats of the time ratio
(FederatedRidge / Ridge; target <= 0.6 at 1,000,000 x 100 with 100 clients)
and the extra peak memory each allocates during fit as a share of X's size
(target <= 10% for FederatedRidge: no full-size centered copy). Memory is
measured with tracemalloc (which sees numpy's allocations) in a separate,
untimed run, so tracing does not slow the timed ones.

Usage::

    python benchmarks/bench_federated_ridge.py            # the issue's shapes
    python benchmarks/bench_federated_ridge.py --quick    # small shapes, seconds
"""

import argparse
import gc
import time
import tracemalloc

import numpy as np
from sklearn.linear_model import Ridge

from sklearn_fed import FederatedRidge


def _seconds(fit):
    gc.collect()
    start = time.perf_counter()
    fit()
    return time.perf_counter() - start


def _peak_bytes(fit):
    """Peak bytes numpy allocates during ``fit`` (a separate, untimed run)."""
    gc.collect()
    tracemalloc.start()
    fit()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def bench(n, d, n_clients, layout, repeats, rng):
    X = rng.standard_normal((n, d))
    y = X @ rng.standard_normal(d) + rng.standard_normal(n)
    if layout == "contiguous":  # each site's rows stacked one after another
        clients = np.repeat(np.arange(n_clients), -(-n // n_clients))[:n]
    else:  # rows of all sites interleaved at random
        clients = rng.integers(0, n_clients, size=n)
    fed = lambda: FederatedRidge(alpha=1.0).fit(X, y, clients=clients)  # noqa: E731
    ridge = lambda: Ridge(alpha=1.0, solver="cholesky").fit(X, y)  # noqa: E731
    ratios = []
    for _ in range(repeats):  # interleaved: both see the same machine state
        ratios.append(_seconds(fed) / _seconds(ridge))
    fed_mem, ridge_mem = _peak_bytes(fed) / X.nbytes, _peak_bytes(ridge) / X.nbytes
    return np.median(ratios), min(ratios), max(ratios), fed_mem, ridge_mem


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small shapes")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    shapes = [(1_000_000, 100), (100_000, 1_000)] if not args.quick else [(100_000, 50), (20_000, 300)]
    rng = np.random.default_rng(0)
    print(f"{'n':>9} {'d':>5} {'clients':>8} {'layout':>10} | {'time ratio fed/ridge':>22} "
          f"| {'fed extra mem':>13} {'ridge extra mem':>15}")
    print("-" * 96)
    for n, d in shapes:
        for layout in ("contiguous", "shuffled"):
            med, lo, hi, fed_mem, ridge_mem = bench(n, d, 100, layout, args.repeats, rng)
            print(f"{n:>9} {d:>5} {100:>8} {layout:>10} | {med:>8.3f} (min {lo:.3f} max {hi:.3f}) "
                  f"| {fed_mem:>12.1%} {ridge_mem:>15.1%}", flush=True)


if __name__ == "__main__":
    main()
