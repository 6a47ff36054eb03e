"""Whole pipelines as protocols: scikit-learn's pipeline on pooled rows; rows never sent."""

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import sklearn
from sklearn.compose import ColumnTransformer
from sklearn.decomposition import PCA
from sklearn.impute import SimpleImputer
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler

from sklearn_fed import (
    FederatedLogisticRegression,
    FederatedOneHotEncoder,
    FederatedPCA,
    FederatedRidge,
    FederatedSimpleImputer,
    FederatedStandardScaler,
)
from sklearn_fed.compose import FederatedColumnTransformer
from sklearn_fed.pipeline import FederatedPipeline, make_federated_pipeline
from sklearn_fed.protocol import (
    BytesTransport,
    SitePolicy,
    decode,
    run_rounds,
    simulate_through_bytes,
)
from sklearn_fed.utils.estimator_checks import run_protocol_by_hand

NUMERIC = ["longitude", "latitude", "age", "rooms", "bedrooms", "income"]
REGIONS = ["<1H OCEAN", "INLAND", "ISLAND", "NEAR BAY", "NEAR OCEAN"]


def housing_like(n=700, seed=0):
    """A small table shaped like California housing: missing bedrooms, a region per row."""
    rng = np.random.default_rng(seed)
    region = rng.choice(REGIONS, n, p=[0.44, 0.32, 0.01, 0.11, 0.12])
    frame = pd.DataFrame({
        "longitude": rng.normal(-119.5, 2.0, n), "latitude": rng.normal(35.6, 2.1, n),
        "age": rng.uniform(1, 52, n), "rooms": rng.lognormal(7.8, 0.7, n),
        "bedrooms": rng.lognormal(6.1, 0.7, n), "income": rng.lognormal(1.3, 0.45, n),
        "ocean_proximity": region,
    })
    frame.loc[rng.random(n) < 0.05, "bedrooms"] = np.nan
    value = (4e4 * frame["income"] - 3e3 * frame["latitude"] + 2e2 * frame["age"]
             + np.select([region == "INLAND", region == "ISLAND"], [-6e4, 1e5], 0.0)
             + rng.normal(0, 3e4, n) + 2e5)
    return frame, value.to_numpy()


def sklearn_pipeline(final, sparse=False):
    return make_pipeline(
        ColumnTransformer([("num", SimpleImputer(), NUMERIC),
                           ("cat", OneHotEncoder(sparse_output=sparse), ["ocean_proximity"])]),
        StandardScaler(), final)


def federated_pipeline(final, sparse=False):
    return make_federated_pipeline(
        FederatedColumnTransformer([
            ("num", FederatedSimpleImputer(), NUMERIC),
            ("cat", FederatedOneHotEncoder(sparse_output=sparse), ["ocean_proximity"])]),
        FederatedStandardScaler(), final)


def _sites(X, how):
    if how == "region":
        return X["ocean_proximity"].to_numpy()
    return np.random.default_rng(1).integers(0, how, len(X))


@pytest.mark.parametrize("how", ["region", 1, 7, 100])
def test_ridge_pipeline_equals_pooled_sklearn_pipeline(how):
    X, y = housing_like()
    pooled = sklearn_pipeline(Ridge(alpha=1.0)).fit(X, y)
    fed = federated_pipeline(FederatedRidge(alpha=1.0)).fit(X, y, clients=_sites(X, how))
    np.testing.assert_allclose(fed.predict(X), pooled.predict(X), rtol=1e-11)
    assert fed.communication_.rounds == 3  # imputer and encoder together, scaler, ridge
    np.testing.assert_array_equal(fed[:-1].get_feature_names_out(),
                                  pooled[:-1].get_feature_names_out())


@pytest.mark.parametrize("how", ["region", 7])
def test_logistic_pipeline_equals_pooled_sklearn_pipeline(how):
    X, y = housing_like()
    label = y > np.median(y)
    pooled = sklearn_pipeline(LogisticRegression(solver="newton-cholesky", tol=1e-14)).fit(
        X, label)
    fed = federated_pipeline(FederatedLogisticRegression()).fit(X, label, clients=_sites(X, how))
    np.testing.assert_allclose(fed.predict_proba(X), pooled.predict_proba(X), atol=1e-8)
    np.testing.assert_array_equal(fed.predict(X), pooled.predict(X))
    assert fed.communication_.rounds == 2 + fed[-1].n_iter_[0]


def test_simulation_bytes_and_roles_give_the_same_predictions_bit_for_bit():
    X, y = housing_like()
    sites = _sites(X, "region")
    in_process = federated_pipeline(FederatedRidge()).fit(X, y, clients=sites)
    with simulate_through_bytes():
        through_bytes = federated_pipeline(FederatedRidge()).fit(X, y, clients=sites)
    server, sent = run_protocol_by_hand(federated_pipeline(FederatedRidge()), X, y, sites)
    by_roles = server.estimator
    expected = in_process.predict(X).tobytes()
    assert through_bytes.predict(X).tobytes() == expected
    assert by_roles.predict(X).tobytes() == expected
    # the same bytes, site by site, in process, serialized and between the roles
    for fitted in (in_process, through_bytes, by_roles):
        assert dict(fitted.communication_.uplink_bytes_per_client) == sent["replies"]
        assert dict(fitted.communication_.downlink_bytes_per_client) == sent["tasks"]


def test_sites_reorder_their_columns_by_name():
    X, y = housing_like(300)
    sites = _sites(X, "region")
    pipe = federated_pipeline(FederatedRidge())
    server = pipe.make_server(feature_names=list(X.columns))
    # permissive sites, as fit's simulated ones (the defaults hold back the ISLAND site's 2 rows)
    clients = {site: pipe.make_client(site=site, policy=SitePolicy.permissive())
               for site in np.unique(sites)}
    tasks = server.next_tasks(list(clients))
    while tasks:
        replies = {}
        for site, task in tasks.items():
            rows = X[sites == site]
            replies[site] = clients[site].respond(task, rows[rows.columns[::-1]], y[sites == site])
        server.receive(replies)
        tasks = server.next_tasks(list(clients))
    reference = federated_pipeline(FederatedRidge()).fit(X, y, clients=sites)
    np.testing.assert_allclose(server.estimator.predict(X), reference.predict(X), rtol=1e-12)


def test_clients_reach_every_step_with_routing_off_and_on():
    X, y = housing_like(400)
    sites = _sites(X, 7)
    expected = sklearn_pipeline(Ridge()).fit(X, y).predict(X)

    def plain():  # scikit-learn's own Pipeline of federated steps
        return Pipeline([
            ("pre", FederatedColumnTransformer([
                ("num", FederatedSimpleImputer(), NUMERIC),
                ("cat", FederatedOneHotEncoder(sparse_output=False), ["ocean_proximity"])])),
            ("scale", FederatedStandardScaler()), ("ridge", FederatedRidge())])

    off = plain().fit(X, y, pre__clients=sites, scale__clients=sites, ridge__clients=sites)
    with sklearn.config_context(enable_metadata_routing=True):
        routed = plain()
        for _, step in routed.steps:
            step.set_fit_request(clients=True)
        routed.fit(X, y, clients=sites)
        own = federated_pipeline(FederatedRidge()).fit(X, y, clients=sites)
    for pipe in (off, routed, own):
        np.testing.assert_allclose(pipe.predict(X), expected, rtol=1e-11)
        assert [step.n_clients_ for _, step in pipe.steps] == [7, 7, 7]
    own_off = federated_pipeline(FederatedRidge()).fit(
        X, y, federatedcolumntransformer__clients=sites)  # a step's clients reach the pipeline
    assert own_off.n_clients_ == 7


def test_sample_weights_go_to_the_steps_that_ask():
    X, y = housing_like(400)
    sites, w = _sites(X, 7), np.random.default_rng(3).random(400) + 0.2
    pooled = sklearn_pipeline(Ridge()).fit(X, y, standardscaler__sample_weight=w,
                                           ridge__sample_weight=w)
    fed = federated_pipeline(FederatedRidge()).fit(
        X, y, clients=sites, federatedstandardscaler__sample_weight=w,
        federatedridge__sample_weight=w)
    np.testing.assert_allclose(fed.predict(X), pooled.predict(X), rtol=1e-11)
    only_ridge = sklearn_pipeline(Ridge()).fit(X, y, ridge__sample_weight=w)
    with sklearn.config_context(enable_metadata_routing=True):
        fed = federated_pipeline(FederatedRidge().set_fit_request(sample_weight=True))
        fed[1].set_fit_request(sample_weight=False)
        fed.fit(X, y, clients=sites, sample_weight=w)
    np.testing.assert_allclose(fed.predict(X), only_ridge.predict(X), rtol=1e-11)


def test_a_step_that_is_not_federated_is_refused():
    X, y = housing_like(100)
    pipe = FederatedPipeline([("scale", StandardScaler()), ("ridge", FederatedRidge())])
    with pytest.raises(TypeError, match="step 'scale' \\(StandardScaler\\) is not federated"):
        pipe.fit(X[NUMERIC].fillna(0), y)
    assert not hasattr(pipe, "communication_")


@pytest.mark.parametrize("threshold", [0.3, 0.9])
def test_sparse_output_is_decided_on_the_pooled_density(threshold):
    X, y = housing_like(300)
    X = X.fillna(0.0)
    pooled = ColumnTransformer([("scale", StandardScaler(), NUMERIC),
                                ("cat", OneHotEncoder(), ["ocean_proximity"])],
                               sparse_threshold=threshold).fit(X)
    fed = FederatedColumnTransformer([("scale", FederatedStandardScaler(), NUMERIC),
                                      ("cat", FederatedOneHotEncoder(), ["ocean_proximity"])],
                                     sparse_threshold=threshold).fit(X, clients=_sites(X, 7))
    assert fed.sparse_output_ == pooled.sparse_output_
    assert fed.communication_.rounds == 2  # the parts together, then the density count
    a, b = pooled.transform(X), fed.transform(X)
    assert sp.issparse(a) == sp.issparse(b)
    np.testing.assert_allclose(b.toarray() if sp.issparse(b) else b,
                               a.toarray() if sp.issparse(a) else a, rtol=1e-10)


def test_nested_pipelines_passthrough_and_pandas_output():
    X, y = housing_like(400)
    numeric = make_federated_pipeline(FederatedSimpleImputer(), FederatedStandardScaler(),
                                      FederatedPCA(n_components=3))
    fed = make_federated_pipeline(
        FederatedColumnTransformer([("num", numeric, NUMERIC)], remainder="passthrough"),
        "passthrough").set_output(transform="pandas")
    pooled = make_pipeline(
        ColumnTransformer([("num", make_pipeline(
            SimpleImputer(), StandardScaler(), PCA(n_components=3, svd_solver="covariance_eigh")),
            NUMERIC)], remainder="passthrough"),
        "passthrough").set_output(transform="pandas")
    out, expected = fed.fit_transform(X, clients=_sites(X, 7)), pooled.fit_transform(X)
    assert list(out.columns) == list(expected.columns)
    np.testing.assert_allclose(out.iloc[:, :3].to_numpy(float),
                               expected.iloc[:, :3].to_numpy(float), rtol=1e-8, atol=1e-10)
    assert fed.communication_.rounds == 3


# ----------------------------------------------------------- message contents
def _numbers(value):
    """Every number in a JSON value (recursively)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return []
    if isinstance(value, (int, float)):
        return [value]
    if isinstance(value, dict):
        return [x for item in value.values() for x in _numbers(item)]
    if isinstance(value, list):
        return [x for item in value for x in _numbers(item)]
    return []


def _strings(value):
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [x for item in value.values() for x in _strings(item)]
    if isinstance(value, list):
        return [x for item in value for x in _strings(item)]
    return []


@pytest.mark.parametrize("final", ["ridge", "logistic"])
def test_messages_carry_aggregates_and_category_sets_only(final):
    """Decode every reply of a whole-pipeline fit: no row and no per-row value in any."""
    X, y = housing_like(500, seed=4)
    sites = _sites(X, "region")
    target = y if final == "ridge" else (y > np.median(y)).astype(int)
    estimator = FederatedRidge() if final == "ridge" else FederatedLogisticRegression()
    replies = []

    def keep(site, reply):
        replies.append((site, decode(reply)))
        return reply

    run_protocol_by_hand(federated_pipeline(estimator), X, target, sites, tamper=keep)
    assert replies
    for site, frame in replies:
        rows = X[sites == site]
        n_rows = len(rows)
        raw = set(rows[NUMERIC].to_numpy().ravel().tolist()) | set(
            target[sites == site].tolist() if final == "ridge" else [])
        raw.discard(float("nan"))
        numbers = _numbers(frame.fields) + [
            float(v) for array in frame.arrays.values()
            for v in np.asarray(array, dtype=float).ravel()]
        leaked = [v for v in numbers if v in raw and v not in (0.0, 1.0)]
        assert not leaked, f"site {site!r} sent raw values {leaked[:3]}"
        if n_rows > 20:  # no array has one entry per row (a site's rows never travel)
            for name, array in frame.arrays.items():
                assert n_rows not in np.shape(array), (site, name, np.shape(array))
        # the only text a reply carries: the site's own categories (the encoder's message)
        text = set(_strings(frame.fields)) & set(REGIONS)
        assert text <= set(rows["ocean_proximity"])


def test_a_failed_part_leaves_every_part_of_the_round_as_it_was():
    # Part 1 (the encoder, fixed categories) refuses the round after part 0 (the
    # scaler) could have applied it: neither is applied, and a retry refuses again
    # instead of crashing on a half-applied server.
    ct = FederatedColumnTransformer([
        ("scale", FederatedStandardScaler(), ["x"]),
        ("onehot", FederatedOneHotEncoder(categories=[["a", "b"]]), ["c"]),
    ])
    data = {site: (pd.DataFrame({"x": np.arange(4.0) + i,
                                 "c": ["a", "b", "a", "c" if site == "s2" else "b"]}), None)
            for i, site in enumerate(["s0", "s1", "s2"])}
    server = ct.make_server(feature_names=["x", "c"])
    transport = BytesTransport(
        {site: ct.make_client(policy=SitePolicy.permissive()) for site in data}, data)
    for _ in range(2):
        with pytest.raises(ValueError, match="unknown categories"):
            run_rounds(server, transport, list(data))
        assert all(part.rounds_applied == 0 and not hasattr(part.estimator, "n_features_in_")
                   for part in server.parts.values())
