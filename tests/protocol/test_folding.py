"""Servers that fold replies as they read them (``Server.reply_fold``): memory and guarantees."""

import pickle

import numpy as np
import pytest

from sklearn_fed import FederatedRidge
from sklearn_fed.linear_model._base import StatisticsClient
from sklearn_fed.linear_model._federated_ridge import FederatedRidgeServer
from sklearn_fed.protocol import (
    FoldedReplies,
    InvalidClientMessage,
    SitePolicy,
    decode,
    encode,
    simulate_through_bytes,
)
from sklearn_fed.statistics import ClientStatistics, merge_statistics

# Many small sites of wide data: every reply is a d x d Gram far larger than the site's rows.
N_FEATURES, N_SITES, ROWS = 200, 32, 40
GRAM_BYTES = N_FEATURES * N_FEATURES * 8


def _data(seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N_SITES * ROWS, N_FEATURES))
    y = X[:, 0] + rng.standard_normal(N_SITES * ROWS)
    return X, y, np.repeat(np.arange(N_SITES), ROWS)


class _HoldingServer(FederatedRidgeServer):
    """FederatedRidge's server keeping every parsed reply (the path of servers that do not fold)."""

    _merges_replies = False


class _HoldingRidge(FederatedRidge):
    _server_role = _HoldingServer


# log2(32) = 5 partial merges, the reply being read, and the transients of
# computing, validating and solving: well under the 32+ Grams of holding all.
MAX_GRAMS = 16


@pytest.mark.parametrize("through_bytes", [False, True])
def test_fit_holds_log_k_grams_not_k(through_bytes, peak_memory):
    X, y, clients = _data()
    with simulate_through_bytes(through_bytes):
        fit = lambda: FederatedRidge().fit(X, y, clients=clients)
        assert peak_memory(fit) / GRAM_BYTES < MAX_GRAMS


def test_receive_unpacks_one_reply_at_a_time(peak_memory):
    X, y, clients = _data()
    server, replies = _round(FederatedRidge(), X, y, clients)
    assert peak_memory(lambda: server.receive(replies)) / GRAM_BYTES < MAX_GRAMS


def _round(estimator, X, y, clients, **kwargs):
    server = estimator.make_server(**kwargs)
    client = estimator.make_client(policy=SitePolicy.permissive())  # as fit's sites
    tasks = server.next_tasks(list(range(N_SITES)))
    replies = {s: client.respond(tasks[s], X[clients == s], y[clients == s]) for s in tasks}
    return server, replies


@pytest.mark.parametrize("fit_intercept", [True, False])
def test_folded_round_equals_holding_every_reply_bit_for_bit(fit_intercept):
    X, y, clients = _data()
    with simulate_through_bytes():  # every site's reply (fit pools the round otherwise)
        folded = FederatedRidge(fit_intercept=fit_intercept).fit(X, y, clients=clients)
    held = _HoldingRidge(fit_intercept=fit_intercept).fit(X, y, clients=clients)
    np.testing.assert_array_equal(folded.coef_, held.coef_)
    np.testing.assert_array_equal(folded.intercept_, held.intercept_)
    assert folded.communication_.uplink_bytes_per_client == \
        held.communication_.uplink_bytes_per_client
    assert folded.clients_.tolist() == held.clients_.tolist()


def test_replies_are_folded_in_label_order_whatever_the_arrival_order():
    X, y, clients = _data()
    server, replies = _round(FederatedRidge(), X, y, clients)
    server.receive(dict(reversed(list(replies.items()))))
    stats = [ClientStatistics.from_data(X[clients == s], y[clients == s])
             for s in range(N_SITES)]
    np.testing.assert_array_equal(server.estimator._aggregate.gram, merge_statistics(stats).gram)
    assert server.estimator.clients_.tolist() == list(range(N_SITES))[::-1]


def _hostile(reply, gram):
    frame = decode(reply)
    frame.arrays = {**frame.arrays, "gram": gram}
    return encode(frame)


def test_a_bad_merge_is_blamed_on_its_site_and_nothing_is_applied():
    # Symmetric, within every O(d^2) check, but not positive semi-definite:
    # only the merge's PSD test sees it; the folded replies are read again
    # to name the site.
    X, y, clients = _data()
    estimator = FederatedRidge()
    server, replies = _round(estimator, X, y, clients)
    d = N_FEATURES
    gram = 1e6 * (2.0 * np.eye(d) - np.ones((d, d)))  # eigenvalue 2 - d < 0
    replies[7] = _hostile(replies[7], gram)
    before = pickle.dumps(estimator)
    with pytest.raises(InvalidClientMessage, match="client 7: gram is not positive") as info:
        server.receive(replies)
    assert info.value.client == 7
    assert pickle.dumps(estimator) == before


def test_drop_mode_folds_only_the_valid_replies():
    X, y, clients = _data()
    server, replies = _round(FederatedRidge(), X, y, clients, on_invalid="drop")
    replies[3] = replies[3][:-1] + bytes([replies[3][-1] ^ 1])
    server.receive(replies)
    keep = clients != 3
    with simulate_through_bytes():  # site by site, as the server above
        expected = FederatedRidge().fit(X[keep], y[keep], clients=clients[keep])
    np.testing.assert_array_equal(server.estimator.coef_, expected.coef_)
    assert list(server.dropped_) == [3]


def test_robust_aggregation_keeps_every_reply():
    from sklearn_fed.linear_model import RobustAggregation

    server = FederatedRidge().make_server(robust=RobustAggregation())
    assert server.reply_fold() is None
    assert FederatedRidge().make_server().reply_fold() is not None


def test_folded_replies_parse_a_site_again_only_when_looked_up():
    X, y, clients = _data()
    server, replies = _round(FederatedRidge(), X, y, clients)
    reads = []
    read_reply = server.read_reply

    def counting(site, frame):
        reads.append(site)
        return read_reply(site, frame)

    server.read_reply = counting
    parsed, failures = server.check_round({s: decode(r) for s, r in replies.items()})
    assert isinstance(parsed, FoldedReplies) and not failures
    assert reads == list(range(N_SITES)) and len(parsed) == N_SITES
    assert parsed[5].n_samples == ROWS and reads[-1] == 5
    with pytest.raises(KeyError):
        parsed["nobody"]


def test_folded_sites_computed_ahead_on_threads_give_the_same_bits(sites_on_threads):
    # Weighted sites are not pooled: they answer one by one, or a few at once
    # on threads ahead of the server's fold, which reads them in label order.
    import threading

    rng = np.random.default_rng(5)
    X = rng.normal(size=(700, 5)) + 3.0
    y = X @ rng.normal(size=5) + rng.normal(size=700)
    w = rng.uniform(0.5, 2.0, size=700)
    clients = rng.integers(0, 7, size=700)
    fits = {}
    for workers in (1, 3):
        threads = sites_on_threads(StatisticsClient, workers)
        fits[workers] = FederatedRidge(alpha=0.5).fit(X, y, w, clients=clients)
        main = threading.get_ident()
        assert (main not in threads and threads) if workers > 1 else threads == {main}
    np.testing.assert_array_equal(fits[1].coef_, fits[3].coef_)
    assert fits[1].intercept_ == fits[3].intercept_
    assert fits[1].communication_.uplink_bytes_per_client == \
        fits[3].communication_.uplink_bytes_per_client


def test_a_failing_site_computed_ahead_fails_the_fit_as_in_turn(sites_on_threads):
    from sklearn_fed.protocol import _simulate

    rng = np.random.default_rng(6)
    X = rng.normal(size=(600, 4))
    y = rng.normal(size=600)
    X[450, 2] = np.inf  # in site 4's rows
    clients = np.repeat(np.arange(6), 100)
    libraries = _simulate.blas_libraries().lib_controllers
    threads_before = [lib.get_num_threads() for lib in libraries]
    errors = []
    for workers in (1, 3):
        sites_on_threads(StatisticsClient, workers)
        model = FederatedRidge()
        with pytest.raises(ValueError) as caught:
            model.fit(X, y, np.ones(600), clients=clients)
        errors.append(str(caught.value))
        assert not hasattr(model, "coef_")
    assert errors[0] == errors[1]
    assert [lib.get_num_threads() for lib in libraries] == threads_before  # limits restored


def test_sites_on_threads_see_the_callers_settings(monkeypatch, sites_on_threads):
    # simulate_through_bytes, scikit-learn's config and numpy's errstate are
    # thread-local: the sites' threads must see the caller's, not the defaults.
    import threading

    import sklearn

    from sklearn_fed.protocol import _simulate

    rng = np.random.default_rng(9)
    X = rng.normal(size=(400, 3))
    y = X.sum(axis=1)
    threads = sites_on_threads(StatisticsClient, 2)
    seen = []
    encode = _simulate.encode

    def spy(frame, **kwargs):
        if frame.kind.endswith("/reply"):
            seen.append((threading.get_ident(), sklearn.get_config()["assume_finite"],
                         np.geterr()["over"]))
        return encode(frame, **kwargs)

    monkeypatch.setattr(_simulate, "encode", spy)
    with simulate_through_bytes(), sklearn.config_context(assume_finite=True), \
            np.errstate(over="raise"):
        FederatedRidge().fit(X, y, np.ones(400), clients=np.repeat(np.arange(4), 100))
    assert len(seen) == 4 and {thread for thread, _, _ in seen} <= threads
    assert threading.get_ident() not in threads
    assert all(assume and over == "raise" for _, assume, over in seen)


def test_classifier_sites_on_threads_give_the_same_model(sites_on_threads):
    import threading

    from sklearn_fed import FederatedRidgeClassifier
    from sklearn_fed.linear_model._ridge_classifier import RidgeClassifierClient

    rng = np.random.default_rng(10)
    X = rng.normal(size=(600, 4))
    y = np.where(X[:, 0] + 0.3 * rng.normal(size=600) > 0, "yes", "no")
    w = rng.uniform(0.5, 2.0, size=600)  # weighted: the sites answer one by one
    clients = rng.integers(0, 5, size=600)
    models = {}
    for workers in (1, 3):
        threads = sites_on_threads(RidgeClassifierClient, workers, "compute")
        models[workers] = FederatedRidgeClassifier().fit(X, y, w, clients=clients)
        assert (threading.get_ident() in threads) == (workers == 1)
    np.testing.assert_array_equal(models[1].coef_, models[3].coef_)
    np.testing.assert_array_equal(models[1].intercept_, models[3].intercept_)
