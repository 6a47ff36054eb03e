"""IncrementalFederatedRidge: per-round cost of the solver routes, drift, and R^2 vs SGD.

Usage::

    python benchmarks/bench_incremental.py            # full table (~2-3 min)
    python benchmarks/bench_incremental.py --quick    # smaller, for a smoke test

1. Per-round time of ``update="auto"`` divided by ``update="refactor"``
   (Cholesky of the accumulated system every round) and by ``update="spectral"``
   (the paper's eigendecomposition + SMW route), for d in {100, 1000}, 20
   clients, 1/10/100 new rows per client per round. The three estimators see
   the same rounds, timed interleaved in one process (rotating order); the
   figure is the median over rounds, then the median over repeats. Both the
   whole round (clients + leader) and the leader's merge+solve time are shown.
2. Drift after 1,000 rounds of pure low-rank updates (no residual check, no
   periodic refactorization): relative difference of the coefficients from
   sklearn's Ridge on all rows.
3. R^2 after one pass over a stream vs SGDRegressor.partial_fit on the same
   rounds.
"""

import argparse
import time

import numpy as np
from sklearn.datasets import load_diabetes, make_regression
from sklearn.linear_model import Ridge, SGDRegressor
from sklearn.metrics import r2_score
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

from sklearn_fed import IncrementalFederatedRidge

ROUTES = ("auto", "refactor", "spectral")


def time_routes(d, rows_per_client, n_clients, n_rounds, seed):
    rng = np.random.default_rng(seed)
    coef = rng.normal(size=d)
    models = {r: IncrementalFederatedRidge(alpha=1.0, update=r, random_state=0) for r in ROUTES}
    warm = rng.normal(size=(2 * d, d)) + 3.0
    for model in models.values():  # a first round big enough to make G well posed
        model.partial_fit(warm, warm @ coef, clients=np.arange(2 * d) % n_clients)
    total = {r: [] for r in ROUTES}
    leader = {r: [] for r in ROUTES}
    chosen = set()
    for k in range(n_rounds):
        n = rows_per_client * n_clients
        X = rng.normal(size=(n, d)) + 3.0
        y = X @ coef + rng.normal(size=n)
        clients = np.repeat(np.arange(n_clients), rows_per_client)
        order = ROUTES[k % 3 :] + ROUTES[: k % 3]  # interleaved, rotating order
        for route in order:
            model = models[route]
            start = time.perf_counter()
            model.partial_fit(X, y, clients=clients)
            total[route].append(time.perf_counter() - start)
            leader[route].append(model.round_history_[-1]["leader_seconds"])
        chosen.add(models["auto"].round_history_[-1]["update"])
        rank = models["auto"].round_history_[-1]["rank"]
    ref = models["refactor"].coef_
    agree = max(
        np.linalg.norm(models[r].coef_ - ref) / np.linalg.norm(ref) for r in ("auto", "spectral")
    )
    med = {r: (np.median(total[r]), np.median(leader[r])) for r in ROUTES}
    return med, rank, "+".join(sorted(chosen)), agree


def bench_routes(args):
    print("1. Per-round time ratios (median of rounds, median of %d repeats)" % args.repeats)
    header = (
        f"{'d':>5} {'rows/cl':>7} {'rank':>5} {'auto route':>10} {'auto/refac':>10} "
        f"{'auto/spec':>9} {'leader a/r':>10} {'leader a/s':>10} {'auto ms':>8} {'max diff':>9}"
    )
    print(header)
    print("-" * len(header))
    for d in args.dims:
        for rows in (1, 10, 100):
            n_rounds = args.rounds if d <= 100 else max(3, args.rounds // 3)
            runs = [
                time_routes(d, rows, args.clients, n_rounds, seed)
                for seed in range(args.repeats)
            ]
            ratio = lambda a, b, i: np.median([m[a][i] / m[b][i] for m, *_ in runs])  # noqa
            auto_ms = 1000 * np.median([m["auto"][0] for m, *_ in runs])
            _, rank, chosen, _ = runs[-1]
            agree = max(r[3] for r in runs)
            print(
                f"{d:>5} {rows:>7} {rank:>5} {chosen:>10} {ratio('auto', 'refactor', 0):>10.2f} "
                f"{ratio('auto', 'spectral', 0):>9.2f} {ratio('auto', 'refactor', 1):>10.2f} "
                f"{ratio('auto', 'spectral', 1):>10.2f} {auto_ms:>8.1f} {agree:>9.1e}"
            )


def bench_drift(args):
    print("\n2. Drift after %d rounds of low-rank updates only (tol=None)" % args.drift_rounds)
    d, n_clients = args.drift_dim, 20
    rng = np.random.default_rng(0)
    n = args.drift_rounds * n_clients
    X = rng.normal(size=(n, d)) * rng.uniform(0.5, 2, size=d) + 2.0
    y = X @ rng.normal(size=d) + rng.normal(size=n)
    reference = Ridge(alpha=1.0).fit(X, y)
    print(f"{'route':>9} {'d':>4} {'rounds':>6} {'refactors':>9} {'rel. coef diff':>14}")
    for route in ("woodbury", "spectral"):
        model = IncrementalFederatedRidge(alpha=1.0, update=route, tol=None, random_state=0)
        for batch in np.array_split(np.arange(n), args.drift_rounds):
            model.partial_fit(X[batch], y[batch], clients=batch % n_clients)
        refactors = sum(h["update"] == "refactor" for h in model.round_history_[1:])
        diff = np.linalg.norm(model.coef_ - reference.coef_) / np.linalg.norm(reference.coef_)
        print(f"{route:>9} {d:>4} {args.drift_rounds:>6} {refactors:>9} {diff:>14.1e}")


def bench_sgd(args):
    print("\n3. R^2 on held-out rows after one pass (20 clients per round)")
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


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--drift-rounds", type=int, default=1000)
    parser.add_argument("--drift-dim", type=int, default=100)
    parser.add_argument(
        "--threads", type=int, default=1, help="BLAS threads (1: stable on shared machines)"
    )
    args = parser.parse_args(argv)
    args.dims = (100, 1000)
    if args.quick:
        args.dims, args.rounds, args.drift_rounds, args.drift_dim = (100,), 3, 100, 20
    from threadpoolctl import threadpool_limits

    with threadpool_limits(args.threads):
        print(f"BLAS threads: {args.threads}")
        bench_routes(args)
        bench_drift(args)
        bench_sgd(args)


if __name__ == "__main__":
    main()
