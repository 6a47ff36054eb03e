"""FederatedEmpiricalCovariance (the developers' guide's worked example) equals scikit-learn's.

On the pooled rows, for 1, 7 and 100 sites; through bytes driven by hand; and it
refuses tampered replies naming the site. scikit-learn's own checks and the
shared federated checks run on it with every other estimator
(tests/test_estimator_checks.py, tests/protocol/test_federated_checks.py).
"""

import copy
import inspect
import warnings

import numpy as np
import pandas as pd
import pytest
from sklearn.covariance import EmpiricalCovariance

from sklearn_fed import FederatedEmpiricalCovariance
from sklearn_fed.covariance import _empirical
from sklearn_fed.protocol import (
    InvalidClientMessage,
    SymmetricMatrix,
    decode,
    encode,
    simulate_through_bytes,
)
from sklearn_fed.statistics import ClientStatistics

N_SITES = (1, 7, 100)
FITTED = ("location_", "covariance_", "precision_")


def _rows(n=700, d=5, seed=0, offset=3.0, dtype=np.float64):
    """Correlated rows with an offset (so centering matters) and no entry near zero."""
    rng = np.random.default_rng(seed)
    # covariance (I + 0.3 J) D^2 (I + 0.3 J): condition number below 30, no entry near zero
    mixing = (np.eye(d) + 0.3) @ np.diag(1.0 + rng.random(d))
    return (rng.normal(size=(n, d)) @ mixing + offset * np.arange(1, d + 1)).astype(dtype)


def _sites(n, n_sites, seed=0):
    return np.random.default_rng(seed).integers(0, n_sites, n)


def _assert_equal_to(fed, reference, rtol=1e-12):
    for name in FITTED:
        ours, theirs = getattr(fed, name), getattr(reference, name)
        if theirs is None:
            assert ours is None, name
            continue
        assert ours.dtype == theirs.dtype and ours.shape == theirs.shape, name
        np.testing.assert_allclose(ours, theirs, rtol=rtol, atol=0, err_msg=name)
    assert fed.n_features_in_ == reference.n_features_in_


# ---------------------------------------------------------- equal to scikit-learn
@pytest.mark.parametrize("n_sites", N_SITES)
@pytest.mark.parametrize("assume_centered", [False, True])
@pytest.mark.parametrize("store_precision", [True, False])
def test_equals_empirical_covariance_on_pooled_rows(n_sites, assume_centered, store_precision):
    X = _rows(offset=0.0 if assume_centered else 3.0)  # assume_centered: rows near zero mean
    params = {"assume_centered": assume_centered, "store_precision": store_precision}
    fed = FederatedEmpiricalCovariance(**params).fit(X, clients=_sites(len(X), n_sites))
    reference = EmpiricalCovariance(**params).fit(X)
    _assert_equal_to(fed, reference)
    assert fed.n_clients_ == len(np.unique(_sites(len(X), n_sites)))
    # scikit-learn's own methods, on the federated fit
    X_test = _rows(seed=1, offset=0.0 if assume_centered else 3.0)
    np.testing.assert_allclose(fed.mahalanobis(X_test), reference.mahalanobis(X_test),
                               rtol=1e-10)
    np.testing.assert_allclose(fed.score(X_test), reference.score(X_test), rtol=1e-12)
    assert fed.error_norm(reference.covariance_) < 1e-24


def test_large_offset_is_merged_stably():
    # a mean of 1e6 with unit spread: raw sums would cancel every digit
    X = _rows(offset=1e6)
    fed = FederatedEmpiricalCovariance(store_precision=False).fit(X, clients=_sites(700, 7))
    np.testing.assert_allclose(fed.covariance_, np.cov(X.T, bias=True), rtol=1e-9)


@pytest.mark.parametrize("assume_centered", [False, True])
def test_float32_rows_keep_scikit_learn_dtypes(assume_centered):
    X = _rows(dtype=np.float32, offset=0.0 if assume_centered else 3.0)
    fed = FederatedEmpiricalCovariance(assume_centered=assume_centered).fit(
        X, clients=_sites(len(X), 7))
    reference = EmpiricalCovariance(assume_centered=assume_centered).fit(X)
    for name in FITTED:
        assert getattr(fed, name).dtype == getattr(reference, name).dtype, name
    if assume_centered:  # scikit-learn: X.T @ X in float32; ours in float64, then rounded
        np.testing.assert_allclose(fed.covariance_, reference.covariance_, rtol=1e-5)
        np.testing.assert_allclose(fed.precision_, reference.precision_, rtol=1e-4)
        in_float64 = EmpiricalCovariance(assume_centered=True).fit(X.astype(np.float64))
        np.testing.assert_allclose(fed.covariance_, in_float64.covariance_, rtol=1e-7)
    else:  # np.cov works in float64 (the float32 rows are exact in it); X.mean in float32
        np.testing.assert_allclose(fed.covariance_, reference.covariance_, rtol=1e-12)
        np.testing.assert_allclose(fed.precision_, reference.precision_, rtol=1e-11)
        np.testing.assert_allclose(fed.location_, reference.location_, rtol=1e-6)
        exact = EmpiricalCovariance().fit(X.astype(np.float64)).location_.astype(np.float32)
        np.testing.assert_array_equal(fed.location_, exact)  # the mean, correctly rounded


def test_dataframe_feature_names():
    X = pd.DataFrame(_rows(d=3), columns=["age", "bmi", "bp"])
    fed = FederatedEmpiricalCovariance().fit(X, clients=_sites(len(X), 7))
    _assert_equal_to(fed, EmpiricalCovariance().fit(X))
    assert fed.feature_names_in_.tolist() == ["age", "bmi", "bp"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # named columns: no "fitted with feature names" warning
        fed.mahalanobis(X)
    with pytest.raises(ValueError, match="feature names"):
        fed.mahalanobis(X[["bp", "age", "bmi"]])


def test_one_row_and_integer_rows_as_scikit_learn():
    with pytest.warns(UserWarning, match="Only one sample available"):
        fed = FederatedEmpiricalCovariance().fit(np.arange(5).reshape(1, 5))
    np.testing.assert_array_equal(fed.covariance_, np.zeros((5, 5)))
    X = np.array([[0, 1], [1, 0], [3, 3], [4, 1]])
    _assert_equal_to(FederatedEmpiricalCovariance().fit(X, clients=[0, 1, 1, 2]),
                     EmpiricalCovariance().fit(X))


# ------------------------------------------------------------- the protocol by hand
def _by_hand(estimator, X, labels, *, keys=None, tamper=None, **server_kwargs):
    """The deployment's loop: every message crosses as bytes, each site sees only its rows."""
    server = estimator.make_server(keys=keys, **server_kwargs)
    sites = {s: estimator.make_client(key=(keys or {}).get(s), site=s)
             for s in np.unique(labels).tolist()}
    tasks = server.next_tasks(list(sites))
    while tasks:
        replies = {s: sites[s].respond(task, X[labels == s]) for s, task in tasks.items()}
        if tamper is not None:
            replies = {s: tamper(s, reply) for s, reply in replies.items()}
        server.receive(replies)
        tasks = server.next_tasks(list(sites))
    return server


@pytest.mark.parametrize("assume_centered", [False, True])
def test_bytes_driven_by_hand_equal_fit(assume_centered):
    X, labels = _rows(), _sites(700, 7)
    keys = {s: f"site-{s}-shared-secret" for s in range(7)}
    est = FederatedEmpiricalCovariance(assume_centered=assume_centered)
    server = _by_hand(est, X, labels, keys=keys)
    fitted = FederatedEmpiricalCovariance(assume_centered=assume_centered).fit(X, clients=labels)
    with simulate_through_bytes():
        through_bytes = FederatedEmpiricalCovariance(assume_centered=assume_centered).fit(
            X, clients=labels)
    for name in FITTED:  # bit for bit
        np.testing.assert_array_equal(getattr(server.estimator, name), getattr(fitted, name))
        np.testing.assert_array_equal(getattr(through_bytes, name), getattr(fitted, name))
    assert server.estimator.n_clients_ == 7 and server.rounds_applied == 1
    by_hand, ledger = server.estimator.communication_, fitted.communication_
    assert by_hand.uplink_bytes_per_client == ledger.uplink_bytes_per_client
    assert by_hand.downlink_bytes_per_client == ledger.downlink_bytes_per_client


def test_sites_send_their_columns_by_name():
    X = pd.DataFrame(_rows(d=3), columns=["a", "b", "c"])
    labels = _sites(len(X), 3)
    est = FederatedEmpiricalCovariance()
    server = est.make_server(feature_names=["a", "b", "c"])
    client = est.make_client()
    tasks = server.next_tasks([0, 1, 2])
    # each site holds its columns in its own order
    replies = {s: client.respond(t, X[labels == s][["c", "a", "b"][s:] + ["c", "a", "b"][:s]])
               for s, t in tasks.items()}
    server.receive(replies)
    _assert_equal_to(server.estimator, EmpiricalCovariance().fit(X))
    assert server.estimator.feature_names_in_.tolist() == ["a", "b", "c"]


# ---------------------------------------------------------------- hostile replies
def _reply_with(change):
    """A tamper function: site 2's statistics changed by ``change(stats)``, re-encoded."""
    def tamper(site, reply):
        if site != 2:
            return reply
        frame = decode(reply)
        stats = ClientStatistics.from_payload(frame.fields, frame.arrays, n_targets=0)
        frame.fields, frame.arrays = change(stats)
        return encode(frame)
    return tamper


def _indefinite(stats):
    # every 2x2 minor passes Cauchy-Schwarz, but the matrix is not PSD
    d = stats.n_features
    scale = np.sqrt(np.outer(np.diag(stats.gram), np.diag(stats.gram)))
    gram = np.full((d, d), -0.9) * scale
    np.fill_diagonal(gram, np.diag(stats.gram))
    fields, arrays = stats.to_payload()
    return fields, {**arrays, "gram": SymmetricMatrix(gram)}


def _edit(fields=None, **arrays):
    def change(stats):
        payload_fields, payload_arrays = stats.to_payload()
        return {**payload_fields, **(fields or {})}, {**payload_arrays, **arrays}
    return change


HOSTILE = {
    "more rows than weight": _edit({"n_samples": 10**6}),
    "uncentered statistics": _edit({"centered": False}),
    "a NaN mean": _edit(x_mean=np.array([np.nan, 0, 0, 0, 0.0])),
    "a mean too short": _edit(x_mean=np.zeros(4)),
    "a target": _edit(y_mean=np.zeros(1)),
    "an asymmetric gram": _edit(gram=np.triu(np.ones((5, 5)))),
    "a negative variance": _edit(gram=SymmetricMatrix(-np.eye(5))),
    "an indefinite gram": _indefinite,
}


@pytest.mark.parametrize("what", list(HOSTILE))
def test_hostile_reply_is_refused_naming_the_site(what):
    X, labels = _rows(), _sites(700, 3)
    est = FederatedEmpiricalCovariance()
    with pytest.raises(InvalidClientMessage, match="client 2") as info:
        _by_hand(est, X, labels, tamper=_reply_with(HOSTILE[what]))
    assert info.value.client == 2
    assert not hasattr(est, "covariance_")  # nothing of the round was applied


def test_a_dropped_site_leaves_the_others_model():
    X, labels = _rows(), _sites(700, 3)
    server = _by_hand(FederatedEmpiricalCovariance(), X, labels, on_invalid="drop",
                      tamper=_reply_with(_indefinite))
    assert list(server.dropped_) == [2]
    _assert_equal_to(server.estimator, EmpiricalCovariance().fit(X[labels != 2]))


def test_a_task_without_centering_is_refused_at_the_site():
    est = FederatedEmpiricalCovariance()
    task = decode(est.make_server().next_tasks([0])[0])
    task.fields = {}
    with pytest.raises(InvalidClientMessage, match="server"):
        est.make_client().respond(encode(task), _rows())


def test_hostile_reply_on_a_copy_of_the_server_changes_nothing():
    X, labels = _rows(), _sites(700, 3)
    est = FederatedEmpiricalCovariance()
    server = est.make_server()
    client = est.make_client()
    tasks = server.next_tasks([0, 1, 2])
    replies = {s: client.respond(t, X[labels == s]) for s, t in tasks.items()}
    attempt = copy.deepcopy(server)
    with pytest.raises(InvalidClientMessage):
        attempt.receive({**replies, 2: _reply_with(_indefinite)(2, replies[2])})
    server.receive(replies)  # the honest round still applies
    _assert_equal_to(server.estimator, EmpiricalCovariance().fit(X))



def test_the_guides_roles_stay_short():
    # docs/developers.rst includes the roles verbatim and promises fewer than 80 lines
    roles = [_empirical.EmpiricalCovarianceClient, _empirical.EmpiricalCovarianceServer]
    assert sum(len(inspect.getsource(role).splitlines()) for role in roles) < 80
