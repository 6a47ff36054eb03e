"""Checks every federated estimator must pass, beyond scikit-learn's own.

Use :func:`parametrize_with_federated_checks` in a test module, as
scikit-learn's :func:`~sklearn.utils.estimator_checks.parametrize_with_checks`::

    @parametrize_with_federated_checks([FederatedRidge(), FESCRidge()])
    def test_federated(estimator, check):
        check(estimator)

The checks:

- :func:`check_fit_equals_protocol_run`: ``fit(X, y, clients=c)`` and a run
  of ``make_server``/``make_client``/``next_tasks``/``respond``/``receive``
  driven by hand with bytes give the same model (bit for bit: coefficients,
  or a network's parameters; to round-off for a round ``fit`` pools), the
  same predictions and the same byte counts.
- :func:`check_ledger_matches_bytes`: ``communication_`` counts exactly the
  bytes of the tasks and replies.
- :func:`check_label_round_trip`: ``clients_`` keeps each label's type.
- :func:`check_failed_fit_leaves_estimator_unchanged`: a ``fit`` or
  ``partial_fit`` that raises changes nothing.
- :func:`check_bad_reply_rejects_round`: a tampered reply is rejected with
  :class:`~sklearn_fed.InvalidClientMessage` naming the site, and nothing of
  the round is applied.
- :func:`check_hostile_replies_are_refused`: every reply field and array
  pushed to hostile values (NaN, infinities, huge or negative numbers, wrong
  types, shapes or dtypes, missing or extra entries) and re-sealed with a
  valid checksum is refused with :class:`~sklearn_fed.InvalidClientMessage`
  naming the site, or is harmless (a finite model) — never another exception.
- :func:`check_partition_invariance` (exact estimators only): any split of
  the rows into clients gives the model of one client.
"""

import copy
import functools
import pickle
import warnings

import numpy as np
from sklearn.base import BaseEstimator, clone, is_classifier

from .._clients import group_rows_by_client
from .._composite import site_rows, table_feature_names
from ..protocol import (
    BytesTransport,
    InvalidClientMessage,
    SitePolicy,
    decode,
    encode,
    run_rounds,
    simulate_through_bytes,
)

__all__ = [
    "check_bad_reply_rejects_round",
    "check_failed_fit_leaves_estimator_unchanged",
    "check_fit_equals_protocol_run",
    "check_hostile_replies_are_refused",
    "check_label_round_trip",
    "check_ledger_matches_bytes",
    "check_partition_invariance",
    "federated_checks",
    "parametrize_with_federated_checks",
    "run_protocol_by_hand",
]


def _data(estimator, n=90, d=4, seed=0):
    """A small problem suited to the estimator (classification or regression)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    if is_classifier(estimator):
        y = (X[:, 0] + 0.5 * X[:, 1] > 0).astype(int)
    else:
        y = X @ np.linspace(1.0, -1.0, d) + 0.1 * rng.normal(size=n) + 3.0
    clients = np.arange(n) % 3
    return X, y, clients


def run_protocol_by_hand(estimator, X, y, clients, sample_weight=None, *, keys=None,
                         tamper=None, max_rounds=None, policy=None):
    """Drive ``estimator``'s roles with bytes, one site per client label.

    Parameters
    ----------
    estimator : estimator
        Fitted by the run (its server's estimator).
    X, y, clients, sample_weight : arrays
    keys : dict, default=None
        Site -> key, for both roles.
    tamper : callable, default=None
        ``tamper(site, reply_bytes) -> bytes``, applied to every reply.
    max_rounds : int, default=None
        Stop after this many rounds (streaming protocols never finish).
    policy : SitePolicy, default=None
        Every site's policy. ``None``: :meth:`SitePolicy.permissive
        <sklearn_fed.protocol.SitePolicy.permissive>`, as the sites that
        ``fit`` simulates, so that the run and ``fit`` can be compared.

    Returns
    -------
    server : Server
    sent : dict
        ``{"tasks": {site: bytes}, "replies": {site: bytes}}`` summed over rounds.
    """
    labels, rows = group_rows_by_client(clients, X.shape[0])
    labels = [label.item() if isinstance(label, np.generic) else label for label in labels]
    keys = keys or {}
    # told the feature names when X is a table with named columns, as fit does
    server = estimator.make_server(keys=keys, max_rounds=max_rounds,
                                   feature_names=table_feature_names(X))
    policy = SitePolicy.permissive() if policy is None else policy
    sites = {label: estimator.make_client(key=keys.get(label), policy=policy)
             for label in labels}
    data = {label: site_rows(r, X, y, sample_weight) for label, r in zip(labels, rows)}
    transport = BytesTransport(sites, data, tamper=tamper)
    run_rounds(server, transport, labels)
    return server, transport.sent


# Fitted attributes that describe the federation or the run (its timings), not the model.
_FEDERATION_ATTRIBUTES = ("communication_", "clients_", "n_clients_", "round_history_")


def _model_state(estimator):
    """What must be identical between two runs: every learned attribute, nested parts included.

    A dict of the public fitted attributes (names ending in ``_``) but the
    federation's own (ledger, clients) and the diagnostics only a simulation
    can compute (an estimator's ``_simulation_only_attributes``); fitted
    sub-estimators (pipeline steps, a column transformer's parts) are
    replaced by their own state.
    """
    if hasattr(estimator, "module_"):  # a torch network: its parameters
        return [p.detach().numpy().copy() for p in estimator.module_.parameters()]
    skip = _FEDERATION_ATTRIBUTES + tuple(getattr(estimator, "_simulation_only_attributes", ()))
    state = {name: _plain_state(value) for name, value in sorted(vars(estimator).items())
             if name.endswith("_") and not name.startswith("_") and name not in skip}
    if hasattr(estimator, "steps") and hasattr(estimator, "_final_estimator"):
        state["steps"] = _plain_state([step for _, step in estimator.steps])
    return state


def _plain_state(value):
    if isinstance(value, BaseEstimator):
        return _model_state(value)
    if isinstance(value, (list, tuple)):
        return [_plain_state(item) for item in value]
    if isinstance(value, dict):
        return {key: _plain_state(item) for key, item in value.items()}
    return value


def _assert_close_state(a, b):
    """Model states equal up to round-off: float arrays close, everything else equal."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), (a, b)
        for key in a:
            _assert_close_state(a[key], b[key])
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b)
        for x, y in zip(a, b):
            _assert_close_state(x, y)
    elif isinstance(a, (np.ndarray, float, np.floating)) and np.asarray(a).dtype.kind == "f":
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
    else:
        np.testing.assert_equal(a, b)


def _rounds_of(estimator):
    return getattr(estimator, "_protocol_rounds_in_fit", None)


def check_fit_equals_protocol_run(estimator):
    """``fit`` is an in-process run of the roles: same model, predictions and bytes.

    Bit for bit; a server that pools a round in simulation (see
    :meth:`~sklearn_fed.protocol.Server.pools_round`) gives the model to
    round-off and the same bytes, and bit for bit inside
    :func:`~sklearn_fed.protocol.simulate_through_bytes`, which never pools.
    """
    X, y, clients = _data(estimator)
    server, _ = run_protocol_by_hand(
        clone(estimator), X, y, clients, max_rounds=_rounds_of(estimator)
    )
    by_hand = server.estimator
    pools = clone(estimator).make_server().pools_round(None)
    with simulate_through_bytes(pools):
        fitted = clone(estimator).fit(X, y, clients=clients)
    np.testing.assert_equal(_model_state(fitted), _model_state(by_hand))
    for method in ("predict", "predict_proba"):
        if hasattr(fitted, method):
            np.testing.assert_array_equal(getattr(fitted, method)(X), getattr(by_hand, method)(X))
    assert _ledger(fitted) == _ledger(by_hand)
    if pools:
        pooled = clone(estimator).fit(X, y, clients=clients)
        _assert_close_state(_model_state(pooled), _model_state(by_hand))
        assert _ledger(pooled) == _ledger(by_hand)


def _ledger(estimator):
    ledger = estimator.communication_
    return (
        dict(ledger.uplink_bytes_per_client),
        dict(ledger.downlink_bytes_per_client),
        ledger.rounds,
    )


def check_ledger_matches_bytes(estimator):
    """``communication_`` counts exactly the bytes of the tasks and replies."""
    X, y, clients = _data(estimator)
    server, sent = run_protocol_by_hand(
        clone(estimator), X, y, clients, max_rounds=_rounds_of(estimator)
    )
    ledger = server.estimator.communication_
    assert dict(ledger.uplink_bytes_per_client) == sent["replies"]
    assert dict(ledger.downlink_bytes_per_client) == sent["tasks"]


def check_label_round_trip(estimator):
    """``clients_`` keeps mixed label types (``1`` stays an int next to ``"a"``)."""
    X, y, _ = _data(estimator)
    clients = np.array([1, "a", 2.5] * (X.shape[0] // 3), dtype=object)
    fitted = clone(estimator).fit(X, y, clients=clients)
    assert sorted(map(repr, fitted.clients_.tolist())) == sorted(map(repr, [1, "a", 2.5]))


def check_failed_fit_leaves_estimator_unchanged(estimator):
    """A call that raises (infinity in X, a wrong number of features) changes nothing.

    Infinity rather than NaN: imputers, scalers and encoders take NaN as a
    missing value, and no estimator takes infinity.
    """
    X, y, clients = _data(estimator)
    fitted = clone(estimator).fit(X, y, clients=clients)
    before = pickle.dumps(fitted)
    bad_X = X.copy()
    bad_X[5, 1] = np.inf
    calls = [functools.partial(fitted.fit, bad_X, y, clients=clients),
             functools.partial(fitted.fit, X, y, clients=clients[:-1])]
    if hasattr(fitted, "partial_fit"):
        calls += [functools.partial(fitted.partial_fit, bad_X, y, clients=clients),
                  functools.partial(fitted.partial_fit, X[:, :-1], y, clients=clients)]
    for call in calls:
        try:
            call()
        except ValueError:
            pass
        else:
            raise AssertionError(f"{call.func.__name__} accepted bad input")
        assert pickle.dumps(fitted) == before, f"{call.func.__name__} changed the estimator"


def check_bad_reply_rejects_round(estimator):
    """A reply with one flipped bit is rejected, naming the site; nothing is applied."""
    X, y, clients = _data(estimator)

    def flip(site, reply):
        if site != 2:
            return reply
        data = bytearray(reply)
        data[len(data) // 2] ^= 1
        return bytes(data)

    target = clone(estimator)
    before = pickle.dumps(target)
    try:
        run_protocol_by_hand(target, X, y, clients, tamper=flip,
                             max_rounds=_rounds_of(estimator))
    except InvalidClientMessage as exc:
        assert exc.client == 2 and "client 2" in str(exc)
    else:
        raise AssertionError("a tampered reply was accepted")
    assert pickle.dumps(target) == before, "a rejected round changed the estimator"


def _hostile_variants(frame):
    """What a dishonest site can send with a valid checksum: ``(what, fields, arrays)``."""
    fields, arrays = frame.fields, frame.arrays
    for name, array in arrays.items():
        others = {k: v for k, v in arrays.items() if k != name}
        if array.size and array.dtype.kind == "f":
            for value in (np.nan, np.inf, -1e300, 1e300):
                bad = np.array(array, copy=True)
                with np.errstate(over="ignore"):  # 1e300 in a float32 array is inf
                    bad.flat[0] = value
                yield f"{name}[0]={value}", fields, {**others, name: bad}
        elif array.size and array.dtype.kind in "iu":
            info = np.iinfo(array.dtype)
            for value in (info.max, info.min, -1 if info.min < 0 else info.max - 1):
                bad = np.array(array, copy=True)
                bad.flat[0] = value
                yield f"{name}[0]={value}", fields, {**others, name: bad}
        if array.size:
            yield f"{name} one short", fields, {**others, name: array.ravel()[:-1]}
        yield f"{name} one longer", fields, {**others, name: np.append(array.ravel(), 0)}
        cast = np.float64 if array.dtype.kind in "iub" else np.int64
        yield f"{name} as {np.dtype(cast).name}", fields, {**others, name: array.astype(cast)}
        yield f"{name} missing", fields, others
    yield "an extra array", fields, {**arrays, "extra": np.zeros(3)}
    for key, value in fields.items():
        others = {k: v for k, v in fields.items() if k != key}
        for bad in ("x", None, -1, 2**70, 1e300, float("nan"), [1, 2], {"a": 1}, True):
            if not (type(bad) is type(value) and bad == value):
                yield f"field {key}={bad!r}", {**others, key: bad}, arrays
        yield f"field {key} missing", others, arrays
    yield "an extra field", {**fields, "extra": 1}, arrays


def _finite_state(state):
    """Whether every floating-point array of a model state, nested parts included, is finite."""
    if isinstance(state, dict):
        state = list(state.values())
    if isinstance(state, list):
        return all(map(_finite_state, state))
    return np.asarray(state).dtype.kind != "f" or bool(np.isfinite(state).all())


def check_hostile_replies_are_refused(estimator, max_rounds_attacked=2):
    """Hostile replies (valid checksum) are refused naming the site, or harmless.

    In each of the first rounds, one site's honest reply is decoded, one of
    its fields or arrays is replaced by a hostile value, and the result is
    re-encoded and received (on a copy of the server) beside the other
    sites' honest replies. Any exception other than
    :class:`~sklearn_fed.InvalidClientMessage` naming that site fails the
    check; so does an accepted reply that leaves a non-finite model.
    """
    X, y, clients = _data(estimator)
    labels, rows = group_rows_by_client(clients, X.shape[0])
    labels = [label.item() if isinstance(label, np.generic) else label for label in labels]
    index = dict(zip(labels, rows))
    target = labels[1]
    server = clone(estimator).make_server(max_rounds=_rounds_of(estimator))
    # permissive sites, as fit's: the check is about what the server accepts
    sites = {label: server.estimator.make_client(policy=SitePolicy.permissive())
             for label in labels}
    tasks = server.next_tasks(labels)
    for _ in range(max_rounds_attacked):
        if not tasks:
            break
        replies = {s: sites[s].respond(tasks[s], X[index[s]], y[index[s]]) for s in tasks}
        if target in replies:
            honest = decode(replies[target])
            for what, fields, arrays in _hostile_variants(honest):
                hostile = copy.copy(honest)
                hostile.fields, hostile.arrays = fields, arrays
                attempt = copy.deepcopy(server)
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        attempt.receive({**replies, target: encode(hostile)})
                except InvalidClientMessage as exc:
                    assert exc.client == target, f"{what}: blamed {exc.client!r}: {exc}"
                except Exception as exc:  # any other exception is what the check is about
                    raise AssertionError(
                        f"reply with {what} raised {type(exc).__name__}: {exc}"
                    ) from exc
                else:
                    model = attempt.estimator
                    if hasattr(model, "coef_") or hasattr(model, "module_"):
                        assert _finite_state(_model_state(model)), (
                            f"reply with {what} gave a non-finite model")
        server.receive(replies)
        tasks = server.next_tasks(labels)


def check_partition_invariance(estimator):
    """Exact estimators: any split of the rows into clients gives the pooled model."""
    if not getattr(estimator, "_exact_federation", False):
        return
    X, y, clients = _data(estimator)
    one = _model_state(clone(estimator).fit(X, y))
    for split in (clients, np.arange(X.shape[0]) % 7, np.arange(X.shape[0])):
        _assert_close_state(one, _model_state(clone(estimator).fit(X, y, clients=split)))


_CHECKS = (
    check_fit_equals_protocol_run,
    check_ledger_matches_bytes,
    check_label_round_trip,
    check_failed_fit_leaves_estimator_unchanged,
    check_bad_reply_rejects_round,
    check_hostile_replies_are_refused,
    check_partition_invariance,
)


def federated_checks(estimator):
    """Yield ``(estimator, check)`` pairs for :func:`parametrize_with_federated_checks`."""
    for check in _CHECKS:
        yield estimator, check


def parametrize_with_federated_checks(estimators):
    """A ``pytest.mark.parametrize`` over every federated check of every estimator."""
    import pytest

    cases = [pair for estimator in estimators for pair in federated_checks(estimator)]
    ids = [f"{type(est).__name__}-{check.__name__}" for est, check in cases]
    return pytest.mark.parametrize("estimator, check", cases, ids=ids)
