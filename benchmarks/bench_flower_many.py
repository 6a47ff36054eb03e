"""20 SuperNodes on one machine: the run completes, equals the in-process fit; memory per node.

Starts LocalFederation with 20 sites (the 1797 digits rows dealt round-robin;
TLS, enrolled node keys, HMAC site keys, one site worker per SuperNode), fits
FederatedRidge (one round) and FederatedLogisticRegression (binary, 5
rounds), checks each equals the in-process fit on the same rows, and samples
every 0.2 s, from /proc, the resident memory of each site's processes: its
SuperNode, the SuperNode's SuperExec and ClientApp processes, and its worker.
Prints, per process kind, the peak over the sites and the run, and per site
the peak of all its processes together. ``make flower-many`` runs it (slow:
40 Python processes start on this machine).

Usage::

    python benchmarks/bench_flower_many.py [--sites 20]
"""

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path

import numpy as np
from sklearn.base import clone
from sklearn.datasets import load_digits

from sklearn_fed import FederatedLogisticRegression, FederatedRidge
from sklearn_fed.flower import LocalFederation
from sklearn_fed.flower._local import _descendants

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "flower"))
from test_flower import _assert_same_model


def _rss_and_kind(pid):
    """(resident bytes, kind) of a live process, from /proc; None if it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return None
    rss = next((int(line.split()[1]) * 1024 for line in status.splitlines()
                if line.startswith("VmRSS:")), 0)
    for kind in ("flwr-clientapp", "flower-superexec", "flower-supernode",
                 "sklearn_fed.flower.worker"):
        if kind in command:
            return rss, kind
    return rss, "other"


class Sampler(threading.Thread):
    """Peaks of resident memory: per site (all its processes together) and per process kind."""

    def __init__(self, federation):
        super().__init__(daemon=True)
        self.federation, self.stop = federation, threading.Event()
        self.site_peak, self.kind_peak = {}, {}

    def run(self):
        while not self.stop.is_set():
            for label, node in self.federation._supernodes.items():
                pids = [node.pid, *(pid for pid, _ in _descendants(node.pid))]
                worker = self.federation._workers.get(label)
                if worker is not None:
                    pids.append(worker.pid)
                total = 0
                for pid in pids:
                    found = _rss_and_kind(pid)
                    if found is None:
                        continue
                    total += found[0]
                    self.kind_peak[found[1]] = max(self.kind_peak.get(found[1], 0), found[0])
                self.site_peak[label] = max(self.site_peak.get(label, 0), total)
            time.sleep(0.2)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sites", type=int, default=20)
    args = parser.parse_args()
    X, y = load_digits(return_X_y=True)
    y = (y > 4).astype(int)
    labels = np.array([f"site-{i:02d}" for i in range(args.sites)])[np.arange(len(y)) % args.sites]
    sites = {label: (X[labels == label], y[labels == label]) for label in np.unique(labels)}
    estimators = [FederatedRidge(alpha=1.0), FederatedLogisticRegression(max_iter=4, tol=0.0)]
    start = time.perf_counter()
    with LocalFederation(sites, startup_timeout=900) as federation:
        print(f"{args.sites} SuperNodes and workers online in {time.perf_counter() - start:.0f} s "
              f"(TLS, enrolled node keys, HMAC site keys); {os.cpu_count()} CPUs, load average "
              f"{os.getloadavg()[0]:.1f}")
        sampler = Sampler(federation)
        sampler.start()
        for estimator in estimators:
            fitted = federation.fit(estimator, timeout=1800)
            local = clone(estimator).fit(X, y, clients=labels)
            _assert_same_model(fitted, local)
            print(f"{type(estimator).__name__}: {fitted.communication_.rounds} round(s) over "
                  f"{fitted.n_clients_} sites in {federation.last_run_seconds:.0f} s; identical "
                  "to the in-process fit")
        sampler.stop.set()
        sampler.join()
    mib = 1 << 20
    print("\npeak resident memory (MiB), the largest over the sites and the runs:")
    for kind, peak in sorted(sampler.kind_peak.items()):
        print(f"  {kind}: {peak / mib:.0f}")
    peaks = list(sampler.site_peak.values())
    print(f"one site's processes together: median {statistics.median(peaks) / mib:.0f}, "
          f"max {max(peaks) / mib:.0f} (SuperNode + SuperExec + ClientApp + worker)")
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
