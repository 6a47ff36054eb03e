"""Wall time of a fit through a real Flower federation vs the same fit in process.

Starts one SuperLink and three SuperNodes on 127.0.0.1 (LocalFederation) and
runs every estimator of ``tests/flower/test_flower.py`` (``FLOWER_CASES``, on the
same 600 digits rows split into three sites) through it, one ``flwr run``
each; fits the same estimator in process on the same per-site rows (median of
5); checks both give identical models and prints a markdown table. The
Flower time is end to end: the ``flwr`` CLI building and submitting the app,
the ServerApp process, one ClientApp process per message and site, and
saving the model.

Usage::

    python benchmarks/bench_flower.py
"""

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "flower"))

from test_flower import (  # noqa: E402  (the test's cases, data and reference fit)
    FLOWER_CASES,
    _assert_same_model,
    _case_id,
    _flower_config,
    _in_process,
    _site_rows,
)

from sklearn_fed.flower import LocalFederation  # noqa: E402


def main():
    sites = _site_rows()
    start = time.perf_counter()
    with LocalFederation(sites) as federation:
        print(f"federation started in {time.perf_counter() - start:.1f} s "
              f"(SuperLink + 3 SuperNodes online); {os.cpu_count()} CPUs, load average "
              f"{os.getloadavg()[0]:.1f}\n")
        print("| estimator | rounds | Flower run (s) | in process (ms) | identical |")
        print("|---|---|---|---|---|")
        for estimator in FLOWER_CASES:
            start = time.perf_counter()
            flower = federation.fit(estimator, run_config=_flower_config(estimator))
            flower_s = time.perf_counter() - start
            local_times = []
            for _ in range(5):
                start = time.perf_counter()
                local = _in_process(estimator, sites)
                local_times.append(time.perf_counter() - start)
            try:
                _assert_same_model(flower, local)
                same = "yes"
            except AssertionError:
                same = "NO"
            print(f"| {_case_id(estimator)} | {flower.communication_.rounds} | {flower_s:.1f} | "
                  f"{1000 * statistics.median(local_times):.1f} | {same} |")
        print(f"\nload average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
