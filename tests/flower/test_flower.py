"""sklearn-fed on Flower: configs, data files, model files, the apps, a real federation.

The apps are tested twice: in process, through a fake Grid that hands each
message to the ClientApp (fast; every dropout path), and through a real
SuperLink and three SuperNodes on 127.0.0.1 (one federation for all
estimators: each Flower message starts a ClientApp process).
"""

import contextlib
import functools
import io
import json
import logging
import queue
import re
import shutil
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.datasets import load_digits
from sklearn.linear_model import Ridge

pytest.importorskip("flwr", reason="needs the flower extra: pip install sklearn-fed[flower]")
pytest.importorskip("skops", reason="needs the flower extra: pip install sklearn-fed[flower]")

from flwr.app import Context, RecordDict
from flwr.supercore.task_identity import TaskIdentity

from sklearn_fed import (
    DPFedAvgRegressor,
    FedAvgRegressor,
    FederatedLogisticRegression,
    FederatedRidge,
    FederatedRidgeCV,
    FederatedSimpleImputer,
    FederatedStandardScaler,
    FedMPDDClassifier,
    FedNovaRegressor,
    FedProxRegressor,
    FESCRidge,
    IncrementalFederatedRidge,
    InvalidClientMessage,
    PrivateFederatedRidge,
    ProjectedFederatedRidge,
)
from sklearn_fed.compose import FederatedColumnTransformer
from sklearn_fed.datasets import load_site_data, save_site_data
from sklearn_fed.flower import (
    RUN_CONFIG_DEFAULTS,
    LocalFederation,
    NodeSettings,
    ServerSettings,
    estimator_from_config,
    estimator_to_config,
    load_model,
    make_client_app,
    run_server,
    save_model,
)
from sklearn_fed.flower._local import (
    _descendants,
    _proc_identity,
    _still_running,
)
from sklearn_fed.pipeline import make_federated_pipeline
from sklearn_fed.protocol import simulate_through_bytes
from sklearn_fed.utils.estimator_checks import _model_state

# Every protocol estimator runs through Flower; add one line per estimator.
FLOWER_CASES = [
    FederatedRidge(alpha=1.0),
    FederatedRidgeCV(alphas=(0.1, 1.0, 10.0)),
    ProjectedFederatedRidge(n_components=16, random_state=0),
    PrivateFederatedRidge(epsilon=2.0, feature_bound=80.0, target_bound=10.0, random_state=0),
    # two rounds: X25519 public keys, then masked sums; the key pair waits in context.state
    PrivateFederatedRidge(epsilon=2.0, feature_bound=80.0, target_bound=10.0,
                          noise="distributed", random_state=0),
    # streaming: rows arrive in N_ROUNDS rounds; a site holds rows below min_samples
    IncrementalFederatedRidge(alpha=1.0, min_samples=100, random_state=0),
    FESCRidge(),  # two rounds: sizes, then local models
    # three rounds: the sites' classes, then two training rounds; torch at every site
    FedMPDDClassifier(n_directions=16, max_epochs=2, batch_size=16, client_fraction=1.0,
                      random_state=0),
]
# Also through the apps in process (a real federation costs seconds per round per site).
APPS_ONLY_CASES = [
    FederatedRidgeCV(alphas=(0.1, 1.0, 10.0), cv="clients"),  # leave one client out
    FedAvgRegressor(n_rounds=4, batch_size=7, client_fraction=0.7, random_state=0),
    FedProxRegressor(n_rounds=3),
    FedNovaRegressor(n_rounds=3, batch_size=11, random_state=0),
    DPFedAvgRegressor(n_rounds=3, epsilon=10.0, random_state=0),
]
SITES = ("a", "b", "c")


def _case_id(estimator):
    variant = getattr(estimator, "noise", None) or getattr(estimator, "cv", None)
    return type(estimator).__name__ + (f"-{variant}" if isinstance(variant, str) else "")


N_ROUNDS = 3  # of a streaming protocol: its rows arrive in three rounds


@functools.cache
def _digits():
    """600 digits rows, split into three sites (200 rows each)."""
    X, y = load_digits(return_X_y=True)
    X, y = X[:600], y[:600]
    clients = np.array(SITES)[np.arange(600) % 3]
    return X, y, clients


def _site_rows():
    """Each site's rows, and the round in which each arrives (for streaming protocols)."""
    X, y, clients = _digits()
    return {site: {"X": X[clients == site], "y": y[clients == site],
                   "rounds": np.arange(200) % N_ROUNDS} for site in SITES}


def _streaming(estimator):
    return bool(getattr(estimator, "_protocol_rounds_in_fit", None))


def _in_process(estimator, sites):
    """The same per-site rows fitted in process: ``fit``, or one call per round if streaming.

    Through bytes, as a deployment runs: every site computes its own reply
    (no pooled rounds, whose sums differ from the sites' in the last bits), so
    the model must equal the one over Flower bit for bit.
    """
    rounds = range(N_ROUNDS) if _streaming(estimator) else [None]
    model = clone(estimator)
    for r in rounds:
        rows = {s: slice(None) if r is None else sites[s]["rounds"] == r for s in sites}
        X = np.vstack([sites[s]["X"][rows[s]] for s in sites])
        y = np.concatenate([sites[s]["y"][rows[s]] for s in sites])
        clients = np.concatenate([[s] * len(sites[s]["y"][rows[s]]) for s in sites])
        fit = model.fit if r in (None, 0) else model.partial_fit
        with simulate_through_bytes():
            fit(X, y, clients=clients)
    return model


_REFERENCES = {}


def _reference(estimator):
    """``_in_process(estimator, _site_rows())``, fitted once per estimator and test session
    (several tests compare their fits with it); never modified by its callers."""
    key = json.dumps(estimator_to_config(estimator), sort_keys=True)
    if key not in _REFERENCES:
        _REFERENCES[key] = _in_process(estimator, _site_rows())
    return _REFERENCES[key]


def _flower_config(estimator):
    """Run-config overrides: a streaming protocol runs one round per batch of rows."""
    return {"max-rounds": N_ROUNDS} if _streaming(estimator) else {}


def _assert_same_model(flower, local):
    np.testing.assert_equal(_model_state(flower), _model_state(local))  # every value, bit for bit
    assert flower.communication_.as_dict() == local.communication_.as_dict()
    assert flower.clients_.tolist() == local.clients_.tolist()
    if hasattr(local, "steps"):  # a pipeline: every step's model, through its predictions
        X = _digits()[0]
        np.testing.assert_array_equal(flower[:-1].transform(X), local[:-1].transform(X))
        np.testing.assert_array_equal(flower.predict_proba(X), local.predict_proba(X))


def _pipeline(impute=True):
    """The whole pipeline of a newcomer's notebook, deployed as one run (two Newton steps)."""
    steps = [FederatedSimpleImputer()] if impute else []
    return make_federated_pipeline(*steps, FederatedStandardScaler(),
                                   FederatedLogisticRegression(max_iter=2))


# ----------------------------------------------------------------- the extra
def test_flower_is_imported_only_when_used_and_its_absence_names_the_extra(monkeypatch):
    import importlib.util
    import subprocess
    import sys

    code = ("import sys, sklearn_fed, sklearn_fed.flower; "
            "assert 'flwr' not in sys.modules and 'skops' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)
    from sklearn_fed import flower

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "flwr" else find_spec(name, *a))
    with pytest.raises(ImportError, match=r"needs flwr; .*pip install sklearn-fed\[flower\]"):
        flower.make_client_app  # noqa: B018 - the lazy attribute access is the test


# ----------------------------------------------------------------- run config
@pytest.mark.parametrize("estimator", FLOWER_CASES + APPS_ONLY_CASES, ids=_case_id)
def test_run_config_names_the_estimator_and_its_changed_params(estimator):
    config = estimator_to_config(estimator)
    assert set(config) <= set(RUN_CONFIG_DEFAULTS)
    rebuilt = estimator_from_config(config)
    assert type(rebuilt) is type(estimator)
    assert estimator_to_config(rebuilt) == config
    assert repr(rebuilt) == repr(estimator)


def test_run_config_carries_arrays_and_refuses_what_it_cannot_carry():
    alpha = np.array([0.5, 2.0])
    config = estimator_to_config(FederatedRidge(alpha=alpha))
    assert json.loads(config["estimator-params"]) == {
        "alpha": {"ndarray": [0.5, 2.0], "dtype": "<f8"}}
    np.testing.assert_array_equal(estimator_from_config(config).alpha, alpha)
    with pytest.raises(TypeError, match="parameter 'random_state' of ProjectedFederatedRidge"):
        estimator_to_config(ProjectedFederatedRidge(random_state=np.random.RandomState(0)))
    with pytest.raises(ValueError, match="not one of sklearn-fed's protocol estimators"):
        estimator_from_config({"estimator": "os.system"})
    with pytest.raises(ValueError, match="not one of sklearn-fed's protocol estimators"):
        estimator_from_config({"estimator": "ClientStatistics"})
    with pytest.raises(ValueError, match="not valid JSON"):
        estimator_from_config({"estimator": "FederatedRidge", "estimator-params": "{alpha"})
    with pytest.raises(ValueError, match="unexpected keyword"):
        estimator_from_config({"estimator": "FederatedRidge", "estimator-params": '{"beta": 1}'})
    with pytest.raises(ValueError, match="alpha"):
        estimator_from_config({"estimator": "FederatedRidge", "estimator-params": '{"alpha": -1}'})


def test_run_config_carries_composites_as_json_of_known_classes_only():
    from sklearn.preprocessing import PolynomialFeatures

    pipe = make_federated_pipeline(FederatedStandardScaler(), PolynomialFeatures(2),
                                   FederatedRidge(alpha=0.5), verbose=True)
    config = estimator_to_config(pipe)
    assert json.loads(config["estimator-params"]) == {"verbose": True, "steps": [
        ["federatedstandardscaler", {"estimator": "FederatedStandardScaler", "params": {}}],
        ["polynomialfeatures", {"estimator": "PolynomialFeatures", "params": {}}],
        ["federatedridge", {"estimator": "FederatedRidge", "params": {"alpha": 0.5}}]]}
    rebuilt = estimator_from_config(config)
    assert rebuilt.steps[2][1].alpha == 0.5 and estimator_to_config(rebuilt) == config
    ct = FederatedColumnTransformer([("num", FederatedStandardScaler(), ["a"])],
                                    remainder=PolynomialFeatures(degree=3))
    assert estimator_to_config(estimator_from_config(estimator_to_config(ct))) == \
        estimator_to_config(ct)
    for name in ("StandardScaler", "subprocess.Popen"):  # not federated; not ours
        params = json.dumps({"steps": [["x", {"estimator": name, "params": {}}]]})
        with pytest.raises(ValueError, match=f"estimator '{name}' is not one of sklearn-fed"):
            estimator_from_config({"estimator": "FederatedPipeline", "estimator-params": params})
    with pytest.raises(ValueError, match="estimator 'PolynomialFeatures' is not one of"):
        estimator_from_config({"estimator": "PolynomialFeatures"})  # a part, never a run
    with pytest.raises(TypeError, match="reserved keys"):
        estimator_to_config(FederatedRidge(alpha={"estimator": "x", "params": {}}))


def test_settings_are_checked():
    settings = ServerSettings.from_run_config(RUN_CONFIG_DEFAULTS)
    assert settings.server_kwargs() == {"on_invalid": "raise"}
    with pytest.raises(ValueError, match="min-nodes"):
        ServerSettings.from_run_config({"min-nodes": 0})
    with pytest.raises(ValueError, match="on-invalid"):
        ServerSettings.from_run_config({"on-invalid": "ignore"})
    node = NodeSettings.from_node_config({
        "site": 7, "data-path": "x.csv", "target": "y", "allowed-kinds": "ridge.statistics, a.b",
        "min-rows": 10,
    })
    assert node.site == 7 and node.policy.allowed_kinds == {"ridge.statistics", "a.b"}
    assert node.policy.min_rows == 10 and node.read_key() is None
    with pytest.raises(ValueError, match="unknown node-config keys"):
        NodeSettings.from_node_config({"site": "a", "data-path": "x", "datapath": "y"})
    with pytest.raises(ValueError, match="needs site="):
        NodeSettings.from_node_config({"data-path": "x"})
    with pytest.raises(ValueError, match="needs data-path="):
        NodeSettings.from_node_config({"site": "a"})


@pytest.mark.filterwarnings("ignore::DeprecationWarning:pathspec")  # inside Flower 1.41
def test_example_app_lists_every_run_config_key_and_ships_no_secrets():
    import tomllib
    from flwr.cli.build import get_filtered_fab_paths

    example = Path(__file__).parents[2] / "examples" / "flower"
    project = tomllib.loads((example / "pyproject.toml").read_text())
    app = project["tool"]["flwr"]["app"]
    assert set(app["config"]) == set(RUN_CONFIG_DEFAULTS)
    assert app["components"] == {"serverapp": "sklearn_fed.flower.app:serverapp",
                                 "clientapp": "sklearn_fed_site:clientapp"}
    estimator_from_config(app["config"])  # the example's estimator and parameters are valid
    files = {name: b"" for name in ("README.md", "prepare_sites.py", "sites/server-keys.json",
                                    "sites/north.key", "sites/north.csv", "model.skops")}
    assert get_filtered_fab_paths(files, project) == ["README.md"]


# ----------------------------------------------------------------- data and model files
def test_site_data_files_read_back_exactly(tmp_path):
    import pandas as pd

    rng = np.random.default_rng(0)
    table = pd.DataFrame(rng.normal(size=(20, 3)) * 1e6 + 1 / 3, columns=["u", "v", "w"])
    table["target"] = rng.normal(size=20)
    table["t2"] = rng.normal(size=20)
    table["weight"] = rng.uniform(size=20)
    table.to_csv(tmp_path / "site.csv", index=False)
    table.to_parquet(tmp_path / "site.parquet")
    for name in ("site.csv", "site.parquet"):
        X, y, w = load_site_data(tmp_path / name, target="target,t2", weight="weight",
                                 features="w,u")
        assert X.columns.tolist() == ["w", "u"]
        np.testing.assert_array_equal(X.to_numpy(), table[["w", "u"]].to_numpy())
        np.testing.assert_array_equal(y, table[["target", "t2"]].to_numpy())
        np.testing.assert_array_equal(w, table["weight"].to_numpy())
    save_site_data(tmp_path / "site.npz", np.float32(table[["u", "v"]]), ["x", "y"] * 10)
    X, y, w = load_site_data(tmp_path / "site.npz")
    assert X.dtype == np.float32 and y.tolist() == ["x", "y"] * 10 and w is None
    # streaming: one round's rows, and the round column is never a feature
    table["round"] = np.arange(20) % 3
    table.to_csv(tmp_path / "stream.csv", index=False)
    X, y, _ = load_site_data(tmp_path / "stream.csv", target="target", round_column="round",
                             in_round=1)
    assert "round" not in X.columns and y.tolist() == table["target"][1::3].tolist()
    save_site_data(tmp_path / "stream.npz", table[["u"]].to_numpy(), table["target"],
                   rounds=table["round"])
    X, y, _ = load_site_data(tmp_path / "stream.npz", round_column="round", in_round=2)
    assert X[:, 0].tolist() == table["u"][2::3].tolist()
    with pytest.raises(ValueError, match=r"no column\(s\) \['nope'\]"):
        load_site_data(tmp_path / "site.csv", target="nope")
    with pytest.raises(ValueError, match="name the target"):
        load_site_data(tmp_path / "site.csv")
    with pytest.raises(ValueError, match="unsupported data file type"):
        load_site_data(tmp_path / "site.xlsx", target="y")


def test_model_file_loads_without_pickle_and_refuses_foreign_types(tmp_path):
    X, y, clients = _digits()
    model = FederatedRidge().fit(X, y, clients=clients)
    save_model(model, tmp_path / "model.skops")
    loaded = load_model(tmp_path / "model.skops")
    _assert_same_model(loaded, model)
    import skops.io

    skops.io.dump({"model": model, "hook": functools.partial(print)}, tmp_path / "other.skops")
    with pytest.raises(ValueError, match=r"refusing to load types .*: \['builtins.print', "
                                         r"'functools.partial'\]"):
        load_model(tmp_path / "other.skops")


def test_node_state_reads_back_and_rebuilds_only_sklearn_fed_classes():
    from sklearn_fed.flower._state import read_state, write_state
    from sklearn_fed.privacy._secure_aggregation import MaskingKey

    key = MaskingKey()
    value = {("f" * 32, '"a"'): key, "pending": ((np.eye(2, dtype=np.float32), [1, 2], None),),
             "clipped": {7: ("a", np.int64(3), 10.5)}, "raw": b"\x00\xff", "labels": ["x", True]}
    back = read_state(write_state(value))
    assert back[("f" * 32, '"a"')].public_bytes == key.public_bytes  # the private key too
    (X, y, w), = back["pending"]
    assert X.dtype == np.float32 and X.tolist() == [[1, 0], [0, 1]] and y == [1, 2] and w is None
    assert back["clipped"] == {7: ("a", 3, 10.5)} and type(back["clipped"][7][1]) is np.int64
    assert back["raw"] == b"\x00\xff" and back["labels"] == ["x", True]
    with pytest.raises(TypeError, match="functools.partial cannot be kept"):
        write_state({"hook": functools.partial(print)})
    with pytest.raises(TypeError, match="array of Python objects"):
        write_state(np.array([print]))
    forged = io.BytesIO()  # state naming another class than sklearn-fed's
    tree = json.dumps({"object": "subprocess.Popen", "state": {"dict": []}}).encode()
    np.savez(forged, tree=np.frombuffer(tree, dtype=np.uint8))
    with pytest.raises(ValueError, match="'subprocess.Popen', not a sklearn-fed class"):
        read_state(forged.getvalue())


# ----------------------------------------------------------------- the apps, in process
class FakeGrid:
    """A Grid whose SuperNodes are the ClientApp called in this process.

    ``silent`` nodes never answer (a dead node the SuperLink still lists);
    ``tamper(site, reply_bytes)`` alters replies on their way back.
    """

    def __init__(self, node_configs, run_config, *, silent=(), tamper=None, app=None):
        self.node_configs = dict(enumerate(node_configs, start=101))
        self.run_config = run_config
        self.silent = {101 + i for i in silent}
        self.tamper = tamper
        self.app = app or make_client_app()
        # one Context per node for the whole run, as a SuperNode keeps it
        self.contexts = {node: Context(run_id=1, node_id=node, node_config=config,
                                       state=RecordDict(), run_config=run_config)
                         for node, config in self.node_configs.items()}
        self.replies = {}
        self.rounds = 0

    def get_node_ids(self):
        return list(self.node_configs)

    def push_messages(self, messages):
        ids = []
        self.rounds += 1
        for message in messages:
            message.metadata.__dict__["_message_id"] = message.object_id  # as the SuperLink does
            ids.append(message.metadata.message_id)
            node = message.metadata.dst_node_id
            if node in self.silent:
                continue
            reply = self.app(message, self.contexts[node])
            record = reply.content.config_records.get("sklearn_fed") if reply.has_content() else {}
            if self.tamper is not None and "reply" in record:
                site = self.node_configs[node]["site"]
                record["reply"] = self.tamper(site, record["reply"])
            self.replies[message.metadata.message_id] = reply
        return ids

    def pull_messages(self, message_ids):
        return [self.replies.pop(i) for i in list(message_ids) if i in self.replies]


@pytest.fixture
def task_identity():
    """Flower sets these in its ServerApp process; Message() needs them."""
    saved = (TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id)
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 0, 1
    yield
    TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id = saved


# Sites compared with the in-process fit release as fit's simulated sites do
# (permissive; the default rules would refuse a 67-row streaming round of 64 features).
PERMISSIVE_NODE = {"min-rows": 0, "min-count": 0, "max-parameters-per-row": 0.0,
                   "max-levels": 0, "exact-extremes": True}


def _node_configs(tmp_path, sites, keys=None, **extra):
    configs = []
    for site, data in sites.items():
        path = tmp_path / f"{site}.npz"
        save_site_data(path, data["X"], data["y"], rounds=data["rounds"])
        config = {"site": site, "data-path": str(path), "round-column": "round",
                  **PERMISSIVE_NODE, **extra.get(site, {})}
        if keys:
            (tmp_path / f"{site}.key").write_text(keys[site])
            config["key-file"] = str(tmp_path / f"{site}.key")
        configs.append(config)
    return configs


def _run_config(estimator, tmp_path, keys=None, **overrides):
    config = dict(RUN_CONFIG_DEFAULTS, **estimator_to_config(estimator))
    config.update({"min-nodes": 1, "node-timeout": 0.5, "reply-timeout": 0.5,
                   "poll-interval": 0.01})
    if keys:
        (tmp_path / "keys.json").write_text(json.dumps(keys))
        config["keys-file"] = str(tmp_path / "keys.json")
    config.update(overrides)
    return config


KEYS = {site: f"{site}-secret-key-of-32-characters!" for site in SITES}


@pytest.mark.parametrize("estimator", FLOWER_CASES + APPS_ONLY_CASES, ids=_case_id)
def test_apps_give_the_in_process_fit(estimator, tmp_path, task_identity):
    sites = _site_rows()
    grid = FakeGrid(_node_configs(tmp_path, sites, KEYS),
                    _run_config(estimator, tmp_path, KEYS, **{"model-path": str(tmp_path / "m")},
                                **_flower_config(estimator)))
    fitted = run_server(grid, grid.run_config)
    local = _reference(estimator)
    _assert_same_model(fitted, local)
    _assert_same_model(load_model(tmp_path / "m"), local)


def test_silent_and_refusing_sites_are_dropout(tmp_path, task_identity):
    sites = _site_rows()
    configs = _node_configs(tmp_path, sites, KEYS, b={"min-rows": 500})  # b refuses: 200 rows
    configs.append({"site": "dead", "data-path": "nowhere.npz"})  # listed, never answers
    grid = FakeGrid(configs, _run_config(FederatedRidge(), tmp_path, KEYS), silent=[3])
    fitted = run_server(grid, grid.run_config)
    X = np.vstack([sites["a"]["X"], sites["c"]["X"]])
    y = np.concatenate([sites["a"]["y"], sites["c"]["y"]])
    np.testing.assert_allclose(fitted.coef_, Ridge().fit(X, y).coef_, rtol=1e-10, atol=1e-12)
    assert fitted.clients_.tolist() == ["a", "c"]


def test_too_few_sites_stop_the_run(tmp_path, task_identity):
    sites = _site_rows()
    configs = _node_configs(tmp_path, sites, KEYS, b={"min-rows": 500})
    config = _run_config(FederatedRidge(), tmp_path, KEYS, **{"min-nodes": 3})
    with pytest.raises(RuntimeError, match=r"round 1: 2 site\(s\) replied, min-nodes=3"):
        run_server(FakeGrid(configs, config), config)
    with pytest.raises(RuntimeError, match=r"2 site\(s\) known after the roll call"):
        run_server(FakeGrid(configs, config, silent=[0]), config)
    with pytest.raises(RuntimeError, match=r"3 SuperNode\(s\) connected .* min-nodes=4"):
        run_server(FakeGrid(configs, config), dict(config, **{"min-nodes": 4}))
    configs[1]["site"] = "a"
    with pytest.raises(RuntimeError, match="say they are site 'a'"):
        run_server(FakeGrid(configs, config), dict(config, **{"min-nodes": 1}))


def test_node_sites_skip_the_roll_call_and_a_wrong_one_is_dropout(tmp_path, task_identity):
    sites = _site_rows()
    configs = _node_configs(tmp_path, sites, KEYS)
    config = _run_config(FederatedRidge(), tmp_path, KEYS,
                         **{"node-sites": json.dumps({"101": "a", "102": "b", "103": "c"})})
    grid = FakeGrid(configs, config)
    _assert_same_model(run_server(grid, config), _reference(FederatedRidge()))
    assert grid.rounds == 1  # the task round only
    swapped = dict(config, **{"node-sites": json.dumps({"101": "b", "102": "a", "103": "c"})})
    fitted = run_server(FakeGrid(configs, swapped), swapped)  # a and b cannot verify their tasks
    assert fitted.clients_.tolist() == ["c"]


def test_tampered_reply_is_rejected_naming_the_site(tmp_path, task_identity):
    def flip(site, reply):
        if site != "b":
            return reply
        data = bytearray(reply)
        data[len(data) // 2] ^= 1
        return bytes(data)

    sites = _site_rows()
    configs = _node_configs(tmp_path, sites, KEYS)
    config = _run_config(FederatedRidge(), tmp_path, KEYS)
    with pytest.raises(InvalidClientMessage, match="client 'b': authentication failed"):
        run_server(FakeGrid(configs, config, tamper=flip), config)
    dropped = run_server(FakeGrid(configs, config, tamper=flip),
                         dict(config, **{"on-invalid": "drop"}))
    assert dropped.clients_.tolist() == ["a", "c"]


def test_a_node_without_the_sites_key_is_refused(tmp_path, task_identity, caplog):
    sites = _site_rows()
    configs = _node_configs(tmp_path, sites, KEYS)
    (tmp_path / "c.key").write_text("an-impostor-key-that-is-long-enough")
    config = _run_config(FederatedRidge(), tmp_path, KEYS)
    with caplog.at_level(logging.WARNING, logger="sklearn_fed.flower"):
        fitted = run_server(FakeGrid(configs, config), config)  # c cannot read its task
    assert fitted.clients_.tolist() == ["a", "b"]
    # said where it can be fixed: at the site, naming the key file to compare
    said = [r.getMessage() for r in caplog.records if "cannot read" in r.getMessage()]
    assert any("site 'c' cannot read the server's task: the task does not verify under site "
               "'c''s key" in text and f"(this node's key-file: {tmp_path / 'c.key'})" in text
               for text in said), said


def test_node_config_says_whether_unnamed_columns_are_in_order():
    node = {"site": "a", "data-path": "a.npz"}
    assert not NodeSettings.from_node_config(node).policy.columns_in_order
    for value in (True, "true"):
        settings = NodeSettings.from_node_config({**node, "columns-in-order": value})
        assert settings.policy.columns_in_order
    with pytest.raises(ValueError, match="columns-in-order must be true or false; got 'yes'"):
        NodeSettings.from_node_config({**node, "columns-in-order": "yes"})


@pytest.mark.filterwarnings("ignore:FederatedLogisticRegression did not converge")
def test_a_whole_pipeline_is_one_run_of_the_apps(tmp_path, task_identity):
    sites = _site_rows()
    for index, site in enumerate(SITES):  # a value missing here and there, as in real tables
        sites[site]["X"] = sites[site]["X"].copy()
        sites[site]["X"][index::17, 3 + index] = np.nan
    grid = FakeGrid(_node_configs(tmp_path, sites, KEYS), _run_config(_pipeline(), tmp_path, KEYS))
    fitted = run_server(grid, grid.run_config)
    local = _in_process(_pipeline(), sites)
    _assert_same_model(fitted, local)
    assert fitted.communication_.rounds == local.communication_.rounds >= 4


# ----------------------------------------------------------------- site workers
def test_thin_clientapp_imports_neither_scikit_learn_nor_sklearn_fed():
    import subprocess
    import sys

    code = ("import sys, sklearn_fed_site; "
            "assert not {'sklearn', 'sklearn_fed'} & set(sys.modules), 'imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


@contextlib.contextmanager
def _site_worker(**kwargs):
    """A SiteWorker served on a Unix socket from a thread; yields (socket path, worker)."""
    from sklearn_fed.flower._worker import SiteWorker, serve

    directory = Path(tempfile.mkdtemp(prefix="sf-"))  # AF_UNIX paths are short
    path, worker, started = directory / "w.sock", SiteWorker(**kwargs), queue.Queue()
    thread = threading.Thread(target=serve, args=(path, worker, started.put), daemon=True)
    thread.start()
    server = started.get(timeout=30)
    try:
        yield str(path), worker
    finally:
        server.shutdown()
        thread.join(timeout=30)
        shutil.rmtree(directory, ignore_errors=True)


WORKER_CASES = [
    PrivateFederatedRidge(epsilon=2.0, feature_bound=80.0, target_bound=10.0,
                          noise="distributed", random_state=0),  # a round's X25519 key kept
    IncrementalFederatedRidge(alpha=1.0, min_samples=100, random_state=0),  # rows held back
    FederatedLogisticRegression(max_iter=2),  # three rounds: classes, two Newton steps
    FedAvgRegressor(n_rounds=3, batch_size=7, client_fraction=0.7, random_state=0),
]


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("max_runs", [8, 0], ids=["in-memory", "restarted-every-message"])
@pytest.mark.parametrize("estimator", WORKER_CASES, ids=_case_id)
def test_site_worker_gives_the_in_process_fit(estimator, max_runs, tmp_path, task_identity):
    """The thin ClientApp hands tasks to the worker; the role is kept in memory between
    rounds (``max_runs=0``: never kept, every message rebuilds it from context.state)."""
    import sklearn_fed_site

    sites = _site_rows()
    with _site_worker(max_runs=max_runs) as (socket_path, worker):
        configs = _node_configs(tmp_path, sites, KEYS)
        for config in configs:
            config["worker-socket"] = socket_path
        grid = FakeGrid(configs, _run_config(estimator, tmp_path, KEYS,
                                             **_flower_config(estimator)),
                        app=sklearn_fed_site.clientapp)
        fitted = run_server(grid, grid.run_config)
        assert len(worker._runs) == (3 if max_runs else 0)  # one role per site of run 1
    _assert_same_model(fitted, _reference(estimator))
    for context in grid.contexts.values():  # the state is written as without a worker
        assert "sklearn_fed_client" in context.state.config_records


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_site_worker_refusals_and_failures_leave_the_run_as_it_was(tmp_path, task_identity,
                                                                     caplog):
    import sklearn_fed_site
    from sklearn_fed.flower._worker import serve

    sites = _site_rows()
    estimator = FederatedLogisticRegression(max_iter=2)
    with _site_worker() as (socket_path, worker):
        configs = _node_configs(tmp_path, sites, KEYS, b={"min-rows": 500})  # b refuses
        for config in configs:
            config["worker-socket"] = socket_path
        config = _run_config(estimator, tmp_path, KEYS)
        fitted = run_server(FakeGrid(configs, config, app=sklearn_fed_site.clientapp), config)
        assert fitted.clients_.tolist() == ["a", "c"]
        assert "site 'b' is dropout from round 1 on" in caplog.text
        assert "TaskRefused" in caplog.text and "fewer than the policy's minimum 500" in caplog.text
        # a failing task drops the kept role: the next one starts from context.state
        header, _ = worker.handle({"op": "task", "run_id": 9, "node_config": configs[0],
                                   "run_config": config}, {"task": b"not a frame"})
        assert header["ok"] is False and "InvalidClientMessage" in header["error"]
        assert not any(run == 9 for run, _ in worker._runs)
        assert worker.handle({"op": "launch"}, {})[0]["error"].endswith("'launch'.")
    # the worker is gone: the ClientApp answers in its own process, with a warning
    caplog.clear()
    fitted = run_server(FakeGrid(configs, config, app=sklearn_fed_site.clientapp), config)
    assert fitted.clients_.tolist() == ["a", "c"]
    assert "did not answer" in caplog.text and "answering in this process" in caplog.text
    open_dir = tmp_path / "open"
    open_dir.mkdir(mode=0o755)
    open_dir.chmod(0o755)
    with pytest.raises(ValueError, match="open to other users .* chmod 700"):
        serve(open_dir / "w.sock")


def test_worker_wire_refuses_malformed_frames():
    import socket
    import struct

    from sklearn_fed_site import receive, send

    left, right = socket.socketpair()
    with left, right:
        send(left, {"op": "task"}, {"task": b"\x00" * 10, "state:x": b""})
        assert receive(right) == ({"op": "task"}, {"task": b"\x00" * 10, "state:x": b""})
        left.sendall(struct.pack("!Q", 1 << 30))
        with pytest.raises(ValueError, match="header of 1073741824 bytes"):
            receive(right)
    for header in (b'{"op": 1}', b'{"blobs": [["x", -1]]}', b'[1]'):
        left, right = socket.socketpair()
        with left, right:
            left.sendall(struct.pack("!Q", len(header)) + header)
            with pytest.raises(ValueError):
                receive(right)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_server_logs_a_line_per_round_and_a_summary(tmp_path, task_identity, caplog):
    import logging

    sites = _site_rows()
    caplog.set_level(logging.INFO, logger="sklearn_fed.flower")
    estimator = FederatedLogisticRegression(max_iter=2, tol=0.0)
    config = _run_config(estimator, tmp_path, KEYS)
    fitted = run_server(FakeGrid(_node_configs(tmp_path, sites, KEYS), config), config)
    lines = re.findall(r"round (\d+): 3 of 3 site\(s\) answered, (\d+) bytes sent, (\d+) "
                       r"received, [0-9.]+ s \([0-9.]+ s in all\)", caplog.text)
    assert [int(r) for r, _, _ in lines] == list(range(1, fitted.communication_.rounds + 1))
    sent = sum(int(s) for _, s, _ in lines)
    received = sum(int(r) for _, _, r in lines)
    assert re.search(rf"fitted FederatedLogisticRegression in {len(lines)} round\(s\) over 3 "
                     rf"site\(s\) \['a', 'b', 'c'\]: {sent} bytes sent, {received} received",
                     caplog.text)


def test_credentials_are_what_flower_reads(tmp_path):
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import load_ssh_private_key
    from flwr.cli.supernode.register import try_load_public_key
    from flwr.supercore.primitives.asymmetric import public_key_to_bytes

    from sklearn_fed.flower._credentials import make_node_key, make_tls_files

    files = make_tls_files(tmp_path / "tls", hosts=("127.0.0.1", "link.example"))
    ca = x509.load_pem_x509_certificate(files["ca"].read_bytes())
    server = x509.load_pem_x509_certificate(files["cert"].read_bytes())
    server.verify_directly_issued_by(ca)
    names = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["link.example"]
    assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert files["key"].stat().st_mode & 0o777 == 0o600
    private, public = make_node_key(tmp_path / "nodes", "north")
    key = load_ssh_private_key(private.read_bytes(), password=None)
    assert try_load_public_key(public) == public_key_to_bytes(key.public_key())
    assert private.stat().st_mode & 0o777 == 0o600


def test_local_federation_writes_each_sites_node_config(tmp_path):
    import tomllib

    X, y, _ = _digits()
    save_site_data(tmp_path / "east.npz", X[:50], y[:50])
    sites = {"north": (X[:50], y[:50]), np.int64(7): {"X": X[:9], "y": y[:9], "rounds": [0] * 9},
             "east": str(tmp_path / "east.npz")}
    federation = LocalFederation(sites, target="y", workdir=tmp_path / "work")
    federation._prepare()
    shutil.rmtree(federation._sockets)  # start() would start the workers there; close() removes it
    nodes = [tomllib.loads(p.read_text()) for p in federation._node_configs.values()]
    assert [node["site"] for node in nodes] == ["north", 7, "east"]
    assert nodes[2]["data-path"] == str(tmp_path / "east.npz") and nodes[2]["target"] == "y"
    assert nodes[1]["round-column"] == "round" and "target" not in nodes[0]
    keys = json.loads(Path(federation._keys_file).read_text())
    for node in nodes:  # every site holds its own key, and the server holds them all
        NodeSettings.from_node_config(node)
        assert Path(node["key-file"]).read_text() == keys[str(node["site"])]
        assert len(keys[str(node["site"])]) == 64
        assert Path(node["key-file"]).stat().st_mode & 0o777 == 0o600
    X_north, _, _ = NodeSettings.from_node_config(nodes[0]).read_data()
    np.testing.assert_array_equal(X_north, X[:50])
    with pytest.raises(TypeError, match="site 'x': expected"):
        LocalFederation({"x": [X, y]}, workdir=tmp_path / "w2")._prepare()
    with pytest.raises(ValueError, match="distinct"):
        LocalFederation({1: (X, y), "1": (X, y)})


# ----------------------------------------------------------------- a real federation
# The estimators the issue names, and a whole pipeline, through real SuperNodes (every
# other case runs through the apps above; distributed noise's two rounds there too).
REAL_CASES = [_pipeline()] + [  # the pipeline (imputer, scaler, logistic regression) is one run
    case for case in FLOWER_CASES[::-1] if _case_id(case) != "PrivateFederatedRidge-distributed"
]  # the runs of most rounds first: the one-round runs fill in beside them
OUTSIDERS = ("not-enrolled", "wrong-certificate")


@pytest.fixture(scope="module")
def federation(tmp_path_factory):
    """``federation()``: the module's federation, as deployed (TLS, enrolled node keys, HMAC
    site keys, site workers), shared by the tests below; started anew after a test ends it.

    From its start, two outsiders try to join: a SuperNode whose key was never enrolled,
    and an enrolled one that trusts another CA (the runs meanwhile see neither).
    """
    from sklearn_fed.flower._credentials import make_tls_files

    started = []

    def get():
        if not started or started[-1]._closed or started[-1]._dead:
            federation = LocalFederation(_site_rows(), node_config=PERMISSIVE_NODE).start()
            started.append(federation)
            federation.start_outsider("not-enrolled", "a")
            federation.start_outsider("wrong-certificate", "b", enroll=True,
                                      ca=make_tls_files(tmp_path_factory.mktemp("ca"))["ca"])
        return started[-1]

    yield get
    for federation in started:
        federation.close()


def _fit_side_by_side(federation, runs, at_once=None):
    """``federation.fit(*args, **kwargs)`` for every run, ``at_once`` at a time (default: all);
    results or exceptions.

    The SuperLink holds the runs side by side; each SuperNode answers their
    messages one at a time, so the runs' fixed costs (the CLI, the ServerApp
    process, saving the model) overlap. More than a few at once on two busy
    cores gain nothing: a ServerApp process that is not up within Flower's 30 s
    task heartbeat is started again, which only adds load.
    """
    with ThreadPoolExecutor(at_once or len(runs)) as pool:
        futures = [pool.submit(federation.fit, *args, **kwargs) for args, kwargs in runs]
        return [future.exception() or future.result() for future in futures]


@pytest.mark.slow
@pytest.mark.xdist_group("flower-federation")
@pytest.mark.filterwarnings("ignore:FederatedLogisticRegression did not converge")
def test_every_estimator_through_real_supernodes_equals_in_process_fit(federation):
    """Each estimator is one `flwr run`; its model equals the in-process fit on the same rows."""
    start = time.perf_counter()
    fitted = _fit_side_by_side(federation(), [
        ((estimator,), {"timeout": 600, "run_config": _flower_config(estimator)})
        for estimator in REAL_CASES
    ], at_once=4)
    print(f"{len(REAL_CASES)} Flower runs: {time.perf_counter() - start:.1f} s")
    differences = []
    for estimator, flower in zip(REAL_CASES, fitted, strict=True):
        if isinstance(flower, Exception):
            differences.append(f"{_case_id(estimator)}: the Flower run failed: {flower}")
            continue
        try:
            _assert_same_model(flower, _reference(estimator))
        except AssertionError as exc:
            differences.append(f"{_case_id(estimator)}: {exc}")
    assert not differences, "\n".join(differences)


@pytest.mark.slow
@pytest.mark.xdist_group("flower-federation")
def test_outsiders_and_a_wrong_site_key_are_refused_and_the_run_completes(federation):
    """As deployed (TLS, enrolled node keys, HMAC site keys): a SuperNode whose key was never
    enrolled, one that trusts another CA, and a site holding the wrong HMAC key are each
    refused with a message saying why; the run completes on the other sites."""
    import tomllib

    sites = _site_rows()
    federation = federation()
    assert federation.tls and federation.node_auth and federation.workers
    key_file = Path(tomllib.loads(federation._node_configs["c"].read_text())["key-file"])
    key = key_file.read_text()
    key_file.write_text("0" * 64)  # c's node holds another key than the server's for c
    try:
        fitted = federation.fit(FederatedRidge(alpha=1.0), run_config={"min-nodes": 2})
    finally:
        key_file.write_text(key)  # the next runs' roles read it anew
    run_log = (federation.logs / f"run-{federation._runs}.log").read_text(errors="replace")
    deadline = time.monotonic() + 120  # the outsiders give up after 3 tries
    while any(p.poll() is None for p in federation._outsiders):
        assert time.monotonic() < deadline, "an outsider is still trying"
        time.sleep(0.5)
    logs = {name: (federation.logs / f"{name}.log").read_text(errors="replace")
            for name in OUTSIDERS}
    superlink_log = (federation.logs / "superlink.log").read_text(errors="replace")
    assert fitted.clients_.tolist() == ["a", "b"]
    np.testing.assert_equal(_model_state(fitted), _model_state(
        _in_process(FederatedRidge(alpha=1.0), {s: sites[s] for s in ("a", "b")})))
    # the wrong site key: the server's log names the site and why
    assert re.search(r"site 'c' is dropout from round 1 on: .*the task does not verify under "
                     r"site 'c'.s key.*this node's key-file: ", run_log)
    assert "fitted FederatedRidge in 1 round(s) over 2 site(s) ['a', 'b']" in run_log
    # TLS: the node that trusts another CA says so and gives up
    assert "CERTIFICATE_VERIFY_FAILED" in logs["wrong-certificate"]
    # node enrollment: the SuperLink refuses to activate a key it does not know
    assert "Failed to activate SuperNode" in logs["not-enrolled"]
    assert "No SuperNode found with the given public key" in superlink_log


@pytest.mark.slow
@pytest.mark.xdist_group("flower-federation")
def test_killed_supernode_is_dropout_and_every_process_ends(federation):
    """Last: it kills a site and ends the federation (a test after it would get a new one)."""
    sites = _site_rows()
    federation = federation()
    try:
        ours = [federation._superlink, *federation._supernodes.values()]
        processes = {(p.pid, _proc_identity(p.pid)[1]) for p in ours}
        federation.kill_site("c")  # dies before it replies; the SuperLink still lists it
        never_enough = {"min-nodes": 4, "node-timeout": 600.0}  # waits, sends no message
        failed, stopped, fitted = _fit_side_by_side(federation, [
            ((FederatedRidge(),), {"run_config": {"min-nodes": 4, "node-timeout": 1.0}}),
            ((FederatedRidge(),), {"timeout": 10, "run_config": never_enough}),
            ((FederatedRidge(alpha=1.0),), {"run_config": {"reply-timeout": 20.0}}),
        ])
        processes.update(child for p in ours for child in _descendants(p.pid))  # apps too
    finally:
        federation.close()  # ends every process it started, by PID
    assert [pid for pid, started in processes if _still_running(pid, started)] == []
    assert isinstance(failed, RuntimeError)
    assert re.search(r"(?s)no model was saved.*Logs are kept in.*min-nodes=4", str(failed))
    assert isinstance(stopped, TimeoutError)
    assert "took longer than 10 s and was stopped" in str(stopped)
    assert federation.logs.is_dir()  # runs failed: the logs are kept, the test removes them
    shutil.rmtree(federation.workdir)
    assert not isinstance(fitted, Exception), f"the survivors' run failed: {fitted}"
    X = np.vstack([sites["a"]["X"], sites["b"]["X"]])
    y = np.concatenate([sites["a"]["y"], sites["b"]["y"]])
    reference = Ridge(alpha=1.0).fit(X, y)
    np.testing.assert_allclose(fitted.coef_, reference.coef_, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(fitted.intercept_, reference.intercept_, rtol=1e-10)
    assert fitted.clients_.tolist() == ["a", "b"]
