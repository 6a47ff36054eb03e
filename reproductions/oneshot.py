"""One-shot federated ridge paper: Tables II, III, IV, VI and Figure 3.

One module serves the registry names ``oneshot-table2``, ``oneshot-table3``,
``oneshot-table4``, ``oneshot-table6`` and ``oneshot-figure3``; :func:`run`
dispatches on ``args.name``.

Data: :func:`sklearn_fed.datasets.make_heterogeneous_regression` (Sec. V-A2);
defaults K=20, n_k=500, d=100, sigma (our ``alpha``)=0.01, gamma=0.5, 5 trials.
The gradient baselines use the paper's settings: learning rate 0.01, E=5
local epochs, FedProx mu=0.01, full participation and full local batches
(the paper gives no batch size). ``--quick`` runs one trial on a small problem
(n_k=100, d=20), so its numbers are not comparable with the paper's; only the
exactness claims are meaningful there.

With ``--out DIR`` each name writes ``DIR/NAME.md`` (our numbers beside the
paper's, a verdict per row) and ``DIR/NAME.png``; a progress bar over trials
goes to stderr unless ``--no-progress``.
"""

import sys
import time
from functools import partial

import numpy as np
from sklearn.linear_model import Ridge
from sklearn.metrics import mean_squared_error

from sklearn_fed.baselines import FedAvgRegressor, FedProxRegressor
from sklearn_fed.datasets import make_heterogeneous_regression
from sklearn_fed.linear_model import FederatedRidge
from ._report import (
    add_progress_argument,
    equal_to_round_off,
    new_figure,
    progress,
    progress_enabled,
    publish,
    verdict,
)

DESCRIPTIONS = {
    "oneshot-table2": "One-shot ridge paper, Table II: one-shot vs FedAvg/FedProx vs centralized MSE.",
    "oneshot-table3": "One-shot ridge paper, Table III: MSE vs heterogeneity gamma.",
    "oneshot-table4": "One-shot ridge paper, Table IV: uplink MB per client vs d.",
    "oneshot-table6": "One-shot ridge paper, Table VI: MSE and time vs number of clients K.",
    "oneshot-figure3": "One-shot ridge paper, Figure 3: FedAvg/FedProx test MSE per round (PNG).",
}
DESCRIPTION = "One-shot ridge paper, Tables II-IV, VI and Figure 3."

# The paper's numbers. Table II: test MSE; Table III: gamma -> (One-Shot,
# FedAvg, FedProx, Oracle); Table IV: d -> (One-Shot MB, FedAvg-200 MB);
# Table VI: K -> (One-Shot MSE, FedAvg MSE, One-Shot s, FedAvg s).
PAPER_TABLE2 = {
    "One-Shot": 0.0100,
    "FedAvg-100": 0.0103,
    "FedAvg-200": 0.0102,
    "FedAvg-500": 0.0102,
    "FedProx-200": 0.0102,
    "Centralized": 0.0100,
}
PAPER_TABLE3 = {
    0.0: (0.01003, 0.01013, 0.01014, 0.01003),
    0.2: (0.01003, 0.01014, 0.01015, 0.01003),
    0.4: (0.01004, 0.01014, 0.01013, 0.01004),
    0.6: (0.01006, 0.01013, 0.01014, 0.01006),
    0.8: (0.01008, 0.01014, 0.01014, 0.01008),
    1.0: (0.01012, 0.01016, 0.01037, 0.01012),
}
PAPER_TABLE4 = {50: (0.02, 1.60), 100: (0.08, 3.20), 200: (0.32, 6.40), 400: (1.28, 12.80)}
PAPER_TABLE6 = {
    10: (0.0090, 0.0090, 0.001, 0.065),
    20: (0.0094, 0.0094, 0.001, 0.070),
    50: (0.0097, 0.0098, 0.002, 0.080),
    100: (0.0102, 0.0132, 0.010, 0.085),
    200: (0.0100, 0.0130, 0.020, 0.075),
    500: (0.0099, 0.0123, 0.040, 0.045),
}
ALPHA = 0.01
QUICK_DATA = {"n_samples_per_client": 100, "n_features": 20}


def _baseline(method, n_rounds, **params):
    """The paper's gradient baseline: eta=0.01, E=5, mu=0.01 for FedProx."""
    common = dict(alpha=ALPHA, learning_rate=0.01, local_epochs=5, n_rounds=n_rounds,
                  random_state=0, **params)
    if method == "FedProx":
        return FedProxRegressor(mu=0.01, **common)
    return FedAvgRegressor(**common)


def one_shot_vs_centralized(heterogeneity=0.5, n_trials=5, alpha=ALPHA, baselines=(), bar=None,
                            **data_params):
    """Test MSE of FederatedRidge, centralized Ridge and gradient baselines over trials.

    Parameters
    ----------
    baselines : sequence of (name, method, n_rounds)
        Gradient baselines to run as well, ``method`` in {"FedAvg", "FedProx"}.
    bar : progress bar, default=None
        Advanced by one per trial (see :func:`._report.progress`).

    Returns
    -------
    dict
        ``one_shot``, ``centralized`` and one entry per baseline name: arrays of
        per-trial test MSE; ``max_coef_gap``, the largest relative coefficient
        difference between one-shot and centralized.
    """
    out = {"one_shot": [], "centralized": [], **{name: [] for name, _, _ in baselines}}
    gap = 0.0
    for trial in range(n_trials):
        X, X_test, y, y_test, clients, _ = make_heterogeneous_regression(
            heterogeneity=heterogeneity, random_state=trial, **data_params
        )
        fed = FederatedRidge(alpha=alpha).fit(X, y, clients=clients)
        ridge = Ridge(alpha=alpha, solver="cholesky").fit(X, y)
        out["one_shot"].append(mean_squared_error(y_test, fed.predict(X_test)))
        out["centralized"].append(mean_squared_error(y_test, ridge.predict(X_test)))
        gap = max(gap, np.abs(fed.coef_ - ridge.coef_).max() / np.abs(ridge.coef_).max())
        for name, method, n_rounds in baselines:
            model = _baseline(method, n_rounds).fit(X, y, clients=clients)
            out[name].append(mean_squared_error(y_test, model.predict(X_test)))
        if bar is not None:
            bar.update(1)
    result = {key: np.array(values) for key, values in out.items()}
    result["max_coef_gap"] = gap
    return result


def message_megabytes(n_features, n_clients=20, n_rounds=200):
    """Per-client uplink in MB: our packed message, the paper's count, FedAvg-R.

    The paper counts the full d x d Gram in float64 (``8 d^2`` bytes); the
    Gram is symmetric, so we send its upper triangle plus means and counts.
    The paper's FedAvg-200 column equals ``R d`` float64 uplink values summed
    over all K=20 clients (not per client, although the table says "per
    client"); we count it the same way so the columns can be compared.
    """
    rng = np.random.default_rng(0)
    X = rng.standard_normal((n_features + 1, n_features))
    fed = FederatedRidge().fit(X, X[:, 0])
    ours = fed.communication_.uplink_bytes / 1e6
    paper_count = 8 * n_features**2 / 1e6
    fedavg = n_rounds * n_features * 8 * n_clients / 1e6
    return ours, paper_count, fedavg


def _exactness_line(result):
    if equal_to_round_off(result["one_shot"], result["centralized"]):
        return (
            "One-Shot MSE is equal to centralized to round-off (np.allclose, rtol 1e-9; "
            f"largest relative coefficient gap {result['max_coef_gap']:.1e})."
        )
    return (
        "One-Shot MSE DIFFERS from centralized beyond round-off "
        f"(largest relative coefficient gap {result['max_coef_gap']:.1e})."
    )


TABLE2_BASELINES = (("FedAvg-100", "FedAvg", 100), ("FedAvg-200", "FedAvg", 200),
                    ("FedAvg-500", "FedAvg", 500), ("FedProx-200", "FedProx", 200))


def table2(n_trials=5, data_params=None, bar=None):
    data_params = data_params or {}
    baselines = TABLE2_BASELINES
    result = one_shot_vs_centralized(n_trials=n_trials, baselines=baselines, bar=bar,
                                     **data_params)
    lines = [
        "| Method | MSE (paper) | MSE (ours, mean ± sd) | vs centralized (ours) | verdict (5%) |",
        "| --- | --- | --- | --- | --- |",
    ]
    central = result["centralized"].mean()
    keys = [("One-Shot", "one_shot")] + [(b[0], b[0]) for b in baselines]
    for name, key in keys + [("Centralized", "centralized")]:
        values = result[key]
        lines.append(
            f"| {name} | {PAPER_TABLE2[name]:.4f} | {values.mean():.5f} ± {values.std():.5f} | "
            f"{values.mean() / central - 1:+.2%} | {verdict(values.mean(), PAPER_TABLE2[name], 0.05)} |"
        )
    paper_gap = PAPER_TABLE2["FedAvg-200"] / PAPER_TABLE2["Centralized"] - 1
    ours_gap = result["FedAvg-200"].mean() / central - 1
    lines.append("")
    lines.append(_exactness_line(result))
    lines.append(
        f"FedAvg-200 gap to centralized: paper {paper_gap:+.1%}, ours {ours_gap:+.2%} "
        f"({'reproduced' if abs(ours_gap - paper_gap) <= 0.01 else 'differs'})."
    )
    return "\n".join(lines), result


def table3(n_trials=5, data_params=None, n_rounds=200, bar=None):
    data_params = data_params or {}
    baselines = [("FedAvg", "FedAvg", n_rounds), ("FedProx", "FedProx", n_rounds)]
    lines = [
        f"| gamma | One-Shot paper / ours | FedAvg-{n_rounds} paper / ours | "
        f"FedProx-{n_rounds} paper / ours | Oracle paper / ours | One-Shot equal to centralized "
        "(rtol 1e-9) | verdict One-Shot (5%) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    results = {}
    for gamma, (p_one, p_avg, p_prox, p_central) in PAPER_TABLE3.items():
        result = one_shot_vs_centralized(
            heterogeneity=gamma, n_trials=n_trials, baselines=baselines, bar=bar, **data_params
        )
        results[gamma] = result
        means = {k: result[k].mean() for k in ("one_shot", "FedAvg", "FedProx", "centralized")}
        equal = equal_to_round_off(result["one_shot"], result["centralized"])
        lines.append(
            f"| {gamma:.1f} | {p_one:.5f} / {means['one_shot']:.5f} | "
            f"{p_avg:.5f} / {means['FedAvg']:.5f} | {p_prox:.5f} / {means['FedProx']:.5f} | "
            f"{p_central:.5f} / {means['centralized']:.5f} | {'yes' if equal else 'NO'} | "
            f"{verdict(means['one_shot'], p_one, 0.05)} |"
        )
    return "\n".join(lines), results


def table4():
    """The table's text and ``{d: (ours packed, paper's count, FedAvg-200 summed)}`` in MB."""
    results = {}
    lines = [
        "| d | One-Shot MB (paper) | paper's count 8d² (ours) | our packed message | "
        "FedAvg-200 MB (paper) | FedAvg-200 MB (ours) | verdict |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for d, (paper_one_shot, paper_fedavg) in PAPER_TABLE4.items():
        ours, paper_count, fedavg = message_megabytes(d)
        results[d] = (ours, paper_count, fedavg)
        same = np.isclose(paper_count, paper_one_shot, rtol=0.05) and np.isclose(
            fedavg, paper_fedavg, rtol=0.05
        )
        word = (
            "reproduced by the paper's count (FedAvg column summed over K=20)"
            if same else "differs"
        )
        lines.append(
            f"| {d} | {paper_one_shot:.2f} | {paper_count:.2f} | {ours:.3f} | "
            f"{paper_fedavg:.2f} | {fedavg:.2f} | {word} |"
        )
    return "\n".join(lines), results


def table6(n_trials=1, data_params=None, n_rounds=100, clients=(10, 20, 50, 100, 200, 500),
           bar=None):
    """MSE and time vs K at n_k=200: one-shot, FedAvg (all clients), FedAvg (10 per round)."""
    data_params = {"n_samples_per_client": 200, **(data_params or {})}
    lines = [
        f"| K | One-Shot MSE paper / ours | FedAvg MSE paper / ours (all clients, R={n_rounds}) | "
        f"FedAvg ours (10 clients/round) | One-Shot s paper / ours | FedAvg s paper / ours | "
        "One-Shot equal to centralized (rtol 1e-9) | verdict One-Shot (5%) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    results = {}
    for K in clients:
        p_one, p_avg, p_t_one, p_t_avg = PAPER_TABLE6[K]
        rec = {key: [] for key in ("one_shot", "centralized", "fedavg", "fedavg_sampled",
                                   "t_one", "t_avg")}
        for trial in range(n_trials):
            X, X_test, y, y_test, groups, _ = make_heterogeneous_regression(
                n_clients=K, random_state=trial, **data_params
            )
            start = time.perf_counter()
            fed = FederatedRidge(alpha=ALPHA).fit(X, y, clients=groups)
            rec["t_one"].append(time.perf_counter() - start)
            ridge = Ridge(alpha=ALPHA, solver="cholesky").fit(X, y)
            start = time.perf_counter()
            avg = _baseline("FedAvg", n_rounds).fit(X, y, clients=groups)
            rec["t_avg"].append(time.perf_counter() - start)
            sampled = _baseline("FedAvg", n_rounds, client_fraction=min(1.0, 10 / K))
            sampled.fit(X, y, clients=groups)
            for key, model in (("one_shot", fed), ("centralized", ridge), ("fedavg", avg),
                               ("fedavg_sampled", sampled)):
                rec[key].append(mean_squared_error(y_test, model.predict(X_test)))
            if bar is not None:
                bar.update(1)
        rec = {key: np.array(values) for key, values in rec.items()}
        results[K] = rec
        equal = equal_to_round_off(rec["one_shot"], rec["centralized"])
        lines.append(
            f"| {K} | {p_one:.4f} / {rec['one_shot'].mean():.4f} | "
            f"{p_avg:.4f} / {rec['fedavg'].mean():.4f} | {rec['fedavg_sampled'].mean():.4f} | "
            f"{p_t_one:.3f} / {rec['t_one'].mean():.3f} | {p_t_avg:.3f} / {rec['t_avg'].mean():.3f} | "
            f"{'yes' if equal else 'NO'} | {verdict(rec['one_shot'].mean(), p_one, 0.05)} |"
        )
    return "\n".join(lines), results


def convergence(n_rounds=300, data_params=None, heterogeneity=0.5, bar=None):
    """Per-round test MSE of FedAvg and FedProx, and the one-shot / centralized MSE."""
    X, X_test, y, y_test, clients, _ = make_heterogeneous_regression(
        heterogeneity=heterogeneity, random_state=0, **(data_params or {})
    )
    one_shot = mean_squared_error(y_test, FederatedRidge(alpha=ALPHA).fit(
        X, y, clients=clients).predict(X_test))
    central = mean_squared_error(
        y_test, Ridge(alpha=ALPHA, solver="cholesky").fit(X, y).predict(X_test)
    )
    curves = {}
    for method in ("FedAvg", "FedProx"):
        model, curve = _baseline(method, n_rounds), []
        for _ in range(n_rounds):
            model.partial_fit(X, y, clients=clients)  # one more round
            curve.append(mean_squared_error(y_test, model.predict(X_test)))
            if bar is not None:
                bar.update(1)
        curves[method] = np.array(curve)
    return {"one_shot": one_shot, "centralized": central, **curves}


# The paper's Figure 3 gives curves, not a table: the one-shot MSE at the
# optimum (0.0100) from round 1, and FedAvg/FedProx levelling off near 0.0102.
PAPER_FIGURE3 = {"one_shot": 0.0100, "plateau": 0.0102}


def figure3_table(result):
    central = result["centralized"]
    lines = [
        "| round | FedAvg MSE | FedProx MSE | FedAvg vs centralized | paper | verdict |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    n = len(result["FedAvg"])
    for r in sorted({1, 10, 50, 100, 200, n} & set(range(1, n + 1))):
        fedavg = result["FedAvg"][r - 1]
        if r == n:  # only the plateau is a number the paper states
            # The claim is a gap of +2% above the optimum: compare gaps (within 1
            # point), since a 5% tolerance on the MSE itself could not tell.
            paper_gap = PAPER_FIGURE3["plateau"] / PAPER_FIGURE3["one_shot"] - 1
            ours_gap = fedavg / central - 1
            paper = f"{PAPER_FIGURE3['plateau']:.4f} (plateau, {paper_gap:+.1%})"
            word = "reproduced" if abs(ours_gap - paper_gap) <= 0.01 else "differs"
            word = f"{word} (gap {ours_gap:+.2%} vs paper's {paper_gap:+.1%})"
        else:
            paper, word = "curve only", "-"
        lines.append(
            f"| {r} | {fedavg:.5f} | {result['FedProx'][r - 1]:.5f} | "
            f"{fedavg / central - 1:+.2%} | {paper} | {word} |"
        )
    one_shot = result["one_shot"]
    exact = (
        "equal to centralized (rtol 1e-9)" if equal_to_round_off(one_shot, central)
        else "DIFFERS from centralized"
    )
    lines.append(
        f"| One-Shot (round 1) | {one_shot:.5f} | | {one_shot / central - 1:+.2%} | "
        f"{PAPER_FIGURE3['one_shot']:.4f} | {exact}; "
        f"{verdict(one_shot, PAPER_FIGURE3['one_shot'], 0.05)} |"
    )
    lines.append(f"| Centralized | {central:.5f} | | | {PAPER_FIGURE3['one_shot']:.4f} | "
                 f"{verdict(central, PAPER_FIGURE3['one_shot'], 0.05)} |")
    return "\n".join(lines)


# Figures: one PNG per experiment, drawn on a pyplot-free Figure.
_PAPER_STYLE = {"ls": "--", "marker": "x", "alpha": 0.8}


def figure2(result):
    """Bar chart of test MSE per method, ours (mean ± sd) beside the paper's."""
    names = ["One-Shot", *(b[0] for b in TABLE2_BASELINES), "Centralized"]
    keys = ["one_shot", *(b[0] for b in TABLE2_BASELINES), "centralized"]
    ours = np.array([result[k].mean() for k in keys])
    spread = np.array([result[k].std() for k in keys])
    paper = np.array([PAPER_TABLE2[n] for n in names])
    fig = new_figure((7, 4))
    ax = fig.add_subplot()
    x = np.arange(len(names))
    ax.bar(x - 0.2, ours, 0.4, yerr=spread, color="tab:blue", label="ours (mean ± sd)")
    ax.bar(x + 0.2, paper, 0.4, color="tab:gray", label="paper")
    low = min(ours.min(), paper.min())
    high = max((ours + spread).max(), paper.max())
    ax.set_ylim(low - 0.2 * (high - low) - 1e-5, high + 0.2 * (high - low) + 1e-5)
    ax.set_xticks(x, names, rotation=20)
    ax.set_ylabel("test MSE")
    ax.set_title("Table II: one-shot vs gradient baselines")
    ax.legend()
    return fig


def figure_table3(results, n_rounds=200):
    """Test MSE vs heterogeneity gamma: ours (solid) and the paper's (dashed)."""
    gammas = sorted(results)
    fig = new_figure((6.5, 4))
    ax = fig.add_subplot()
    columns = (("one_shot", "One-Shot", "tab:green"), ("FedAvg", f"FedAvg-{n_rounds}", "tab:blue"),
               ("FedProx", f"FedProx-{n_rounds}", "tab:red"), ("centralized", "Oracle", "black"))
    for i, (key, label, color) in enumerate(columns):
        ax.plot(gammas, [results[g][key].mean() for g in gammas], marker="o", color=color,
                label=f"{label} (ours)")
        ax.plot(gammas, [PAPER_TABLE3[g][i] for g in gammas], color=color,
                label=f"{label} (paper)", **_PAPER_STYLE)
    ax.set_xlabel("heterogeneity gamma")
    ax.set_ylabel("test MSE")
    ax.set_title("Table III: MSE vs heterogeneity")
    ax.legend(fontsize="small", ncol=2)
    return fig


def figure_table4(results, n_rounds=200, n_clients=20):
    """Uplink MB vs d: one-shot message vs FedAvg-200, as counted by us and by the paper."""
    ds = np.array(sorted(results))
    fig = new_figure((6.5, 4))
    ax = fig.add_subplot()
    ax.loglog(ds, [results[d][0] for d in ds], marker="o", color="tab:green",
              label="One-Shot, our packed message")
    ax.loglog(ds, [PAPER_TABLE4[d][0] for d in ds], color="tab:green",
              label="One-Shot, paper (8d² bytes)", **_PAPER_STYLE)
    ax.loglog(ds, n_rounds * ds * 8 / 1e6, marker="o", color="tab:blue",
              label=f"FedAvg-{n_rounds} per client (ours)")
    ax.loglog(ds, [PAPER_TABLE4[d][1] for d in ds], color="tab:blue",
              label=f"FedAvg-{n_rounds}, paper (summed over K={n_clients})", **_PAPER_STYLE)
    ax.set_xlabel("d (features)")
    ax.set_ylabel("uplink MB")
    ax.set_title("Table IV: communication, one-shot vs FedAvg")
    ax.legend(fontsize="small")
    return fig


def figure_table6(results):
    """Wall time vs K: one-shot and FedAvg, ours (solid) and the paper's (dashed)."""
    ks = sorted(results)
    fig = new_figure((6.5, 4))
    ax = fig.add_subplot()
    ax.loglog(ks, [results[k]["t_one"].mean() for k in ks], marker="o", color="tab:green",
              label="One-Shot (ours)")
    ax.loglog(ks, [PAPER_TABLE6[k][2] for k in ks], color="tab:green", label="One-Shot (paper)",
              **_PAPER_STYLE)
    ax.loglog(ks, [results[k]["t_avg"].mean() for k in ks], marker="o", color="tab:blue",
              label="FedAvg (ours)")
    ax.loglog(ks, [PAPER_TABLE6[k][3] for k in ks], color="tab:blue", label="FedAvg (paper)",
              **_PAPER_STYLE)
    ax.set_xlabel("K (clients)")
    ax.set_ylabel("fit time (s)")
    ax.set_title("Table VI: time vs number of clients")
    ax.legend(fontsize="small")
    return fig


def figure3(result):
    """Per-round test MSE of FedAvg and FedProx against the one-shot and centralized lines."""
    fig = new_figure((6, 4))
    ax = fig.add_subplot()
    rounds = np.arange(1, len(result["FedAvg"]) + 1)
    ax.semilogy(rounds, result["FedAvg"], color="tab:blue", label="FedAvg")
    ax.semilogy(rounds, result["FedProx"], color="tab:red", ls=":", label="FedProx")
    ax.axhline(result["one_shot"], color="tab:green", label="One-Shot (round 1)")
    ax.axhline(result["centralized"], color="gray", ls="--", label="Centralized")
    ax.set_xlabel("communication round")
    ax.set_ylabel("test MSE")
    ax.set_title("Convergence (one-shot paper, Fig. 3)")
    ax.legend()
    return fig


def add_arguments(parser):
    parser.add_argument("--trials", type=int, default=5, help="random trials (paper: 5)")
    parser.add_argument(
        "--quick", action="store_true",
        help="one trial on a small problem (n_k=100, d=20); exactness checks only",
    )
    parser.add_argument("--out", default=None, help="folder for NAME.md and NAME.png")
    add_progress_argument(parser)


def run(args):
    name = getattr(args, "name", "oneshot-table2")
    trials = 1 if args.quick else args.trials
    if trials < 1:
        print("error: --trials must be >= 1", file=sys.stderr)
        return 2
    data = dict(QUICK_DATA) if args.quick else {}
    setting = "quick: n_k=100, d=20, 1 trial" if args.quick else f"{trials} trial(s)"
    enabled = progress_enabled(args)
    figure = None
    if name == "oneshot-table2":
        with progress(total=trials, desc=name, unit="trial", enabled=enabled) as bar:
            text, result = table2(trials, data, bar=bar)
        figure = partial(figure2, result)
        title = f"Table II (d=100, K=20, gamma=0.5, alpha=0.01; {setting})"
    elif name == "oneshot-table3":
        with progress(total=len(PAPER_TABLE3) * trials, desc=name, unit="trial",
                      enabled=enabled) as bar:
            text, results = table3(trials, data, bar=bar)
        figure = partial(figure_table3, results)
        title = f"Table III (MSE vs heterogeneity; {setting})"
    elif name == "oneshot-table4":
        (text, results), title = table4(), "Table IV (uplink per client)"
        figure = partial(figure_table4, results)
    elif name == "oneshot-table6":
        if args.quick:
            trials, params, n_rounds = 1, {"n_samples_per_client": 50, "n_features": 20}, 20
            setting = "quick: n_k=50, d=20, R=20, 1 trial"
        else:
            params, n_rounds = {}, 100
        with progress(total=len(PAPER_TABLE6) * trials, desc=name, unit="fit",
                      enabled=enabled) as bar:
            text, results = table6(trials, params, n_rounds=n_rounds, bar=bar)
        figure = partial(figure_table6, results)
        title = f"Table VI (scalability in K, n_k=200; {setting})"
    elif name == "oneshot-figure3":
        n_rounds = 60 if args.quick else 300
        with progress(total=2 * n_rounds, desc=name, unit="round", enabled=enabled) as bar:
            result = convergence(n_rounds, data, bar=bar)
        text = figure3_table(result)
        figure = partial(figure3, result)
        setting = "quick: n_k=100, d=20, seed 0" if args.quick else "seed 0"
        title = f"Figure 3 (convergence, {n_rounds} rounds; {setting})"
    else:
        print(f"error: {name!r} is not served by this module", file=sys.stderr)
        return 2
    return publish(args, name, f"{title}\n\n{text}", figure)
