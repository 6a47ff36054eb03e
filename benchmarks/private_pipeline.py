"""A differentially private pipeline on California housing, beside the non-private one.

scale | one-hot encode -> impute -> ridge, every step private (one release
each, composed in the pipeline's ledger, budget enforced), for a total of
epsilon = 1 and 10 at delta = 1e-5, against the same federated pipeline
without noise (which equals scikit-learn's on the pooled rows). Sites: 10
random sites; 80% of the rows fit, 20% score (R^2 of the house value in
$100k). Each private row is the mean (and spread) over 5 noise seeds.

Usage::

    python benchmarks/private_pipeline.py --data /path/to/shared/data [--docs docs]

``--docs`` also writes the table to ``docs/_bench_private_pipeline.txt``
(quoted by docs/disclosure.rst).
"""

import argparse
import io
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import brentq
from sklearn.metrics import r2_score

from sklearn_fed import FederatedRidge, PrivateFederatedRidge
from sklearn_fed.compose import FederatedColumnTransformer
from sklearn_fed.impute import FederatedSimpleImputer, PrivateFederatedSimpleImputer
from sklearn_fed.pipeline import make_federated_pipeline
from sklearn_fed.preprocessing import (
    FederatedOneHotEncoder,
    FederatedStandardScaler,
    PrivateFederatedOneHotEncoder,
    PrivateFederatedStandardScaler,
)
from sklearn_fed.privacy import PrivacyBudget
from sklearn_fed.privacy._budget import planned_ledger

NUMERIC = ["longitude", "latitude", "housing_median_age", "total_rooms", "total_bedrooms",
           "population", "households", "median_income"]
# Ranges stated from the census data dictionary, not read from the rows.
RANGES = [(-124.5, -114.0), (32.5, 42.0), (1, 52), (0, 40000), (0, 6500), (0, 36000),
          (0, 6100), (0.5, 15.0)]
DELTA = 1e-5
SITES = 10


def load(data):
    frame = pd.read_csv(Path(data) / "california_housing" / "housing.csv")
    value = frame.pop("median_house_value").to_numpy() / 1e5  # in $100k: at most 5
    return frame, value


def plain_pipeline():
    return make_federated_pipeline(
        FederatedColumnTransformer([
            ("num", FederatedStandardScaler(), NUMERIC),
            ("cat", FederatedOneHotEncoder(sparse_output=False, handle_unknown="ignore"),
             ["ocean_proximity"])]),
        FederatedSimpleImputer(), FederatedRidge(alpha=1.0))


def private_pipeline(epsilon_step, seed, budget=None):
    """The same steps, each one private release of ``epsilon_step`` (NaN skipped by the scaler,
    then imputed by the mean in scaled units, bounded by +-5 standard deviations)."""
    return make_federated_pipeline(
        FederatedColumnTransformer([
            ("num", PrivateFederatedStandardScaler(bounds=RANGES, epsilon=epsilon_step,
                                                   delta=DELTA, random_state=seed), NUMERIC),
            ("cat", PrivateFederatedOneHotEncoder(sparse_output=False, handle_unknown="ignore",
                                                  epsilon=epsilon_step, delta=DELTA,
                                                  random_state=seed), ["ocean_proximity"])]),
        PrivateFederatedSimpleImputer(bounds=(-5.0, 5.0), epsilon=epsilon_step, delta=DELTA,
                                      random_state=seed),
        # noise on the Gram needs a larger penalty than the pooled fit's alpha=1; alpha
        # and the bounds are set once here, not tuned on the scored rows
        PrivateFederatedRidge(alpha=1000.0, epsilon=epsilon_step, delta=DELTA,
                              feature_bound=3.0, target_bound=5.0, random_state=seed),
        privacy_budget=budget)


def step_epsilon(total):
    """The per-step epsilon whose four composed releases spend ``total`` at ``DELTA``."""
    def spent(epsilon):
        return planned_ledger(private_pipeline(epsilon, 0)).epsilon(2 * DELTA) - total

    return brentq(spent, 1e-3, total)


def run(data):
    X, y = load(data)
    rng = np.random.default_rng(0)
    test = rng.random(len(y)) < 0.2
    sites = rng.integers(0, SITES, size=len(y))
    Xf, yf, sf = X[~test], y[~test], sites[~test]
    out = io.StringIO()

    def say(text=""):
        print(text)
        out.write(text + "\n")

    plain = plain_pipeline().fit(Xf, yf, clients=sf)
    r2_plain = r2_score(y[test], plain.predict(X[test]))
    say(f"California housing: {len(yf)} rows to fit at {SITES} sites, {test.sum()} to score; "
        f"R^2 of the house value.")
    say()
    say(f"{'pipeline':<34} {'epsilon per step':>16} {'total (eps, delta)':>22} "
        f"{'R^2 (mean +- sd, 5 seeds)':>26}")
    say(f"{'federated, not private':<34} {'-':>16} {'(inf, 0)':>22} {r2_plain:>26.4f}")
    for total in (1.0, 10.0):
        epsilon = step_epsilon(total)
        scores, spent = [], None
        for seed in range(5):
            budget = PrivacyBudget(total * 1.0001, 2 * DELTA)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # clipping warnings: reported below
                model = private_pipeline(epsilon, seed, budget).fit(Xf, yf, clients=sf)
            scores.append(r2_score(y[test], model.predict(X[test])))
            spent = model.privacy_spent_
        label = f"private, epsilon = {total:g}"
        say(f"{label:<34} {epsilon:>16.3f} {f'({spent[0]:.3f}, {spent[1]:.0e})':>22} "
            f"{f'{np.mean(scores):.4f} +- {np.std(scores):.4f}':>26}")
    say()
    say("Per step (epsilon = 1 total): " + ", ".join(
        f"{name}: eps={e:.3f}" for name, (e, _) in model_steps(Xf, yf, sf).items()))
    return out.getvalue()


def model_steps(X, y, sites):
    epsilon = step_epsilon(1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = private_pipeline(epsilon, 0).fit(X, y, clients=sites)
    return model.privacy_spent_by_step_


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="folder holding california_housing/")
    parser.add_argument("--docs", help="docs folder: write _bench_private_pipeline.txt there")
    args = parser.parse_args()
    text = run(args.data)
    if args.docs:
        (Path(args.docs) / "_bench_private_pipeline.txt").write_text(text)


if __name__ == "__main__":
    main()
