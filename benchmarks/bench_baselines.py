"""Gradient baselines: protocol rounds vs a per-client loop, convergence, DP, defaults.

Default: time per round of ``FedAvgRegressor.fit`` (the protocol run in
process: real task and reply frames, sites of equal size trained together)
against a reference that runs the same algorithm one client at a time in
plain numpy (interleaved, median of ``--repeats`` runs), and check both give
the same model.

``--convergence``: FedAvg/FedProx on the one-shot paper's default synthetic
setting (Sec. V-A: K=20, n_k=500 with 20% held out, d=100, alpha=0.01,
gamma=0.5, eta=0.01, E=5): test MSE after R rounds beside centralized Ridge,
and the distance of the final coefficients to Ridge's.
``--dp``: DP-FedAvg-100 test MSE across epsilon (Table V's budgets).
``--real-data DIR``: test R^2 with default parameters on California housing
(site: ``ocean_proximity``), insurance (site: ``region``) and diabetes (site:
``sex``), features standardized, beside Ridge; DIR holds
``california_housing/housing.csv`` and ``insurance/insurance.csv``.

    python benchmarks/bench_baselines.py [--repeats 3] [--convergence] [--dp]
                                         [--real-data DIR]
"""

import argparse
import os
import statistics
import time
import warnings

import numpy as np
from sklearn.datasets import load_diabetes
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import Ridge
from sklearn.metrics import mean_squared_error, r2_score
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

from sklearn_fed.baselines import (
    DPFedAvgRegressor,
    FedAvgRegressor,
    FedNovaRegressor,
    FedProxRegressor,
)
from sklearn_fed.datasets import make_heterogeneous_regression


def loop_reference(X, y, clients, *, alpha, lr, epochs, batch_size, rounds, seed):
    """FedAvg with a Python loop over clients (and over each client's batches).

    The server's random numbers as the protocol draws them: one shuffling
    seed per site and round, one permutation per epoch from it.
    """
    Xc, yc = X - X.mean(axis=0), y - y.mean()
    rows = [np.flatnonzero(clients == c) for c in np.unique(clients)]
    data = [(Xc[r], yc[r]) for r in rows]
    n = np.array([len(r) for r in rows])
    p, S = n / n.sum(), n.sum()
    server = np.random.RandomState(seed)
    coef = np.zeros(X.shape[1])
    for _ in range(rounds):
        seeds = server.randint(0, 2**32, size=len(rows), dtype=np.int64)
        local = []
        for k, (Xk, yk) in enumerate(data):
            B = n[k] if batch_size is None else min(batch_size, n[k])
            site = np.random.default_rng(seeds[k])
            w = coef.copy()
            for _ in range(epochs):
                order = np.arange(n[k]) if B == n[k] else site.permutation(n[k])
                for j in range(-(-n[k] // B)):
                    idx = order[j * B:(j + 1) * B]
                    grad = Xk[idx].T @ (Xk[idx] @ w - yk[idx]) / len(idx)
                    w -= lr * (grad + alpha / S * w)
            local.append(w)
        coef = p @ np.array(local)
    return coef


def bench_speed(repeats):
    print("Time per round, FedAvg, E=5, d=100 (median of %d, interleaved)" % repeats)
    print(f"| {'K':>4} | {'n_k':>5} | {'batch':>5} | {'protocol ms':>11} | "
          f"{'loop ms':>8} | {'speed-up':>8} | {'max |diff|':>10} |")
    print("|" + "|".join("-" * w for w in (6, 7, 7, 13, 10, 10, 12)) + "|")
    for K, n_k, batch, rounds in [(20, 400, None, 20), (20, 400, 32, 5),
                                  (100, 80, None, 20), (100, 80, 16, 5)]:
        X, _, y, _, clients, _ = make_heterogeneous_regression(
            n_clients=K, n_samples_per_client=n_k, n_features=100, test_size=0.0,
            random_state=0)
        fed, loop = [], []
        for _ in range(repeats):
            est = FedAvgRegressor(alpha=0.01, learning_rate=0.01, batch_size=batch,
                                  n_rounds=rounds, random_state=0)
            t = time.perf_counter()
            est.fit(X, y, clients=clients)
            fed.append((time.perf_counter() - t) / rounds)
            t = time.perf_counter()
            ref = loop_reference(X, y, clients, alpha=0.01, lr=0.01, epochs=5,
                                 batch_size=batch, rounds=rounds, seed=0)
            loop.append((time.perf_counter() - t) / rounds)
        v, lo = statistics.median(fed), statistics.median(loop)
        diff = np.abs(est.coef_ - ref).max()
        print(f"| {K:>4} | {n_k:>5} | {str(batch):>5} | {v * 1e3:>11.2f} | "
              f"{lo * 1e3:>8.2f} | {lo / v:>7.1f}x | {diff:>10.1e} |")


def bench_convergence(trials, checkpoints=(10, 50, 100, 200, 300, 500)):
    print(f"\nTest MSE, one-shot paper default setting, mean over {trials} seeds")
    rows = {}
    for seed in range(trials):
        X, Xt, y, yt, clients, _ = make_heterogeneous_regression(random_state=seed)
        ridge = Ridge(alpha=0.01).fit(X, y)
        central = mean_squared_error(yt, ridge.predict(Xt))
        rows.setdefault(("Centralized Ridge", "-"), []).append(
            {**{r: central for r in checkpoints}, "dist": 0.0})
        for name, cls, extra in [("FedAvg", FedAvgRegressor, {}),
                                 ("FedProx mu=0.01", FedProxRegressor, {"mu": 0.01})]:
            for batch in (None, 32):
                est = cls(alpha=0.01, learning_rate=0.01, local_epochs=5,
                          batch_size=batch, random_state=seed, **extra)
                found = {}
                for r in range(1, max(checkpoints) + 1):  # = fit with n_rounds=r
                    est.partial_fit(X, y, clients=clients)
                    if r in checkpoints:
                        found[r] = mean_squared_error(yt, est.predict(Xt))
                found["dist"] = np.linalg.norm(est.coef_ - ridge.coef_)
                rows.setdefault((name, "full" if batch is None else batch), []).append(found)
    central = np.mean([t[checkpoints[0]] for t in rows[("Centralized Ridge", "-")]])
    print(f"| {'method':<18} | {'batch':>5} | "
          + " | ".join(f"R={r:<6}" for r in checkpoints) + " | gap at R=500 | ||w - w_ridge|| |")
    print("|" + "|".join("-" * w for w in [20, 7] + [10] * len(checkpoints) + [14, 17]) + "|")
    for (name, batch), found in rows.items():
        means = [np.mean([t[r] for t in found]) for r in checkpoints]
        gap = means[-1] / central - 1
        print(f"| {name:<18} | {str(batch):>5} | "
              + " | ".join(f"{m:<8.6f}" for m in means) + f" | {gap:>+11.3%} | "
              f"{np.mean([t['dist'] for t in found]):>15.1e} |")


def bench_dp(trials):
    print(f"\nDP-FedAvg-100 test MSE (full batch, eta=0.01, mean over {trials} seeds)")
    print(f"| {'epsilon':>7} | {'clip C':>6} | {'multiplier z':>12} | {'noise std':>9} | "
          f"{'spent':>6} | {'test MSE':>10} |")
    print("|---------|--------|--------------|-----------|--------|------------|")
    for epsilon in (0.1, 1.0, 10.0, 100.0):
        for clip in (0.01, 0.1):
            mses = []
            for seed in range(trials):
                X, Xt, y, yt, clients, _ = make_heterogeneous_regression(random_state=seed)
                est = DPFedAvgRegressor(alpha=0.01, epsilon=epsilon, clip_norm=clip,
                                        learning_rate=0.01, n_rounds=100, random_state=seed)
                mses.append(mean_squared_error(yt, est.fit(X, y, clients=clients).predict(Xt)))
            print(f"| {epsilon:>7} | {clip:>6} | {est.noise_multiplier_:>12.4g} | "
                  f"{est.noise_std_:>9.3g} | {est.privacy_spent_[0]:>6.3g} | "
                  f"{np.mean(mses):>10.4g} |")


def _tables(data_dir):
    """(name, X, y, site) of the three real tables, without the site column."""
    import pandas as pd

    frame = pd.read_csv(os.path.join(data_dir, "california_housing", "housing.csv")).dropna()
    site = frame.pop("ocean_proximity").to_numpy()
    yield "California (site: ocean_proximity)", frame.drop(
        columns="median_house_value").to_numpy(float), frame["median_house_value"].to_numpy(), site
    frame = pd.read_csv(os.path.join(data_dir, "insurance", "insurance.csv"))
    site = frame.pop("region").to_numpy()
    frame["sex"] = (frame["sex"] == "male").astype(float)
    frame["smoker"] = (frame["smoker"] == "yes").astype(float)
    yield "insurance (site: region)", frame.drop(columns="charges").to_numpy(float), frame[
        "charges"].to_numpy(), site
    X, y = load_diabetes(return_X_y=True)
    yield "diabetes (site: sex)", np.delete(X, 1, axis=1), y, X[:, 1] > 0


def bench_real_data(data_dir):
    print("\nTest R^2 with default parameters (E=5, R=100, full batches), features "
          "standardized, 25% held out")
    models = [
        ("Ridge (centralized)", lambda: Ridge()),
        ("FedAvg, learning_rate=0.01 (old default)",
         lambda: FedAvgRegressor(learning_rate=0.01)),
        ("FedAvg (default: auto)", lambda: FedAvgRegressor()),
        ("FedProx (default: auto)", lambda: FedProxRegressor()),
        ("FedNova (default: auto)", lambda: FedNovaRegressor()),
        ("FedAvg, learning_rate=0.5", lambda: FedAvgRegressor(learning_rate=0.5)),
    ]
    tables = list(_tables(data_dir))
    print("| model | " + " | ".join(name for name, *_ in tables) + " |")
    print("|---|" + "---|" * len(tables))
    for label, make in models:
        cells = []
        for _, X, y, site in tables:
            X_train, X_test, y_train, y_test, s_train, _ = train_test_split(
                X, y, site, random_state=0)
            scaler = StandardScaler().fit(X_train)
            model = make()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", ConvergenceWarning)
                try:
                    fitted = model.fit(scaler.transform(X_train), y_train, clients=s_train) if (
                        not isinstance(model, Ridge)) else model.fit(
                        scaler.transform(X_train), y_train)
                    cell = f"{r2_score(y_test, fitted.predict(scaler.transform(X_test))):.4g}"
                except ValueError:
                    cell = "diverged (error)"
            if any(issubclass(w.category, ConvergenceWarning) for w in caught):
                cell += " (ConvergenceWarning)"
            cells.append(cell)
        print(f"| {label} | " + " | ".join(cells) + " |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--convergence", action="store_true")
    parser.add_argument("--dp", action="store_true")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--real-data", metavar="DIR",
                        help="folder with california_housing/ and insurance/ CSVs")
    args = parser.parse_args()
    bench_speed(args.repeats)
    if args.convergence:
        bench_convergence(args.trials)
    if args.dp:
        bench_dp(args.trials)
    if args.real_data:
        bench_real_data(args.real_data)


if __name__ == "__main__":
    main()
