"""Fuzz the server with validated-but-hostile statistics messages.

Each example takes an honest ClientStatistics, pushes some of its numbers to
extremes (1e308, 1e154, denormals, NaN, sign flips, impossible counts and
weights, indefinite Grams) and hands it, beside honest messages, to
FederatedRidge / FederatedRidgeCV ``fit_statistics``, in memory or as bytes.
The only acceptable outcomes: InvalidClientMessage naming the hostile client,
or a finite model. Usage: ``python tests/protocol/fuzz_statistics.py N_EXAMPLES``
(``make fuzz`` runs 200,000); prints the counts of both outcomes.
"""

import dataclasses
import sys
import warnings

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sklearn_fed import (
    ClientStatistics,
    FederatedRidge,
    FederatedRidgeCV,
    InvalidClientMessage,
)

EXTREMES = [
    1e308,
    -1e308,
    1e200,
    1e154,
    -1e154,
    1e76,
    1e75,
    1e-310,
    0.0,
    -1.0,
    3.0,
    np.nan,
    np.inf,
]
ARRAYS = ["x_mean", "y_mean", "gram", "moment", "target_ss"]


@st.composite
def hostile(draw):
    d, t = draw(st.integers(1, 4)), draw(st.integers(1, 2))
    n = draw(st.integers(2, 30))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    X = rng.normal(size=(n, d)) * draw(st.sampled_from([1e-3, 1.0, 1e6]))
    y = rng.normal(size=(n, t))
    centered = draw(st.booleans())
    stats = ClientStatistics.from_data(X, y if t > 1 else y[:, 0], centered=centered)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.integers(0, 4))
        if kind == 0:
            name = draw(st.sampled_from(ARRAYS))
            value = getattr(stats, name).copy()
            value.flat[draw(st.integers(0, value.size - 1))] = draw(
                st.sampled_from(EXTREMES)
            )
            stats = dataclasses.replace(stats, **{name: value})
        elif kind == 1:
            name = draw(st.sampled_from(ARRAYS))
            factor = draw(st.sampled_from([1e-300, 1e-10, -1.0, 1e10, 1e100, 1e200]))
            stats = dataclasses.replace(stats, **{name: getattr(stats, name) * factor})
        elif kind == 2:
            stats = dataclasses.replace(
                stats, n_samples=draw(st.sampled_from([1, 2, 2**63 - 1, 2**63]))
            )
        elif kind == 3:
            stats = dataclasses.replace(
                stats,
                weight_sum=draw(st.sampled_from([0.0, 1e-300, 1e15, 1e75, 1e76, -1.0])),
            )
        else:
            v = rng.normal(size=d)
            sign = draw(st.sampled_from([-1.0, 1.0]))
            size = draw(st.sampled_from([1e-8, 1.0, 1e6, 1e100]))
            stats = dataclasses.replace(
                stats, gram=stats.gram + sign * size * np.outer(v, v)
            )
    return stats, centered, t


outcomes = {"rejected": 0, "finite": 0}


@settings(
    max_examples=int(sys.argv[1]) if __name__ == "__main__" else 10,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(hostile(), st.sampled_from([0.0, 1e-8, 1.0]), st.booleans(), st.booleans())
def run(case, alpha, as_bytes, cv):
    stats, centered, t = case
    rng = np.random.default_rng(1)
    X = rng.normal(size=(40, stats.n_features if stats.x_mean.ndim == 1 else 1))
    honest = ClientStatistics.from_data(
        X, rng.normal(size=(40, t)) if t > 1 else X[:, 0], centered=centered
    )
    evil = stats
    if as_bytes:
        try:
            evil = stats.to_bytes()
        except Exception:
            return  # cannot even be serialized: nothing reaches a server
    messages = {"ok": honest, "evil": evil}
    if cv:
        messages["ok2"] = honest
        model = FederatedRidgeCV(alphas=[1e-3, 1.0, 1e3], fit_intercept=centered, cv="clients")
    else:
        model = FederatedRidge(alpha=alpha, fit_intercept=centered)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.fit_statistics(messages)
    except InvalidClientMessage as exc:
        assert exc.client == "evil", exc
        outcomes["rejected"] += 1
        return
    assert np.all(np.isfinite(model.coef_)) and np.all(np.isfinite(model.intercept_))
    outcomes["finite"] += 1


if __name__ == "__main__":
    run()
    print(outcomes["rejected"], outcomes["finite"])
