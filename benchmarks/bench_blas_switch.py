"""What a switch between numpy's and scipy's OpenBLAS costs, side by side (issue 19).

numpy and scipy wheels each bring their own OpenBLAS. After a call, an
OpenBLAS's worker threads spin for a while before they sleep, so a call into
the *other* library right after a multi-threaded one competes with them for
the cores. This script times one LAPACK call of a d x d Gram (scipy's or
numpy's ``eigh``, scipy's ``cho_factor``) alone and right after a call of
the other library, on 1 and 2 BLAS threads, median of interleaved repeats.
It is why :func:`sklearn_fed.linear_model._solver.numerical_range` uses
numpy's ``eigh`` (FederatedRidgeCV's fold loop alternates it with numpy
products), and why the server's PSD check is slower on two threads right
after numpy's ``syrk``.

Usage::

    python benchmarks/bench_blas_switch.py            # d = 500
    python benchmarks/bench_blas_switch.py --d 1000
"""

import argparse
import os
import time

import numpy as np
from scipy import linalg
from threadpoolctl import threadpool_limits


def _median_ms(call, repeats):
    call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return 1e3 * float(np.median(times))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--d", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    A = rng.standard_normal((4 * args.d, args.d))
    gram = A.T @ A
    half = A[: 6 * args.d // 5]

    def numpy_product():
        half.T @ half  # big enough that numpy's OpenBLAS uses every thread

    calls = {
        "scipy eigh": lambda: linalg.eigh(gram, check_finite=False, driver="evd"),
        "numpy eigh": lambda: np.linalg.eigh(gram),
        "scipy cho_factor": lambda: linalg.cho_factor(gram, check_finite=False),
    }
    before = {
        "scipy eigh": ("numpy product", numpy_product),
        "numpy eigh": ("numpy product", numpy_product),
        "scipy cho_factor": ("numpy eigh", lambda: np.linalg.eigh(gram)),
    }
    print(f"load average {os.getloadavg()[0]:.2f}; d = {args.d}; median of "
          f"{args.repeats}; ms of the call alone, and after the call named (its own "
          "time subtracted)")
    for threads in (1, 2):
        with threadpool_limits(threads):
            for name, call in calls.items():
                label, first = before[name]
                alone = _median_ms(call, args.repeats)
                first_ms = _median_ms(first, args.repeats)

                def pair(call=call, first=first):
                    first()
                    call()

                after = _median_ms(pair, args.repeats) - first_ms
                print(f"  {threads} thread(s)  {name:>17}: alone {alone:7.1f} ms, "
                      f"after {label:>13} {after:7.1f} ms ({after / alone:4.1f}x)")


if __name__ == "__main__":
    main()
