"""Gradient baselines: vectorized rounds vs a per-client loop, and paper convergence.

Default: time per round of the vectorized round loop against a reference that
runs the same algorithm one client at a time in Python (interleaved, median of
``--repeats`` runs), and check both give the same model.

``--convergence``: FedAvg/FedProx on the one-shot paper's default synthetic
setting (Sec. V-A: K=20, n_k=500 with 20% held out, d=100, alpha=0.01,
gamma=0.5, eta=0.01, E=5): test MSE after R rounds beside centralized Ridge,
and the distance of the final coefficients to Ridge's.
``--dp``: DP-FedAvg-100 test MSE across epsilon (Table V's budgets).

    python benchmarks/bench_baselines.py [--repeats 3] [--convergence] [--dp]
"""

import argparse
import statistics
import time

import numpy as np
from sklearn.linear_model import Ridge
from sklearn.metrics import mean_squared_error

from sklearn_fed.baselines import DPFedAvgRegressor, FedAvgRegressor, FedProxRegressor
from sklearn_fed.datasets import make_heterogeneous_regression


def loop_reference(X, y, clients, *, alpha, lr, epochs, batch_size, rounds, seed):
    """FedAvg with a Python loop over clients (and over each client's batches)."""
    Xc, yc = X - X.mean(axis=0), y - y.mean()
    rows = [np.flatnonzero(clients == c) for c in np.unique(clients)]
    data = [(Xc[r], yc[r]) for r in rows]
    n = np.array([len(r) for r in rows])
    p, S, n_max = n / n.sum(), n.sum(), n.max()
    B = n_max if batch_size is None else min(batch_size, n_max)
    rng = np.random.RandomState(seed)
    coef = np.zeros(X.shape[1])
    for _ in range(rounds):
        keys = [rng.random_sample((len(rows), n_max)) if B < n_max else None
                for _ in range(epochs)]
        local = []
        for k, (Xk, yk) in enumerate(data):
            w = coef.copy()
            for e in range(epochs):
                if keys[e] is None:
                    order = np.arange(n[k])
                else:
                    order = np.argsort(keys[e][k] + (np.arange(n_max) >= n[k]))[: n[k]]
                for j in range(-(-n[k] // B)):
                    idx = order[j * B:(j + 1) * B]
                    grad = Xk[idx].T @ (Xk[idx] @ w - yk[idx]) / len(idx)
                    w -= lr * (grad + alpha / S * w)
            local.append(w)
        coef = p @ np.array(local)
    return coef


def bench_speed(repeats):
    print("Time per round, FedAvg, E=5, d=100 (median of %d, interleaved)" % repeats)
    print(f"| {'K':>4} | {'n_k':>5} | {'batch':>5} | {'vectorized ms':>13} | "
          f"{'loop ms':>8} | {'speed-up':>8} | {'max |diff|':>10} |")
    print("|" + "|".join("-" * w for w in (6, 7, 7, 15, 10, 10, 12)) + "|")
    for K, n_k, batch, rounds in [(20, 400, None, 20), (20, 400, 32, 5),
                                  (100, 80, None, 20), (100, 80, 16, 5)]:
        X, _, y, _, clients, _ = make_heterogeneous_regression(
            n_clients=K, n_samples_per_client=n_k, n_features=100, test_size=0.0,
            random_state=0)
        vec, loop = [], []
        for _ in range(repeats):
            est = FedAvgRegressor(alpha=0.01, batch_size=batch, n_rounds=rounds,
                                  random_state=0)
            t = time.perf_counter()
            est.fit(X, y, clients=clients)
            vec.append((time.perf_counter() - t) / rounds)
            t = time.perf_counter()
            ref = loop_reference(X, y, clients, alpha=0.01, lr=0.01, epochs=5,
                                 batch_size=batch, rounds=rounds, seed=0)
            loop.append((time.perf_counter() - t) / rounds)
        v, lo = statistics.median(vec), statistics.median(loop)
        diff = np.abs(est.coef_ - ref).max()
        print(f"| {K:>4} | {n_k:>5} | {str(batch):>5} | {v * 1e3:>13.2f} | "
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
                for r in range(1, max(checkpoints) + 1):
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
    print(f"\nDP-FedAvg-100 test MSE (full batch, mean over {trials} seeds)")
    print(f"| {'epsilon':>7} | {'clip C':>6} | {'noise std':>9} | {'test MSE':>10} |")
    print("|---------|--------|-----------|------------|")
    for epsilon in (0.1, 1.0, 10.0, 100.0):
        for clip in (0.01, 0.1):
            mses = []
            for seed in range(trials):
                X, Xt, y, yt, clients, _ = make_heterogeneous_regression(random_state=seed)
                est = DPFedAvgRegressor(alpha=0.01, epsilon=epsilon, clip_norm=clip,
                                        n_rounds=100, random_state=seed)
                mses.append(mean_squared_error(yt, est.fit(X, y, clients=clients).predict(Xt)))
            print(f"| {epsilon:>7} | {clip:>6} | {est.noise_std_:>9.3g} | "
                  f"{np.mean(mses):>10.4g} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--convergence", action="store_true")
    parser.add_argument("--dp", action="store_true")
    parser.add_argument("--trials", type=int, default=3)
    args = parser.parse_args()
    bench_speed(args.repeats)
    if args.convergence:
        bench_convergence(args.trials)
    if args.dp:
        bench_dp(args.trials)


if __name__ == "__main__":
    main()
