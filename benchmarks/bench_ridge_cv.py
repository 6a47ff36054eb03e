"""FederatedRidgeCV.fit against RidgeCV, side by side (issue 19).

Times, interleaved in one process, ``FederatedRidgeCV.fit`` (leave-one-row-out,
``cv=None``, and leave-one-client-out, ``cv="clients"``) and
``RidgeCV(alphas).fit`` on the same rows, with 1 BLAS thread; prints the
median and min-max of the wall and user-CPU ratios, and the load average.

Usage::

    python benchmarks/bench_ridge_cv.py                 # 20,000 x 500, 50 clients
    python benchmarks/bench_ridge_cv.py --n 5000 --d 200 --repeats 3
"""

import argparse
import gc
import os
import resource
import time

import numpy as np
from sklearn.linear_model import RidgeCV
from threadpoolctl import threadpool_limits

from sklearn_fed import FederatedRidgeCV


def _timed(fit):
    gc.collect()
    wall, user = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF).ru_utime
    fit()
    return time.perf_counter() - wall, resource.getrusage(resource.RUSAGE_SELF).ru_utime - user


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--d", type=int, default=500)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((args.n, args.d))
    y = X @ rng.standard_normal(args.d) + rng.standard_normal(args.n)
    clients = np.arange(args.n) % args.clients
    alphas = np.logspace(-3, 3, 13)
    fits = {
        "RidgeCV": lambda: RidgeCV(alphas=alphas).fit(X, y),
        "fed cv=None": lambda: FederatedRidgeCV(alphas=alphas).fit(X, y, clients=clients),
        "fed cv='clients'": lambda: FederatedRidgeCV(alphas=alphas, cv="clients").fit(
            X, y, clients=clients),
    }
    times = {name: {"wall": [], "user": []} for name in fits}
    load = "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg())
    with threadpool_limits(limits=args.threads):
        for _ in range(args.repeats):
            for name, fit in fits.items():
                wall, user = _timed(fit)
                times[name]["wall"].append(wall)
                times[name]["user"].append(user)
    print(f"{args.n} x {args.d}, {args.clients} clients, {len(alphas)} alphas, "
          f"{args.threads} BLAS thread(s), median (min-max) of {args.repeats}; "
          f"load {load} / {'{:.2f} {:.2f} {:.2f}'.format(*os.getloadavg())}")
    for name in fits:
        cells = []
        for kind in ("wall", "user"):
            ratio = np.asarray(times[name][kind]) / np.asarray(times["RidgeCV"][kind])
            cells.append(f"{kind} {np.median(times[name][kind]):7.3f} s, "
                         f"/RidgeCV {np.median(ratio):5.2f} ({ratio.min():.2f}-{ratio.max():.2f})")
        print(f"{name:>17} | " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
