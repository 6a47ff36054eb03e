"""An evaluation and a search each run as one run of the Flower apps, as they do in process.

The apps run in this process over a fake Grid (tests/flower/test_flower.py's
FakeGrid): the ServerApp's ``run_server`` and every node's ClientApp, with the
run config and node configs a deployment would have.
"""

import numpy as np
import pytest

pytest.importorskip("flwr")
pytest.importorskip("skops")

from test_flower import (
    KEYS,
    FakeGrid,
    _node_configs,
    _run_config,
    _site_rows,
    task_identity,  # noqa: F401  (the fixture)
)

from sklearn_fed import (
    FederatedEvaluator,
    FederatedGridSearchCV,
    FederatedRidgeClassifier,
)
from sklearn_fed.flower import run_server, save_model


def _pooled(sites):
    X = np.vstack([sites[s]["X"] for s in sites])
    y = np.concatenate([sites[s]["y"] for s in sites])
    clients = np.concatenate([[s] * len(sites[s]["y"]) for s in sites])
    return X, y, clients


def test_evaluation_of_a_saved_model_through_the_apps(tmp_path, task_identity):  # noqa: F811
    sites = _site_rows()
    X, y, clients = _pooled(sites)
    model = FederatedRidgeClassifier(alpha=3.0).fit(X, y, clients=clients)
    save_model(model, tmp_path / "deployed.skops")
    evaluator = FederatedEvaluator(model, metrics=["accuracy", "f1_macro", "confusion_matrix"])
    grid = FakeGrid(_node_configs(tmp_path, sites, KEYS), _run_config(
        evaluator, tmp_path, KEYS, **{"evaluate-model": str(tmp_path / "deployed.skops")}))
    flower = run_server(grid, grid.run_config)
    local = FederatedEvaluator(model, metrics=["accuracy", "f1_macro", "confusion_matrix"]).fit(
        X, y, clients=clients)
    assert flower.scores_.keys() == local.scores_.keys()
    for name, value in local.scores_.items():  # counts: the same bits
        np.testing.assert_array_equal(flower.scores_[name], value)
    assert flower.site_scores_.keys() == local.site_scores_.keys()
    # a run config that names another model than the file is refused before any site works
    other = FederatedEvaluator(FederatedRidgeClassifier(alpha=5.0), metrics=["accuracy"])
    grid = FakeGrid(_node_configs(tmp_path, sites, KEYS), _run_config(
        other, tmp_path, KEYS, **{"evaluate-model": str(tmp_path / "deployed.skops")}))
    with pytest.raises(ValueError, match="evaluate-model"):
        run_server(grid, grid.run_config)


def test_grid_search_is_one_run_of_the_apps(tmp_path, task_identity):  # noqa: F811
    sites = _site_rows()
    X, y, clients = _pooled(sites)
    search = FederatedGridSearchCV(FederatedRidgeClassifier(), {"alpha": [0.1, 10.0, 1e3]},
                                   cv="sites", scoring="f1_macro")
    grid = FakeGrid(_node_configs(tmp_path, sites, KEYS), _run_config(search, tmp_path, KEYS))
    flower = run_server(grid, grid.run_config)
    local = FederatedGridSearchCV(**search.get_params(deep=False)).fit(X, y, clients=clients)
    np.testing.assert_array_equal(flower.cv_results_["mean_test_score"],
                                  local.cv_results_["mean_test_score"])
    assert flower.best_params_ == local.best_params_
    np.testing.assert_array_equal(flower.best_estimator_.coef_, local.best_estimator_.coef_)
