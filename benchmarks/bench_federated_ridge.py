"""FederatedRidge.fit vs sklearn Ridge(solver="cholesky").fit, side by side.

Prints, for each shape, the median over interleaved repeats of the time ratio
(FederatedRidge / Ridge; target <= 0.6 at 1,000,000 x 100 with 100 clients)
for the default path (``solver="auto"``: the Gram round, Cholesky) and, beside
it, for the factor path (``solver="svd"``: sites send the R of a QR of their
rows, the server stacks the factors and takes an SVD); and the extra peak
memory each allocates during fit as a share of X's size (target <= 10% for
FederatedRidge: no full-size centered copy). Memory is measured with
tracemalloc (which sees numpy's allocations) in a separate, untimed run, so
tracing does not slow the timed ones.

A second table times ``solver="auto"`` where it takes its second round (an
ill-conditioned aggregate: alpha far below the Gram's spectrum on wide data)
against a Gram-only fit and Ridge(solver="svd").

Usage::

    python benchmarks/bench_federated_ridge.py            # the issue's shapes
    python benchmarks/bench_federated_ridge.py --quick    # small shapes, seconds
    python benchmarks/bench_federated_ridge.py --quick --default-only  # no factor path
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


def bench(n, d, n_clients, layout, repeats, rng, factor_path=True):
    X = rng.standard_normal((n, d))
    y = X @ rng.standard_normal(d) + rng.standard_normal(n)
    if layout == "contiguous":  # each site's rows stacked one after another
        clients = np.repeat(np.arange(n_clients), -(-n // n_clients))[:n]
    else:  # rows of all sites interleaved at random
        clients = rng.integers(0, n_clients, size=n)
    fed = lambda: FederatedRidge(alpha=1.0).fit(X, y, clients=clients)  # noqa: E731
    factor = lambda: FederatedRidge(alpha=1.0, solver="svd").fit(X, y, clients=clients)  # noqa: E731
    ridge = lambda: Ridge(alpha=1.0, solver="cholesky").fit(X, y)  # noqa: E731
    ratios, factor_ratios = [], []
    for _ in range(repeats):  # interleaved: all see the same machine state
        reference = _seconds(ridge)
        ratios.append(_seconds(fed) / reference)
        if factor_path:
            factor_ratios.append(_seconds(factor) / reference)
    fed_mem, ridge_mem = _peak_bytes(fed) / X.nbytes, _peak_bytes(ridge) / X.nbytes
    factor_mem = _peak_bytes(factor) / X.nbytes if factor_path else np.nan
    factor_ratios = factor_ratios or [np.nan]
    return ratios, factor_ratios, fed_mem, factor_mem, ridge_mem


def bench_escalation(n, d, n_clients, repeats, rng):
    """Wide data, alpha = 1e-12: "auto" takes the factor round; Gram-only and Ridge(svd) beside."""
    X = rng.standard_normal((n, d))
    y = X @ rng.standard_normal(d)
    clients = np.arange(n) % n_clients
    auto = lambda: FederatedRidge(alpha=1e-12).fit(X, y, clients=clients)  # noqa: E731
    gram = lambda: FederatedRidge(alpha=1e-12, solver="cholesky").fit(X, y, clients=clients)  # noqa: E731,E501
    ridge = lambda: Ridge(alpha=1e-12, solver="svd").fit(X, y)  # noqa: E731
    times = {"auto": [], "gram": [], "ridge": []}
    for _ in range(repeats):
        for name, fit in (("ridge", ridge), ("auto", auto), ("gram", gram)):
            times[name].append(_seconds(fit))
    rounds = FederatedRidge(alpha=1e-12).fit(X, y, clients=clients).communication_.rounds
    return {name: float(np.median(t)) for name, t in times.items()}, rounds


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small shapes")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--default-only", action="store_true",
                        help="time only the default path (no factor path, no escalation table)")
    args = parser.parse_args(argv)
    shapes = [(1_000_000, 100), (100_000, 1_000)] if not args.quick else [(100_000, 50), (20_000, 300)]
    rng = np.random.default_rng(0)
    print(f"{'n':>9} {'d':>5} {'clients':>8} {'layout':>10} | {'default fed/ridge':>30} "
          f"| {'factor path fed/ridge':>21} | {'mem: fed':>8} {'factor':>7} {'ridge':>7}")
    print("-" * 118)
    for n, d in shapes:
        for layout in ("contiguous", "shuffled"):
            ratios, factor_ratios, fed_mem, factor_mem, ridge_mem = bench(
                n, d, 100, layout, args.repeats, rng, factor_path=not args.default_only)
            print(f"{n:>9} {d:>5} {100:>8} {layout:>10} | {np.median(ratios):>8.3f} "
                  f"(min {min(ratios):.3f} max {max(ratios):.3f}) | {np.median(factor_ratios):>21.3f} "
                  f"| {fed_mem:>8.1%} {factor_mem:>7.1%} {ridge_mem:>7.1%}", flush=True)
    if args.default_only:
        return
    print()
    print("solver='auto' taking its second (factor) round: wide data, alpha=1e-12, 10 clients")
    print(f"{'n':>6} {'d':>5} | {'rounds':>6} | {'auto s':>8} {'Gram-only s':>11} "
          f"{'Ridge(svd) s':>12} | {'auto/Ridge':>10}")
    for n, d in ([(2_000, 4_000), (500, 1_000)] if not args.quick else [(200, 400), (500, 1_000)]):
        times, rounds = bench_escalation(n, d, 10, args.repeats, rng)
        print(f"{n:>6} {d:>5} | {rounds:>6} | {times['auto']:>8.3f} {times['gram']:>11.3f} "
              f"{times['ridge']:>12.3f} | {times['auto'] / times['ridge']:>10.2f}", flush=True)


if __name__ == "__main__":
    main()
