"""``load_model(save_model(est))`` for every class sklearn-fed exports (issue 29).

The factories below are checked against ``sklearn_fed.__all__``: a new export
without one fails the test, so every exported class is saved fitted and
loaded back, attribute for attribute.
"""

import numpy as np
import pytest
from sklearn.base import BaseEstimator

pytest.importorskip("skops", reason="needs the flower extra: pip install sklearn-fed[flower]")

import sklearn_fed
from sklearn_fed.compose import FederatedColumnTransformer
from sklearn_fed.flower import load_model, save_model
from sklearn_fed.pipeline import make_federated_pipeline
from sklearn_fed.statistics import ClientStatistics, ColumnMoments

rng = np.random.default_rng(0)
X = rng.normal(size=(40, 3))
y = X @ [1.0, -2.0, 0.5] + 0.1 * rng.normal(size=40)
labels = (y > 0).astype(int)
clients = np.repeat(["a", "b"], 20)
X_missing = np.where(np.arange(40)[:, None] % 7 == np.arange(3), np.nan, X)
X_text = np.array([["u", "v"][i % 2] for i in range(40)], dtype=object)[:, None]


def _mpdd():
    pytest.importorskip("torch")
    return sklearn_fed.FedMPDDClassifier(
        max_epochs=2, batch_size=8, module__hidden_units=(8,), n_directions=8, random_state=0,
    ).fit(X.astype(np.float32), labels, clients=clients)


S = sklearn_fed
FITTED = {
    "ClientStatistics": lambda: ClientStatistics.from_data(X, y),
    "ColumnMoments": lambda: ColumnMoments.from_data(X_missing),
    "FedMPDDClassifier": _mpdd,
    # a large budget: at epsilon=1 the noisy weights of 2 x 20 rows may sum to <= 0
    "DPFedAvgRegressor": lambda: S.DPFedAvgRegressor(epsilon=1e4, random_state=0).fit(
        X, y, clients=clients),
    "FedAvgRegressor": lambda: S.FedAvgRegressor(random_state=0).fit(X, y, clients=clients),
    "FedNovaRegressor": lambda: S.FedNovaRegressor(random_state=0).fit(X, y, clients=clients),
    "FedProxRegressor": lambda: S.FedProxRegressor(random_state=0).fit(X, y, clients=clients),
    "FederatedEmpiricalCovariance": lambda: S.FederatedEmpiricalCovariance().fit(
        X, clients=clients),
    "FederatedLogisticRegression": lambda: S.FederatedLogisticRegression().fit(
        X, labels, clients=clients),
    "FederatedMinMaxScaler": lambda: S.FederatedMinMaxScaler().fit(X, clients=clients),
    "FederatedOneHotEncoder": lambda: S.FederatedOneHotEncoder().fit(X_text, clients=clients),
    "FederatedPCA": lambda: S.FederatedPCA(n_components=2).fit(X, clients=clients),
    "FederatedRidge": lambda: S.FederatedRidge().fit(X, y, clients=clients),
    "FederatedRidgeCV": lambda: S.FederatedRidgeCV().fit(X, y, clients=clients),
    "FederatedRidgeClassifier": lambda: S.FederatedRidgeClassifier().fit(
        X, labels, clients=clients),
    "FederatedRidgeClassifierCV": lambda: S.FederatedRidgeClassifierCV().fit(
        X, labels, clients=clients),
    # the case: its fitted dtype (numpy.dtype) was refused on load
    "FederatedSimpleImputer": lambda: S.FederatedSimpleImputer().fit(X_missing, clients=clients),
    "FederatedStandardScaler": lambda: S.FederatedStandardScaler().fit(X, clients=clients),
    "FESCRidge": lambda: S.FESCRidge().fit(X, y, clients=clients),
    "IncrementalFederatedRidge": lambda: S.IncrementalFederatedRidge().fit(
        X, y, clients=clients),
    "PrivateFederatedRidge": lambda: S.PrivateFederatedRidge(random_state=0).fit(
        np.clip(X / 3, -1, 1), np.clip(y / 5, -1, 1), clients=clients),
    "ProjectedFederatedRidge": lambda: S.ProjectedFederatedRidge().fit(X, y, clients=clients),
    "FederatedLogisticRegressionCV": lambda: S.FederatedLogisticRegressionCV(Cs=3, cv=2).fit(
        X, labels, clients=clients),
    "FederatedGridSearchCV": lambda: S.FederatedGridSearchCV(
        S.FederatedRidge(), {"alpha": [0.1, 10.0]}, cv=2).fit(X, y, clients=clients),
    "FederatedRandomizedSearchCV": lambda: S.FederatedRandomizedSearchCV(
        S.FederatedRidge(), {"alpha": [0.1, 1.0, 10.0]}, n_iter=2, cv=2, random_state=0,
    ).fit(X, y, clients=clients),
    "FederatedEvaluator": lambda: S.FederatedEvaluator(
        S.FederatedRidge().fit(X, y, clients=clients), metrics=["r2", "neg_mean_squared_error"],
    ).fit(X, y, clients=clients),
}
# composites exported by their own modules
COMPOSITES = {
    "FederatedPipeline": lambda: make_federated_pipeline(
        S.FederatedSimpleImputer(), S.FederatedStandardScaler(), S.FederatedRidge(),
    ).fit(X_missing, y, clients=clients),
    "FederatedColumnTransformer": lambda: FederatedColumnTransformer(
        [("scale", S.FederatedStandardScaler(), [0]), ("impute", S.FederatedSimpleImputer(), [1])],
        remainder="passthrough").fit(X_missing, clients=clients),
}
# the private transformers, exported by their own subpackages
def _private(module, name, **params):
    import importlib

    return lambda: getattr(importlib.import_module(f"sklearn_fed.{module}"), name)(
        epsilon=1e3, random_state=0, **params)


PRIVATE = {
    "PrivateFederatedStandardScaler": lambda: _private(
        "preprocessing", "PrivateFederatedStandardScaler", bounds=(-5.0, 5.0))().fit(
        X, clients=clients),
    "PrivateFederatedOneHotEncoder": lambda: _private(
        "preprocessing", "PrivateFederatedOneHotEncoder")().fit(X_text, clients=clients),
    "PrivateFederatedSimpleImputer": lambda: _private(
        "impute", "PrivateFederatedSimpleImputer", bounds=(-5.0, 5.0))().fit(
        X_missing, clients=clients),
    "PrivateFederatedPCA": lambda: _private(
        "decomposition", "PrivateFederatedPCA", n_components=2, feature_bound=5.0)().fit(
        X, clients=clients),
}
# exported names that are no models: an exception, a warning, a function, a string
NOT_MODELS = {"InvalidClientMessage", "MissingClientsWarning", "merge_statistics", "__version__"}


def test_every_export_has_a_fitted_example():
    assert set(FITTED) | NOT_MODELS == set(sklearn_fed.__all__)
    for name in NOT_MODELS:
        value = getattr(sklearn_fed, name)
        assert not (isinstance(value, type) and issubclass(value, BaseEstimator)), name


def _assert_same(loaded, original, where):
    assert type(loaded) is type(original), where
    if isinstance(original, np.ndarray):
        assert loaded.dtype == original.dtype and loaded.shape == original.shape, where
        np.testing.assert_array_equal(loaded, original, err_msg=where)  # the saved bytes
    elif isinstance(original, dict):
        assert list(loaded) == list(original), where
        for key in original:
            _assert_same(loaded[key], original[key], f"{where}[{key!r}]")
    elif isinstance(original, (list, tuple)):
        assert len(loaded) == len(original), where
        for i, (a, b) in enumerate(zip(loaded, original)):
            _assert_same(a, b, f"{where}[{i}]")
    elif hasattr(original, "__dict__") and not isinstance(original, type):
        state = getattr(original, "__getstate__", lambda: vars(original))()
        _assert_same(getattr(loaded, "__getstate__", lambda: vars(loaded))(), state, where)
    elif isinstance(original, float) and np.isnan(original):
        assert np.isnan(loaded), where
    else:
        assert loaded == original, where


def _outputs(model):
    """What a fitted model computes on new rows (same arrays in, same code path)."""
    rows = X_text[:5] if isinstance(model, S.FederatedOneHotEncoder) else X_missing[:5] if (
        isinstance(model, (S.FederatedSimpleImputer, FederatedColumnTransformer))
        or getattr(model, "steps", None)) else X[:5]
    if hasattr(model, "module_"):
        rows = rows.astype(np.float32)
    out = {}
    for method in ("predict", "predict_proba", "decision_function", "transform", "score_samples",
                   "mahalanobis"):
        if hasattr(model, method):
            value = getattr(model, method)(rows)
            out[method] = value.toarray() if hasattr(value, "toarray") else value
    return out


@pytest.mark.parametrize("name", sorted(FITTED) + sorted(COMPOSITES) + sorted(PRIVATE))
def test_saved_model_loads_back_the_same(name, tmp_path):
    model = {**FITTED, **COMPOSITES, **PRIVATE}[name]()
    save_model(model, tmp_path / "model.skops")
    loaded = load_model(tmp_path / "model.skops")
    if hasattr(model, "module_"):  # a torch network is rebuilt from its arrays
        assert type(loaded) is type(model)
        for key, tensor in model.module_.state_dict().items():
            np.testing.assert_array_equal(loaded.module_.state_dict()[key].numpy(),
                                          tensor.numpy())
    elif isinstance(model, BaseEstimator):
        assert loaded.get_params(deep=False).keys() == model.get_params(deep=False).keys()
        fitted = {k: v for k, v in vars(model).items() if k.endswith("_")}
        _assert_same({k: v for k, v in vars(loaded).items() if k.endswith("_")}, fitted, name)
    else:
        _assert_same(loaded, model, name)
    if isinstance(model, BaseEstimator):
        # the same arrays through the same code path in the same process: equal bits
        expected, got = _outputs(model), _outputs(loaded)
        # an evaluator computes nothing on new rows: its scores_ are compared above
        assert expected.keys() == got.keys() and (expected or name == "FederatedEvaluator"), name
        for method in expected:
            np.testing.assert_array_equal(got[method], expected[method], err_msg=method)


def _data_free_step(name):
    from sklearn_fed._composite import DATA_FREE

    params = {
        "RangeScaler": {"ranges": [(-3.0, 3.0)] * 3},
        "GaussianRandomProjection": {"n_components": 2, "random_state": 0},
        "SparseRandomProjection": {"n_components": 2, "random_state": 0},
        "RBFSampler": {"n_components": 5, "random_state": 0},
        "SplineTransformer": {"knots": np.linspace(-3, 3, 5)[:, None].repeat(3, axis=1)},
    }
    return DATA_FREE[name](**params.get(name, {}))


def _data_free_names():
    from sklearn_fed._composite import DATA_FREE

    return sorted(DATA_FREE)


@pytest.mark.parametrize("name", _data_free_names())
def test_pipeline_with_a_data_free_step_loads_back_the_same(name, tmp_path):
    """Every data-free step a federated pipeline may hold is on the load allow-list."""
    model = make_federated_pipeline(_data_free_step(name), S.FederatedRidge()).fit(
        X, y, clients=clients)
    save_model(model, tmp_path / "model.skops")
    loaded = load_model(tmp_path / "model.skops")
    assert [type(step) for _, step in loaded.steps] == [type(step) for _, step in model.steps]
    np.testing.assert_array_equal(loaded.predict(X[:5]), model.predict(X[:5]))
