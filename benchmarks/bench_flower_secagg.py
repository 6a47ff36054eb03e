"""What Flower's SecAgg+ would do to ridge statistics, measured.

Flower 1.41's secure aggregation (``SecAggPlusWorkflow`` with
``secaggplus_mod``) returns the weighted mean of float vectors, weight =
``num_examples``. Each client multiplies its vector by its quantized weight
``round(n_k / max_weight * 2^22) / 2^22``, clips every value to ``[-8, 8]``,
quantizes it stochastically to ``2^22`` levels and adds masks modulo
``2^32``; the server sums, unmasks, dequantizes and divides by the total
weight. The masks cancel exactly (that is the protocol's point), so this
script runs Flower's own quantize / dequantize / factor functions on each
site's vector, sums modulo ``2^32``, and decodes as the server does.

What a site would send through it: its **per-site normalized statistics**
``[mean(x), mean(y), mean(x x^T) (upper triangle), mean(x y)]`` (raw moments
divided by its row count, so that the weighted mean is the pooled moments;
centered statistics cannot be combined by a weighted mean). The server then
rebuilds the centered Gram and moment and solves ridge. The coefficient
error is measured against ``sklearn.linear_model.Ridge`` on all rows, for
raw features and for features standardized with the pooled mean and
standard deviation (the best case: it needs one extra round to learn them),
next to the same statistics summed by sklearn-fed's
:class:`~sklearn_fed.privacy.SecureAggregator` (X25519 pairwise masks over
64-bit fixed point, with as many fractional bits as the largest sum leaves
room for) and to the exact sums with the same formula.

Usage::

    python benchmarks/bench_flower_secagg.py                      # diabetes (bundled)
    python benchmarks/bench_flower_secagg.py --housing PATH/housing.csv
"""

import argparse

import numpy as np
from sklearn.datasets import load_diabetes
from sklearn.linear_model import Ridge

try:
    from flwr.common.secure_aggregation.ndarrays_arithmetic import (
        factor_combine,
        factor_extract,
        parameters_mod,
        parameters_multiply,
    )
    from flwr.common.secure_aggregation.quantization import dequantize, quantize
except ImportError as exc:  # pragma: no cover - the flower extra is missing
    raise ImportError("this benchmark needs Flower: pip install sklearn-fed[flower]") from exc

from sklearn_fed.privacy import SecureAggregator

CLIPPING_RANGE = 8.0  # SecAggPlusWorkflow defaults (Flower 1.41)
QUANTIZATION_RANGE = 2**22
MODULUS_RANGE = 2**32


def secaggplus_weighted_mean(vectors, n_rows, max_weight):
    """The vector Flower's SecAgg+ server obtains: clipped, quantized, weighted mean."""
    summed = None
    for vector, n in zip(vectors, n_rows):
        # client side (secaggplus_mod, stage "fit")
        q_ratio = round(n / max_weight * QUANTIZATION_RANGE)
        scaled = parameters_multiply([vector], q_ratio / QUANTIZATION_RANGE)
        quantized = quantize(scaled, CLIPPING_RANGE, QUANTIZATION_RANGE)
        # the masks Flower adds are int64 and cancel modulo 2^32 in the sum
        message = [a.astype(np.int64) for a in factor_combine(q_ratio, quantized)]
        summed = message if summed is None else [a + b for a, b in zip(summed, message)]
    # server side (SecAggPlusWorkflow, stage "unmask")
    summed = parameters_mod(summed, MODULUS_RANGE)
    q_total, values = factor_extract(summed)
    mean = dequantize(values, CLIPPING_RANGE, QUANTIZATION_RANGE)[0]
    mean += -(len(vectors) - 1) * CLIPPING_RANGE
    mean *= QUANTIZATION_RANGE / q_total
    return mean


def site_vector(X, y):
    """Raw moments divided by the row count: what a site would send to a weighted mean."""
    n, d = X.shape
    upper = np.triu_indices(d)
    return np.concatenate([X.mean(0), [y.mean()], ((X.T @ X) / n)[upper], X.T @ y / n])


def ridge_from_means(vector, n_total, d, alpha):
    """Ridge coefficients from pooled (weighted-mean) moments."""
    x_mean, y_mean = vector[:d], vector[d]
    k = d * (d + 1) // 2
    second = np.zeros((d, d))
    second[np.triu_indices(d)] = vector[d + 1:d + 1 + k]
    second = second + np.triu(second, 1).T
    cross = vector[d + 1 + k:]
    gram = n_total * (second - np.outer(x_mean, x_mean))
    moment = n_total * (cross - x_mean * y_mean)
    return np.linalg.solve(gram + alpha * np.eye(d), moment)


def relative_error(coef, reference):
    return float(np.linalg.norm(coef - reference) / np.linalg.norm(reference))


def measure(name, X, y, n_sites, alpha, repeats):
    rows = np.array_split(np.arange(X.shape[0]), n_sites)
    d, n_total = X.shape[1], X.shape[0]
    reference = Ridge(alpha=alpha).fit(X, y).coef_
    vectors = [site_vector(X[r], y[r]) for r in rows]
    n_rows = [len(r) for r in rows]
    weights = np.array(n_rows) / n_total
    clipped = {
        max_weight: float(np.mean(np.concatenate(
            [np.abs(v * (n / max_weight)) > CLIPPING_RANGE for v, n in zip(vectors, n_rows)])))
        for max_weight in (1000.0, float(max(n_rows)))
    }
    results = {}
    for max_weight in (1000.0, float(max(n_rows))):
        errors = []
        for seed in range(repeats):
            np.random.seed(seed)  # Flower's stochastic rounding draws from numpy's global RNG
            mean = secaggplus_weighted_mean(vectors, n_rows, max_weight)
            errors.append(relative_error(ridge_from_means(mean, n_total, d, alpha), reference))
        results[max_weight] = (float(np.median(errors)), float(np.max(errors)))
    # sklearn-fed's SecureAggregator sums each site's raw sums (n_k times its vector), with
    # as many fractional bits as the largest sum allows; the server divides by N
    sums = [v * n for v, n in zip(vectors, n_rows)]
    peak = max(float(np.max(np.abs(v))) for v in sums)
    bits = int(np.clip(np.floor(np.log2(2.0**62 / n_sites / peak)), 0, 52))
    aggregator = SecureAggregator(n_clients=n_sites, seed=0, fractional_bits=bits)
    masked = [aggregator.mask(k, v) for k, v in enumerate(sums)]
    ours = relative_error(
        ridge_from_means(aggregator.aggregate(masked) / n_total, n_total, d, alpha), reference)
    exact = relative_error(
        ridge_from_means(np.sum([v * w for v, w in zip(vectors, weights)], axis=0),
                         n_total, d, alpha), reference)
    cells = [f"{med:.1e} ({top:.1e}), {clipped[w]:.1%} clipped"
             for w, (med, top) in results.items()]
    print(f"| {name} | {n_sites} | {' | '.join(cells)} | {ours:.1e} ({bits} bits) | "
          f"{exact:.1e} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--housing", help="path of housing.csv (California housing)")
    parser.add_argument("--sites", type=int, default=10)
    parser.add_argument("--alpha", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    datasets = [("diabetes (as shipped: centered, unit norm)", *load_diabetes(return_X_y=True))]
    if args.housing:
        from sklearn_fed.datasets import load_california_housing_csv

        X, y = load_california_housing_csv(args.housing)
        datasets.append(("California housing, raw units", X, y))
    standardized = []
    for name, X, y in datasets:
        scale = X.std(0)
        scale[scale == 0] = 1.0
        standardized.append((name.split(",")[0].split(" (")[0] + ", standardized",
                             (X - X.mean(0)) / scale, (y - y.mean()) / y.std()))
    print(f"Ridge(alpha={args.alpha}) coefficients from per-site normalized statistics; "
          f"relative error vs Ridge on all rows, median (max) of {args.repeats} seeds\n")
    print("| data | sites | SecAgg+, max_weight=1000 (default) | SecAgg+, max_weight=max n_k | "
          "SecureAggregator, 64-bit fixed point | exact sums, same formula |")
    print("|---|---|---|---|---|---|")
    for name, X, y in datasets + standardized:
        measure(name, X, y, args.sites, args.alpha, args.repeats)


if __name__ == "__main__":
    main()
