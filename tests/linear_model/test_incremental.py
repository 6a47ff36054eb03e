"""IncrementalFederatedRidge: exactness after every round, quorum, leaders, bad input."""

import copy
import pickle

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.datasets import load_diabetes
from sklearn.linear_model import Ridge
from sklearn.model_selection import GridSearchCV, GroupKFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

from sklearn_fed import IncrementalFederatedRidge
from sklearn_fed.protocol import SitePolicy
from sklearn_fed.simulation import elect_leader

RTOL = 1e-8
UPDATES = ["auto", "woodbury", "spectral", "refactor"]


def rel_err(model, reference):
    coef = np.linalg.norm(np.asarray(model.coef_) - reference.coef_) / np.linalg.norm(
        reference.coef_
    )
    scale = max(np.linalg.norm(reference.intercept_), 1.0)
    intercept = np.linalg.norm(np.asarray(model.intercept_) - reference.intercept_) / scale
    return max(coef, intercept)


def stream(n=240, d=6, t=None, offset=0.0, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * rng.uniform(0.5, 3, size=d) + offset
    coef = rng.normal(size=(d,) if t is None else (d, t))
    y = X @ coef + rng.normal(size=(n,) if t is None else (n, t)) + 3.0
    return X, y, rng


@parametrize_with_checks(
    [IncrementalFederatedRidge(), IncrementalFederatedRidge(update="spectral")]
)
def test_sklearn_compatible(estimator, check):
    check(estimator)


@pytest.mark.parametrize("update", UPDATES)
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_equals_ridge_after_every_round_weighted_multioutput(update, fit_intercept):
    X, y, rng = stream(n=300, d=8, t=2, offset=50.0)
    sw = rng.uniform(0.1, 3.0, size=len(y))
    model = IncrementalFederatedRidge(
        alpha=0.7, fit_intercept=fit_intercept, update=update, random_state=0
    )
    for batch in np.array_split(np.arange(len(y)), 25):
        clients = rng.integers(0, 5, size=len(batch))  # some clients absent some rounds
        model.partial_fit(X[batch], y[batch], sample_weight=sw[batch], clients=clients)
        seen = slice(0, batch[-1] + 1)
        ref = Ridge(alpha=0.7, fit_intercept=fit_intercept).fit(
            X[seen], y[seen], sample_weight=sw[seen]
        )
        assert rel_err(model, ref) <= RTOL
    assert model.n_samples_seen_ == len(y) and model.n_samples_pending_ == 0
    assert model.coef_.shape == (2, 8)


@pytest.mark.parametrize("update", ["auto", "woodbury", "spectral"])
def test_one_row_rounds_with_absent_clients(update):
    X, y, rng = stream(n=60, d=10)
    model = IncrementalFederatedRidge(alpha=0.1, update=update, random_state=1)
    for i in range(len(y)):
        model.partial_fit(X[i : i + 1], y[i : i + 1], clients=[int(rng.integers(0, 7))])
        if i >= 1:
            ref = Ridge(alpha=0.1).fit(X[: i + 1], y[: i + 1])
            assert rel_err(model, ref) <= RTOL
    used = {h["update"] for h in model.round_history_}
    if update == "woodbury":
        assert "woodbury" in used  # the low-rank route is really exercised
    if update == "spectral":
        assert "spectral" in used


def test_auto_takes_low_rank_route_when_rank_is_small():
    X, y, _ = stream(n=400, d=80)
    model = IncrementalFederatedRidge(alpha=1.0, random_state=0)
    model.partial_fit(X[:200], y[:200], clients=np.arange(200) % 4)
    for start in range(200, 240, 4):  # 4 clients x 1 row: rank 4 <= d / 8
        model.partial_fit(X[start : start + 4], y[start : start + 4], clients=np.arange(4))
        model.coef_  # the round's model is solved when first used
        assert model.round_history_[-1]["rank"] == 4
    assert model.round_history_[-1]["update"] == "woodbury"
    assert rel_err(model, Ridge(alpha=1.0).fit(X[:240], y[:240])) <= RTOL


@pytest.mark.parametrize("update", UPDATES)
def test_alpha_changed_mid_stream(update):
    X, y, rng = stream(n=200, d=7, offset=10.0)
    model = IncrementalFederatedRidge(alpha=1.0, update=update, random_state=0)
    batches = np.array_split(np.arange(200), 10)
    alphas = [1.0, 1.0, 5.0, 5.0, 0.01, 0.01, 2.0, 2.0, 2.0, 0.5]
    for alpha, batch in zip(alphas, batches):
        model.set_params(alpha=alpha)
        model.partial_fit(X[batch], y[batch], clients=batch % 3)
        ref = Ridge(alpha=alpha).fit(X[: batch[-1] + 1], y[: batch[-1] + 1])
        assert rel_err(model, ref) <= RTOL
    if update == "spectral":  # the delta-lambda term went through Eq. 13-17
        assert [h["update"] for h in model.round_history_][2] == "spectral"


def test_per_target_alpha():
    X, y, _ = stream(n=120, d=5, t=3)
    alpha = np.array([0.1, 1.0, 0.1])
    model = IncrementalFederatedRidge(alpha=alpha, update="woodbury", random_state=0)
    for batch in np.array_split(np.arange(120), 6):
        model.partial_fit(X[batch], y[batch], clients=batch % 2)
    assert rel_err(model, Ridge(alpha=alpha).fit(X, y)) <= RTOL


def test_quorum_skips_rounds_without_losing_rows():
    X, y, _ = stream(n=200, d=5)
    model = IncrementalFederatedRidge(alpha=0.5, min_clients=3, min_samples=4, random_state=0)
    # round 0: 2 clients only -> skipped; round 1: client 2 has 2 rows (< min_samples)
    plan = [
        (np.arange(0, 20), np.repeat([0, 1], 10)),
        (np.arange(20, 22), np.array([2, 2])),
        (np.arange(22, 60), np.arange(38) % 4),
        (np.arange(60, 63), np.array([5, 5, 5])),
        (np.arange(63, 200), np.arange(137) % 6),  # client 5 gets more rows
    ]
    for rows, clients in plan:
        model.partial_fit(X[rows], y[rows], clients=clients)
    assert model.skipped_rounds_ == [0, 1, 3]
    assert len(model.leaders_) == model.n_rounds_ == 5
    assert model.n_samples_seen_ == 200 and model.n_samples_pending_ == 0
    assert rel_err(model, Ridge(alpha=0.5).fit(X, y)) <= RTOL
    history = model.round_history_
    # round 0 was skipped, but its statistics were sent: the server kept them
    assert history[0]["contributors"] == [] and history[0]["uplink_bytes"] > 0
    assert history[2]["contributors"] == [0, 1, 2, 3]
    assert model.communication_.uplink_bytes == sum(h["uplink_bytes"] for h in history)
    assert model.communication_.downlink_bytes == sum(h["downlink_bytes"] for h in history)


def test_first_round_skipped_is_not_fitted():
    from sklearn.exceptions import NotFittedError

    X, y, _ = stream(n=20, d=3)
    model = IncrementalFederatedRidge(min_clients=2).fit(X, y)
    assert model.skipped_rounds_ == [0] and model.n_samples_pending_ == 20
    with pytest.raises(NotFittedError):
        model.predict(X)


def test_partial_fit_after_held_rounds_checks_the_width():
    """A stream whose rows are all held so far continues it: rows of another width
    are refused (the held rows have the first width), and the rest goes on."""
    X, y, _ = stream(n=30, d=4)
    model = IncrementalFederatedRidge(min_samples=12).fit(X[:6], y[:6], clients=[0, 1] * 3)
    assert model.n_samples_pending_ == 6 and model.n_samples_seen_ == 0
    before = pickle.dumps(model)
    with pytest.raises(ValueError, match="features"):
        model.partial_fit(X[6:12, :3], y[6:12], clients=[0, 1] * 3)
    assert pickle.dumps(model) == before
    model.partial_fit(X[6:], y[6:], clients=[0, 1] * 12)
    assert model.n_samples_seen_ == 30
    assert rel_err(model, Ridge().fit(X, y)) <= RTOL


@pytest.mark.parametrize("centered", [True, False])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("t", [None, 3])
def test_few_rows_factor_is_the_factor_form_of_client_statistics(centered, weighted, t):
    """The factor of a site with few rows: R^T R holds the site's products, as the
    Gram form says, with min(n - 1, d + t) rows (min(n, d + t) uncentered)."""
    from sklearn_fed.statistics import ClientStatistics
    from sklearn_fed.statistics._kernels import few_rows_factor

    X, y, rng = stream(n=7, d=20, t=t, offset=5.0)
    w = rng.uniform(0.1, 2.0, size=7) if weighted else None
    weight_sum, x_mean, y_mean, factor = few_rows_factor(X, y, w, centered)
    stats = ClientStatistics(7, weight_sum, x_mean, y_mean, factor=factor, centered=centered,
                             single_target=t is None)
    assert factor.shape == (6 if centered else 7, 20 + (t or 1))
    np.testing.assert_array_equal(factor, np.triu(factor))
    expected = ClientStatistics.from_data(X, y, w, centered=centered)
    assert stats.weight_sum == pytest.approx(expected.weight_sum, rel=1e-15)
    for name in ("x_mean", "y_mean", "gram", "moment", "target_ss"):
        np.testing.assert_allclose(getattr(stats, name), getattr(expected, name),
                                   rtol=1e-10, atol=1e-10 * np.abs(expected.gram).max())
    fields, arrays = stats.to_payload()  # and the message is read back as sent
    back = ClientStatistics.from_payload(fields, arrays, client="a", n_features=20,
                                         n_targets=t or 1)
    np.testing.assert_array_equal(back.factor, factor)


def test_leader_dropout_reelects_and_loses_nothing():
    X, y, rng = stream(n=300, d=6)
    model = IncrementalFederatedRidge(alpha=0.2, leader_dropout=0.5, random_state=3)
    held_after_dropout = []
    for batch in np.array_split(np.arange(290), 20):
        model.partial_fit(X[batch], y[batch], clients=batch % 6)
        if model.round_history_[-1]["dropped_leaders"]:  # a dropped leader sat out
            held_after_dropout.append(model.n_samples_pending_)
    assert held_after_dropout and min(held_after_dropout) > 0
    for record in model.round_history_:
        assert record["leader"] not in record["dropped_leaders"]
        assert not set(record["dropped_leaders"]) & set(record["contributors"])
    # rows of dropped leaders waited; a last round without dropout flushes them
    model.set_params(leader_dropout=0.0)
    model.partial_fit(X[290:], y[290:], clients=np.arange(10) % 6)
    assert model.n_samples_pending_ == 0 and model.n_samples_seen_ == 300
    assert rel_err(model, Ridge(alpha=0.2).fit(X, y)) <= RTOL


def test_deterministic_with_random_state():
    X, y, _ = stream(n=150, d=4)

    def run(seed):
        model = IncrementalFederatedRidge(leader_dropout=0.3, random_state=seed)
        for batch in np.array_split(np.arange(150), 10):
            model.partial_fit(X[batch], y[batch], clients=batch % 8)
        return model

    a, b, c = run(7), run(7), run(8)
    assert a.leaders_ == b.leaders_
    assert [h["dropped_leaders"] for h in a.round_history_] == [
        h["dropped_leaders"] for h in b.round_history_
    ]
    assert a.leaders_ != c.leaders_
    np.testing.assert_array_equal(a.coef_, b.coef_)


def test_gossip_election():
    result = elect_leader(list("abcdefgh"), bids=[1, 2, 9, 3, 9, 0, 1, 2], random_state=0)
    assert result.leader in ("c", "e")
    winners = {
        elect_leader(range(6), bids=[5, 5, 5, 1, 1, 1], random_state=s).leader
        for s in range(40)
    }
    assert winners == {0, 1, 2}  # ties broken at random among the best
    full = elect_leader(range(30), fanout=3, n_rounds=3, random_state=0)
    assert full.converged_fraction == 1.0 and full.n_messages == 2 * 3 * 3 * 30
    none = elect_leader(range(30), fanout=1, n_rounds=0, random_state=0)
    assert none.converged_fraction == pytest.approx(1 / 30)
    with pytest.raises(ValueError, match="one value per node"):
        elect_leader(range(3), bids=[1, 2])


@pytest.mark.parametrize("update", ["woodbury", "spectral"])
def test_thousand_round_drift(update):
    X, y, rng = stream(n=1000, d=4, offset=3.0)
    model = IncrementalFederatedRidge(alpha=0.05, update=update, random_state=0)
    for i in range(0, 1000):
        model.partial_fit(X[i : i + 1], y[i : i + 1], clients=[i % 3])
        model.intercept_
    assert rel_err(model, Ridge(alpha=0.05).fit(X, y)) <= RTOL
    assert model.n_rounds_ == 1000


def test_drift_without_checks_is_small():
    # No residual check and no periodic refactorization: pure SMW for 1000 rounds.
    X, y, rng = stream(n=2000, d=6, offset=1.0, seed=4)
    model = IncrementalFederatedRidge(alpha=0.5, update="spectral", tol=None, random_state=0)
    for batch in np.array_split(np.arange(2000), 1000):
        model.partial_fit(X[batch], y[batch], clients=batch % 2)
        model.coef_  # solve every round: 1000 low-rank updates in a row
    assert {h["update"] for h in model.round_history_[1:]} == {"spectral"}
    assert rel_err(model, Ridge(alpha=0.5).fit(X, y)) <= RTOL


def test_refactor_every():
    X, y, _ = stream(n=40, d=30)
    model = IncrementalFederatedRidge(update="woodbury", refactor_every=3, random_state=0)
    for i in range(10):
        model.partial_fit(X[4 * i : 4 * i + 4], y[4 * i : 4 * i + 4], clients=[0, 0, 1, 1])
        model.coef_
    routes = [h["update"] for h in model.round_history_]
    assert routes[:7] == ["refactor", "woodbury", "woodbury", "refactor"] + ["woodbury"] * 2 + [
        "refactor"
    ]


def test_sparse_and_float32():
    X, y, _ = stream(n=120, d=6)
    X[X < 0.3] = 0
    dense = IncrementalFederatedRidge(random_state=0)
    sparse = IncrementalFederatedRidge(random_state=0)
    for batch in np.array_split(np.arange(120), 4):
        dense.partial_fit(X[batch], y[batch], clients=batch % 3)
        sparse.partial_fit(sp.csr_matrix(X[batch]), y[batch], clients=batch % 3)
    np.testing.assert_allclose(sparse.coef_, dense.coef_, rtol=1e-10)
    f32 = IncrementalFederatedRidge().fit(X.astype(np.float32), y)
    assert f32.coef_.dtype == np.float32


def test_bad_input_leaves_state_unchanged():
    X, y, _ = stream(n=100, d=5)
    model = IncrementalFederatedRidge(alpha=0.3, random_state=0)
    model.partial_fit(X[:50], y[:50], clients=np.arange(50) % 3)
    coef = model.coef_.copy()
    before = pickle.dumps(model)
    bad_nan = X[50:60].copy()
    bad_nan[2, 1] = np.nan
    with pytest.raises(ValueError, match="features"):
        model.partial_fit(X[50:60, :4], y[50:60])
    with pytest.raises(ValueError, match="NaN"):
        model.partial_fit(bad_nan, y[50:60])
    with pytest.raises(ValueError, match="clients must hold one label per row"):
        model.partial_fit(X[50:60], y[50:60], clients=[0, 1])
    with pytest.raises(ValueError, match="targets"):
        model.partial_fit(X[50:60], np.c_[y[50:60], y[50:60]])
    with pytest.raises(ValueError, match="alpha"):
        model.set_params(alpha=np.array([1.0, 2.0])).partial_fit(X[50:60], y[50:60])
    model.set_params(alpha=0.3)
    assert pickle.dumps(model) == before
    np.testing.assert_array_equal(model.coef_, coef)
    model.partial_fit(X[50:], y[50:], clients=np.arange(50) % 3)
    assert rel_err(model, Ridge(alpha=0.3).fit(X, y)) <= RTOL


def test_fit_resets_and_clone():
    X, y, _ = stream(n=80, d=4)
    model = IncrementalFederatedRidge(random_state=0)
    model.partial_fit(X[:40], y[:40])
    model.fit(X[40:], y[40:], clients=np.arange(40) % 2)
    assert model.n_rounds_ == 1 and model.n_samples_seen_ == 40
    assert rel_err(model, Ridge().fit(X[40:], y[40:])) <= RTOL
    fresh = clone(model)
    assert not hasattr(fresh, "coef_")
    copied = copy.deepcopy(model).partial_fit(X[:40], y[:40])
    assert rel_err(copied, Ridge().fit(np.r_[X[40:], X[:40]], np.r_[y[40:], y[:40]])) <= RTOL


def test_pipeline_and_grid_search_with_clients():
    X, y = load_diabetes(return_X_y=True)
    clients = np.arange(len(y)) % 5
    pipe = make_pipeline(StandardScaler(), IncrementalFederatedRidge(alpha=1.0))
    pipe.fit(X, y, incrementalfederatedridge__clients=clients)
    ref = make_pipeline(StandardScaler(), Ridge(alpha=1.0)).fit(X, y)
    np.testing.assert_allclose(pipe.predict(X), ref.predict(X), rtol=1e-9)
    search = GridSearchCV(
        IncrementalFederatedRidge(), {"alpha": [0.01, 1.0, 100.0]}, cv=GroupKFold(5)
    )
    search.fit(X, y, groups=clients, clients=clients)
    ref_search = GridSearchCV(Ridge(), {"alpha": [0.01, 1.0, 100.0]}, cv=GroupKFold(5))
    ref_search.fit(X, y, groups=clients)
    assert search.best_params_ == ref_search.best_params_
    np.testing.assert_allclose(
        search.cv_results_["mean_test_score"], ref_search.cv_results_["mean_test_score"]
    )


def test_pipeline_with_metadata_routing():
    import sklearn

    X, y = load_diabetes(return_X_y=True)
    clients = np.arange(len(y)) % 4
    with sklearn.config_context(enable_metadata_routing=True):
        est = IncrementalFederatedRidge().set_fit_request(clients=True)
        pipe = make_pipeline(StandardScaler(), est).fit(X, y, clients=clients)
        assert pipe[-1].n_clients_ == 4


def test_csv_loaders(tmp_path):
    from sklearn_fed.datasets import load_california_housing_csv, load_insurance_csv

    path = tmp_path / "insurance.csv"
    path.write_text(
        "age,sex,bmi,children,smoker,region,charges\n"
        "19,female,27.9,0,yes,southwest,100.5\n"
        "18,male,,1,no,southeast,200.0\n"
        "40,male,30.0,2,no,northeast,300.0\n"
    )
    X, y, names = load_insurance_csv(path, return_feature_names=True)
    assert X.shape == (2, 9) and y.tolist() == [100.5, 300.0]  # row with missing bmi dropped
    assert names[:3] == ["age", "bmi", "children"]
    np.testing.assert_array_equal(X[:, names.index("smoker=yes")], [1.0, 0.0])
    np.testing.assert_array_equal(X[:, names.index("region=northeast")], [0.0, 1.0])
    bad = tmp_path / "housing.csv"
    bad.write_text("longitude,latitude\n1,2\n")
    with pytest.raises(ValueError, match="missing column"):
        load_california_housing_csv(bad)


def _hand_driven_stream(estimator, batches, keys=None):
    """Drive one long-lived server by hand, with bytes; one client object per site."""
    keys = keys or {}
    server = estimator.make_server(keys=keys)
    sites = {}
    coefs = []
    for X, y, clients in batches:
        labels = sorted(set(clients.tolist()) | {s for s, c in sites.items() if c.n_pending})
        for label in labels:
            sites.setdefault(label, estimator.make_client(key=keys.get(label), site=label, policy=SitePolicy.permissive()))
        tasks = server.next_tasks(labels)
        replies = {}
        for site, task in tasks.items():
            mine = clients == site
            replies[site] = sites[site].respond(task, X[mine], y[mine])
        server.receive(replies)
        coefs.append(estimator.coef_.copy() if hasattr(estimator, "coef_") else None)
    return server, coefs


@pytest.mark.parametrize("params", [
    dict(min_samples=3, min_clients=2),
    dict(leader_dropout=0.4, update="woodbury"),
    dict(fit_intercept=False, update="spectral"),
])
def test_partial_fit_is_the_long_lived_protocol_run(params):
    """partial_fit after partial_fit == one server driven by hand: same bits, same bytes."""
    X, y, rng = stream(n=160, d=7, offset=5.0)
    batches = []
    for batch in np.array_split(np.arange(160), 12):
        clients = rng.integers(0, 6, size=len(batch))
        batches.append((X[batch], y[batch], clients))
    simulated = IncrementalFederatedRidge(random_state=0, **params)
    coefs = []
    for Xb, yb, cb in batches:
        simulated.partial_fit(Xb, yb, clients=cb)
        coefs.append(simulated.coef_.copy() if hasattr(simulated, "coef_") else None)
    keys = {site: bytes([65 + site]) * 16 for site in range(6)}
    by_hand = IncrementalFederatedRidge(random_state=0, **params)
    with_keys = IncrementalFederatedRidge(random_state=0, **params)
    _, hand_coefs = _hand_driven_stream(by_hand, batches)
    _hand_driven_stream(with_keys, batches, keys=keys)
    for a, b in zip(coefs, hand_coefs):
        assert (a is None) == (b is None)
        if a is not None:
            np.testing.assert_array_equal(a, b)
    assert simulated.leaders_ == by_hand.leaders_
    assert simulated.skipped_rounds_ == by_hand.skipped_rounds_
    assert simulated.n_samples_pending_ == by_hand.n_samples_pending_
    for attribute in ("uplink_bytes_per_client", "downlink_bytes_per_client", "rounds"):
        assert getattr(simulated.communication_, attribute) == getattr(
            by_hand.communication_, attribute
        )
    # HMAC trailers and SHA-256 checksums have the same length: same byte counts
    assert with_keys.communication_.uplink_bytes == by_hand.communication_.uplink_bytes
    Xa = np.concatenate([b[0] for b in batches])
    ya = np.concatenate([b[1] for b in batches])
    seen = simulated.n_samples_seen_
    assert seen + simulated.n_samples_pending_ == len(ya)


def test_site_keeps_rows_below_min_samples():
    X, y, _ = stream(n=12, d=3)
    estimator = IncrementalFederatedRidge(min_samples=5)
    server = estimator.make_server()
    site = estimator.make_client(site="a", policy=SitePolicy.permissive())
    for start in (0, 2):  # 2 + 2 rows: held by the site, the server gets counts only
        reply = site.respond(server.next_tasks(["a"])["a"], X[start : start + 2],
                             y[start : start + 2])
        server.receive({"a": reply})
        assert site.n_pending == start + 2 and len(reply) < 400
    assert estimator.n_samples_pending_ == 4 and not hasattr(estimator, "coef_")
    reply = site.respond(server.next_tasks(["a"])["a"], X[4:12], y[4:12])
    server.receive({"a": reply})
    assert site.n_pending == 0 and estimator.n_samples_seen_ == 12
    assert rel_err(estimator, Ridge().fit(X, y)) <= RTOL


def test_huge_batch_is_rejected_naming_the_site_and_later_rounds_are_fine():
    """One batch with 1e308 (issue 14): a clear error, nothing applied, no NaN model."""
    from sklearn_fed import FederatedRidge, InvalidClientMessage

    X, y, _ = stream(n=120, d=4)
    model = IncrementalFederatedRidge(random_state=0)
    model.partial_fit(X[:40], y[:40], clients=np.arange(40) % 4)
    coef = model.coef_.copy()
    before = pickle.dumps(model)
    for value in (1e308, 1e200, 1e160):
        bad = X[40:80].copy()
        bad[7, 2] = value  # row 7 belongs to client 3
        with pytest.raises(InvalidClientMessage, match="client 3") as error, np.errstate(
            over="ignore", invalid="ignore"  # the site's own overflow warnings
        ):
            model.partial_fit(bad, y[40:80], clients=np.arange(40) % 4)
        assert error.value.client == 3
        assert pickle.dumps(model) == before
        with pytest.raises(ValueError), np.errstate(all="ignore"):  # as FederatedRidge does
            FederatedRidge().fit(bad, y[40:80], clients=np.arange(40) % 4)
    np.testing.assert_array_equal(model.coef_, coef)
    model.partial_fit(X[40:], y[40:], clients=np.arange(80) % 4)
    assert np.isfinite(model.coef_).all()
    assert rel_err(model, Ridge().fit(X, y)) <= RTOL


def test_statistics_that_would_overflow_when_merged_are_rejected():
    """Each site's Gram is finite, the merged one would not be: the caps stop it first."""
    from sklearn_fed import InvalidClientMessage

    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 3))
    X[::2, 0] = 1e153  # constant within each site: every site's centered Gram is tiny
    X[1::2, 0] = -1e153
    y = rng.normal(size=40)
    model = IncrementalFederatedRidge()
    with pytest.raises(InvalidClientMessage, match="beyond 1e\\+75") as error:
        model.partial_fit(X, y, clients=np.arange(40) % 4)
    assert error.value.client in range(4)
    assert not hasattr(model, "coef_") and not hasattr(model, "n_rounds_")


def _frame_of(reply, **changes):
    from sklearn_fed.protocol import decode

    frame = decode(reply)
    frame.arrays = dict(frame.arrays, **changes.pop("arrays", {}))
    frame.fields = dict(frame.fields, **changes.pop("fields", {}))
    return frame


def _round_with_hostile_reply(X, y, change, **server_params):
    """Replies of sites "a" and "b" (every other row each), "b"'s changed after encoding."""
    from sklearn_fed.protocol import encode

    estimator = IncrementalFederatedRidge()
    server = estimator.make_server(**server_params)
    sites = {s: estimator.make_client(site=s, policy=SitePolicy.permissive()) for s in ("a", "b")}
    tasks = server.next_tasks(["a", "b"])
    replies = {s: sites[s].respond(tasks[s], X[i::2], y[i::2]) for i, s in enumerate("ab")}
    replies["b"] = encode(_frame_of(replies["b"], **change))
    return estimator, server, replies


def test_replies_are_client_statistics():
    """One statistics message: a site's reply is ClientStatistics' payload, in factor
    form with few rows (R of its centered rows [x, y]), else in Gram form."""
    from sklearn_fed.protocol import decode
    from sklearn_fed.statistics import ClientStatistics

    X, y, _ = stream(n=40, d=6)
    estimator = IncrementalFederatedRidge()
    server = estimator.make_server()
    site = estimator.make_client(site="a", policy=SitePolicy.permissive())
    for rows, form in ((slice(0, 4), "factor"), (slice(4, 40), "gram")):
        reply = site.respond(server.next_tasks(["a"])["a"], X[rows], y[rows])
        frame = decode(reply)
        assert frame.kind == "ridge.incremental/reply"
        stats = ClientStatistics.from_payload(frame.fields, frame.arrays, client="a")
        assert stats.form == form
        if form == "factor":  # n - 1 rows of [x, y]: the direction of the mean is dropped
            assert stats.factor.shape == (3, 7)
        expected = ClientStatistics.from_data(X[rows], y[rows])
        np.testing.assert_allclose(stats.x_mean, expected.x_mean, rtol=1e-12)
        np.testing.assert_allclose(stats.gram, expected.gram, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(stats.moment, expected.moment, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(stats.target_ss, expected.target_ss, rtol=1e-10)
        server.receive({"a": reply})
    assert rel_err(estimator, Ridge().fit(X, y)) <= RTOL


# (change, match): what a hostile site "b" does to its factor-form reply (4 rows,
# d = 6: R has 3 rows of 7 columns, 18 packed values), and the validator's words.
FACTOR_CHANGES = [
    ({"arrays": {"factor": np.full(18, np.inf)}}, "factor contains NaN or infinity"),
    ({"arrays": {"factor": np.full(18, np.nan)}}, "factor contains NaN or infinity"),
    ({"arrays": {"factor": np.full(18, 1e101)}}, "factor has entries beyond 1e\\+100"),
    ({"arrays": {"factor": np.ones(17)}}, "factor has shape \\(17,\\), expected \\(18,\\)"),
    ({"arrays": {"factor": np.ones((3, 7))}}, "factor has shape"),
    ({"fields": {"factor_rows": 8}}, "factor_rows must be an integer in \\[0, 7\\]"),
    ({"arrays": {"factor": np.ones(18, dtype=np.float32)}}, "float64"),
    ({"arrays": {"x_mean": np.full(6, np.nan)}}, "x_mean contains NaN"),
    ({"arrays": {"y_mean": np.full(1, 1e80)}}, "y_mean has entries beyond 1e\\+75"),
    ({"arrays": {"x_mean": np.zeros(5)}}, "shape"),
    ({"arrays": {"x_mean": np.zeros(7)}}, "shape"),
    ({"arrays": {"moment": np.zeros((6, 1))}}, "statistics arrays must be"),
    ({"fields": {"n_samples": 0}}, "n_samples"),
    ({"fields": {"n_samples": 1}}, "one centered row but non-zero second moments"),
    ({"fields": {"weight_sum": -1.0}}, "weight_sum"),
    ({"fields": {"weight_sum": 1e80}}, "weight_sum"),
    ({"fields": {"weight_sum": 0.0}}, "zero weight sum but non-zero second moments"),
    ({"fields": {"centered": False}}, "centered"),
    ({"fields": {"single_target": "yes"}}, "booleans"),
    ({"fields": {"extra": 1}}, "statistics fields must be"),
]


@pytest.mark.parametrize("change, match", FACTOR_CHANGES)
def test_hostile_factor_replies_are_refused_naming_the_site(change, match):
    """Well-formed bytes that lie: refused by ClientStatistics' validator naming the
    site, nothing applied."""
    from sklearn_fed import InvalidClientMessage

    X, y, _ = stream(n=9, d=6)
    estimator, server, replies = _round_with_hostile_reply(X, y, change)
    with pytest.raises(InvalidClientMessage, match="client 'b': .*" + match) as error:
        server.receive(replies)
    assert error.value.client == "b" and not hasattr(estimator, "n_rounds_")


def _not_psd(gram):
    bad = gram.copy()
    bad[0, 1] = bad[1, 0] = 0.999 * np.sqrt(bad[0, 0] * bad[1, 1])
    bad[0, 2] = bad[2, 0] = 0.999 * np.sqrt(bad[0, 0] * bad[2, 2])
    bad[1, 2] = bad[2, 1] = -0.999 * np.sqrt(bad[1, 1] * bad[2, 2])
    return bad


def _asymmetric(gram):
    bad = gram.copy()
    bad[0, 1] += 0.5 * np.sqrt(bad[0, 0] * bad[1, 1])
    return bad


# The same for a Gram-form reply (15 rows, d = 3): the checks of a full Gram.
GRAM_CHANGES = [
    ({"gram": _asymmetric}, "gram is not symmetric"),
    ({"gram": _not_psd}, "gram is not positive semi-definite"),
    ({"gram": lambda gram: gram - 2 * np.diag(np.diag(gram))}, "gram has a negative diagonal"),
    ({"gram": lambda gram: np.full_like(gram, np.inf)}, "gram contains NaN or infinity"),
    ({"gram": lambda gram: gram[:2, :2]}, "gram has shape \\(2, 2\\), expected \\(3, 3\\)"),
    ({"moment": lambda moment: moment + 1e6}, "Cauchy-Schwarz"),
    ({"moment": lambda moment: moment[:, :0]}, "moment has shape"),
    ({"target_ss": lambda target_ss: -target_ss - 1}, "target_ss is negative"),
    ({"target_ss": lambda target_ss: np.full_like(target_ss, np.nan)}, "target_ss contains NaN"),
]


@pytest.mark.parametrize("change, match", GRAM_CHANGES)
def test_hostile_gram_replies_are_refused_naming_the_site(change, match):
    from sklearn_fed import InvalidClientMessage
    from sklearn_fed.protocol import decode

    X, y, _ = stream(n=30, d=3)
    estimator = IncrementalFederatedRidge()
    reply = estimator.make_client(site="b", policy=SitePolicy.permissive()).respond(
        estimator.make_server().next_tasks(["b"])["b"], X[1::2], y[1::2])
    arrays = decode(reply).arrays
    assert "gram" in arrays  # 15 rows of 3 features: the Gram form
    arrays = {name: np.ascontiguousarray(how(arrays[name])) for name, how in change.items()}
    estimator, server, replies = _round_with_hostile_reply(X, y, {"arrays": arrays})
    with pytest.raises(InvalidClientMessage, match="client 'b': .*" + match) as error, \
            np.errstate(invalid="ignore"):
        server.receive(replies)
    assert error.value.client == "b" and not hasattr(estimator, "n_rounds_")


def test_hostile_reply_in_a_later_round_leaves_the_model_as_it_was():
    from sklearn_fed import InvalidClientMessage
    from sklearn_fed.protocol import encode

    X, y, _ = stream(n=60, d=8)
    estimator = IncrementalFederatedRidge(random_state=0)
    server = estimator.make_server()
    sites = {s: estimator.make_client(site=s, policy=SitePolicy.permissive()) for s in ("a", "b")}

    def round_of(rows, change=None):
        tasks = server.next_tasks(["a", "b"])
        replies = {s: sites[s].respond(tasks[s], X[rows][i::2], y[rows][i::2])
                   for i, s in enumerate("ab")}
        if change is not None:
            replies["b"] = encode(_frame_of(replies["b"], **change))
        server.receive(replies)

    round_of(slice(0, 40))
    before = pickle.dumps(estimator)
    with pytest.raises(InvalidClientMessage, match="client 'b'"):
        round_of(slice(40, 46), {"arrays": {"factor": np.full(14, np.nan)}})
    assert pickle.dumps(estimator) == before
    round_of(slice(40, 60))
    assert estimator.n_rounds_ == 2
    assert rel_err(estimator, Ridge().fit(X, y)) <= RTOL


def test_reading_the_model_or_not_gives_the_same_answer():
    X, y, _ = stream(n=400, d=60, offset=2.0)
    eager = IncrementalFederatedRidge(alpha=0.3, random_state=0)
    lazy = IncrementalFederatedRidge(alpha=0.3, random_state=0)
    for batch in np.array_split(np.arange(400), 80):
        eager.partial_fit(X[batch], y[batch], clients=batch % 2)
        eager.coef_
        lazy.partial_fit(X[batch], y[batch], clients=batch % 2)
    updates = [h["update"] for h in lazy.round_history_]
    assert set(updates[:-1]) == {None}  # never used: never solved
    reference = Ridge(alpha=0.3).fit(X, y)
    assert rel_err(eager, reference) <= RTOL and rel_err(lazy, reference) <= RTOL
    assert lazy.round_history_[-1]["update"] is not None
    assert "woodbury" in {h["update"] for h in eager.round_history_}


def _spread_by_simulating_every_node(k, fanout, n_rounds, rng):
    """Reference: synchronous push-pull over all k nodes, distinct peers, no self."""
    informed = np.zeros(k, dtype=bool)
    informed[rng.integers(k)] = True
    for _ in range(n_rounds):
        contacts = np.array([rng.choice(np.delete(np.arange(k), i), fanout, replace=False)
                             for i in range(k)])
        pulled = informed[contacts].any(axis=1)
        pushed = np.zeros(k, dtype=bool)
        pushed[contacts[informed].ravel()] = True
        informed = informed | pulled | pushed
    return informed.mean()


@pytest.mark.parametrize("k, fanout, n_rounds", [(40, 2, 2), (12, 3, 1), (200, 1, 3)])
def test_gossip_spread_has_the_distribution_of_the_full_simulation(k, fanout, n_rounds):
    rng = np.random.default_rng(0)
    reference = [_spread_by_simulating_every_node(k, fanout, n_rounds, rng) for _ in range(300)]
    ours = [elect_leader(range(k), fanout=fanout, n_rounds=n_rounds,
                         random_state=seed).converged_fraction for seed in range(2000)]
    mean, sem = np.mean(reference), np.std(reference) / np.sqrt(len(reference))
    assert abs(np.mean(ours) - mean) < 4 * sem + 4 * np.std(ours) / np.sqrt(len(ours))
    assert abs(np.std(ours) - np.std(reference)) < 0.25 * np.std(reference) + 1e-3


def test_gossip_leader_is_uniform_and_cheap_for_many_nodes():
    counts = np.bincount(
        [elect_leader(range(5), random_state=seed).leader for seed in range(2500)], minlength=5
    )
    assert counts.min() > 400  # uniform: 500 expected each
    big = elect_leader(range(10**9), fanout=3, n_rounds=3, random_state=0)
    assert 0 < big.converged_fraction < 1e-5 and big.n_messages == 2 * 3 * 3 * 10**9


def test_merge_backstop_names_the_site_when_statistics_overflow():
    """Past the per-message caps (e.g. 2**40 capped messages), the merge itself refuses."""
    from sklearn_fed import InvalidClientMessage
    from sklearn_fed.linear_model._incremental_model import _Model
    from sklearn_fed.statistics import ClientStatistics

    def reply(site, scale):  # (not validated: the backstop is what is tested)
        stats = ClientStatistics(2, 2.0, np.full(3, scale), np.zeros(1),
                                 factor=np.full((1, 4), 1e154))
        return site, stats

    with pytest.raises(InvalidClientMessage, match="client 'big'.*overflows"), np.errstate(
        over="ignore"
    ):
        _Model.after_round(None, [reply("small", 1.0), reply("big", 1e160)], alpha=1.0,
                           options=("auto", None, 1e-11), centered=True, single_target=True,
                           dtype=np.float64, record={})


def test_copies_that_go_on_separately_keep_their_own_nodes():
    # States share one append-only node index; each must see only its own nodes.
    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, 3))
    y = X @ np.array([1.0, -2.0, 0.5])
    model = IncrementalFederatedRidge(random_state=0)
    model.partial_fit(X[:20], y[:20], clients=np.repeat([0, 1], 10))
    twin = copy.copy(model)  # shares the fitted stream
    model.partial_fit(X[20:30], y[20:30], clients=np.full(10, 2))
    twin.partial_fit(X[30:40], y[30:40], clients=np.full(10, 3))
    assert model.clients_.tolist() == [0, 1, 2]
    assert twin.clients_.tolist() == [0, 1, 3]
    twin.partial_fit(X[40:], y[40:], clients=np.full(10, 2))  # new to the twin
    model.partial_fit(X[40:], y[40:], clients=np.full(10, 2))  # known to the model
    assert twin.clients_.tolist() == [0, 1, 3, 2]
    assert model.clients_.tolist() == [0, 1, 2]
    assert twin.n_samples_seen_ == model.n_samples_seen_ == 40


def test_each_failing_site_is_named_among_many():
    """Every reply is validated; with on_invalid="drop" each bad site is named and left out."""
    X, y, _ = stream(n=40, d=6)
    estimator = IncrementalFederatedRidge()
    server = estimator.make_server(on_invalid="drop")
    labels = ["a", "b", "c", "d"]
    sites = {s: estimator.make_client(site=s, policy=SitePolicy.permissive()) for s in labels}
    tasks = server.next_tasks(labels)
    replies = {s: sites[s].respond(tasks[s], X[i::4], y[i::4]) for i, s in enumerate(labels)}
    from sklearn_fed.protocol import encode

    # 10 rows of 6 features: Gram form
    replies["b"] = encode(_frame_of(replies["b"], arrays={"moment": np.full((6, 1), 1e6)}))
    replies["d"] = encode(_frame_of(replies["d"], arrays={"x_mean": np.full(6, np.nan)}))
    server.receive(replies)
    assert sorted(server.dropped_) == ["b", "d"]
    assert "Cauchy-Schwarz" in server.dropped_["b"] and "x_mean" in server.dropped_["d"]
    assert estimator.round_history_[0]["contributors"] == ["a", "c"]


def test_round_draws_are_philox_of_the_seed_and_round():
    # The generator of each round is reused, but its stream is a fresh Philox's.
    from sklearn_fed.linear_model._incremental import _philox

    for key, counter in [(0, 0), (12345, 7), (2**64 - 1, 2**40), (2**70, 3)]:
        fresh = np.random.Generator(np.random.Philox(key=key, counter=counter))
        _philox(key + 1, counter).binomial(1000, 0.4)  # leave the kept one used
        kept = _philox(key, counter)
        assert kept.integers(10**9, size=4).tolist() == fresh.integers(10**9, size=4).tolist()
        assert kept.binomial(50, 0.3) == fresh.binomial(50, 0.3)


def test_solve_runs_on_one_blas_thread_and_restores_the_count():
    from threadpoolctl import threadpool_info, threadpool_limits

    from sklearn_fed.linear_model import _incremental, _incremental_model

    def blas_threads():
        return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]

    seen = {"_refactor": [], "_site_statistics": []}
    modules = {"_refactor": _incremental_model, "_site_statistics": _incremental}

    def spy(name):
        function = getattr(modules[name], name)

        def spied(*args):
            seen[name].append(blas_threads())
            return function(*args)
        return spied

    X, y, _ = stream(n=700, d=300)
    with threadpool_limits(2, user_api="blas"), pytest.MonkeyPatch.context() as patch:
        for name in seen:
            patch.setattr(modules[name], name, spy(name))
        model = IncrementalFederatedRidge().partial_fit(X, y, clients=np.arange(700) % 3)
        coef = model.coef_  # the solve: one thread
        assert seen["_site_statistics"] == [[2] * len(blas_threads())] * 3  # 700 rows > d
        model.partial_fit(X[:50], y[:50], clients=np.arange(50) % 2)  # a streaming round
        assert seen["_site_statistics"][3:] == [[1] * len(blas_threads())] * 2
        assert seen["_refactor"] and all(set(counts) == {1} for counts in seen["_refactor"])
        assert blas_threads() == [2] * len(blas_threads())
    with threadpool_limits(1, user_api="blas"):
        again = IncrementalFederatedRidge().partial_fit(X, y, clients=np.arange(700) % 3).coef_
    # Not the same bits: each site's Gram above was summed on 2 BLAS threads, here on 1,
    # and OpenBLAS's blocking (per kernel: Haswell, SkylakeX, ...) orders the sums
    # differently; the solve runs on one thread either way. Measured: 2.3e-16 relative.
    np.testing.assert_allclose(coef, again, rtol=1e-12, atol=1e-12 * np.abs(coef).max())


def test_one_column_target_shaped_like_ridge():
    # Ridge ravels coef_ (and predictions) for y of shape (n, 1); intercept_ stays (1,).
    X, y, _ = stream()
    y = y[:, None]
    reference = Ridge(alpha=0.5).fit(X, y)
    model = IncrementalFederatedRidge(alpha=0.5).fit(X, y, clients=np.arange(len(y)) % 3)
    assert model.coef_.shape == reference.coef_.shape == (X.shape[1],)
    assert np.shape(model.intercept_) == np.shape(reference.intercept_)
    assert model.predict(X).shape == reference.predict(X).shape
    assert rel_err(model, reference) < RTOL
