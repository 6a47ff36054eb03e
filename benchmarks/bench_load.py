"""A server under load: FederatedRidge.fit_statistics on many messages (issue 14).

Builds K statistics messages (bytes, the deployment path) of d features
from small random sites, then times ``FederatedRidge().fit_statistics`` on
them and measures its extra peak memory (tracemalloc, a separate run)
against the total size of the messages, which the server holds anyway.
Target: messages + extra peak <= 2x the message bytes.

Usage::

    python benchmarks/bench_load.py                       # 10,000 x d=100 and 1,000 x d=1,000
    python benchmarks/bench_load.py --loads 1000x100      # K x d
"""

import argparse
import gc
import os
import resource
import time
import tracemalloc

import numpy as np

from sklearn_fed import FederatedRidge
from sklearn_fed.statistics import ClientStatistics


def _messages(n_clients, d, rows, rng):
    base = rng.standard_normal((rows * 8, d))
    messages = []
    for _ in range(n_clients):  # 8 blocks of rows, shifted: every message differs
        start = rng.integers(0, 7) * rows
        X = base[start : start + rows] + rng.standard_normal(d)
        messages.append(ClientStatistics.from_data(X, X[:, 0] + rng.standard_normal(rows)).to_bytes())
    return messages


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loads", nargs="+", default=["10000x100", "1000x1000"])
    parser.add_argument("--rows", type=int, default=20, help="rows per site")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    print(f"{'K':>6} {'d':>5} | {'messages MB':>11} | {'fit s':>6} {'user s':>6} | "
          f"{'extra peak MB':>13} | {'(messages + peak) / messages':>28} | load")
    for load in args.loads:
        n_clients, d = (int(v) for v in load.split("x"))
        messages = _messages(n_clients, d, args.rows, rng)
        total = sum(len(m) for m in messages)
        gc.collect()
        wall, user = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF).ru_utime
        FederatedRidge().fit_statistics(messages)
        wall = time.perf_counter() - wall
        user = resource.getrusage(resource.RUSAGE_SELF).ru_utime - user
        gc.collect()
        tracemalloc.start()
        FederatedRidge().fit_statistics(messages)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        print(f"{n_clients:>6} {d:>5} | {total / 1e6:>11.1f} | {wall:>6.2f} {user:>6.2f} | "
              f"{peak / 1e6:>13.1f} | {(total + peak) / total:>28.3f} | "
              + "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg()), flush=True)
        del messages
        gc.collect()


if __name__ == "__main__":
    main()
