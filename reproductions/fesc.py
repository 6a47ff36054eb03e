"""The FESC demo: MSE of centralized, plain federated and FESC ridge versus gamma.

For gamma = 0.2, 0.3, ..., 1.2, ``m`` client sizes are drawn from a
sample-size law of mean ``m ** gamma``, the FESC paper's linear model is
generated (theta* ~ U[0,1]^d, x ~ N(0, I), y = x theta* + N(0, 1)), and three
estimates of theta* are compared by ``||theta_hat - theta*||^2``: centralized
ridge on all rows, the plain federated estimator (local ridges averaged with
weights n_i / N) and FESC. Every ridge uses ``lambda = 1 / sqrt(N)`` and no
intercept, as in the paper. The paper ran one Monte-Carlo repetition; we
average ``--repeats`` of them and shade a 95 % confidence interval of the mean.

Outputs (in ``--out``): ``sizes_hist.png`` (client sizes at gamma = 1.2),
``mse_vs_gamma.png``, ``mse_vs_gamma.csv``, ``mse_vs_gamma.md`` and ``fesc.md``
(the table beside the paper's claim, with a verdict per gamma).
"""

import csv
import math
import os
import sys

import numpy as np

from sklearn_fed.datasets import make_fesc_regression
from sklearn_fed.linear_model import FESCRidge
from sklearn_fed.simulation import SAMPLE_SIZE_LAWS, sample_client_sizes
from ._report import add_progress_argument, new_figure, save_figure, write_markdown
from ._report import progress as progress_bar

DESCRIPTION = "FESC demo: MSE vs gamma of centralized, plain federated and FESC ridge"

GAMMAS = tuple(round(0.2 + 0.1 * k, 1) for k in range(11))
ESTIMATORS = ("centralized", "federated", "fesc")
LABELS = {"centralized": "Centralized", "federated": "Plain federated", "fesc": "FESC"}


def add_arguments(parser):
    parser.add_argument("--nodes", type=int, default=100, help="number of clients m (100)")
    parser.add_argument("--dim", type=int, default=10, help="feature dimension d (10)")
    parser.add_argument(
        "--distribution",
        default="lognormal-low",
        choices=(*SAMPLE_SIZE_LAWS, "all"),
        help="sample-size law (lognormal-low); 'all' runs every law into OUT/LAW",
    )
    parser.add_argument("--repeats", type=int, default=20, help="Monte-Carlo repetitions (20)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (0)")
    parser.add_argument("--out", default="fesc_demo", help="output folder (./fesc_demo)")
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: 20 nodes, 2 repeats, same gamma grid"
    )
    add_progress_argument(parser)


def simulate(law, n_nodes, n_features, n_repeats, *, gammas=GAMMAS, seed=0, progress=False):
    """Run the demo's Monte-Carlo simulation.

    Returns
    -------
    results : dict
        ``gammas`` (g,), ``mse`` dict estimator -> (g, n_repeats) array,
        ``n_total`` (g, n_repeats) total rows, ``n_selected`` (g, n_repeats)
        FESC's K, and ``sizes`` the client sizes of the first repetition at
        the largest gamma.
    """
    if n_nodes < 1 or n_features < 1 or n_repeats < 1:
        raise ValueError("nodes, dim and repeats must all be >= 1.")
    gammas = np.asarray(gammas, dtype=float)
    shape = (gammas.shape[0], n_repeats)
    mse = {name: np.empty(shape) for name in ESTIMATORS}
    n_total = np.empty(shape, dtype=np.int64)
    n_selected = np.empty(shape, dtype=np.int64)
    sizes_last = None
    seeds = np.random.SeedSequence(seed).spawn(gammas.shape[0] * n_repeats)
    bar = progress_bar(total=gammas.shape[0] * n_repeats, desc=f"fesc {law}", unit="fit",
                       enabled=progress)
    for g, gamma in enumerate(gammas):
        for r in range(n_repeats):
            rng = np.random.RandomState(np.random.MT19937(seeds[g * n_repeats + r]))
            sizes = sample_client_sizes(law, n_nodes, float(gamma), random_state=rng)
            X, y, clients, theta = make_fesc_regression(sizes, n_features, random_state=rng)
            # One estimator object gives all three: with one client and
            # proportional weights FESCRidge is exactly centralized ridge.
            central = FESCRidge(weighting="proportional", fit_intercept=False).fit(
                X, y, clients=np.zeros(len(y))  # one client holding every row
            )
            fesc = FESCRidge(weighting="fesc", fit_intercept=False).fit(X, y, clients=clients)
            plain = np.asarray(fesc.client_sizes_ / fesc.client_sizes_.sum()) @ fesc.local_coefs_
            mse["centralized"][g, r] = np.sum((central.coef_ - theta) ** 2)
            mse["federated"][g, r] = np.sum((plain - theta) ** 2)
            mse["fesc"][g, r] = np.sum((fesc.coef_ - theta) ** 2)
            n_total[g, r] = sizes.sum()
            n_selected[g, r] = fesc.n_selected_clients_
            if g == gammas.shape[0] - 1 and r == 0:
                sizes_last = sizes
            bar.update(1)
    bar.close()
    return {
        "law": law,
        "n_nodes": n_nodes,
        "gammas": gammas,
        "mse": mse,
        "n_total": n_total,
        "n_selected": n_selected,
        "sizes": sizes_last,
    }


def summary_rows(results):
    """One dict per gamma: means, standard errors, K and the FESC/plain ratio."""
    rows = []
    n_repeats = results["n_total"].shape[1]
    for g, gamma in enumerate(results["gammas"]):
        row = {
            "gamma": round(float(gamma), 2),
            "mean_size": round(results["n_nodes"] ** float(gamma), 2),
            "mean_total_rows": round(float(results["n_total"][g].mean()), 1),
        }
        for name in ESTIMATORS:
            values = results["mse"][name][g]
            row[f"mse_{name}"] = float(values.mean())
            se = values.std(ddof=1) / math.sqrt(n_repeats) if n_repeats > 1 else math.nan
            row[f"se_{name}"] = float(se)
        row["fesc_over_federated"] = row["mse_fesc"] / row["mse_federated"]
        row["fesc_K"] = float(results["n_selected"][g].mean())
        rows.append(row)
    return rows


def plot_histogram(sizes, ax, *, law="", gamma=GAMMAS[-1]):
    """Histogram of client sizes (the paper's first figure)."""
    ax.hist(sizes, bins=min(50, max(10, len(sizes) // 2)), color="tab:blue", edgecolor="white")
    ax.set_xlabel("rows per client")
    ax.set_ylabel("clients")
    ax.set_title(f"Client sizes, {law}, gamma = {gamma:g} (m = {len(sizes)})")
    return ax


def plot_mse(results, ax):
    """Mean MSE vs gamma with a shaded 95 % interval (the paper's second figure)."""
    gammas = results["gammas"]
    n_repeats = results["n_total"].shape[1]
    colors = {"centralized": "black", "federated": "tab:orange", "fesc": "tab:green"}
    for name in ESTIMATORS:
        values = results["mse"][name]
        mean = values.mean(axis=1)
        ax.plot(gammas, mean, marker="o", color=colors[name], label=LABELS[name])
        if n_repeats > 1:
            half = 1.96 * values.std(axis=1, ddof=1) / math.sqrt(n_repeats)
            low = np.maximum(mean - half, mean * 1e-3)
            ax.fill_between(gammas, low, mean + half, color=colors[name], alpha=0.2)
    ax.axvline(1.0, color="grey", linestyle=":", linewidth=1,
               label=f"gamma = 1: as many rows per client as clients ({results['n_nodes']})")
    ax.set_yscale("log")
    ax.set_xlabel("gamma (mean rows per client = m ** gamma)")
    ax.set_ylabel("MSE  ||theta_hat - theta*||^2")
    ax.set_title(f"{results['law']}, m = {results['n_nodes']}, {n_repeats} repeats")
    handles, labels = ax.get_legend_handles_labels()
    if n_repeats > 1:  # say what the shading is
        from matplotlib.patches import Patch

        handles.append(Patch(color="grey", alpha=0.2))
        labels.append(f"shaded: 95% interval of the mean over {n_repeats} repeats")
    ax.legend(handles, labels, fontsize=8)
    return ax


def write_outputs(results, out):
    """Write the two PNG figures, the CSV and the markdown tables; return the rows."""
    os.makedirs(out, exist_ok=True)
    rows = summary_rows(results)
    fig = new_figure((6, 4))
    plot_histogram(
        results["sizes"], fig.add_subplot(), law=results["law"], gamma=results["gammas"][-1]
    )
    save_figure(fig, out, "sizes_hist.png", dpi=110)
    fig = new_figure((6.5, 4.5))
    plot_mse(results, fig.add_subplot())
    save_figure(fig, out, "mse_vs_gamma.png", dpi=110)
    with open(os.path.join(out, "mse_vs_gamma.csv"), "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    with open(os.path.join(out, "mse_vs_gamma.md"), "w") as handle:
        handle.write(markdown_table(rows) + "\n")
    return rows


def markdown_table(rows):
    header = (
        "| gamma | mean rows/client | centralized | plain federated | FESC "
        "| FESC / plain | FESC K |\n"
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    )
    lines = [header]
    for row in rows:
        cells = [f"{row['gamma']:.1f}", f"{row['mean_size']:.1f}"]
        for name in ESTIMATORS:
            cells.append(f"{row[f'mse_{name}']:.4g} ± {row[f'se_{name}']:.2g}")
        cells += [f"{row['fesc_over_federated']:.3f}", f"{row['fesc_K']:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# The paper's claim: FESC beats the plain average when clients are small
# (gamma <= 0.6 in its figure) and both approach centralized as gamma grows.
SMALL_GAMMA = 0.6


def claim_rows(rows):
    """Each gamma beside the paper's claim for it, with a verdict.

    Small gamma: reproduced when FESC's mean MSE is below the plain average's.
    Larger gamma: reproduced when both gaps to centralized are smaller than at
    the smallest gamma (they approach it); FESC above plain there is noted,
    as the paper does not claim either order.
    """
    first = rows[0]
    start_plain = first["mse_federated"] / first["mse_centralized"] - 1
    start_fesc = first["mse_fesc"] / first["mse_centralized"] - 1
    lines = [
        "| gamma | centralized | plain federated | FESC | FESC / plain | plain / centralized "
        "| FESC / centralized | paper's claim | verdict |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for row in rows:
        ratio = row["fesc_over_federated"]
        plain_gap = row["mse_federated"] / row["mse_centralized"] - 1
        fesc_gap = row["mse_fesc"] / row["mse_centralized"] - 1
        if row["gamma"] <= SMALL_GAMMA + 1e-9:
            claim = "FESC below plain"
            word = "reproduced" if ratio < 1 else "differs"
            result = f"{word} (FESC {ratio - 1:+.0%} vs plain)"
        else:
            claim = "both approach centralized"
            word = ("reproduced" if plain_gap < start_plain and fesc_gap < start_fesc
                    else "differs")
            result = (f"{word} (gap to centralized: plain {plain_gap:+.0%}, FESC "
                      f"{fesc_gap:+.0%}; at gamma {first['gamma']:.1f}: {start_plain:+.0%}, "
                      f"{start_fesc:+.0%})")
            if ratio > 1:
                result += f"; FESC {ratio - 1:+.1%} vs plain (not in the paper)"
        lines.append(
            f"| {row['gamma']:.1f} | {row['mse_centralized']:.4g} | {row['mse_federated']:.4g} "
            f"| {row['mse_fesc']:.4g} | {ratio:.3f} | {plain_gap + 1:.2f} | {fesc_gap + 1:.2f} "
            f"| {claim} | {result} |"
        )
    return "\n".join(lines)


def verdict(rows):
    """The paper's two claims checked on our numbers, as printable lines."""
    low = [row for row in rows if row["gamma"] <= 0.6 + 1e-9]
    below = [row["gamma"] for row in low if row["mse_fesc"] < row["mse_federated"]]
    last = rows[-1]
    lines = [
        f"paper: FESC below plain federated for gamma <= 0.6 -> ours: "
        f"{len(below)}/{len(low)} gammas "
        f"({'holds' if len(below) == len(low) else 'does not hold everywhere'})",
        f"paper: both approach centralized as gamma -> {last['gamma']:.1f} -> ours: "
        f"plain/centralized = {last['mse_federated'] / last['mse_centralized']:.3f}, "
        f"FESC/centralized = {last['mse_fesc'] / last['mse_centralized']:.3f} at gamma "
        f"{last['gamma']:.1f} (vs {rows[0]['mse_federated'] / rows[0]['mse_centralized']:.1f} "
        f"and {rows[0]['mse_fesc'] / rows[0]['mse_centralized']:.1f} "
        f"at gamma {rows[0]['gamma']:.1f})",
    ]
    return lines


def run(args):
    nodes, repeats = args.nodes, args.repeats
    if args.quick:
        nodes, repeats = min(nodes, 20), min(repeats, 2)
    if nodes < 1 or args.dim < 1 or repeats < 1:
        print("error: --nodes, --dim and --repeats must be >= 1", file=sys.stderr)
        return 2
    laws = SAMPLE_SIZE_LAWS if args.distribution == "all" else (args.distribution,)
    for law in laws:
        out = os.path.join(args.out, law) if args.distribution == "all" else args.out
        results = simulate(
            law, nodes, args.dim, repeats, seed=args.seed, progress=not args.no_progress
        )
        rows = write_outputs(results, out)
        print(f"\nFESC demo: law={law}, m={nodes}, d={args.dim}, repeats={repeats} "
              f"(mean MSE ± standard error)")
        print(markdown_table(rows))
        for line in verdict(rows):
            print(line)
        write_markdown(out, "fesc", (
            f"FESC demo: law={law}, m={nodes}, d={args.dim}, repeats={repeats} "
            f"(mean MSE ||theta_hat - theta*||^2; ratios of means)\n\n"
            f"{claim_rows(rows)}\n\n" + "\n".join(verdict(rows))
        ))
        print(f"wrote {out}/fesc.md, sizes_hist.png, mse_vs_gamma.png, mse_vs_gamma.csv, "
              "mse_vs_gamma.md")
    return 0
