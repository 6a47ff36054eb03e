"""The bounds recipe of PrivateFederatedRidge on three real tables, with the R^2 it gets.

For each table the features are mapped from ranges fixed by domain knowledge
(census top-codes, geography, clinical limits; never computed from the rows)
with :class:`~sklearn_fed.privacy.RangeScaler`, so every row has norm <= 1
(the default ``feature_bound``); the target is mapped from its known range
onto [-1, 1] (the default ``target_bound``), and predictions back. Sites are the natural groups
(California housing by ``ocean_proximity``, insurance by ``region``,
diabetes by ``sex``). Prints, on a 25% test split:

* ``Ridge`` on the bounded training rows and PrivateFederatedRidge at
  ``epsilon=inf`` (equal up to the fixed-point grid: the max coefficient gap);
* the median (min-max) test R^2 over 10 releases at epsilon = 1 and 10, for
  local and distributed noise, at ``alpha = 1`` and at an alpha of the order
  of the noise (``alpha = 2 tau sqrt(d)``; tau in the privacy docs).

Usage::

    python benchmarks/private_real_tables.py --data /path/to/shared/data
"""

import argparse
import math
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.datasets import load_diabetes
from sklearn.linear_model import Ridge
from sklearn.metrics import r2_score
from sklearn.model_selection import train_test_split

from sklearn_fed import PrivateFederatedRidge
from sklearn_fed.privacy import RangeScaler, gaussian_noise_std
from sklearn_fed.linear_model._private_release import joint_sensitivity


def california(data):
    frame = pd.read_csv(Path(data) / "california_housing" / "housing.csv")
    features = pd.DataFrame({
        "longitude": frame["longitude"],
        "latitude": frame["latitude"],
        "housing_median_age": frame["housing_median_age"],
        "median_income": frame["median_income"],
        "rooms_per_household": frame["total_rooms"] / frame["households"],
        "people_per_household": frame["population"] / frame["households"],
    })
    ranges = {  # California's extent; the census top-codes age at 52 and income at 15
        "longitude": (-124.5, -114.0), "latitude": (32.5, 42.0),
        "housing_median_age": (0, 52), "median_income": (0, 15),
        "rooms_per_household": (1, 10), "people_per_household": (1, 6),
    }
    # house values are top-coded at $500,001: in $100,000, within [0, 5]
    return features, frame["median_house_value"] / 1e5, (0.0, 5.0), frame["ocean_proximity"], ranges


def insurance(data):
    frame = pd.read_csv(Path(data) / "insurance" / "insurance.csv")
    features = pd.DataFrame({
        "age": frame["age"], "bmi": frame["bmi"], "children": frame["children"],
        "smoker": (frame["smoker"] == "yes").astype(float),
        "male": (frame["sex"] == "male").astype(float),
    })
    ranges = {"age": (18, 65), "bmi": (15, 55), "children": (0, 5), "smoker": (0, 1),
              "male": (0, 1)}
    # annual charges in $10,000, within [0, 7]
    return features, frame["charges"] / 1e4, (0.0, 7.0), frame["region"], ranges


def diabetes(_):
    frame = load_diabetes(scaled=False, as_frame=True).frame
    names = ["age", "bmi", "bp", "s1", "s2", "s3", "s4", "s5", "s6"]
    ranges = {  # clinically plausible limits of each measurement
        "age": (18, 80), "bmi": (15, 50), "bp": (50, 140), "s1": (80, 320), "s2": (30, 250),
        "s3": (20, 100), "s4": (1, 10), "s5": (3, 6.5), "s6": (50, 130),
    }
    return frame[names], frame["target"], (0.0, 350.0), frame["sex"], ranges


def evaluate(name, loader, data, n_releases):
    X, y, (low, high), sites, ranges = loader(data)
    X_train, X_test, y_train, y_test, s_train, _ = train_test_split(
        X, y.to_numpy(), sites.to_numpy(), test_size=0.25, random_state=0)
    scaler = RangeScaler(ranges).fit(X_train)
    Z_train, Z_test = scaler.transform(X_train), scaler.transform(X_test)
    middle, half = (low + high) / 2, (high - low) / 2
    t_train = (np.clip(y_train, low, high) - middle) / half
    d = Z_train.shape[1]

    def private(epsilon, noise, alpha, seed):
        return PrivateFederatedRidge(
            alpha=alpha, epsilon=epsilon, noise=noise, random_state=seed,
        ).fit(Z_train, t_train, clients=s_train)

    ridge = Ridge(alpha=1.0).fit(Z_train, t_train)
    exact = private(math.inf, "local", 1.0, 0)
    print(f"\n{name}: {len(y)} rows, {d} features, {len(np.unique(s_train))} sites; "
          f"clipped share {exact.clipped_share_:.1%}")
    print(f"  Ridge on the bounded rows: R^2 {r2_score(y_test, ridge.predict(Z_test) * half + middle):.4f}"
          f"; epsilon=inf: R^2 {r2_score(y_test, exact.predict(Z_test) * half + middle):.4f}, "
          f"max |coef gap| {np.abs(exact.coef_ - ridge.coef_).max():.1e}")
    print(f"  {'epsilon':>7} {'noise':>11} {'alpha':>7} | {'test R^2 median (min-max)':>27}")
    sensitivity = joint_sensitivity(1.0, 1.0)
    for epsilon in (1.0, 10.0):
        tau = gaussian_noise_std(epsilon, 1e-5, sensitivity)
        for noise in ("local", "distributed"):
            for alpha in (1.0, round(2 * tau * math.sqrt(d), 1)):
                scores = [r2_score(y_test, private(epsilon, noise, alpha, seed).predict(Z_test)
                                   * half + middle) for seed in range(n_releases)]
                print(f"  {epsilon:>7g} {noise:>11} {alpha:>7g} | {np.median(scores):>9.3f} "
                      f"({min(scores):.3f} to {max(scores):.3f})", flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="folder with california_housing/ "
                        "and insurance/ (as in shared/data)")
    parser.add_argument("--releases", type=int, default=10, help="releases per setting")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore", category=UserWarning)  # few clipped rows: expected
    for name, loader in [("California housing by ocean_proximity", california),
                         ("Insurance by region", insurance), ("Diabetes by sex", diabetes)]:
        evaluate(name, loader, args.data, args.releases)


if __name__ == "__main__":
    main()
