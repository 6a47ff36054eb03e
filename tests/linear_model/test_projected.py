"""ProjectedFederatedRidge: shared projection, exactness when m >= d, communication."""

import numpy as np
import pytest
import scipy.sparse as sp
from numpy.testing import assert_allclose, assert_array_equal
from sklearn import config_context
from sklearn.model_selection import GridSearchCV, GroupKFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.random_projection import johnson_lindenstrauss_min_dim
from sklearn.utils._param_validation import InvalidParameterError
from sklearn.utils.estimator_checks import parametrize_with_checks

from sklearn_fed import FederatedRidge, ProjectedFederatedRidge
from sklearn_fed.linear_model._projected import shared_projection
from sklearn_fed.protocol._wire import SymmetricMatrix
from sklearn_fed.statistics import ClientStatistics


def _data(n=240, d=30, t=None, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) + 3.0
    coef = rng.normal(size=(d,) if t is None else (d, t))
    y = X @ coef + 0.1 * rng.normal(size=(n,) if t is None else (n, t))
    clients = rng.integers(0, 5, size=n)
    return X, y, clients


@parametrize_with_checks([ProjectedFederatedRidge(), ProjectedFederatedRidge(n_components=2)])
def test_sklearn_compatible_estimator(estimator, check):
    check(estimator)


@pytest.mark.parametrize("n_components", [30, 45, "auto"])
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_no_projection_when_m_at_least_d_equals_federated_ridge(n_components, fit_intercept):
    X, y, clients = _data()
    if n_components == "auto":
        assert johnson_lindenstrauss_min_dim(X.shape[0], eps=0.1) >= X.shape[1]
    model = ProjectedFederatedRidge(
        alpha=0.5, n_components=n_components, fit_intercept=fit_intercept, random_state=0
    ).fit(X, y, clients=clients)
    exact = FederatedRidge(alpha=0.5, fit_intercept=fit_intercept).fit(X, y, clients=clients)
    assert not model.projected_
    assert model.n_components_ == 30
    assert_array_equal(model.coef_, exact.coef_)
    assert_array_equal(model.intercept_, exact.intercept_)
    # "auto" needs the total row count first: one extra round of counts
    assert model.communication_.rounds == 1 + (n_components == "auto")


def test_same_seed_gives_same_matrix_on_every_client():
    a = shared_projection(1234, 50, 10)
    b = shared_projection(1234, 50, 10)
    assert_array_equal(a.components_, b.components_)
    assert not np.allclose(shared_projection(1235, 50, 10).components_, a.components_)
    X, y, clients = _data(d=50)
    model = ProjectedFederatedRidge(n_components=10, random_state=7).fit(X, y, clients=clients)
    rebuilt = shared_projection(model.projection_seed_, 50, 10)
    assert_array_equal(model.components_, rebuilt.components_)
    # Each client projecting its own rows alone gives what the simulation used.
    for label in np.unique(clients):
        rows = clients == label
        assert_allclose(rebuilt.transform(X[rows]), X[rows] @ model.components_.T)


def test_gaussian_entries_have_variance_one_over_m():
    R = shared_projection(0, 400, 100).components_
    assert abs(R.var() * 100 - 1) < 0.02
    assert abs(R.mean()) < 0.002


@pytest.mark.parametrize("projection", ["gaussian", "sparse"])
@pytest.mark.parametrize("t", [None, 2])
def test_coef_in_original_space_reproduces_projected_ridge(projection, t):
    X, y, clients = _data(d=40, t=t)
    model = ProjectedFederatedRidge(
        alpha=2.0, n_components=12, projection=projection, random_state=3
    ).fit(X, y, clients=clients)
    R = model.components_.T
    Z = np.asarray(X @ R)
    reference = FederatedRidge(alpha=2.0).fit(Z, y, clients=clients)
    assert model.coef_.shape == ((40,) if t is None else (2, 40))
    assert_allclose(model.predict(X), reference.predict(Z), rtol=1e-10, atol=1e-10)
    assert_allclose(model.coef_, np.asarray(R @ reference.coef_.T).T, rtol=1e-10, atol=1e-12)
    assert_allclose(model.intercept_, reference.intercept_, rtol=1e-10, atol=1e-10)


def test_sparse_input():
    X, y, clients = _data(d=40)
    X[X < 3.5] = 0
    dense = ProjectedFederatedRidge(n_components=8, random_state=0).fit(X, y, clients=clients)
    sparse = ProjectedFederatedRidge(n_components=8, random_state=0).fit(
        sp.csr_matrix(X), y, clients=clients
    )
    assert_allclose(sparse.coef_, dense.coef_, rtol=1e-10)


def test_communication_counts_projected_values():
    X, y, clients = _data(d=40)
    model = ProjectedFederatedRidge(n_components=10, random_state=0).fit(X, y, clients=clients)
    assert model.uplink_values_ == {"projected": 65, "full": 860, "ratio": 860 / 65}
    # Each client sends the statistics of 10 projected features, whatever d is.
    statistics = ClientStatistics.from_data(np.zeros((3, 10)), np.zeros(3)).to_payload()
    payload = 8 * sum(  # a symmetric matrix travels as its packed upper triangle
        len(a.matrix) * (len(a.matrix) + 1) // 2 if isinstance(a, SymmetricMatrix) else a.size
        for a in statistics[1].values()
    )
    assert payload == 8 * (10 + 1 + 55 + 10 + 1)
    for sent in model.communication_.uplink_bytes_per_client.values():
        assert payload < sent < payload + 500  # + header and metadata
    # Downlink: one task per client carrying the seed, m and the projection kind.
    assert all(0 < sent < 500 for sent in model.communication_.downlink_bytes_per_client.values())


def test_projection_loses_accuracy_for_isotropic_features():
    """For isotropic features a projection to m < d discards signal (a test of direction)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(3000, 60))
    w = rng.normal(size=60) / np.sqrt(60)
    y = X @ w + 0.1 * rng.normal(size=3000)
    mse = []
    for m in (10, 30, 60):
        model = ProjectedFederatedRidge(alpha=0.01, n_components=m, random_state=0)
        mse.append(np.mean((model.fit(X, y).predict(X) - y) ** 2))
    assert mse[0] > mse[1] > mse[2]
    # About a fraction (1 - m/d) of ||w||^2 is lost: 1 - 10/60 of ~1.
    assert 0.5 < mse[0] < 1.2


def test_partial_fit_keeps_the_projection():
    X, y, clients = _data(d=40)
    full = ProjectedFederatedRidge(n_components=9, random_state=5).fit(X, y, clients=clients)
    part = ProjectedFederatedRidge(n_components=9, random_state=5)
    part.partial_fit(X[:100], y[:100], clients=clients[:100])
    seed = part.projection_seed_
    part.partial_fit(X[100:], y[100:], clients=clients[100:])
    assert part.projection_seed_ == seed
    assert_allclose(part.coef_, full.coef_, rtol=1e-9)
    with pytest.raises(ValueError):
        part.partial_fit(X[:, :3], y)
    assert_allclose(part.coef_, full.coef_, rtol=1e-9)


@pytest.mark.parametrize(
    "params, name",
    [
        ({"n_components": 0}, "n_components"),
        ({"n_components": -3}, "n_components"),
        ({"n_components": "many"}, "n_components"),
        ({"projection": "orthogonal"}, "projection"),
        ({"eps": 1.5}, "eps"),
        ({"alpha": -1.0}, "alpha"),
    ],
)
def test_bad_parameters_raise_clear_errors(params, name):
    X, y, clients = _data(n=50)
    with pytest.raises(InvalidParameterError, match=name):
        ProjectedFederatedRidge(**params).fit(X, y, clients=clients)


def test_clients_through_pipeline_and_grid_search():
    X, y, clients = _data(n=200, d=40)
    pipe = make_pipeline(StandardScaler(), ProjectedFederatedRidge(random_state=0))
    pipe.fit(X, y, projectedfederatedridge__clients=clients)
    assert pipe[-1].n_clients_ == 5
    with config_context(enable_metadata_routing=True):
        ridge = ProjectedFederatedRidge(random_state=0).set_fit_request(clients="groups")
        search = GridSearchCV(
            ridge, {"n_components": [5, 40]}, cv=GroupKFold(n_splits=5)
        )
        search.fit(X, y, groups=clients)
    assert search.best_params_["n_components"] == 40
    assert search.best_estimator_.n_clients_ == 5
