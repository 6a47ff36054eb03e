"""A search and an evaluator are named in a Flower run config: nested estimators as JSON."""

import json

import numpy as np
import pytest

from sklearn_fed import (
    FederatedEvaluator,
    FederatedGridSearchCV,
    FederatedLogisticRegression,
    FederatedRidge,
)
from sklearn_fed.flower._config import (
    ServerSettings,
    estimator_from_config,
    estimator_to_config,
)


def test_search_round_trips_through_a_run_config():
    search = FederatedGridSearchCV(FederatedLogisticRegression(max_iter=77),
                                   {"C": [0.1, 1.0]}, cv="sites", scoring="roc_auc")
    config = estimator_to_config(search)
    assert json.loads(config["estimator-params"])["estimator"] == {
        "estimator": "FederatedLogisticRegression", "params": {"max_iter": 77}}
    rebuilt = estimator_from_config(config)
    assert isinstance(rebuilt, FederatedGridSearchCV)
    assert rebuilt.get_params(deep=False).keys() == search.get_params(deep=False).keys()
    assert repr(rebuilt) == repr(search)


def test_evaluator_names_the_model_class_and_parameters_never_its_state():
    model = FederatedRidge(alpha=2.0).fit(np.eye(3), [1.0, 2.0, 3.0])
    config = estimator_to_config(FederatedEvaluator(model, metrics=["r2", "mean_squared_error"]))
    assert "coef_" not in config["estimator-params"]
    rebuilt = estimator_from_config(config)
    assert rebuilt.estimator.alpha == 2.0 and not hasattr(rebuilt.estimator, "coef_")
    assert ServerSettings.from_run_config({"evaluate-model": "m.skops"}).evaluate_model == (
        "m.skops")


def test_a_nested_estimator_must_be_one_of_ours():
    with pytest.raises(ValueError, match="not one of sklearn-fed's protocol estimators"):
        estimator_from_config({"estimator": "FederatedEvaluator", "estimator-params": json.dumps(
            {"estimator": {"estimator": "LogisticRegression", "params": {}}})})
