"""The hostile-site harness: structure-aware mutations of one site's reply, checked.

Used by ``test_hostile_sites.py`` (a fixed sample of the mutations) and by
``make fuzz`` (every mutation: ``python -W ignore tests/protocol/hostile_harness.py
[case ...]``). See that module's docstring and docs/security.rst for what is
checked.
"""

import copy
import faulthandler
import hashlib
import json
import math
import re
import struct
import sys
import time
import tracemalloc
import warnings

import numpy as np
import scipy.sparse as sp
from sklearn.base import clone, is_classifier

from sklearn_fed import (
    DPFedAvgRegressor,
    FedAvgRegressor,
    FederatedEmpiricalCovariance,
    FederatedLogisticRegression,
    FederatedMinMaxScaler,
    FederatedOneHotEncoder,
    FederatedPCA,
    FederatedRidge,
    FederatedRidgeClassifier,
    FederatedRidgeClassifierCV,
    FederatedRidgeCV,
    FederatedSimpleImputer,
    FederatedStandardScaler,
    FedNovaRegressor,
    FedProxRegressor,
    FESCRidge,
    IncrementalFederatedRidge,
    InvalidClientMessage,
    PrivateFederatedRidge,
    ProjectedFederatedRidge,
)
from sklearn_fed.compose import FederatedColumnTransformer
from sklearn_fed.pipeline import make_federated_pipeline
from sklearn_fed.protocol import SitePolicy, decode, encode
from sklearn_fed.utils.estimator_checks import _model_state

LABELS = (0, 1, 2)
# the sites' rows are arrays in the declared features' order, as a site states it; the
# sites are permissive (as run_protocol_by_hand's): the harness checks what a hostile
# reply does to the server against the model of the honest rows, which disclosure
# control would change (tests/privacy/test_disclosure.py checks the rules themselves)
IN_ORDER = SitePolicy.permissive(columns_in_order=True)
MAX_SECONDS = 10.0
MAX_BYTES = 100 * 2**20


def _column_transformer():
    return FederatedColumnTransformer(
        [("scale", FederatedStandardScaler(), [0, 1]),
         ("onehot", FederatedOneHotEncoder(sparse_output=True), [2])],
        remainder="passthrough")


# (id, factory, float32 rows, categorical rows). FedMPDDClassifier is left out: it
# trains a torch network for several epochs per round (seconds per mutation), and its
# replies are read by the one codec reader that tests/neural_network/test_codecs.py fuzzes.
CASES = [
    ("ridge", lambda: FederatedRidge(), False, False),
    ("ridge-f32", lambda: FederatedRidge(), True, False),
    ("ridge-cv", lambda: FederatedRidgeCV(), False, False),
    ("ridge-cv-clients", lambda: FederatedRidgeCV(cv="clients"), False, False),
    ("projected", lambda: ProjectedFederatedRidge(n_components=2, random_state=0), False, False),
    ("incremental", lambda: IncrementalFederatedRidge(random_state=0), False, False),
    ("fesc", lambda: FESCRidge(), False, False),
    ("fedavg", lambda: FedAvgRegressor(n_rounds=2, batch_size=7, random_state=0), False, False),
    ("fedprox", lambda: FedProxRegressor(n_rounds=2, learning_rate=0.05), False, False),
    ("fednova", lambda: FedNovaRegressor(n_rounds=2, batch_size=11, random_state=0),
     False, False),
    ("dpfedavg", lambda: DPFedAvgRegressor(n_rounds=2, epsilon=10.0, random_state=0),
     False, False),
    ("private", lambda: PrivateFederatedRidge(
        epsilon=2.0, feature_bound=5.0, target_bound=10.0, random_state=0), False, False),
    ("private-distributed", lambda: PrivateFederatedRidge(
        epsilon=2.0, feature_bound=5.0, target_bound=10.0, noise="distributed",
        random_state=0), False, False),
    ("standard", lambda: FederatedStandardScaler(), False, False),
    ("standard-f32", lambda: FederatedStandardScaler(), True, False),
    ("minmax", lambda: FederatedMinMaxScaler(), False, False),
    ("minmax-f32", lambda: FederatedMinMaxScaler(), True, False),
    ("onehot", lambda: FederatedOneHotEncoder(), False, True),
    ("imputer-mean", lambda: FederatedSimpleImputer(), False, False),
    ("imputer-mean-f32", lambda: FederatedSimpleImputer(), True, False),
    ("imputer-mode", lambda: FederatedSimpleImputer(strategy="most_frequent", add_indicator=True),
     False, True),
    ("pca", lambda: FederatedPCA(n_components=2, whiten=True), False, False),
    ("pca-f32", lambda: FederatedPCA(n_components=2), True, False),
    ("covariance", lambda: FederatedEmpiricalCovariance(), False, False),
    ("ridge-classifier", lambda: FederatedRidgeClassifier(class_weight="balanced"), False, False),
    ("ridge-classifier-cv", lambda: FederatedRidgeClassifierCV(cv="clients"), False, False),
    ("logistic", lambda: FederatedLogisticRegression(max_iter=3), False, False),
    ("pipeline", lambda: make_federated_pipeline(
        FederatedSimpleImputer(), FederatedStandardScaler(), FederatedRidge()), False, False),
    ("pipeline-column-transformer", lambda: make_federated_pipeline(
        _column_transformer(), FederatedRidge()), False, True),
    ("column-transformer", _column_transformer, False, True),
]
CASE_IDS = [case[0] for case in CASES]


# ------------------------------------------------------------------ the sites' rows
def _site_rows(estimator, float32, categorical, seed=0):
    rng = np.random.default_rng(seed)
    sites = {}
    for label in LABELS:
        X = rng.normal(size=(30, 4))
        if categorical:
            X[:, 2:] = rng.integers(0, 3, size=(30, 2))
        if float32:
            X = X.astype(np.float32)
        if is_classifier(estimator):
            y = (X[:, 0] + 0.5 * X[:, 1] > 0).astype(int)
        else:
            y = X @ np.array([1.0, -0.5, 0.25, 2.0]) + 0.1 * rng.normal(size=30) + 3.0
        sites[label] = (X, y)
    return sites


def _declared(estimator):
    """What the server declares, as a deployment does: the features, and one target."""
    kwargs = {"feature_names": [f"x{i}" for i in range(4)]}
    client = estimator.make_client()
    if getattr(client, "needs_y", False) and not hasattr(estimator, "steps"):
        kwargs["n_targets"] = 1
    return kwargs


# ------------------------------------------------------------------ raw frames
_HEADER = struct.Struct("<8sHHI")


def _raw(meta, payload=b""):
    """Bytes of a frame with this metadata (any JSON) and payload, with a valid checksum."""
    text = meta if isinstance(meta, bytes) else json.dumps(meta).encode("utf-8")
    body = _HEADER.pack(b"SKFEDMSG", 2, 0, len(text)) + text + payload
    return body + hashlib.sha256(body).digest()


def _split(data):
    """``(meta, payload)`` of an encoded frame."""
    length = _HEADER.unpack_from(data)[3]
    return (json.loads(data[_HEADER.size:_HEADER.size + length]),
            data[_HEADER.size + length:-32])


def _edit_meta(data, edit):
    meta, payload = _split(data)
    edit(meta)
    return _raw(meta, payload)


# ------------------------------------------------------------------ the mutations
# Each mutation is (what, kind, bytes). kind "value": a plausible value (a finite number
# in the reply's dtype, a count): accepted, it may change the model (a site may lie about
# its rows) but the model must stay finite. kind "malformed": anything else; accepted, it
# must change nothing.
BAD = ([], {}, "|O", None, -1, 0, 1.5, True, "x", 2**70, float("nan"), 1e308, -1e300,
       [1, [2]], {"a": {"b": 1}})


def _numeric(value):
    return type(value) in (int, float)


def _value_kind(old, new):
    """A number pushed to another number is a plausible lie (a count, a loss), else
    malformed; NaN is never plausible, and a count is never a fraction."""
    plausible = _numeric(old) and _numeric(new) and not (
        isinstance(new, float) and math.isnan(new)) and not (
        type(old) is int and type(new) is float)
    return "value" if plausible else "malformed"


def _leaf_mutations(value, path):
    """``(path, new value, kind)`` for a JSON value and every value nested in it (depth 4)."""
    for bad in BAD:
        if not (type(bad) is type(value) and bad == value):
            yield path, bad, _value_kind(value, bad)
    if type(value) is int and not isinstance(value, bool):
        for delta in (1, -1):
            yield path, value + delta, "value"
    if len(path) > 5:
        return
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaf_mutations(item, path + (key,))
        yield path, {**value, "extra": 1}, "malformed"
        for key in value:
            yield path, {k: v for k, v in value.items() if k != key}, "malformed"
    elif isinstance(value, list) and value:
        for index, item in enumerate(value[:3]):
            yield from _leaf_mutations(item, path + (index,))
        yield path, value[:-1], "malformed"
        yield path, value + value[-1:], "malformed"


def _set(container, path, value):
    for key in path[:-1]:
        container = container[key]
    container[path[-1]] = value


def _with(data, section, path, value):
    def edit(meta):
        if path:
            _set(meta[section], path, value)
        else:
            meta[section] = value
    return _edit_meta(data, edit)


def _array_variants(name, array, schema_dtype):
    """``(what, new array or None (missing), kind)`` of one array."""
    if array.size and array.dtype.kind == "f":
        for value in (np.nan, np.inf, -np.inf):
            # NaN is a category of a one-hot encoder's column (a site with missing values)
            kind = "value" if np.isnan(value) and re.search(r"(^|\.)c\d+$", name) else \
                "malformed"
            yield f"{name}[0]={value}", _put(array, value), kind
        for value in (1e308, -1e300, 1e50, 0.0, -1.0):
            bad = _put(array.astype(np.float64), value)
            # a float32 array sent as float64 has the wrong dtype, whatever the value
            kind = "malformed" if array.dtype == np.float32 else "value"
            yield f"{name}[0]={value:g} (float64)", bad, kind
    elif array.size and array.dtype.kind in "iu":
        info = np.iinfo(array.dtype)
        for value in (info.max, info.min, 0, int(array.flat[0]) + 1):
            yield f"{name}[0]={value}", _put(array, value), "value"
    for dtype in ("<f8", "<f4", "<i8", "<i4", "|u1"):
        if array.dtype.str != dtype:
            # float64 values rounded to float32: a plausible set (a table's float32 column)
            kind = "value" if (array.ndim == 1 and array.dtype == np.float64
                               and dtype == "<f4") else "malformed"
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                yield f"{name} as {dtype}", np.asarray(array).astype(dtype), kind
    yield f"{name} 0-d", np.asarray(array).ravel()[:1].reshape(()) if array.size else \
        np.zeros((), array.dtype), "malformed"
    yield f"{name} empty", np.zeros((0,), array.dtype), "malformed"
    # a set of values (categories, classes) one smaller or larger is a plausible set
    resized = "value" if array.ndim == 1 else "malformed"
    if array.size:
        yield f"{name} one short", array.ravel()[:-1], resized
        yield f"{name} as a row", array.reshape(1, -1), "malformed"
    yield f"{name} one longer", np.append(array.ravel(), array.ravel()[:1]), resized
    yield f"{name} missing", None, "malformed"


def _put(array, value):
    bad = np.array(array, copy=True)
    with np.errstate(over="ignore", invalid="ignore"):
        bad.flat[0] = value
    return bad


def mutations(data):
    """Every mutation of one encoded reply: ``[(what, kind, bytes)]``."""
    frame = decode(data)
    meta, _ = _split(data)
    out = []
    # bytes
    out.append(("truncated", "malformed", data[: len(data) // 2]))
    out.append(("empty bytes", "malformed", b""))
    for position in (8, 12, _HEADER.size + 2, len(data) // 2, len(data) - 40):
        if 0 <= position < len(data):
            garbled = bytearray(data)
            garbled[position] ^= 0x41
            out.append((f"byte {position} garbled", "malformed", bytes(garbled)))
    out.append(("metadata not JSON", "malformed", _raw(b"\xff{not json")))
    out.append(("metadata nested 10^5 deep", "malformed", _raw(b"[" * 100000 + b"]" * 100000)))
    out.append(("metadata a list", "malformed", _raw([1, 2])))
    huge = copy.deepcopy(meta)
    if huge["arrays"]:
        huge["arrays"][0][2] = [2**40]
        out.append(("array declared 2^40 long", "malformed", _raw(huge, _split(data)[1])))
    # header
    for key in ("kind", "federation", "round", "site"):
        for bad in BAD + ("0" * 32,):
            if type(bad) is type(meta[key]) and bad == meta[key]:
                continue
            out.append((f"header {key}={bad!r}", "malformed", _with(data, key, (), bad)))
    out.append(("header round+1", "malformed", _with(data, "round", (), frame.round + 1)))
    out.append(("header site of an honest site", "malformed", _with(data, "site", (), 1)))
    # schema
    schema = frame.schema
    for bad in BAD:
        out.append((f"schema={bad!r}", "malformed", _with(data, "schema", (), bad)))
    if isinstance(schema, dict):
        for key, value in schema.items():
            for bad in list(BAD) + ["float16", "<f8", "object"]:
                if bad != value:
                    out.append((f"schema {key}={bad!r}", "malformed",
                                _with(data, "schema", (key,), bad)))
            out.append((f"schema {key} missing", "malformed", _with(
                data, "schema", (), {k: v for k, v in schema.items() if k != key})))
        flipped = "float64" if schema.get("dtype") == "float32" else "float32"
        out.append((f"schema dtype={flipped}", "dtype", _with(data, "schema", ("dtype",),
                                                               flipped)))
        for n in (schema.get("n_features", 1) + 1, 1):
            out.append((f"schema n_features={n}", "malformed",
                        _with(data, "schema", ("n_features",), n)))
        if schema.get("n_targets") is not None:
            out.append(("schema n_targets+1", "malformed",
                        _with(data, "schema", ("n_targets",), schema["n_targets"] + 1)))
        names = ["a", "b", "c", "d"][: schema.get("n_features", 4)]
        digest = hashlib.sha256(json.dumps(names, separators=(",", ":")).encode()).hexdigest()
        out.append(("schema other feature names", "malformed", _with(
            data, "schema", (), {**schema, "names": digest[:32], "feature_names": names})))
    # fields, nested values included
    for path, bad, kind in _leaf_mutations(frame.fields, ()):
        out.append((f"fields{list(path)}={_short(bad)}", kind, _with(data, "fields", path, bad)))
    # arrays
    for name, array in frame.arrays.items():
        for what, bad, kind in _array_variants(name, array, (schema or {}).get("dtype")):
            arrays = dict(frame.arrays)
            if bad is None:
                del arrays[name]
            else:
                arrays[name] = bad
            out.append((what, kind, encode(_replace(frame, arrays=arrays))))
    out.append(("an extra array", "malformed",
                encode(_replace(frame, arrays={**frame.arrays, "extra": np.zeros(3)}))))
    return out


def _short(value):
    text = repr(value)
    return text if len(text) < 40 else text[:37] + "..."


def _replace(frame, **changes):
    new = copy.copy(frame)
    for key, value in changes.items():
        setattr(new, key, value)
    return new


def sample(items, n, seed_text):
    """``n`` of ``items`` evenly spread (so every section of the mutations, bytes, header,
    schema, fields and arrays, is sampled), from an offset seeded by ``seed_text``: the
    same ones every run, other ones for another estimator, round or hostile site."""
    items = list(items)
    if n is None or len(items) <= n:
        return items
    seed = int.from_bytes(hashlib.sha256(seed_text.encode()).digest()[:8], "little")
    offset = seed % (len(items) // n)
    return [items[offset + k * len(items) // n] for k in range(n)]


# ------------------------------------------------------------------ state and outputs
def snapshot(obj):
    """Every attribute of ``obj``, nested objects included, as comparable plain values."""
    seen = {}

    def plain(value, depth):
        if depth > 12:
            return "<deep>"
        if isinstance(value, (bool, int, str, bytes, type(None))):
            return value
        if isinstance(value, float):
            return repr(value)
        if isinstance(value, np.generic):
            return ("np", value.dtype.str, repr(value.item()))
        if isinstance(value, np.ndarray):
            if value.dtype.kind == "O":
                return ("nd", "O", value.shape, [plain(v, depth + 1) for v in value.ravel()])
            return ("nd", value.dtype.str, value.shape, value.tobytes())
        if isinstance(value, np.dtype):
            return ("dtype", value.str)
        if sp.issparse(value):
            return ("sparse", plain(value.toarray(), depth + 1))
        if isinstance(value, (list, tuple)):
            return [type(value).__name__] + [plain(v, depth + 1) for v in value]
        if isinstance(value, (set, frozenset)):
            return ("set", sorted(map(repr, value)))
        if isinstance(value, dict):
            return ("dict", [(repr(k), plain(v, depth + 1)) for k, v in value.items()])
        if isinstance(value, np.random.Generator):
            return ("rng", repr(value.bit_generator.state))
        if isinstance(value, np.random.RandomState):
            return ("rs", plain(list(value.get_state()), depth + 1))
        if id(value) in seen:
            return ("ref", seen[id(value)])
        seen[id(value)] = len(seen)
        attributes = getattr(value, "__dict__", None)
        if attributes is None and hasattr(value, "__slots__"):
            attributes = {s: getattr(value, s, None) for s in value.__slots__}
        if attributes is None:
            return ("obj", type(value).__name__)
        return (type(value).__name__, plain(dict(attributes), depth + 1))

    return plain(obj, 0)


def _outputs(estimator, X):
    """What the fitted model gives on rows: predictions, probabilities or a transform."""
    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for method in ("predict", "predict_proba", "decision_function", "transform"):
            if hasattr(estimator, method) and (method != "transform" or not hasattr(
                    estimator, "predict")):
                try:
                    value = getattr(estimator, method)(X)
                except (AttributeError, NotImplementedError):
                    continue
                except ValueError as exc:  # e.g. a category the model lost: compared below
                    out[method] = np.array(f"{type(exc).__name__}: {exc}")
                    continue
                out[method] = value.toarray() if sp.issparse(value) else np.asarray(value)
    return out


def _finite(values):
    return all(np.all(np.isfinite(v)) for v in values
               if isinstance(v, np.ndarray) and v.dtype.kind == "f")


def _float_leaves(state):
    """The float arrays of a model state, but categories (where NaN is a category)."""
    if isinstance(state, dict):
        state = [v for k, v in state.items() if k != "categories_"]
    if isinstance(state, list):
        for item in state:
            yield from _float_leaves(item)
    elif isinstance(state, (np.ndarray, float, np.floating)) and np.asarray(state).dtype.kind \
            == "f":
        yield np.asarray(state)


# ------------------------------------------------------------------ the attack
class Finding(AssertionError):
    pass


def _no_blame(exc):
    """A round refused naming no site: replies that disagree on what nothing declared
    (features, targets, the targets' dimensions). Honest sites are not blamed; the
    hostile site can stop the round, as it could by disagreeing with any declaration."""
    return type(exc) is ValueError and "disagree" in str(exc)


def _timed(call):
    """``(result or exception, seconds, peak bytes)`` of ``call()``, hang-guarded."""
    faulthandler.dump_traceback_later(120, exit=True)  # a hang in LAPACK cannot be interrupted
    tracemalloc.start()
    start = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = call()
    except Exception as exc:  # noqa: BLE001 - sorted by the caller
        result = exc
    finally:
        seconds = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        faulthandler.cancel_dump_traceback_later()
    return result, seconds, peak


def _model(server):
    """The learned state; what the ledger records (bytes, also in a history) left out."""
    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if "bytes" not in str(k)}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value
    return strip(_model_state(server.estimator))


class Federation:
    """Two copies of one federation (``on_invalid="raise"`` and ``"drop"``), driven round by
    round with honest replies; :meth:`attack` tries mutations of one round's hostile reply."""

    def __init__(self, factory, float32, categorical, hostile, declare=True, findings=None):
        self.findings = findings  # a list: record every finding instead of raising the first
        self.template = factory()
        self.sites = _site_rows(self.template, float32, categorical)
        self.X = np.concatenate([self.sites[s][0] for s in LABELS])
        self.hostile = hostile
        kwargs = _declared(self.template) if declare else {}
        self.declared = declare
        self.servers = {mode: clone(self.template).make_server(on_invalid=mode, **kwargs)
                        for mode in ("raise", "drop")}
        self.clients = {mode: {s: server.estimator.make_client(policy=IN_ORDER) for s in LABELS}
                        for mode, server in self.servers.items()}
        self.tasks = {mode: server.next_tasks(list(LABELS))
                      for mode, server in self.servers.items()}

    def replies(self, mode):
        tasks = self.tasks[mode]
        return {s: self.clients[mode][s].respond(tasks[s], *self.sites[s])
                for s in LABELS if s in tasks}

    def rounds(self, n):
        """Yield ``(round index, {mode: honest replies})`` for the first ``n`` rounds."""
        for index in range(n):
            if not all(self.tasks.values()):
                return
            replies = {mode: self.replies(mode) for mode in self.servers}
            if not all(self.hostile in r for r in replies.values()):
                return
            yield index, replies
            for mode, server in self.servers.items():
                server.receive(replies[mode])
                self.tasks[mode] = server.next_tasks(list(LABELS))

    def attack(self, replies, picked):
        """Check every mutation ``picked`` (indices into the mutations of this round)."""
        hostile, X = self.hostile, self.X
        raise_server, drop_server = self.servers["raise"], self.servers["drop"]
        honest = copy.deepcopy(raise_server)
        honest.receive(replies["raise"])
        honest_model, honest_out = _model(honest), _outputs(honest.estimator, X)
        assert _finite(honest_out.values()), "the honest model is not finite"
        dropout = copy.deepcopy(drop_server)
        without = {s: r for s, r in replies["drop"].items() if s != hostile}
        dropout_result, _, _ = _timed(lambda: dropout.receive(without))
        all_raise = mutations(replies["raise"][hostile])
        # the drop server's reply differs (its federation, keys, masks): same mutation by name
        all_drop = {}
        for what, _, data in mutations(replies["drop"][hostile]):
            all_drop.setdefault(what, data)
        before = snapshot(raise_server)
        checked = 0
        for index in picked(len(all_raise)):
            what, kind, data = all_raise[index]
            try:
                self._one(raise_server, before, replies["raise"], data, what, kind,
                          honest_model, honest_out)
                if what in all_drop:
                    self._drop(drop_server, replies["drop"], all_drop[what], what,
                               dropout, dropout_result)
            except Finding as exc:
                if self.findings is None:
                    raise
                self.findings.append(str(exc))
            checked += 1
        return checked

    def _receive(self, server, replies, data):
        ordered = {s: (data if s == self.hostile else replies[s]) for s in LABELS}
        return _timed(lambda: server.receive(ordered))

    def _one(self, server, before, replies, data, what, kind, honest_model, honest_out):
        attempt = copy.deepcopy(server)
        result, seconds, peak = self._receive(attempt, replies, data)
        where = f"hostile site {self.hostile}, {what}"
        if seconds > MAX_SECONDS:
            raise Finding(f"{where}: took {seconds:.1f} s")
        if peak > MAX_BYTES:
            raise Finding(f"{where}: allocated {peak / 2**20:.0f} MB")
        if isinstance(result, Exception):
            if isinstance(result, InvalidClientMessage):
                if result.client != self.hostile:
                    raise Finding(f"{where}: blamed site {result.client!r}: {result}")
            elif not _no_blame(result):
                raise Finding(f"{where}: raised {type(result).__name__}: {result}") from result
            if snapshot(attempt) != before:
                raise Finding(f"{where}: the refused round changed the server: {result}")
            return
        model, out = _model(attempt), _outputs(attempt.estimator, self.X)
        if not (_finite(_float_leaves(model)) and _finite(out.values())):
            raise Finding(f"{where}: accepted, and the model or its outputs are not finite")
        for method, value in out.items():
            if kind == "malformed" and value.dtype != honest_out[method].dtype:
                raise Finding(f"{where}: accepted, and {method} now gives {value.dtype} "
                              f"instead of {honest_out[method].dtype}")
        if kind == "malformed":
            try:
                np.testing.assert_equal(model, honest_model)
            except AssertionError as exc:
                raise Finding(f"{where}: accepted, and the model silently changed") from exc

    def _drop(self, server, replies, data, what, dropout, dropout_result):
        attempt = copy.deepcopy(server)
        result, _, _ = self._receive(attempt, replies, data)
        where = f"on_invalid='drop', hostile site {self.hostile}, {what}"
        if isinstance(result, Exception):
            if isinstance(result, InvalidClientMessage) and result.client != self.hostile:
                raise Finding(f"{where}: blamed site {result.client!r}: {result}")
            if type(result) is type(dropout_result):
                return  # the honest sites alone cannot finish this round either
            if _no_blame(result):
                return
            raise Finding(f"{where}: raised {type(result).__name__}: {result}") from result
        dropped = set(attempt.dropped_) - set(server.dropped_)
        if not dropped:
            return  # accepted: judged in "raise" mode
        if dropped != {self.hostile}:
            raise Finding(f"{where}: dropped {sorted(map(repr, dropped))}")
        if isinstance(dropout_result, Exception):
            raise Finding(f"{where}: dropped the hostile site, but the honest sites alone "
                          f"fail: {dropout_result}")
        try:
            np.testing.assert_equal(_model(attempt), _model(dropout))
            np.testing.assert_equal(
                getattr(attempt.estimator, "clients_", None),
                getattr(dropout.estimator, "clients_", None))
        except AssertionError as exc:
            raise Finding(f"{where}: the model is not the honest sites' model") from exc


def run_case(case_id, *, per_round=None, rounds=2, hostiles=(0, 2), declare=True,
             findings=None):
    """Attack one estimator; ``per_round=None``: every mutation. Returns the count checked."""
    _, factory, float32, categorical = CASES[CASE_IDS.index(case_id)]
    checked = 0
    for hostile in hostiles:
        federation = Federation(factory, float32, categorical, hostile, declare=declare,
                                findings=findings)
        for index, replies in federation.rounds(rounds):
            def picked(n, index=index, hostile=hostile):
                return sample(range(n), per_round, f"{case_id}/{hostile}/{index}/{declare}")
            checked += federation.attack(replies, picked)
    return checked


if __name__ == "__main__":  # make fuzz: every mutation of every estimator
    chosen = [a for a in sys.argv[1:] if not a.startswith("-")] or CASE_IDS
    total, failures = 0, []
    for case_id in chosen:
        for declare in (True, False):
            try:
                n = run_case(case_id, per_round=None, declare=declare)
            except Finding as exc:
                failures.append(f"{case_id} (declared={declare}): {exc}")
                print("FAIL", failures[-1], flush=True)
                continue
            total += n
            print(f"{case_id} declared={declare}: {n} mutations, no finding", flush=True)
    print(f"{total} mutations checked, {len(failures)} estimators with a finding")
    sys.exit(1 if failures else 0)
