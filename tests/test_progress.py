"""``verbose`` as scikit-learn's: pipelines print their steps, iterative estimators their rounds."""

import re

import numpy as np
import pandas as pd
import pytest
from sklearn.preprocessing import PolynomialFeatures

from sklearn_fed import (
    FedAvgRegressor,
    FederatedLogisticRegression,
    FederatedSimpleImputer,
    FederatedStandardScaler,
)
from sklearn_fed.compose import FederatedColumnTransformer
from sklearn_fed.pipeline import make_federated_pipeline


def _rows(n=120):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, 3))
    return X, (X @ [1.0, -1.0, 0.5] + rng.logistic(size=n) > 0).astype(int), np.arange(n) % 3


def test_pipeline_prints_each_step_as_pipeline_does(capsys):
    X, y, clients = _rows()
    pipe = make_federated_pipeline(FederatedSimpleImputer(), PolynomialFeatures(2),
                                   FederatedLogisticRegression(), verbose=True)
    pipe.fit(X, y, clients=clients)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3, lines
    for i, (line, name) in enumerate(zip(lines, ["federatedsimpleimputer", "polynomialfeatures",
                                                 "federatedlogisticregression"]), start=1):
        assert re.fullmatch(rf"\[Pipeline\] \.* ?\(step {i} of 3\) Processing {name}, "
                            r"total=\s*[\d.]+m?s", line), line
    make_federated_pipeline(FederatedSimpleImputer(), FederatedLogisticRegression()).fit(
        X, y, clients=clients)
    assert capsys.readouterr().out == ""  # verbose=False: silent


@pytest.mark.parametrize("estimator", [FederatedLogisticRegression(verbose=1),
                                       FedAvgRegressor(n_rounds=3, verbose=1)],
                         ids=lambda e: type(e).__name__)
def test_iterative_estimators_print_one_line_per_round(estimator, capsys):
    X, y, clients = _rows()
    estimator.fit(X, y, clients=clients)
    lines = capsys.readouterr().out.splitlines()
    name = type(estimator).__name__
    assert len(lines) == estimator.communication_.rounds
    for r, line in enumerate(lines, start=1):
        assert re.fullmatch(rf"\[{name}\] round {r}: 3 site\(s\) answered, \d+ B up, \d+ B down, "
                            r"[\d.]+ s", line), line
    estimator.set_params(verbose=0).fit(X, y, clients=clients)
    assert capsys.readouterr().out == ""


def test_column_transformer_prints_each_transformer(capsys):
    X, _, clients = _rows()
    frame = pd.DataFrame(X, columns=["a", "b", "c"])
    FederatedColumnTransformer([("num", FederatedStandardScaler(), ["a", "b"]),
                                ("poly", PolynomialFeatures(2), ["c"])],
                               verbose=True).fit(frame, clients=clients)
    lines = capsys.readouterr().out.splitlines()
    assert [re.sub(r"\.+", ".", line.split(",")[0]) for line in lines] == [
        "[ColumnTransformer] . (1 of 2) Processing num",
        "[ColumnTransformer] . (2 of 2) Processing poly"]
