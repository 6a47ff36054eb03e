"""Wall time of fits through a real Flower federation, against Flower's own floor.

Starts one SuperLink and three SuperNodes on 127.0.0.1 (LocalFederation, as
deployed: TLS, enrolled SuperNode keys, per-site HMAC keys, one site worker
per SuperNode) and measures, side by side over that one federation:

1. **The floor**: an empty ServerApp/ClientApp pair (``benchmarks/flower_floor``,
   nothing but Flower imported) exchanging one 64-byte message per round with
   every SuperNode: a 1-round run end to end (the ``flwr`` CLI submitting the
   app, the ServerApp process, one ClientApp process per message) and the
   per-round round trip of a 10-round run (timed inside the ServerApp).
2. **The targets**: a 10-round FederatedLogisticRegression (binary digits,
   per-round time from the ServerApp's own round log) against the floor's
   round trip, and a one-shot FederatedRidge end to end against the floor's
   1-round run.
3. Every estimator of ``tests/flower/test_flower.py`` (``FLOWER_CASES``, on the
   same 600 digits rows split into three sites), one ``flwr run`` each,
   against the same fit in process (median of 5), checked identical.

``--no-workers`` runs everything with a ClientApp process answering each
message itself (sklearn-fed imported per message: the design before the site
workers). The machine is shared: the load average is printed before and after.

Usage::

    python benchmarks/bench_flower.py [--no-workers] [--skip-table]
"""

import argparse
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "flower"))

from test_flower import (
    FLOWER_CASES,
    _assert_same_model,
    _case_id,
    _flower_config,
    _in_process,
    _site_rows,
)

from sklearn_fed import FederatedLogisticRegression, FederatedRidge
from sklearn_fed.flower import LocalFederation

FLOOR_APP = Path(__file__).resolve().parent / "flower_floor"
_ROUND_LINE = re.compile(r"sklearn-fed: round (\d+): .* ([0-9.]+) s \(")


def floor_run(federation, rounds, tag):
    """Run the empty app for ``rounds`` rounds: (end-to-end s, [s per round])."""
    run_dir = federation.workdir / "runs" / f"floor-{tag}"
    run_dir.mkdir(parents=True)
    result = run_dir / "floor.json"
    config = {"rounds": rounds, "result-path": str(result), "min-nodes": len(federation.sites)}
    federation._flwr_run(FLOOR_APP, config, result, run_dir, f"floor-{tag}", "the floor", 600)
    return federation.last_run_seconds, json.loads(result.read_text())["rounds"]


def timed_fit(federation, estimator, **kwargs):
    """(fitted, end-to-end s, [s per round from the ServerApp's log])."""
    before = set(federation.logs.glob("run-*.log"))
    fitted = federation.fit(estimator, **kwargs)
    elapsed = federation.last_run_seconds  # from `flwr run` to the saved model, as the floor
    log, = set(federation.logs.glob("run-*.log")) - before
    rounds = [float(m.group(2)) for m in _ROUND_LINE.finditer(log.read_text(errors="replace"))]
    return fitted, elapsed, rounds


def binary_sites(sites):
    return {s: {"X": d["X"], "y": (d["y"] > 4).astype(int)} for s, d in sites.items()}


def targets(federation, sites, repeats):
    """The floor and the two targets, interleaved ``repeats`` times (the load drifts)."""
    floor_1, floor_rounds, lr_rounds, ridge = [], [], [], []
    lr = FederatedLogisticRegression(tol=0.0, max_iter=10)  # 1 classes round + 9 Newton
    for repeat in range(repeats):
        floor_1.append(floor_run(federation, 1, f"1-{repeat}")[0])
        floor_rounds += floor_run(federation, 10, f"10-{repeat}")[1]
        fitted, _, rounds = timed_fit(federation, lr)
        assert fitted.communication_.rounds == 10 and len(rounds) == 10, rounds
        lr_rounds += rounds
        fitted, elapsed, _ = timed_fit(federation, FederatedRidge(alpha=1.0))
        ridge.append(elapsed)
    _assert_same_model(fitted, _in_process(FederatedRidge(alpha=1.0), sites))
    return floor_1, floor_rounds, lr_rounds, ridge


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--no-workers", action="store_true",
                        help="a ClientApp process answers each message (no site workers)")
    parser.add_argument("--skip-table", action="store_true", help="only the floor and targets")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    sites = _site_rows()
    start = time.perf_counter()
    with LocalFederation(binary_sites(sites), workers=not args.no_workers) as federation:
        print(f"federation started in {time.perf_counter() - start:.1f} s (SuperLink + 3 "
              f"SuperNodes online; TLS, enrolled node keys, HMAC site keys, "
              f"{'no site workers' if args.no_workers else 'one site worker per SuperNode'}); "
              f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}\n")
        floor_1, floor_rounds, lr_rounds, ridge = targets(
            federation, binary_sites(sites), args.repeats)
        floor_round, lr_round = statistics.median(floor_rounds), statistics.median(lr_rounds)
        print("| measure | median (s) | runs | ratio to the floor | target |")
        print("|---|---|---|---|---|")
        print(f"| floor: empty app, one round trip (10-round runs) | {floor_round:.2f} | "
              f"{len(floor_rounds)} rounds | 1 | |")
        print(f"| floor: empty app, 1-round run end to end | {statistics.median(floor_1):.1f} | "
              f"{len(floor_1)} | 1 | |")
        print(f"| FederatedLogisticRegression, one of 10 rounds | {lr_round:.2f} | "
              f"{len(lr_rounds)} rounds | {lr_round / floor_round:.2f} | <= 2 |")
        print(f"| FederatedRidge, one-shot run end to end | {statistics.median(ridge):.1f} | "
              f"{len(ridge)} | {statistics.median(ridge) / statistics.median(floor_1):.2f} "
              "| <= 3 |")
        print(f"\nper round (s): floor {np.round(floor_rounds, 2).tolist()}; logistic "
              f"{np.round(lr_rounds, 2).tolist()}")
        print(f"load average after the targets: {os.getloadavg()[0]:.1f}")
        if args.skip_table:
            return
        sites_rows = sites
        federation_all = LocalFederation(sites_rows, workers=not args.no_workers)
    with federation_all:
        print("\n| estimator | rounds | Flower run (s) | in process (ms) | identical |")
        print("|---|---|---|---|---|")
        for estimator in FLOWER_CASES:
            flower = federation_all.fit(estimator, run_config=_flower_config(estimator))
            flower_s = federation_all.last_run_seconds
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
