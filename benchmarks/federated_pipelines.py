"""Federated pipelines on real tables: equal to scikit-learn's on pooled rows; rounds, bytes.

Prints four tables (the "Federated pipelines" user guide quotes them):

1. The California housing pipeline, sites = ``ocean_proximity`` (also a
   categorical column; 207 rows miss ``total_bedrooms``): impute -> one-hot
   encode -> scale -> ridge on the house value, and -> logistic regression
   on a derived label (value above the median). Rounds and bytes of the
   protocol, the largest gap to the same scikit-learn pipeline fitted on
   the pooled rows, and whether the in-process fit, the fit through bytes
   and a run of the protocol roles by hand predict the same, bit for bit.
2. Every federated transformer and classifier against its scikit-learn
   counterpart on the three real tables (California housing, insurance,
   MNIST's 10,000 test images), for 1, 7 and 100 sites, with sample
   weights where scikit-learn takes them.
3. Newton rounds against FedAvg for the California logistic regression:
   rounds and bytes to reach the pooled optimum's log-loss.
4. What fusing the scaler into the ridge round would save.

Usage::

    python benchmarks/federated_pipelines.py --data /path/to/shared/data [--docs docs]
"""

import argparse
import contextlib
import io
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.compose import ColumnTransformer
from sklearn.decomposition import PCA
from sklearn.impute import SimpleImputer
from sklearn.linear_model import LogisticRegression, Ridge, RidgeClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MinMaxScaler, OneHotEncoder, StandardScaler

from sklearn_fed import (
    FederatedLogisticRegression,
    FederatedMinMaxScaler,
    FederatedOneHotEncoder,
    FederatedPCA,
    FederatedRidge,
    FederatedRidgeClassifier,
    FederatedSimpleImputer,
    FederatedStandardScaler,
)
from sklearn_fed.compose import FederatedColumnTransformer
from sklearn_fed.datasets import load_mnist_idx
from sklearn_fed.pipeline import make_federated_pipeline
from sklearn_fed.protocol import fedavg_bytes, simulate_through_bytes
from sklearn_fed.utils.estimator_checks import run_protocol_by_hand

NUMERIC = ["longitude", "latitude", "housing_median_age", "total_rooms", "total_bedrooms",
           "population", "households", "median_income"]


def california(data):
    frame = pd.read_csv(Path(data) / "california_housing" / "housing.csv")
    value = frame.pop("median_house_value").to_numpy()
    return frame, value


def insurance(data):
    frame = pd.read_csv(Path(data) / "insurance" / "insurance.csv")
    return frame, frame.pop("charges").to_numpy()


def mnist(data):
    folder = Path(data) / "mnist"
    return load_mnist_idx(folder / "t10k-images-idx3-ubyte.gz",
                          folder / "t10k-labels-idx1-ubyte.gz")


def pooled_pipeline(final):
    return make_pipeline(
        ColumnTransformer([("num", SimpleImputer(), NUMERIC),
                           ("cat", OneHotEncoder(sparse_output=False), ["ocean_proximity"])]),
        StandardScaler(), final)


def federated_pipeline(final):
    return make_federated_pipeline(
        FederatedColumnTransformer([
            ("num", FederatedSimpleImputer(), NUMERIC),
            ("cat", FederatedOneHotEncoder(sparse_output=False), ["ocean_proximity"])]),
        FederatedStandardScaler(), final)


def _kb(n_bytes):
    return f"{n_bytes / 1e3:,.1f} kB"


# ------------------------------------------------------------------ table 1
def california_pipelines(data):
    X, value = california(data)
    sites = X["ocean_proximity"].to_numpy()
    label = (value > np.median(value)).astype(int)
    cases = [
        ("ridge (alpha=1)", Ridge(alpha=1.0), FederatedRidge, value, "predict"),
        ("logistic (C=1)", LogisticRegression(solver="newton-cholesky", tol=1e-14,
                                              max_iter=1000),
         FederatedLogisticRegression, label, "predict_proba"),
    ]
    print("Table 1. California housing, 20,640 rows, sites = ocean_proximity "
          f"({len(np.unique(sites))} sites, {np.min(np.unique(sites, return_counts=True)[1])} "
          "to {:,} rows)".format(np.max(np.unique(sites, return_counts=True)[1])))
    print("| final step | rounds | uplink | downlink | max gap to pooled sklearn "
          "| fit = through bytes = roles (predictions bit for bit, bytes per site) |")
    print("| --- | --- | --- | --- | --- | --- |")
    fitted = {}
    for name, pooled_final, federated_final, target, method in cases:
        pooled = pooled_pipeline(pooled_final).fit(X, target)
        fed = federated_pipeline(federated_final()).fit(X, target, clients=sites)
        with simulate_through_bytes():
            through = federated_pipeline(federated_final()).fit(X, target, clients=sites)
        server, sent = run_protocol_by_hand(federated_pipeline(federated_final()), X, target,
                                            sites)
        roles = server.estimator
        expected, got = getattr(pooled, method)(X), getattr(fed, method)(X)
        gap = np.max(np.abs(got - expected))
        if method == "predict":
            gap = f"{gap / np.max(np.abs(expected)):.1e} (relative)"
        else:
            gap = f"{gap:.1e} (probability)"
        same = all(getattr(other, method)(X).tobytes() == got.tobytes()
                   for other in (through, roles))
        # the ledgers count the bytes the roles really exchanged, site by site
        same &= all(dict(other.communication_.uplink_bytes_per_client) == sent["replies"]
                    and dict(other.communication_.downlink_bytes_per_client) == sent["tasks"]
                    for other in (fed, through, roles))
        ledger = fed.communication_
        print(f"| {name} | {ledger.rounds} | {_kb(ledger.uplink_bytes)} | "
              f"{_kb(ledger.downlink_bytes)} | {gap} | {same} |")
        fitted[name] = fed
    steps = fitted["ridge (alpha=1)"].steps
    print("\nPer step (ridge pipeline; each step's own messages, without the pipeline's "
          "envelope):")
    for name, step in steps:
        ledger = step.communication_
        print(f"  {name}: {ledger.rounds} round(s), uplink {_kb(ledger.uplink_bytes)}")
    logistic = fitted["logistic (C=1)"][-1]
    print(f"  logistic regression: {logistic.n_iter_[0]} Newton iterations "
          f"({logistic.communication_.rounds} rounds)")
    return fitted


# ------------------------------------------------------------------ table 2
def _gap(a, b):
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    scale = max(np.nanmax(np.abs(a)), 1e-300)
    return float(np.nanmax(np.abs(a - b)) / scale)


def equality_table(data):
    rng = np.random.default_rng(0)
    housing, value = california(data)
    numeric = housing[NUMERIC].to_numpy()
    imputed = SimpleImputer().fit_transform(numeric)
    standardized = StandardScaler().fit_transform(imputed)
    label = (value > np.median(value)).astype(int)
    charges_frame, charges = insurance(data)
    insurance_numeric = charges_frame[["age", "bmi", "children"]].to_numpy(float)
    smoker = charges_frame["smoker"].to_numpy()
    insurance_std = StandardScaler().fit_transform(insurance_numeric)
    pixels, digits = mnist(data)
    pixels = pixels.astype(np.float64)
    pixels_std = StandardScaler().fit_transform(pixels)
    zero = (digits == 0).astype(int)
    components = StandardScaler().fit_transform(
        PCA(50, svd_solver="covariance_eigh").fit_transform(pixels))
    ocean = housing["ocean_proximity"].to_numpy()
    region = charges_frame["region"].to_numpy()

    def weights(n):
        return rng.random(n) + 0.5

    cases = [  # (table, estimator name, pooled, federated, X, y, weighted, attributes)
        ("california", "StandardScaler", StandardScaler(), FederatedStandardScaler(), numeric,
         None, True, ["mean_", "var_", "scale_"]),
        ("california", "MinMaxScaler", MinMaxScaler(), FederatedMinMaxScaler(), numeric, None,
         False, ["data_min_", "data_max_", "scale_"]),
        ("california", "SimpleImputer(mean)", SimpleImputer(), FederatedSimpleImputer(),
         numeric, None, False, ["statistics_"]),
        ("california", "SimpleImputer(most_frequent)", SimpleImputer(strategy="most_frequent"),
         FederatedSimpleImputer(strategy="most_frequent"), numeric, None, False,
         ["statistics_"]),
        ("california", "OneHotEncoder", OneHotEncoder(), FederatedOneHotEncoder(),
         housing[["ocean_proximity"]], None, False, []),
        ("california", "PCA(covariance_eigh)", PCA(svd_solver="covariance_eigh"),
         FederatedPCA(), standardized, None, False, ["explained_variance_", "components_"]),
        ("california", "LogisticRegression", None, FederatedLogisticRegression(),
         standardized, label, True, ["coef_", "intercept_"]),
        ("california", "LogisticRegression(5 classes: ocean_proximity)", None,
         FederatedLogisticRegression(), standardized, ocean, True, ["coef_", "intercept_"]),
        ("insurance", "OneHotEncoder(drop=first)", OneHotEncoder(drop="first"),
         FederatedOneHotEncoder(drop="first"), charges_frame[["sex", "smoker", "region"]],
         None, False, []),
        ("insurance", "StandardScaler", StandardScaler(), FederatedStandardScaler(),
         insurance_numeric, None, True, ["mean_", "var_", "scale_"]),
        ("insurance", "RidgeClassifier(balanced)", RidgeClassifier(class_weight="balanced"),
         FederatedRidgeClassifier(class_weight="balanced"), insurance_std, smoker, True,
         ["coef_", "intercept_"]),
        ("insurance", "LogisticRegression", None, FederatedLogisticRegression(),
         insurance_std, smoker, True, ["coef_", "intercept_"]),
        ("insurance", "LogisticRegression(4 classes: region)", None,
         FederatedLogisticRegression(), insurance_std, region, True, ["coef_", "intercept_"]),
        ("mnist", "StandardScaler", StandardScaler(), FederatedStandardScaler(), pixels, None,
         True, ["mean_", "var_", "scale_"]),
        ("mnist", "PCA(n_components=50)", PCA(50, svd_solver="covariance_eigh"),
         FederatedPCA(50), pixels, None, False, ["explained_variance_", "components_"]),
        ("mnist", "RidgeClassifier", RidgeClassifier(alpha=10.0),
         FederatedRidgeClassifier(alpha=10.0), pixels, digits, True, ["coef_", "intercept_"]),
        ("mnist", "LogisticRegression(0 vs rest)", None, FederatedLogisticRegression(),
         pixels_std, zero, True, ["coef_", "intercept_"]),
        ("mnist", "LogisticRegression(10 digits, 50 principal components)", None,
         FederatedLogisticRegression(), components, digits, True, ["coef_", "intercept_"]),
    ]
    print("\nTable 2. Federated estimator vs scikit-learn on the pooled rows (max |gap| / "
          "max |value| over the attributes; transform outputs for encoders). Logistic "
          "regression: the pooled reference is LogisticRegression(solver='newton-cholesky', "
          "tol=1e-14), the exact optimum; then the largest coefficient gap to "
          "LogisticRegression(tol=1e-10) (lbfgs), with lbfgs's own gap to the optimum, and the "
          "iterations of the pooled Newton-Cholesky.")
    print("| table | estimator | sites | weights | gap | rounds | uplink | coef gap to lbfgs "
          "(lbfgs to the optimum) "
          "| pooled Newton iterations |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for table, name, pooled, federated, X, y, weighted, attributes in cases:
        n = X.shape[0]
        w = weights(n) if weighted else None
        fit_kw = {} if w is None else {"sample_weight": w}
        lbfgs_gap = iterations = ""
        if pooled is None:  # logistic regression: the exact optimum, and lbfgs
            pooled = LogisticRegression(solver="newton-cholesky", tol=1e-14, max_iter=1000)
            lbfgs = LogisticRegression(tol=1e-10, max_iter=100000).fit(X, y, **fit_kw)
        else:
            lbfgs = None
        pooled.fit(X, y, **fit_kw) if y is not None else pooled.fit(X, **fit_kw)
        for n_sites in (1, 7, 100):
            sites = rng.integers(0, n_sites, n)
            fed = federated.fit(X, y, clients=sites, **fit_kw) if y is not None else (
                federated.fit(X, clients=sites, **fit_kw))
            if attributes:
                gap = max(_gap(getattr(pooled, a), getattr(fed, a)) for a in attributes)
            else:
                a, b = pooled.transform(X), fed.transform(X)
                gap = float(np.max(np.abs((a - b).toarray() if hasattr(a, "toarray") else a - b)))
            if lbfgs is not None:
                lbfgs_gap = (f"{np.max(np.abs(lbfgs.coef_ - fed.coef_)):.1e} "
                             f"({np.max(np.abs(lbfgs.coef_ - pooled.coef_)):.1e})")
                iterations = str(pooled.n_iter_[0])  # scikit-learn's newton-cholesky
            ledger = fed.communication_
            print(f"| {table} | {name} | {n_sites} | {'yes' if weighted else 'no'} | "
                  f"{gap:.1e} | {ledger.rounds} | {_kb(ledger.uplink_bytes)} | {lbfgs_gap} | "
                  f"{iterations} |")


# ------------------------------------------------------------------ table 3
def _log_loss(w, b, X, y, s, C):
    z = X @ w + b
    return (s @ (np.logaddexp(0.0, z) - y * z) + 0.5 * (w @ w) / C) / s.sum()


def fedavg_logistic(X, y, sites, C, learning_rate, local_epochs, rounds, target):
    """FedAvg for L2 logistic regression: local full-batch gradient steps, weighted averaging.

    The global objective is the mean log-loss plus ``||w||^2 / (2 C n)``
    (LogisticRegression's, divided by n); site k descends its share of it.
    Runs until the global objective is at most ``target`` or for ``rounds``
    rounds; returns the objective after every round.
    """
    parts = [(X[sites == k], y[sites == k]) for k in np.unique(sites)]
    n = X.shape[0]
    w, b = np.zeros(X.shape[1]), 0.0
    history = []
    for _ in range(rounds):
        new_w, new_b = np.zeros_like(w), 0.0
        for Xk, yk in parts:
            wk, bk = w.copy(), b
            for _ in range(local_epochs):
                residual = 1.0 / (1.0 + np.exp(-(Xk @ wk + bk))) - yk
                wk -= learning_rate * (Xk.T @ residual / Xk.shape[0] + wk / (C * n))
                bk -= learning_rate * residual.mean()
            new_w += Xk.shape[0] / n * wk
            new_b += Xk.shape[0] / n * bk
        w, b = new_w, new_b
        history.append(_log_loss(w, b, X, y, np.ones(n), C))
        if history[-1] <= target:
            break
    return np.array(history)


def newton_vs_fedavg(data):
    X, value = california(data)
    sites = X["ocean_proximity"].to_numpy()
    label = (value > np.median(value)).astype(float)
    Z = StandardScaler().fit_transform(SimpleImputer().fit_transform(X[NUMERIC]))
    exact = LogisticRegression(solver="newton-cholesky", tol=1e-14, max_iter=1000).fit(Z, label)
    best = _log_loss(exact.coef_[0], exact.intercept_[0], Z, label, np.ones(len(label)), 1.0)
    fed = FederatedLogisticRegression().fit(Z, label, clients=sites)
    newton = _log_loss(fed.coef_[0], fed.intercept_[0], Z, label, np.ones(len(label)), 1.0)
    n_sites = len(np.unique(sites))
    print("\nTable 3. California logistic regression (8 standardized numeric features, "
          f"{n_sites} sites by ocean_proximity): rounds and bytes to the pooled optimum's "
          f"log-loss {best:.6f}.")
    print("| method | setting | rounds to gap <= 1e-3 / 1e-6 / 1e-9 (relative) | "
          "uplink bytes to 1e-6 |")
    print("| --- | --- | --- | --- |")
    ledger = fed.communication_
    print(f"| Newton (FederatedLogisticRegression) | tol=1e-4 | all three in {ledger.rounds} "
          f"(final gap {(newton - best) / best:.0e}) | {ledger.uplink_bytes:,} (real messages)"
          " |")
    budget = 5000
    for learning_rate in (0.3, 1.0, 3.0):
        for local_epochs in (1, 5):
            history = fedavg_logistic(Z, label, sites, 1.0, learning_rate, local_epochs,
                                      budget, best * (1 + 1e-9))
            rounds = []
            for gap in (1e-3, 1e-6, 1e-9):
                hit = np.flatnonzero(history <= best * (1 + gap))
                rounds.append(str(hit[0] + 1) if hit.size else f">{budget}")
            if rounds[1].isdigit():
                cost = fedavg_bytes(Z.shape[1] + 1, int(rounds[1]), n_sites)["uplink_bytes"]
                cost = f"{cost:,} (raw float64 values)"
            else:
                cost = f"not reached (gap {(history[-1] - best) / best:.0e} after {budget})"
            print(f"| FedAvg | lr={learning_rate}, local epochs={local_epochs} | "
                  f"{' / '.join(rounds)} | {cost} |", flush=True)


# ------------------------------------------------------------------ table 4
def fusion(fitted):
    pipe = fitted["ridge (alpha=1)"]
    scaler = pipe.steps[1][1]
    total = pipe.communication_
    print("\nTable 4. Fusing StandardScaler into the ridge round (the scaler follows from "
          "the ridge statistics' means and Gram diagonal):")
    print(f"  the scaler's own round: {_kb(scaler.communication_.uplink_bytes)} up, "
          f"{_kb(scaler.communication_.downlink_bytes)} down, of "
          f"{_kb(total.uplink_bytes)} / {_kb(total.downlink_bytes)} for the pipeline; "
          f"fusion would save 1 of {total.rounds} rounds and "
          f"{100 * scaler.communication_.uplink_bytes / total.uplink_bytes:.0f}% of the "
          "uplink.")


def _table(docs, name, function, *args):
    """Run one table: print it, and with ``--docs`` also write it for the user guide."""
    with contextlib.redirect_stdout(io.StringIO()) as text:
        result = function(*args)
    print(text.getvalue(), end="", flush=True)
    if docs:
        Path(docs, f"_bench_pipelines_{name}.txt").write_text(text.getvalue().strip() + "\n")
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="folder with california_housing/, "
                        "insurance/ and mnist/")
    parser.add_argument("--skip", default="", help="comma-separated tables to skip (2,3)")
    parser.add_argument("--docs", help="also write the tables into this folder (docs/)")
    args = parser.parse_args()
    skip = set(args.skip.split(","))
    start = time.perf_counter()
    warnings.simplefilter("ignore", UserWarning)

    def california_and_fusion(data):
        fitted = california_pipelines(data)
        fusion(fitted)

    _table(args.docs, "california", california_and_fusion, args.data)
    if "2" not in skip:
        _table(args.docs, "equality", equality_table, args.data)
    if "3" not in skip:
        _table(args.docs, "fedavg", newton_vs_fedavg, args.data)
    print(f"\n({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
