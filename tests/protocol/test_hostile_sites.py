"""Hostile sites against every estimator: structure-aware mutations of one site's reply.

Three sites, one of them hostile (read first, label 0, or last, label 2). In
each of the first rounds of a protocol, the hostile site's honest reply is
decoded and mutated, one change at a time, in every header field, every
schema entry, every field (nested ones too) and every array: wrong types and
dtypes (``[]``, ``{}``, ``"|O"``, 0-d arrays), wrong shapes, NaN and
infinities, values that overflow float32 (1e308, -1e300), other target
counts and feature names, truncated and garbled bytes. The mutated reply is
re-encoded with a valid checksum (a site signs whatever it sends) and
received beside the honest replies by a copy of the server. What must hold:

- the only exception is :class:`~sklearn_fed.InvalidClientMessage` naming the
  hostile site (never an honest one, never a non-library exception);
- a refused round leaves every attribute of the server and its estimator as
  it was (compared value by value, nested parts included);
- an accepted reply leaves a finite model whose outputs on the honest rows are
  finite and of the honest dtype, and a malformed reply (anything but a
  plausible value) that is accepted leaves exactly the honest model;
- with ``on_invalid="drop"`` the hostile site is dropped, alone, and the model
  is exactly the one the honest sites give when the hostile site drops out;
- each receive takes under 10 s and allocates under 100 MB (tracemalloc).

The suite runs a deterministic sample of the mutations (a few seconds per
estimator); ``make fuzz`` runs all of them
(``python -W ignore tests/protocol/hostile_harness.py``). Every finding of
issue 27 has a named regression test at the end of this file.
"""

import pickle

import numpy as np
import pytest
from hostile_harness import (  # tests/protocol, on sys.path as pytest imports this file
    CASE_IDS,
    CASES,
    IN_ORDER,
    LABELS,
    _edit_meta,
    _put,
    _site_rows,
    _with,
    run_case,
    snapshot,
)
from sklearn.base import clone

from sklearn_fed import (
    FedAvgRegressor,
    FederatedMinMaxScaler,
    FederatedOneHotEncoder,
    FederatedPCA,
    FederatedRidge,
    FederatedRidgeClassifier,
    FederatedSimpleImputer,
    FederatedStandardScaler,
    InvalidClientMessage,
)
from sklearn_fed.compose import FederatedColumnTransformer
from sklearn_fed.protocol import decode, encode

pytestmark = pytest.mark.filterwarnings("ignore:X does not have valid feature names")


@pytest.mark.parametrize("case_id", CASE_IDS)
def test_hostile_site(case_id):
    """A sample of the mutations (the same every run), hostile site read first and last."""
    assert run_case(case_id, per_round=8) > 0


@pytest.mark.parametrize("case_id", ["ridge", "standard", "logistic", "pipeline"])
def test_hostile_site_undeclared_schema(case_id):
    """A server that declared nothing (``fit`` on plain arrays): a reply describing other
    features or targets refuses the round naming no site, or is refused naming the hostile
    site; never an honest one."""
    assert run_case(case_id, per_round=8, rounds=1, declare=False) > 0


# ------------------------------------------------------------------ issue 27's findings
def _three_sites(estimator, sites, **server_kwargs):
    """A server, and each site's honest reply to its first task (``{site: bytes}``)."""
    server = estimator.make_server(**server_kwargs)
    tasks = server.next_tasks(list(sites))
    client = server.estimator.make_client(policy=IN_ORDER)
    return server, {s: client.respond(tasks[s], *sites[s]) for s in sites}


def _mutated(data, edit):
    frame = decode(data)
    edit(frame)
    return encode(frame)


def _refused(server, replies, site, match=None):
    before = snapshot(server)
    with pytest.raises(InvalidClientMessage, match=match) as info:
        server.receive(replies)
    assert info.value.client == site
    assert snapshot(server) == before  # nothing of the refused round was applied
    return info.value


@pytest.mark.parametrize("dtype", [[], {}, "|O"])
@pytest.mark.parametrize("case_id", ["ridge", "minmax", "logistic", "pipeline"])
def test_unhashable_or_object_schema_dtype_is_refused_naming_the_site(case_id, dtype):
    """Finding: a schema dtype of [] or {} raised TypeError: unhashable type in the commit."""
    _, factory, float32, categorical = CASES[CASE_IDS.index(case_id)]
    estimator = factory()
    sites = _site_rows(estimator, float32, categorical)
    for hostile in (0, 2):
        server, replies = _three_sites(clone(estimator), sites)
        replies[hostile] = _with(replies[hostile], "schema", ("dtype",), dtype)
        _refused(server, replies, hostile, "dtype")


@pytest.mark.parametrize("missing", ["names", "n_targets", "dtype", "n_features"])
def test_schema_missing_a_key_is_refused_naming_the_site(missing):
    """Found by the harness: a schema without 'names' raised KeyError in check_agreement."""
    sites = _site_rows(FederatedMinMaxScaler(), False, False)
    server, replies = _three_sites(FederatedMinMaxScaler(), sites)
    replies[0] = _edit_meta(replies[0], lambda meta: meta["schema"].pop(missing))
    _refused(server, replies, 0, "schema")


@pytest.mark.parametrize("estimator", [FederatedPCA(n_components=2), FederatedRidge(),
                                       FederatedRidgeClassifier()],
                         ids=["pca", "ridge", "ridge-classifier"])
def test_zero_d_x_mean_is_refused_naming_the_site(estimator):
    """Finding: a 0-d x_mean raised IndexError in ClientStatistics.from_payload."""
    from sklearn_fed import ClientStatistics

    honest = ClientStatistics.from_data(np.ones((3, 2)) + np.eye(3, 2), np.arange(3.0))
    fields, arrays = honest.to_payload()
    with pytest.raises(InvalidClientMessage, match="client 'evil'.*vectors"):
        ClientStatistics.from_payload(fields, {**arrays, "x_mean": np.zeros(())},
                                      client="evil")
    sites = _site_rows(estimator, False, False)
    server = clone(estimator).make_server()
    client = server.estimator.make_client(policy=IN_ORDER)
    while True:  # honest rounds up to the one of the statistics (a classifier's classes first)
        tasks = server.next_tasks(list(LABELS))
        replies = {s: client.respond(tasks[s], *sites[s]) for s in LABELS}
        name = next((n for n in decode(replies[2]).arrays if n.endswith("x_mean")), None)
        if name is not None:
            break
        server.receive(replies)

    def zero_d(frame):
        frame.arrays = {**frame.arrays, name: np.zeros(())}

    replies[2] = _mutated(replies[2], zero_d)
    exc = _refused(server, replies, 2)
    assert "IndexError" not in str(exc)


def test_minmax_float32_overflowing_minimum_is_refused_naming_the_site():
    """Finding: on float32 sites, a data_min of -1e300 became -inf and every transform NaN."""
    sites = _site_rows(FederatedMinMaxScaler(), True, False)
    for hostile in (0, 2):
        server, replies = _three_sites(FederatedMinMaxScaler(), sites)
        replies[hostile] = _mutated(replies[hostile], lambda f: f.arrays.update(
            data_min=_put(f.arrays["data_min"].astype(np.float64), -1e300)))
        _refused(server, replies, hostile, "data_min.*float32")
        server = FederatedMinMaxScaler().make_server(on_invalid="drop")
        tasks = server.next_tasks(list(LABELS))
        client = server.estimator.make_client(policy=IN_ORDER)
        replies = {s: client.respond(tasks[s], *sites[s]) for s in LABELS}
        replies[hostile] = _mutated(replies[hostile], lambda f: f.arrays.update(
            data_min=_put(f.arrays["data_min"].astype(np.float64), -1e300)))
        server.receive(replies)
        assert list(server.dropped_) == [hostile]
        honest = np.concatenate([sites[s][0] for s in LABELS if s != hostile])
        reference = FederatedMinMaxScaler().fit(honest)
        np.testing.assert_array_equal(server.estimator.data_min_, reference.data_min_)
        assert server.estimator.data_min_.dtype == np.float32
        assert np.isfinite(server.estimator.transform(honest)).all()


@pytest.mark.parametrize("strategy", ["mean", "most_frequent", "constant"])
def test_imputer_dtype_comes_from_the_schema(strategy):
    """Finding: FederatedSimpleImputer took a reply dtype "|O" and transformed to objects."""
    estimator = FederatedSimpleImputer(strategy=strategy)
    for float32 in (False, True):
        sites = _site_rows(estimator, float32, False)
        for dtype in ("|O", "<f2", ">f8", "<f4" if not float32 else "<f8"):
            if dtype == "|O" and strategy != "mean" and not float32:
                continue  # object columns are SimpleImputer's for these strategies
            server, replies = _three_sites(clone(estimator), sites)
            replies[0] = _mutated(replies[0], lambda f, d=dtype: f.fields.update(dtype=d))
            _refused(server, replies, 0, "dtype")
    server, replies = _three_sites(clone(estimator), _site_rows(estimator, False, False))
    server.receive(replies)
    assert server.estimator.transform(np.zeros((2, 4))).dtype == np.float64


def test_a_hostile_schema_read_first_blames_no_honest_site():
    """Finding: the first reply read was the reference; with another n_targets or feature
    names it got the honest sites refused, or (drop) the model fitted on the attacker alone."""
    sites = _site_rows(FederatedRidge(), False, False)

    def other_targets(frame):
        frame.schema = {**frame.schema, "n_targets": 2}

    names = [f"x{i}" for i in range(4)]
    for edit in (other_targets, lambda f: f.schema.update(
            names="0" * 32)):
        # declared (a deployment declares its features): the hostile site is named
        server, replies = _three_sites(FederatedRidge(), sites, feature_names=names,
                                       n_targets=1)
        replies[0] = _mutated(replies[0], edit)
        _refused(server, replies, 0)
        server, replies = _three_sites(FederatedRidge(), sites, feature_names=names,
                                       n_targets=1, on_invalid="drop")
        replies[0] = _mutated(replies[0], edit)
        server.receive(replies)
        assert list(server.dropped_) == [0] and server.estimator.clients_.tolist() == [1, 2]
        honest = FederatedRidge().fit(np.concatenate([sites[1][0], sites[2][0]]),
                                      np.concatenate([sites[1][1], sites[2][1]]))
        np.testing.assert_allclose(server.estimator.coef_, honest.coef_, rtol=1e-12)
    # declared nothing: the round is refused and no site is blamed
    server, replies = _three_sites(FederatedRidge(), sites)
    replies[0] = _mutated(replies[0], other_targets)
    before = snapshot(server)
    with pytest.raises(ValueError, match="disagree") as info:
        server.receive(replies)
    assert not isinstance(info.value, InvalidClientMessage)
    assert snapshot(server) == before


def test_an_unsupervised_reply_describing_targets_is_refused_naming_it():
    """Found by the harness: a transformer's server declared nothing about targets, so a reply
    with n_targets refused the round for everyone; a transformer never takes targets."""
    sites = _site_rows(FederatedStandardScaler(), False, False)
    server, replies = _three_sites(FederatedStandardScaler(), sites)
    replies[2] = _mutated(replies[2], lambda f: f.schema.update(n_targets=1))
    _refused(server, replies, 2, "takes none")
    server, replies = _three_sites(FederatedRidge(), sites)
    replies[2] = _mutated(replies[2], lambda f: f.schema.update(n_targets=None))
    _refused(server, replies, 2, "needs them")


def test_fedavg_targets_of_other_dimensions_blame_no_site():
    """Found by the harness: a site claiming 2-D targets, read first, got the honest sites
    named ("its targets are 1-D, the other sites' 2-D")."""
    estimator = FedAvgRegressor(n_rounds=2, random_state=0)
    sites = _site_rows(estimator, False, False)
    server, replies = _three_sites(clone(estimator), sites)
    replies[0] = _mutated(replies[0], lambda f: f.fields.update(y_ndim=2))
    before = snapshot(server)
    with pytest.raises(ValueError, match="disagree") as info:
        server.receive(replies)
    assert not isinstance(info.value, InvalidClientMessage)
    assert snapshot(server) == before


def test_refused_receive_restores_every_server_attribute():
    """Finding: after a refused receive, Server round_dtype (then ``_dtype``) was not restored;
    now the whole server and its estimator are, whatever ``apply`` changed before failing."""
    sites = _site_rows(FederatedStandardScaler(), True, False)
    server, replies = _three_sites(FederatedStandardScaler(), sites)
    before = snapshot(server)
    assert server.round_dtype == np.float64

    def failing_apply(replies, ledger):
        server.estimator.mean_ = "half-applied"
        server.touched = True
        raise ValueError("the hook failed after changing state")

    server.apply = failing_apply
    with pytest.raises(ValueError, match="hook failed"):
        server.receive(replies)
    del server.apply
    assert snapshot(server) == before and server.round_dtype == np.float64
    server.receive(replies)
    assert server.round_dtype == np.float32 and server.estimator.n_samples_seen_.sum() == 90


def test_refused_receive_puts_back_the_objects_the_attributes_shared():
    """Finding: the savepoint put back copies of list and dict attributes, so attributes that
    shared one object (IncrementalFederatedRidge's ``leaders_`` and its stream state, FedMPDD's
    net) held two equal ones after a refused round, and the model no longer pickled as it did."""
    sites = _site_rows(FederatedStandardScaler(), False, False)
    server, replies = _three_sites(FederatedStandardScaler(), sites)
    estimator = server.estimator
    shared = [1]
    estimator.log_, estimator.state_ = shared, {"log": shared}
    state = estimator.state_
    before = pickle.dumps(estimator)

    def failing_apply(replies, ledger):
        shared.append(2)  # mutated in place, then replaced
        state["log"] = None
        estimator.log_, estimator.state_ = [3], {}
        raise ValueError("the hook failed after changing state")

    server.apply = failing_apply
    with pytest.raises(ValueError, match="hook failed"):
        server.receive(replies)
    del server.apply
    assert estimator.log_ is shared and estimator.state_ is state and state["log"] is shared
    assert shared == [1] and pickle.dumps(estimator) == before


def test_column_transformer_part_two_failure_commits_nothing_and_retry_recovers():
    """Finding: FederatedColumnTransformer committed its parts one after another; when part 2
    failed (a category outside fixed ``categories``, a ValueError naming no site) part 1
    stayed committed, and a retry raised TypeError: argument of type 'NoneType' ..."""
    transformer = FederatedColumnTransformer([
        ("scale", FederatedStandardScaler(), [0, 1]),
        ("onehot", FederatedOneHotEncoder(categories=[[0.0, 1.0, 2.0]]), [2])])
    sites = _site_rows(transformer, False, True)
    bad = dict(sites)
    X = sites[2][0].copy()
    X[0, 2] = 7.0  # outside the fixed categories
    bad[2] = (X, sites[2][1])
    estimator = clone(transformer)
    server = estimator.make_server()
    labels = list(LABELS)
    client = estimator.make_client(policy=IN_ORDER)
    tasks = server.next_tasks(labels)
    while tasks:  # the schema round, then the fit round
        replies = {s: client.respond(tasks[s], *bad[s]) for s in tasks}
        if decode(tasks[0]).fields.get("step") == "fit":
            break
        server.receive(replies)
        tasks = server.next_tasks(labels)
    before = snapshot(server)
    with pytest.raises(ValueError, match="unknown categor"):
        server.receive(replies)
    assert snapshot(server) == before  # part 1 (the scaler) was not committed either
    server.receive({s: r for s, r in replies.items() if s != 2})  # retry without site 2
    while (tasks := server.next_tasks(labels)):
        server.receive({s: client.respond(tasks[s], *sites[s]) for s in tasks if s != 2})
    honest = np.concatenate([sites[0][0], sites[1][0]])
    reference = clone(transformer).fit(honest)
    np.testing.assert_allclose(server.estimator.transform(honest), reference.transform(honest),
                               rtol=1e-12)


@pytest.mark.parametrize("case_id, name", [("pca-f32", "x_mean"), ("pca-f32", "gram"),
                                           ("ridge-f32", "y_mean")])
def test_float32_model_overflow_names_the_site_and_drop_leaves_it_out(case_id, name):
    """Found by the harness: on float32 sites, statistics of 1e50 (within every float64 cap)
    gave an infinite float32 model (PCA's mean_ and variances, ridge's intercept). Refused
    naming the site; with on_invalid="drop" the site is left out and the others applied."""
    _, factory, float32, categorical = CASES[CASE_IDS.index(case_id)]
    sites = _site_rows(factory(), float32, categorical)
    for mode in ("raise", "drop"):
        server, replies = _three_sites(factory(), sites, on_invalid=mode)
        replies[0] = _mutated(replies[0], lambda f: f.arrays.update(
            {name: _put(np.asarray(f.arrays[name]), 1e50)}))
        if mode == "raise":
            _refused(server, replies, 0, "overflow|non-finite")
            continue
        server.receive(replies)
        assert list(server.dropped_) == [0]
        honest = factory().fit(np.concatenate([sites[1][0], sites[2][0]]),
                               np.concatenate([sites[1][1], sites[2][1]]),
                               clients=[1] * 30 + [2] * 30)
        for attribute in ("mean_", "coef_", "intercept_"):
            if hasattr(honest, attribute):
                np.testing.assert_allclose(getattr(server.estimator, attribute),
                                           getattr(honest, attribute), rtol=1e-5)
