"""The wire format and the two roles: what is accepted, what is refused, and why."""

import json
import pickle
import struct

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sklearn.linear_model import Ridge

from sklearn_fed import FederatedRidge, ProjectedFederatedRidge
from sklearn_fed.protocol import (
    FeatureSchema,
    Frame,
    InvalidClientMessage,
    SitePolicy,
    SymmetricMatrix,
    TaskRefused,
    check_site_data,
    decode,
    encode,
    simulate_through_bytes,
)

KEY_A = b"a" * 32
KEY_B = b"b" * 32


def _frame():
    rng = np.random.default_rng(0)
    gram = rng.normal(size=(4, 4))
    return Frame(
        kind="test/reply",
        federation="ab" * 16,
        round=3,
        site="site-1",
        schema={"n_features": 4},
        fields={"n": 5, "eps": 0.5, "name": "x"},
        arrays={
            "f8": rng.normal(size=(2, 3)),
            "f4": rng.normal(size=4).astype(np.float32),
            "i8": np.arange(5),
            "u1": np.arange(7, dtype=np.uint8),
            "sym": SymmetricMatrix(gram + gram.T),
        },
    )


def _sites(n=90, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) + 5.0
    y = X @ np.arange(1.0, d + 1) + rng.normal(size=n)
    parts = np.array_split(np.arange(n), 3)
    return X, y, {name: (X[rows], y[rows]) for name, rows in zip("abc", parts)}


def _run(estimator, data, *, server_kwargs=None, keys=None, tamper=None):
    keys = keys or {}
    server = estimator.make_server(keys=keys, **(server_kwargs or {}))
    clients = {s: estimator.make_client(key=keys.get(s), site=s) for s in data}
    tasks = server.next_tasks(list(data))
    while tasks:
        replies = {s: clients[s].respond(tasks[s], *data[s]) for s in tasks}
        if tamper is not None:
            replies = tamper(replies)
        server.receive(replies)
        tasks = server.next_tasks(list(data))
    return server


# ------------------------------------------------------------------ framing
def test_round_trip_keeps_every_value_and_size():
    frame = _frame()
    data = encode(frame)
    assert len(data) == frame.nbytes
    back = decode(data)
    assert (back.kind, back.federation, back.round, back.site) == (
        "test/reply", "ab" * 16, 3, "site-1"
    )
    assert back.fields == frame.fields and back.schema == frame.schema
    for name, value in frame.arrays.items():
        expected = value.matrix if isinstance(value, SymmetricMatrix) else value
        np.testing.assert_array_equal(back.arrays[name], expected)
        assert back.arrays[name].dtype == expected.dtype


def test_header_layout_is_documented():
    data = encode(_frame(), key=KEY_A)
    magic, version, flags, meta_length = struct.unpack_from("<8sHHI", data)
    assert (magic, version, flags) == (b"SKFEDMSG", 2, 1)
    meta = json.loads(data[16 : 16 + meta_length])
    assert set(meta) == {"kind", "federation", "round", "site", "schema", "fields", "arrays"}
    assert b"\x80\x04" not in data[:2]  # not a pickle


def test_hmac_needs_the_right_key():
    data = encode(_frame(), key=KEY_A)
    assert decode(data, key=KEY_A).round == 3
    with pytest.raises(InvalidClientMessage, match="authentication failed"):
        decode(data, key=KEY_B, client="a")
    with pytest.raises(InvalidClientMessage, match="no key is configured"):
        decode(data, client="a")
    with pytest.raises(InvalidClientMessage, match="must sign"):
        decode(encode(_frame()), key=KEY_A, client="a")
    with pytest.raises(ValueError, match="at least 16 bytes"):
        encode(_frame(), key=b"short")


@pytest.mark.parametrize("where", ["header", "meta", "payload", "trailer"])
def test_any_flipped_bit_is_rejected(where):
    data = bytearray(encode(_frame()))
    meta_length = struct.unpack_from("<I", data, 12)[0]
    position = {"header": 9, "meta": 20, "payload": 16 + meta_length + 3,
                "trailer": len(data) - 1}[where]
    for bit in range(8):
        tampered = bytearray(data)
        tampered[position] ^= 1 << bit
        with pytest.raises(InvalidClientMessage):
            decode(bytes(tampered), client="x")


def test_truncated_or_extended_messages_are_rejected():
    data = encode(_frame())
    for cut in (0, 10, 15, 40, len(data) - 33, len(data) - 1):
        with pytest.raises(InvalidClientMessage, match="client 'x'"):
            decode(data[:cut], client="x")
    with pytest.raises(InvalidClientMessage, match="checksum"):
        decode(data + b"\x00", client="x")


def _forge(meta, payload=b"", flags=0, version=2):
    """A message with a valid checksum around arbitrary metadata (what an attacker can do)."""
    import hashlib

    text = json.dumps(meta).encode()
    body = struct.pack("<8sHHI", b"SKFEDMSG", version, flags, len(text)) + text + payload
    return body + hashlib.sha256(body).digest()


def _meta(**changes):
    meta = {"kind": "k/reply", "federation": "0" * 32, "round": 0, "site": None,
            "schema": None, "fields": {}, "arrays": [["x", "<f8", [2], ""]]}
    meta.update(changes)
    return meta


@pytest.mark.parametrize(
    "message, error",
    [
        (_forge(_meta(), b"\x00" * 16, flags=4), "unknown header flags"),
        (_forge(_meta(), b"\x00" * 16, version=3), "version 3"),
        (_forge({"kind": "k"}, b""), "keys"),
        (_forge(_meta(round=-1), b"\x00" * 16), "round id"),
        (_forge(_meta(federation="xyz"), b"\x00" * 16), "federation id"),
        (_forge(_meta(arrays=[["x", "<f8", [10**9], ""]]), b"\x00" * 16), "more than"),
        (_forge(_meta(arrays=[["x", "<f8", [10**9, 10**9], "sym"]]), b""), "malformed shape"),
        (_forge(_meta(arrays=[["x", "<f8", [10**5, 10**5], "sym"]]), b""), "more than"),
        (_forge(_meta(arrays=[["x", "O", [2], ""]]), b"\x00" * 16), "dtype"),
        (_forge(_meta(arrays=[["x", "<f8", [-2], ""]]), b"\x00" * 16), "shape"),
        (_forge(_meta(arrays=[["x", "<f8", [1], ""]]), b"\x00" * 16), "padded or truncated"),
        (_forge(_meta(arrays=[["x", "<f8", [2], ""], ["x", "<f8", [0], ""]]), b"\x00" * 16),
         "repeated"),
    ],
)
def test_forged_headers_are_rejected_before_allocating(message, error, peak_memory):
    def rejected():
        with pytest.raises(InvalidClientMessage, match=error):
            decode(message, client="x")

    assert peak_memory(rejected) < 2 * 2**20


def test_metadata_that_is_not_json_is_rejected():
    import hashlib

    body = struct.pack("<8sHHI", b"SKFEDMSG", 2, 0, 4) + b"\xff\xfe[["
    with pytest.raises(InvalidClientMessage, match="JSON"):
        decode(body + hashlib.sha256(body).digest(), client="x")


def test_message_size_cap():
    data = encode(_frame())
    with pytest.raises(InvalidClientMessage, match="exceeds the limit"):
        decode(data, max_bytes=len(data) - 1, client="x")


@settings(max_examples=300, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_fuzzed_messages_are_rejected_cleanly(data):
    """Mutated or random bytes: a Frame or InvalidClientMessage, nothing else."""
    valid = encode(_frame())
    choice = data.draw(st.integers(0, 2))
    if choice == 0:
        message = data.draw(st.binary(max_size=400))
    elif choice == 1:
        position = data.draw(st.integers(0, len(valid) - 1))
        value = data.draw(st.integers(0, 255))
        message = valid[:position] + bytes([value]) + valid[position + 1 :]
    else:
        meta = _meta(arrays=data.draw(st.lists(st.tuples(
            st.text(max_size=3), st.sampled_from(["<f8", "<i4", "|u1", "bad"]),
            st.lists(st.integers(-3, 10**12), max_size=3), st.sampled_from(["", "sym", "x"]),
        ).map(list), max_size=3)))
        message = _forge(meta, data.draw(st.binary(max_size=64)))
    try:
        decode(message, client="fuzz")
    except InvalidClientMessage as exc:
        assert exc.client == "fuzz"


# ------------------------------------------------------------------ roles
def test_hand_driven_run_equals_fit_and_ridge():
    X, y, data = _sites()
    server = _run(FederatedRidge(alpha=0.5), data)
    with simulate_through_bytes():  # site by site, bit for bit
        fitted = FederatedRidge(alpha=0.5).fit(X, y, clients=np.repeat(list("abc"), 30))
    np.testing.assert_array_equal(server.estimator.coef_, fitted.coef_)
    pooled = FederatedRidge(alpha=0.5).fit(X, y, clients=np.repeat(list("abc"), 30))
    np.testing.assert_allclose(pooled.coef_, fitted.coef_, rtol=1e-13)
    assert pooled.communication_ == server.estimator.communication_
    np.testing.assert_allclose(server.estimator.coef_, Ridge(alpha=0.5).fit(X, y).coef_,
                               rtol=1e-10)
    assert server.finished and server.next_tasks(list(data)) == {}


def test_keys_authenticate_both_directions():
    X, y, data = _sites()
    keys = {"a": KEY_A, "b": KEY_B, "c": b"c" * 32}
    keyed = _run(FederatedRidge(), data, keys=keys).estimator
    plain = _run(FederatedRidge(), data).estimator
    np.testing.assert_array_equal(keyed.coef_, plain.coef_)
    server = FederatedRidge().make_server(keys=keys)
    tasks = server.next_tasks(list(data))
    with pytest.raises(InvalidClientMessage, match="this site cannot read the server's task: "
                       "the task does not verify under this site's key"):
        FederatedRidge().make_client(key=KEY_B).respond(tasks["a"], *data["a"])
    forged = FederatedRidge().make_client(key=KEY_B).respond(tasks["b"], *data["b"])
    with pytest.raises(InvalidClientMessage, match="client 'a': authentication failed"):
        server.receive({"a": forged})


def _replies(estimator, data, server):
    tasks = server.next_tasks(list(data))
    return {s: estimator.make_client().respond(tasks[s], *data[s]) for s in tasks}


@pytest.mark.parametrize("attack", ["other federation", "wrong site", "untasked site",
                                    "task as reply"])
def test_misrouted_replies_are_rejected_and_nothing_applied(attack):
    X, y, data = _sites()
    estimator = FederatedRidge()
    server = estimator.make_server()
    replies = _replies(estimator, data, server)
    if attack == "other federation":
        replies["b"] = _replies(estimator, data, FederatedRidge().make_server())["b"]
        error = "another federation"
    elif attack == "wrong site":
        replies["b"] = replies["a"]
        error = "says it comes from site 'a'"
    elif attack == "untasked site":
        replies["z"] = replies["a"]
        error = "no task was sent"
    else:
        replies["b"] = server.next_tasks(list(data))["b"]
        error = "expected a 'ridge.statistics' reply"
    before = pickle.dumps(estimator)
    with pytest.raises(InvalidClientMessage, match=error):
        server.receive(replies)
    assert pickle.dumps(estimator) == before


def test_reply_replayed_from_an_earlier_round_is_rejected():
    X, y, data = _sites()
    estimator = ProjectedFederatedRidge(n_components="auto", random_state=0)
    server = estimator.make_server()
    first = _replies(estimator, data, server)
    server.receive(first)  # round 0: row counts
    tasks = server.next_tasks(list(data))
    with pytest.raises(InvalidClientMessage, match="round 0, the open round is 1"):
        server.receive(first)
    assert not hasattr(estimator, "coef_")
    replies = {s: estimator.make_client().respond(tasks[s], *data[s]) for s in tasks}
    server.receive(replies)
    assert estimator.n_clients_ == 3


def test_drop_mode_leaves_bad_sites_out_as_dropout():
    X, y, data = _sites()

    def corrupt(replies):
        replies["b"] = replies["b"][:-1] + bytes([replies["b"][-1] ^ 1])
        return replies

    server = _run(FederatedRidge(), data, server_kwargs={"on_invalid": "drop"},
                  tamper=corrupt)
    survivors = np.vstack([data["a"][0], data["c"][0]])
    target = np.concatenate([data["a"][1], data["c"][1]])
    np.testing.assert_allclose(server.estimator.coef_,
                               Ridge().fit(survivors, target).coef_, rtol=1e-10)
    assert list(server.dropped_) == ["b"] and "checksum" in server.dropped_["b"]
    assert server.estimator.clients_.tolist() == ["a", "c"]


def test_dataframe_columns_are_matched_by_name():
    X, y, data = _sites()
    names = ["age", "bmi", "bp"]
    frames = {s: (pd.DataFrame(Xs, columns=names), ys) for s, (Xs, ys) in data.items()}
    reordered = dict(frames)
    reordered["b"] = (frames["b"][0][["bp", "age", "bmi"]], frames["b"][1])
    reordered["c"] = (frames["c"][0][["bmi", "bp", "age"]], frames["c"][1])
    one = _run(FederatedRidge(), frames, server_kwargs={"feature_names": names}).estimator
    two = _run(FederatedRidge(), reordered, server_kwargs={"feature_names": names}).estimator
    np.testing.assert_array_equal(one.coef_, two.coef_)
    assert two.feature_names_in_.tolist() == names
    missing = dict(frames)
    missing["c"] = (frames["c"][0][["age", "bp"]], frames["c"][1])
    with pytest.raises(ValueError, match=r"site 'c'.*missing columns \['bmi'\]"):
        _run(FederatedRidge(), missing, server_kwargs={"feature_names": names})
    extra = dict(frames)
    extra["a"] = (frames["a"][0].assign(zip_code=1.0), frames["a"][1])
    with pytest.raises(ValueError, match=r"site 'a'.*unexpected columns \['zip_code'\]"):
        _run(FederatedRidge(), extra, server_kwargs={"feature_names": names})


@pytest.mark.parametrize("on_invalid", ["raise", "drop"])
def test_sites_that_disagree_without_a_schema_are_refused_and_none_is_blamed(on_invalid):
    # No declared schema: the first reply read is no reference, so the round is
    # refused with every group listed, and no site (honest or not) is named or dropped.
    X, y, data = _sites()
    frames = {s: (pd.DataFrame(Xs, columns=["a", "b", "c"]), ys) for s, (Xs, ys) in data.items()}
    frames["b"] = (frames["b"][0][["c", "a", "b"]], frames["b"][1])
    server = FederatedRidge().make_server(on_invalid=on_invalid)
    replies = {s: FederatedRidge().make_client().respond(task, *frames[s])
               for s, task in server.next_tasks(list(frames)).items()}
    with pytest.raises(ValueError, match=r"disagree.*site\(s\) \['b'\].*make_server\(feature_names"
                       ) as error:
        server.receive(replies)
    assert not isinstance(error.value, InvalidClientMessage)
    assert server.dropped_ == {} and server.rounds_applied == 0


@pytest.mark.parametrize("on_invalid", ["raise", "drop"])
def test_a_hostile_site_read_first_never_gets_honest_sites_blamed(on_invalid):
    # The hostile site 'a' (read first) sends two targets; the server declared one.
    _, _, data = _sites()
    server = FederatedRidge().make_server(on_invalid=on_invalid, n_features=3, n_targets=1)
    tasks = server.next_tasks(list(data))
    replies = {s: FederatedRidge().make_client().respond(tasks[s], *data[s]) for s in data}
    Xa, ya = data["a"]
    replies["a"] = FederatedRidge().make_client().respond(
        tasks["a"], Xa, np.column_stack([ya, ya]))
    if on_invalid == "raise":
        with pytest.raises(InvalidClientMessage, match="client 'a'.*2 targets, expected 1"):
            server.receive(replies)
        return
    server.receive(replies)
    assert list(server.dropped_) == ["a"]
    assert sorted(server.estimator.clients_) == sorted(s for s in data if s != "a")


@pytest.mark.parametrize("dtype", [[], {}, "|O", None, 3])
def test_a_malformed_reply_dtype_is_refused_naming_the_site(dtype):
    _, _, data = _sites()
    server = FederatedRidge().make_server()

    def tamper(replies):
        frame = decode(replies["b"])
        frame.schema["dtype"] = dtype
        return {**replies, "b": encode(frame)}

    with pytest.raises(InvalidClientMessage, match="client 'b'.*dtype"):
        _run(FederatedRidge(), data, tamper=tamper)


def test_any_error_while_reading_a_reply_names_the_site():
    _, _, data = _sites()

    class Fragile(type(FederatedRidge().make_server())):
        def read_reply(self, site, frame):
            if site == "c":
                raise IndexError("too few dimensions")
            return super().read_reply(site, frame)

    server = Fragile(FederatedRidge())
    tasks = server.next_tasks(list(data))
    replies = {s: FederatedRidge().make_client().respond(tasks[s], *data[s]) for s in data}
    with pytest.raises(InvalidClientMessage, match="client 'c'.*IndexError") as error:
        server.receive(replies)
    assert error.value.client == "c"


def test_a_failed_apply_leaves_the_round_dtype_and_schema_as_they_were():
    _, _, data = _sites()

    class Failing(type(FederatedRidge().make_server())):
        def apply(self, replies, ledger):
            raise ArithmeticError("no model")

    server = Failing(FederatedRidge())
    tasks = server.next_tasks(list(data))
    replies = {s: FederatedRidge().make_client().respond(tasks[s], data[s][0].astype(np.float32),
                                                         data[s][1]) for s in data}
    with pytest.raises(ArithmeticError):
        server.receive(replies)
    assert server.round_dtype == np.float64 and server.schema.n_features is None


@pytest.mark.parametrize(
    "X, y, error",
    [
        (np.ones(5), np.ones(5), "Expected 2D array"),
        (np.array([[1.0, np.nan]] * 4), np.ones(4), "NaN"),
        (np.ones((4, 2)), np.ones(3), "X has 4 rows but y has 3"),
        (np.ones((4, 2)), np.array([1.0, np.inf, 0, 0]), "infinity"),
    ],
)
def test_bad_site_data_is_refused_at_the_site(X, y, error):
    server = FederatedRidge().make_server()
    task = server.next_tasks(["s"])["s"]
    with pytest.raises(ValueError, match=f"site 's'.*{error}"):
        FederatedRidge().make_client().respond(task, X, y)


def test_lists_and_series_are_accepted():
    X = [[1.0, 2.0], [2.0, 1.0], [3.0, 5.0]]
    X2, y2, _, names = check_site_data(X, pd.Series([1.0, 2.0, 3.0]))
    assert X2.shape == (3, 2) and y2.tolist() == [1.0, 2.0, 3.0] and names is None


def test_site_policy_refuses_tasks_outside_it():
    X, y, data = _sites()
    task = FederatedRidge().make_server(feature_names=["a", "b", "c"]).next_tasks(["s"])["s"]
    Xs = pd.DataFrame(data["a"][0], columns=["a", "b", "c"])
    cases = [
        (SitePolicy(min_rows=100), "30 rows, fewer than the policy's minimum 100"),
        (SitePolicy(max_epsilon=1.0), "only differentially private tasks"),
        (SitePolicy(allowed_features=["a", "b"]), r"features \['c'\] are not on"),
        (SitePolicy(allowed_kinds=["ridge.fesc"]), "only"),
    ]
    for policy, error in cases:
        with pytest.raises(TaskRefused, match=f"site 's' refuses.*{error}"):
            FederatedRidge().make_client(policy=policy).respond(task, Xs, data["a"][1])
    with pytest.raises(TaskRefused, match="addressed to site 's'"):
        FederatedRidge().make_client(site="other").respond(task, Xs, data["a"][1])
    accepted = SitePolicy(min_rows=10, allowed_features=["a", "b", "c"])
    assert FederatedRidge().make_client(policy=accepted).respond(task, Xs, data["a"][1])


def test_simulation_through_bytes_is_identical():
    X, y, _ = _sites()
    clients = np.arange(len(X)) % 4
    weights = np.ones(len(X))  # with weights nothing is pooled: every reply is computed
    plain = FederatedRidge().fit(X, y, weights, clients=clients)
    with simulate_through_bytes():
        wired = FederatedRidge().fit(X, y, weights, clients=clients)
    np.testing.assert_array_equal(plain.coef_, wired.coef_)
    assert plain.communication_ == wired.communication_


def test_feature_schema_validation():
    with pytest.raises(ValueError, match="unique"):
        FeatureSchema(feature_names=["a", "a"])
    with pytest.raises(ValueError, match="2 feature names"):
        FeatureSchema(3, ["a", "b"])
    with pytest.raises(ValueError, match="malformed"):
        FeatureSchema.from_json({"n_features": -1, "feature_names": None})
