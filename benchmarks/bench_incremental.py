"""IncrementalFederatedRidge: per-round cost against scikit-learn-intelex, flatness, routes.

Usage::

    python benchmarks/bench_incremental.py            # full tables (~10 min on 2 cores)
    python benchmarks/bench_incremental.py --quick    # smaller, for a smoke test
    python benchmarks/bench_incremental.py --only intelex flat

Every figure is a ratio of two estimators measured side by side in this
process: both see the same rounds, timed interleaved (their order alternates
every round), wall time with ``time.perf_counter`` and CPU time (user + sys,
all threads) with ``time.process_time``; each repeat takes the median over
rounds, and the table shows the median and the min-max over repeats. BLAS
runs with 1 and with 2 threads (threadpoolctl). The load average is printed:
on a shared machine the ratios are indicative.

1. ``intelex``: one round of ``IncrementalFederatedRidge.partial_fit`` (50
   new rows, from 1 site or from 5 sites) divided by
   ``sklearnex.linear_model.IncrementalRidge.partial_fit`` on the same rows
   (its ``n_jobs`` set to the BLAS thread count),
   d = 100 and 1,000; then the same with the model read after every round
   (``coef_``: both estimators solve lazily, on first use). Needs
   ``pip install scikit-learn-intelex``; skipped with a note otherwise.
2. ``flat``: median round time (partial_fit + coef_) over the last 100 of
   1,000 rounds divided by the first 100, with 5 new sites every round
   (5,000 nodes at the end, all candidates in the leader election); the
   last 100 rounds of one stream run interleaved with the first 100 of
   another, so that a change of the machine's load does not enter the ratio.
3. ``routes``: solver routes, ``update="auto"`` against ``"refactor"`` and
   ``"spectral"`` (the paper's eigendecomposition), 20 sites per round.
4. ``drift``: 1,000 rounds of low-rank updates only (no residual check).
5. ``sgd``: R^2 after one pass over a stream, against SGDRegressor.
"""

import argparse
import os
import time

import numpy as np
from sklearn.datasets import load_diabetes, make_regression
from sklearn.linear_model import Ridge, SGDRegressor
from sklearn.metrics import r2_score
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

from sklearn_fed import IncrementalFederatedRidge

ROWS_PER_ROUND = 50


def load():
    return "load average %.2f %.2f %.2f" % os.getloadavg()


def timed(call):
    wall, cpu = time.perf_counter(), time.process_time()
    call()
    return time.perf_counter() - wall, time.process_time() - cpu


def summary(ratios):
    ratios = np.asarray(ratios)
    return f"{np.median(ratios):5.2f} ({ratios.min():.2f}-{ratios.max():.2f})"


def stream_rounds(d, n_rounds, seed):
    rng = np.random.default_rng(seed)
    coef = rng.normal(size=d)
    X = rng.normal(size=(ROWS_PER_ROUND * n_rounds, d)) + 3.0
    y = X @ coef + rng.normal(size=X.shape[0])
    return [
        (X[i : i + ROWS_PER_ROUND], y[i : i + ROWS_PER_ROUND])
        for i in range(0, X.shape[0], ROWS_PER_ROUND)
    ]


def race(make_a, make_b, rounds, *, read, warmup):
    """Median per-round (wall, cpu) of a and b fed the same rounds, interleaved."""
    a, b = make_a(), make_b()
    times = {"a": [], "b": []}
    for k, (X, y) in enumerate(rounds):
        pair = [("a", a), ("b", b)] if k % 2 == 0 else [("b", b), ("a", a)]
        for name, (estimator, fit) in pair:
            def one_round():
                fit(X, y)
                if read:
                    estimator.coef_  # noqa: B018 (the lazy solve)
            spent = timed(one_round)
            if k >= warmup:
                times[name].append(spent)
    med = {name: np.median(np.array(t), axis=0) for name, t in times.items()}
    return med["a"], med["b"]


def bench_intelex(args):
    print("\n1. Per round: IncrementalFederatedRidge / sklearnex IncrementalRidge "
          f"({ROWS_PER_ROUND} rows per round; median (min-max) over {args.repeats} repeats)")
    try:
        from sklearnex.linear_model import IncrementalRidge
    except ImportError:
        print("   skipped: scikit-learn-intelex is not installed "
              "(pip install scikit-learn-intelex)")
        return
    from importlib.metadata import version

    print(f"   scikit-learn-intelex {version('scikit-learn-intelex')}")
    header = (f"{'threads':>7} {'d':>5} {'sites':>5} {'model read':>10} "
              f"{'wall ratio':>17} {'CPU ratio':>17} {'ours ms':>8} {'intelex ms':>10}")
    print(header)
    print("-" * len(header))
    for threads in args.threads:
        with threadpool_limits(threads):
            for d in args.dims:
                n_rounds = args.rounds if d <= 100 else max(10, args.rounds // 4)
                for sites in (1, 5):
                    # one site: no clients array, as for IncrementalRidge
                    clients = None if sites == 1 else np.arange(ROWS_PER_ROUND) % sites
                    for read in (False, True):
                        wall, cpu, ours, theirs = [], [], [], []
                        for seed in range(args.repeats):
                            rounds = stream_rounds(d, n_rounds, seed)

                            def make_ours():
                                model = IncrementalFederatedRidge(alpha=1.0, random_state=0)
                                return model, lambda X, y: model.partial_fit(
                                    X, y, clients=clients)

                            def make_intelex():
                                model = IncrementalRidge(alpha=1.0, n_jobs=threads)
                                return model, model.partial_fit

                            a, b = race(make_ours, make_intelex, rounds, read=read, warmup=3)
                            wall.append(a[0] / b[0])
                            cpu.append(a[1] / b[1])
                            ours.append(a[0])
                            theirs.append(b[0])
                        print(f"{threads:>7} {d:>5} {sites:>5} {'yes' if read else 'no':>10} "
                              f"{summary(wall):>17} {summary(cpu):>17} "
                              f"{1e3 * np.median(ours):>8.2f} {1e3 * np.median(theirs):>10.2f}")
    print("   " + load())


def bench_flat(args):
    n_rounds, sites = args.flat_rounds, 5
    print(f"\n2. Flatness: rounds {n_rounds - 100}-{n_rounds} of a stream / rounds 0-100 of "
          f"another (partial_fit + coef_), {sites} new sites every round, d = 100; the two "
          "streams run interleaved, so the machine's load drifts out of the ratio")
    header = f"{'threads':>7} {'wall ratio':>17} {'CPU ratio':>17} {'early ms':>9} {'nodes':>6}"
    print(header)
    print("-" * len(header))

    def round_of(model, k, X, y):
        clients = sites * k + np.arange(ROWS_PER_ROUND) % sites

        def one_round():
            model.partial_fit(X, y, clients=clients)
            model.coef_  # noqa: B018
        return one_round

    for threads in args.threads:
        with threadpool_limits(threads):
            wall, cpu, early_ms = [], [], []
            for seed in range(args.repeats):
                rounds = stream_rounds(100, n_rounds, seed)
                late = IncrementalFederatedRidge(alpha=1.0, random_state=seed)
                for k, (X, y) in enumerate(rounds[:-100]):  # the long stream, untimed
                    round_of(late, k, X, y)()
                early = IncrementalFederatedRidge(alpha=1.0, random_state=seed)
                spent = {"early": [], "late": []}
                for i in range(100):
                    k = n_rounds - 100 + i
                    pair = [("early", round_of(early, i, *rounds[i])),
                            ("late", round_of(late, k, *rounds[k]))]
                    for name, call in pair if i % 2 == 0 else pair[::-1]:
                        spent[name].append(timed(call))
                head = np.median(spent["early"], axis=0)
                tail = np.median(spent["late"], axis=0)
                wall.append(tail[0] / head[0])
                cpu.append(tail[1] / head[1])
                early_ms.append(1e3 * head[0])
            print(f"{threads:>7} {summary(wall):>17} {summary(cpu):>17} "
                  f"{np.median(early_ms):>9.2f} {late.n_clients_:>6}")
    print("   " + load())


ROUTES = ("auto", "refactor", "spectral")


def bench_routes(args):
    print("\n3. Solver routes: per-round time (partial_fit + coef_) of auto / refactor and "
          "auto / spectral, 20 sites per round, 1 BLAS thread")
    header = (f"{'d':>5} {'rows/site':>9} {'rank':>5} {'auto route':>10} {'auto/refactor':>17} "
              f"{'auto/spectral':>17} {'auto ms':>8} {'max diff':>9}")
    print(header)
    print("-" * len(header))
    n_sites = 20
    with threadpool_limits(1):
        for d in args.dims:
            for rows in (1, 10):
                n_rounds = 12 if d <= 100 else 6
                ratio_r, ratio_s, auto_ms, diffs, chosen = [], [], [], [], set()
                for seed in range(args.repeats):
                    rng = np.random.default_rng(seed)
                    coef = rng.normal(size=d)
                    models = {r: IncrementalFederatedRidge(alpha=1.0, update=r, random_state=0)
                              for r in ROUTES}
                    warm = rng.normal(size=(2 * d, d)) + 3.0
                    for model in models.values():  # a first round that makes G well posed
                        model.partial_fit(warm, warm @ coef, clients=np.arange(2 * d) % n_sites)
                        model.coef_  # noqa: B018
                    spent = {r: [] for r in ROUTES}
                    for k in range(n_rounds):
                        X = rng.normal(size=(rows * n_sites, d)) + 3.0
                        y = X @ coef + rng.normal(size=X.shape[0])
                        clients = np.repeat(np.arange(n_sites), rows)
                        for route in ROUTES[k % 3 :] + ROUTES[: k % 3]:  # interleaved
                            model = models[route]

                            def one_round():
                                model.partial_fit(X, y, clients=clients)
                                model.coef_  # noqa: B018

                            spent[route].append(timed(one_round)[0])
                        chosen.add(models["auto"].round_history_[-1]["update"])
                    rank = models["auto"].round_history_[-1]["rank"]
                    med = {r: np.median(spent[r]) for r in ROUTES}
                    ratio_r.append(med["auto"] / med["refactor"])
                    ratio_s.append(med["auto"] / med["spectral"])
                    auto_ms.append(1e3 * med["auto"])
                    ref = models["refactor"].coef_
                    diffs.append(max(np.linalg.norm(models[r].coef_ - ref) / np.linalg.norm(ref)
                                     for r in ("auto", "spectral")))
                print(f"{d:>5} {rows:>9} {rank:>5} {'+'.join(sorted(chosen)):>10} "
                      f"{summary(ratio_r):>17} {summary(ratio_s):>17} "
                      f"{np.median(auto_ms):>8.1f} {max(diffs):>9.1e}")
    print("   " + load())


def bench_drift(args):
    print(f"\n4. Drift after {args.drift_rounds} rounds of low-rank updates only (tol=None)")
    d, n_sites = args.drift_dim, 20
    rng = np.random.default_rng(0)
    n = args.drift_rounds * n_sites
    X = rng.normal(size=(n, d)) * rng.uniform(0.5, 2, size=d) + 2.0
    y = X @ rng.normal(size=d) + rng.normal(size=n)
    reference = Ridge(alpha=1.0).fit(X, y)
    print(f"{'route':>9} {'d':>4} {'rounds':>6} {'refactors':>9} {'rel. coef diff':>14}")
    with threadpool_limits(1):
        for route in ("woodbury", "spectral"):
            model = IncrementalFederatedRidge(alpha=1.0, update=route, tol=None, random_state=0)
            for batch in np.array_split(np.arange(n), args.drift_rounds):
                model.partial_fit(X[batch], y[batch], clients=batch % n_sites)
                model.coef_  # noqa: B018 (solve every round)
            refactors = sum(h["update"] == "refactor" for h in model.round_history_[1:])
            diff = np.linalg.norm(model.coef_ - reference.coef_) / np.linalg.norm(
                reference.coef_)
            print(f"{route:>9} {d:>4} {args.drift_rounds:>6} {refactors:>9} {diff:>14.1e}")


def bench_sgd(args):
    print("\n5. R^2 on held-out rows after one pass (20 sites per round)")
    print(f"{'data':>22} {'rounds':>6} {'IncrementalFedRidge':>19} {'SGDRegressor':>12}")
    X_syn, y_syn = make_regression(
        n_samples=6000, n_features=100, n_informative=30, noise=10.0, random_state=0
    )
    for name, (X, y), per_round in [
        ("diabetes (std.)", load_diabetes(return_X_y=True), 20),
        ("make_regression d=100", (X_syn, y_syn), 200),
    ]:
        X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.25, random_state=0)
        scaler = StandardScaler().fit(X_train)
        X_train, X_test = scaler.transform(X_train), scaler.transform(X_test)
        fed = IncrementalFederatedRidge(alpha=1.0, random_state=0)
        sgd = SGDRegressor(random_state=0)
        batches = np.array_split(np.arange(len(y_train)), max(1, len(y_train) // per_round))
        for batch in batches:
            fed.partial_fit(X_train[batch], y_train[batch], clients=batch % 20)
            sgd.partial_fit(X_train[batch], y_train[batch])
        print(
            f"{name:>22} {len(batches):>6} {r2_score(y_test, fed.predict(X_test)):>19.4f} "
            f"{r2_score(y_test, sgd.predict(X_test)):>12.4f}"
        )


SECTIONS = {"intelex": bench_intelex, "flat": bench_flat, "routes": bench_routes,
            "drift": bench_drift, "sgd": bench_sgd}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", nargs="+", choices=sorted(SECTIONS), default=list(SECTIONS))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--flat-rounds", type=int, default=1000)
    parser.add_argument("--drift-rounds", type=int, default=1000)
    parser.add_argument("--drift-dim", type=int, default=100)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args(argv)
    args.dims = (100, 1000)
    if args.quick:
        args.dims, args.repeats, args.rounds = (100,), 2, 30
        args.flat_rounds, args.drift_rounds, args.drift_dim, args.threads = 200, 100, 20, [1]
    print(load())
    for name in args.only:
        SECTIONS[name](args)


if __name__ == "__main__":
    main()
