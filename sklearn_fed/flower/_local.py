"""A real Flower federation on this machine: one SuperLink, one SuperNode per site.

Deployed as a production federation is (:doc:`/deploying_flower`; TLS,
enrolled node keys, HMAC site keys, site workers), with every process on
127.0.0.1. The SuperLink runs with ``--disable-runtime-dependency-installation``
and every process gets this interpreter's ``bin`` on ``PATH`` and the
directory holding the imported :mod:`sklearn_fed` on ``PYTHONPATH``, so nodes
run exactly the code the caller runs. Waits are bounded, and every process
started here is ended by its PID (with the processes it spawned), also on
error and on timeout.
"""

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import tomli_w

from ..datasets import save_site_data
from ._config import RUN_CONFIG_DEFAULTS, estimator_to_config, site_text
from ._credentials import _private, make_node_key, make_tls_files
from ._persist import load_model, save_model

__all__ = ["LocalFederation", "run_local_federation"]

CONNECTION = "sklearn-fed-local"
_LOG_GRACE = 5.0  # seconds the CLI may take to stream a finished run's last log lines
_SITE_ARRAYS = {"X", "y", "sample_weight", "rounds"}  # what a site given as a dict may hold
_APP_PYPROJECT = {
    "build-system": {"requires": ["hatchling"], "build-backend": "hatchling.build"},
    "project": {
        "name": "sklearn-fed-local",
        "version": "1.0.0",
        "description": "sklearn-fed estimators on a local Flower federation",
        "license": "BSD-3-Clause",
        "dependencies": ["sklearn-fed[flower]"],
    },
    "tool": {"flwr": {"app": {
        "publisher": "sklearn-fed",
        "components": {
            "serverapp": "sklearn_fed.flower.app:serverapp",
            # the thin ClientApp: it hands each task to the site's worker
            "clientapp": "sklearn_fed_site:clientapp",
        },
        "config": RUN_CONFIG_DEFAULTS,
    }}},
}


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _port_open(port):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _tool(name):
    """A Flower command next to this interpreter (the same environment), else on PATH."""
    here = Path(sys.executable).parent / name
    found = str(here) if here.exists() else shutil.which(name)
    if found is None:
        raise ImportError(
            f"Flower's command {name!r} was not found; install the extra with "
            "`pip install sklearn-fed[flower]`."
        )
    return found


# ---------------------------------------------------------------- processes
def _proc_identity(pid):
    """``(parent pid, start time)`` of a live process from /proc, or None (Linux only)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    if fields[0] == "Z":  # a zombie has already exited
        return None
    return int(fields[1]), fields[19]


def _descendants(pid):
    """``[(pid, start time)]`` of every live descendant of ``pid`` (empty off Linux)."""
    children = {}
    for entry in Path("/proc").glob("[0-9]*") if Path("/proc").is_dir() else ():
        identity = _proc_identity(entry.name)
        if identity is not None:
            children.setdefault(identity[0], []).append((int(entry.name), identity[1]))
    found = [(pid, None)]
    for parent, _ in found:  # the list grows as the walk goes down
        found += children.get(parent, [])
    return found[1:]


def _still_running(pid, started):
    """Whether the process ``pid`` that started at ``started`` runs (not a reuse of its PID)."""
    identity = _proc_identity(pid)
    return identity is not None and identity[1] == started


def _end_all(processes, grace):
    """End ``processes`` and what they spawned: SIGTERM (SIGKILL when ``grace`` is 0),
    SIGKILL after ``grace`` s, then SIGKILL any descendant still alive, by PID."""
    spawned = [child for process in processes for child in _descendants(process.pid)]
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM if grace > 0 else signal.SIGKILL)
    deadline = time.monotonic() + grace
    for process in processes:
        try:
            process.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
    for pid, started in spawned:  # Flower detaches some children into new sessions
        if _still_running(pid, started):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5.0  # SIGKILL is delivered asynchronously
    while any(_still_running(*child) for child in spawned) and time.monotonic() < deadline:
        time.sleep(0.05)


def _tail(path, n_chars=6000):
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return ""
    return text[-n_chars:]


class LocalFederation:
    """A SuperLink and one SuperNode per site on 127.0.0.1, for tests and demos.

    Start it once and run several estimators through it; each :meth:`fit`
    is one ``flwr run`` of the sklearn-fed app.

    Parameters
    ----------
    sites : dict
        Site label (str or int) -> ``(X, y)``, ``(X, y, sample_weight)``,
        a dict with ``X``, ``y`` and optionally ``sample_weight`` and
        ``rounds`` (the round of a streaming protocol in which each row
        arrives), or the path of a data file on this machine (CSV, Parquet,
        ``.npz``; see :func:`~sklearn_fed.datasets.load_site_data`). Arrays
        are written to ``.npz`` files in ``workdir``, where the site's
        SuperNode reads them.
    target, features, weight : str, default=None
        The node-config ``target``, ``features`` and ``weight-column`` of
        sites given as a CSV or Parquet path.
    keys : bool or dict, default=True
        ``True``: a random 256-bit key per site, so every task and reply is
        authenticated (HMAC-SHA256); a dict: site -> key; ``False``: none.
    workdir : str or path-like, default=None
        Where data, configs and logs go. ``None``: a new temporary directory,
        removed by :meth:`close` unless something failed (then it is kept,
        and the error says where).
    startup_timeout : float, default=120
        Seconds to wait for the SuperLink and all SuperNodes to be online.
    tls : bool, default=True
        Serve the SuperLink over TLS, with a CA and a server certificate made
        for this federation (``workdir/tls``); ``False``: ``--insecure``.
    node_auth : bool, default=True
        Only SuperNodes whose keys are enrolled may join: one key pair per
        site (``workdir/node-keys``), each public key registered with
        ``flwr supernode register`` before its SuperNode starts.
    workers : bool, default=True
        Start one site worker per SuperNode (the sites' tasks are answered
        there, with the run's client role kept in memory between rounds);
        ``False``: every message is answered in its own ClientApp process.
    node_config : dict, default=None
        Node-config keys given to every site, e.g. its policy's disclosure
        rules (``{"max-parameters-per-row": 0}``; see :doc:`/disclosure`).

    Attributes
    ----------
    workdir : Path
    logs : Path
        One log file per process, and one per run.

    Examples
    --------
    ::

        with LocalFederation({"a": (Xa, ya), "b": (Xb, yb), "c": (Xc, yc)}) as federation:
            ridge = federation.fit(FederatedRidge(alpha=1.0))
            cv = federation.fit(FederatedRidgeCV())
    """

    def __init__(self, sites, *, target=None, features=None, weight=None, keys=True,
                 workdir=None, startup_timeout=120.0, tls=True, node_auth=True, workers=True,
                 node_config=None):
        self.sites = {  # numpy scalars (e.g. from np.unique) become plain labels
            label.item() if isinstance(label, np.generic) else label: data
            for label, data in dict(sites).items()
        }
        if not self.sites:
            raise ValueError("a federation needs at least one site.")
        for label in self.sites:
            if isinstance(label, bool) or not isinstance(label, (str, int)) or label == "":
                raise ValueError(
                    f"site labels must be non-empty strings or integers; got {label!r}."
                )
        if len({site_text(label) for label in self.sites}) != len(self.sites):
            raise ValueError("site labels must be distinct (as text: 1 and '1' collide).")
        self.target, self.features, self.weight = target, features, weight
        self.keys = keys
        self.node_config = dict(node_config or {})
        self.startup_timeout = float(startup_timeout)
        self.tls, self.node_auth, self.workers = bool(tls), bool(node_auth), bool(workers)
        self._workers = {}
        self._outsiders = []
        self._sockets = None
        self.last_run_seconds = None  # of the last run: from `flwr run` to its result
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir is not None else None
        self._superlink = None
        self._supernodes = {}
        self._dead = set()
        self._node_sites = {}
        self._runs = 0
        self._lock = threading.Lock()  # fit() may be called from several threads
        self._failed = False
        self._closed = True

    # ------------------------------------------------------------ lifecycle
    def __enter__(self):
        return self.start()

    def __exit__(self, exc_type, exc, tb):
        self.close(failed=exc_type is not None)

    def start(self):
        """Write the sites' data and configs, start the processes, wait until all are online."""
        if not self._closed:
            return self
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="sklearn-fed-flower-"))
        self._closed = False
        try:
            self._prepare()
            deadline = time.monotonic() + self.startup_timeout
            for index, label in enumerate(self.sites if self.workers else ()):
                self._workers[label] = self._popen(f"worker-{index}", [
                    sys.executable, "-m", "sklearn_fed.flower.worker",
                    "--socket", str(self._sockets / f"{index}.sock"),
                ], f"site-{index}")
            self._start_superlink(deadline)
            if self.node_auth:  # one `flwr supernode register` (a CLI process) per site, at once
                with ThreadPoolExecutor(min(len(self.sites), 4)) as pool:
                    list(pool.map(self._enroll, [public for _, public in self._node_keys.values()]))
            for index, label in enumerate(self.sites):
                private_key = self._node_keys[label][0] if self.node_auth else None
                self._supernodes[label] = self._popen(f"supernode-{index}", self._supernode_command(
                    self._node_configs[label], private_key=private_key), f"site-{index}")
            self._wait_ready(deadline)
        except BaseException:
            self.close(failed=True)
            raise
        return self

    def close(self, failed=False):
        """End every process started here, by PID; remove the workdir unless something failed."""
        if self._closed:
            return
        self._closed = True
        self._failed = self._failed or failed
        _end_all([p for p in [*self._supernodes.values(), *self._outsiders,
                              *self._workers.values(), self._superlink] if p is not None],
                 grace=5.0)
        for handle in getattr(self, "_log_files", []):
            handle.close()
        if self._sockets is not None:
            shutil.rmtree(self._sockets, ignore_errors=True)
        if self._own_workdir and not self._failed:
            shutil.rmtree(self.workdir, ignore_errors=True)

    @property
    def logs(self):
        return self.workdir / "logs"

    # ------------------------------------------------------------ setup
    def _prepare(self):
        root = self.workdir
        for sub in ("data", "nodes", "keys", "homes", "logs", "runs", "app"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        self._tls = make_tls_files(root / "tls") if self.tls else None
        self._node_keys = {
            label: make_node_key(root / "node-keys", f"site-{index}")
            for index, label in enumerate(self.sites)
        } if self.node_auth else {}
        self._log_files = []
        package_root = str(Path(__import__("sklearn_fed").__file__).resolve().parents[1])
        env = dict(os.environ)
        env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
        env["PYTHONPATH"] = os.pathsep.join(
            [package_root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        )
        env["FLWR_TELEMETRY_ENABLED"] = "0"  # nothing leaves this machine
        # SuperExecs look for new ClientApp/ServerApp work every second by default; every
        # message waits for that poll, so a shorter one shortens every round
        env.setdefault("FLWR_SUPEREXEC_TASK_POLL_INTERVAL", "0.2")
        env["PYTHONUNBUFFERED"] = "1"
        self._env = env
        keys = self._site_keys()  # written readable by their owner only
        self._keys_file = str(_private(root / "keys" / "server.json", json.dumps(
            {site_text(s): k for s, k in keys.items()}).encode())) if keys else ""
        self._node_configs = {}
        for index, (label, data) in enumerate(self.sites.items()):
            config = {**self.node_config, "site": label,
                      "data-path": self._write_data(index, label, data)}
            if isinstance(data, dict) and data.get("rounds") is not None:
                config["round-column"] = "round"  # where save_site_data puts the rounds
            if isinstance(data, (str, os.PathLike)):
                for key, value in (("target", self.target), ("features", self.features),
                                   ("weight-column", self.weight)):
                    if value:
                        config[key] = value if isinstance(value, str) else ",".join(value)
            if self.workers:
                if self._sockets is None:
                    # AF_UNIX paths are short (108 bytes): the workers' sockets go in a
                    # short directory of their own, which mkdtemp makes the user's alone
                    self._sockets = Path(tempfile.mkdtemp(prefix="sklearn-fed-"))
                config["worker-socket"] = str(self._sockets / f"{index}.sock")
            if keys:
                key_path = _private(root / "keys" / f"site-{index}.key", keys[label].encode())
                config["key-file"] = str(key_path)
            path = root / "nodes" / f"site-{index}.toml"
            path.write_text(tomli_w.dumps(config))
            self._node_configs[label] = path
        (root / "app" / "pyproject.toml").write_text(tomli_w.dumps(_APP_PYPROJECT))

    def _site_keys(self):
        if self.keys is False or self.keys is None:
            return {}
        if self.keys is True:
            return {label: secrets.token_hex(32) for label in self.sites}
        missing = [label for label in self.sites if label not in self.keys]
        if missing:
            raise ValueError(f"keys has no key for site(s) {missing}.")
        keys = {label: self.keys[label] for label in self.sites}
        # key files and the server's keys file hold text
        return {label: key.decode("utf-8") if isinstance(key, bytes) else str(key)
                for label, key in keys.items()}

    def _write_data(self, index, label, data):
        if isinstance(data, (str, os.PathLike)):
            path = Path(data).resolve()
            if not path.is_file():
                raise FileNotFoundError(f"site {label!r}: no data file {path}.")
            return str(path)
        if isinstance(data, tuple) and len(data) in (2, 3):
            data = dict(zip(("X", "y", "sample_weight"), data))
        if not (isinstance(data, dict) and {"X", "y"} <= set(data) <= _SITE_ARRAYS):
            raise TypeError(
                f"site {label!r}: expected (X, y), (X, y, sample_weight), a dict with X, y "
                f"and optionally sample_weight and rounds, or a data path; got "
                f"{type(data).__name__}."
            )
        path = self.workdir / "data" / f"site-{index}.npz"
        save_site_data(path, **data)
        return str(path)

    def _popen(self, name, command, home):
        env = dict(self._env)
        env["FLWR_HOME"] = str(self.workdir / "homes" / home)
        log = open(self.logs / f"{name}.log", "wb")  # noqa: SIM115 - closed in close()
        self._log_files.append(log)
        return subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.workdir,
            start_new_session=True,  # a Ctrl-C in the caller's terminal is ours to handle
        )

    def _start_superlink(self, deadline):
        self._port = _free_port()
        security = ["--insecure"] if self._tls is None else [
            "--ssl-ca-certfile", str(self._tls["ca"]), "--ssl-certfile", str(self._tls["cert"]),
            "--ssl-keyfile", str(self._tls["key"])]
        if self.node_auth:
            security.append("--enable-supernode-auth")
        self._superlink = self._popen("superlink", [
            _tool("flower-superlink"), *security, "--disable-runtime-dependency-installation",
            "--host", "127.0.0.1", "--port", str(self._port),
        ], "superlink")
        self._wait(lambda: _port_open(self._port), deadline, {"superlink": self._superlink},
                   f"the SuperLink did not open port {self._port}", "superlink")
        home = self.workdir / "homes" / "cli"
        home.mkdir(parents=True, exist_ok=True)
        (home / "config.toml").write_text(tomli_w.dumps({"superlink": {
            "default": CONNECTION,
            CONNECTION: {"address": f"127.0.0.1:{self._port}", "insecure": True}
            if self._tls is None else {"address": f"127.0.0.1:{self._port}",
                                       "root-certificates": str(self._tls["ca"])},
        }}))

    def _supernode_command(self, node_config, *, private_key=None, ca=None):
        security = ["--insecure"] if self._tls is None else [
            "--root-certificates", str(ca or self._tls["ca"])]
        if private_key is not None:
            security += ["--auth-supernode-private-key", str(private_key)]
        return [
            _tool("flower-supernode"), *security, "--superlink", f"127.0.0.1:{self._port}",
            "--host", "127.0.0.1", "--port", str(_free_port()), "--node-config", str(node_config),
            # a node the SuperLink refuses gives up (and says why) instead of retrying forever
            "--max-retries", "3", "--max-wait-time", "30",
        ]

    def _enroll(self, public_key):
        """Register a SuperNode's public key at the SuperLink (``flwr supernode register``)."""
        result = self._cli("supernode", "register", str(public_key), CONNECTION,
                           "--format", "json")
        if result.returncode != 0:
            raise RuntimeError(self._explain(
                f"`flwr supernode register {public_key}` failed:\n{result.stdout}"
                f"{result.stderr}", "superlink"))

    def start_outsider(self, name, site, *, enroll=False, ca=None):
        """Start a SuperNode that should not get in, for tests of the refusals; returns its log.

        Parameters
        ----------
        name : str
            Its log is ``logs/<name>.log``.
        site : str or int
            An existing site whose node config (rows, key) it reuses.
        enroll : bool, default=False
            Register its key at the SuperLink first.
        ca : path-like, default=None
            The CA certificate it trusts instead of the federation's (a node
            given the wrong certificate).
        """
        private_key, public_key = make_node_key(self.workdir / "node-keys", name)
        if enroll:
            self._enroll(public_key)
        self._outsiders.append(self._popen(name, self._supernode_command(
            self._node_configs[site], private_key=private_key if self.node_auth else None,
            ca=ca), name))
        return self.logs / f"{name}.log"

    def _cli(self, *args, timeout=60.0):
        env = dict(self._env)
        env["FLWR_HOME"] = str(self.workdir / "homes" / "cli")
        return subprocess.run(
            [_tool("flwr"), *args], env=env, cwd=self.workdir, capture_output=True, text=True,
            timeout=timeout, check=False,  # callers read the output
        )

    def _wait(self, ready, deadline, processes, what, log_name):
        """Poll ``ready()`` until true; fail when one of ``processes`` exits or at ``deadline``."""
        while not ready():
            for name, process in processes.items():
                if process.poll() is not None:
                    raise RuntimeError(self._explain(
                        f"{name} exited with status {process.returncode}.", name))
            if time.monotonic() > deadline:
                raise TimeoutError(self._explain(
                    f"{what} within {self.startup_timeout:g} s.", log_name))
            time.sleep(0.1)

    def _wait_ready(self, deadline):
        """Until every worker listens and every SuperNode is online.

        A SuperNode logs its id once the SuperLink has activated it (online):
        its log is read, which costs nothing, rather than polling ``flwr
        supernode ls`` (a CLI process each time). The ids are kept, so runs
        skip the roll call.
        """
        processes = {"superlink": self._superlink}
        for index, label in enumerate(self.sites):
            processes[f"supernode-{index}"] = self._supernodes[label]
            if label in self._workers:
                processes[f"worker-{index}"] = self._workers[label]
        for index, label in enumerate(self.sites):
            if label in self._workers:
                socket_path = self._sockets / f"{index}.sock"
                self._wait(socket_path.is_socket, deadline, processes,
                           f"the worker of site {label!r} was not ready", f"worker-{index}")
            log = self.logs / f"supernode-{index}.log"
            self._wait(lambda log=log: "SuperNode ID: " in _tail(log, 10**6), deadline, processes,
                       f"the SuperNode of site {label!r} was not online", f"supernode-{index}")
            node_id = re.search(r"SuperNode ID: (\d+)", _tail(log, 10**6)).group(1)
            self._node_sites[node_id] = label

    def _explain(self, what, log_name):
        self._failed = True
        log = self.logs / f"{log_name}.log"
        return f"{what} Logs are kept in {self.logs}; the end of {log.name}:\n{_tail(log)}"

    # ------------------------------------------------------------ use
    def kill_site(self, label):
        """Kill a site's SuperNode at once (SIGKILL), as a machine that dies would.

        The SuperLink still lists the node until its heartbeat expires, so a
        run started next sends it tasks that are never answered: dropout.
        """
        _end_all([self._supernodes[label], *filter(None, [self._workers.get(label)])], grace=0)
        self._dead.add(site_text(label))

    def fit(self, estimator, *, timeout=300.0, run_config=None):
        """Fit ``estimator`` through the federation (one ``flwr run``); returns the fitted copy.

        The server app saves the model with skops; it is loaded back with
        :func:`~sklearn_fed.flower.load_model` (no pickle). ``estimator``
        itself is not modified. Several threads may call it at once: the
        SuperLink holds the runs side by side and each SuperNode answers
        their messages one at a time.

        Parameters
        ----------
        estimator : estimator
            One of sklearn-fed's protocol estimators, or a
            :class:`~sklearn_fed.pipeline.FederatedPipeline` or
            :class:`~sklearn_fed.compose.FederatedColumnTransformer` (one run
            for the whole composite); its class and changed parameters go
            into the run config (:func:`~sklearn_fed.flower.estimator_to_config`).
        timeout : float, default=300
            Seconds for the whole run; past it the run is stopped and
            :class:`TimeoutError` raised.
        run_config : dict, default=None
            Overrides of :data:`~sklearn_fed.flower.RUN_CONFIG_DEFAULTS`.
            By default ``min-nodes`` is the number of sites not killed,
            ``node-timeout`` 20 s, ``reply-timeout`` the run's timeout, and
            ``node-sites`` the SuperNodes' ids (read from their logs), so
            no roll call is needed.

        Returns
        -------
        estimator : estimator
            Fitted.
        """
        if self._closed:
            raise RuntimeError("the federation is not running: use start() or a with block.")
        with self._lock:
            self._runs += 1
            number = self._runs
        run_dir = self.workdir / "runs" / f"run-{number}"
        run_dir.mkdir(parents=True)
        config = dict(estimator_to_config(estimator))
        config.update({
            "model-path": str(run_dir / "model.skops"),
            "min-nodes": len(self.sites) - len(self._dead),
            "keys-file": self._keys_file,
            "node-timeout": 20.0,
            "reply-timeout": float(timeout),
            "node-sites": json.dumps(self._node_sites) if self._node_sites else "",
        })
        if getattr(estimator, "_evaluates_fitted_model", False):
            # an evaluator: the server reads the fitted model from a file, the sites get
            # its class and parameters from the run config and its state in the task
            evaluated = run_dir / "evaluated-model.skops"
            save_model(estimator.estimator, evaluated)
            config["evaluate-model"] = str(evaluated)
        config.update(run_config or {})
        unknown = sorted(set(config) - set(RUN_CONFIG_DEFAULTS))
        if unknown:
            raise ValueError(
                f"unknown run-config keys {unknown}; known: {list(RUN_CONFIG_DEFAULTS)}."
            )
        model = Path(config["model-path"])
        self._flwr_run(self.workdir / "app", config, model, run_dir, f"run-{number}",
                       type(estimator).__name__, timeout)
        return load_model(model)

    def _flwr_run(self, app, config, result, run_dir, log_name, what, timeout):
        """``flwr run app`` with ``config``; returns when the ServerApp wrote ``result``.

        The ServerApp writes its result (atomically) as its last step: done
        when it is there (the log stream's end is waited for briefly, see
        below); failed when the CLI exits without it.
        """
        overrides = run_dir / "run-config.toml"
        overrides.write_text(tomli_w.dumps(config))
        process = self._popen(log_name, [
            _tool("flwr"), "run", str(app), CONNECTION, "--run-config", str(overrides),
            "--stream",
        ], "cli")
        deadline = time.monotonic() + timeout
        while not result.exists() and process.poll() is None:
            if time.monotonic() > deadline:
                self._stop_run(log_name)
                _end_all([process], grace=5.0)
                raise TimeoutError(self._explain(
                    f"the Flower run of {what} took longer than {timeout:g} s and was "
                    "stopped.", log_name))
            time.sleep(0.05)
        self.last_run_seconds = time.monotonic() - (deadline - timeout)
        # the CLI streams the run's last log lines, then exits, seconds later: done when
        # the log names the result (the ServerApp's last line), or the CLI has exited
        grace = time.monotonic() + _LOG_GRACE
        log = self.logs / f"{log_name}.log"
        while (process.poll() is None and time.monotonic() < grace
               and str(result) not in _tail(log)):
            time.sleep(0.05)
        _end_all([process], grace=0)
        if not result.exists():
            raise RuntimeError(self._explain(
                f"the Flower run of {what} failed (no model was saved).", log_name))

    def _stop_run(self, log_name):
        match = re.search(r"started run (\d+)", _tail(self.logs / f"{log_name}.log", 10**6))
        if match:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._cli("stop", match.group(1), CONNECTION, timeout=30.0)


def run_local_federation(estimator, sites, *, timeout=300.0, **kwargs):
    """Fit ``estimator`` on a Flower federation started on this machine for this call.

    Starts a SuperLink and one SuperNode per site on 127.0.0.1, runs the
    sklearn-fed app, ends every process it started (also on error and on
    timeout) and returns the fitted estimator. To fit several estimators on
    one federation, use :class:`LocalFederation`.

    Parameters
    ----------
    estimator : estimator
        One of sklearn-fed's protocol estimators.
    sites : dict
        Site label -> ``(X, y)``, ``(X, y, sample_weight)`` or a data path.
    timeout : float, default=300
        Seconds for everything: starting the federation and the run.
    **kwargs
        ``target``, ``features``, ``weight``, ``keys``, ``workdir``: see
        :class:`LocalFederation`; ``run_config``: see :meth:`LocalFederation.fit`.

    Returns
    -------
    estimator : estimator
        Fitted (loaded from the skops file the server app saved).
    """
    run_config = kwargs.pop("run_config", None)
    deadline = time.monotonic() + timeout
    with LocalFederation(sites, startup_timeout=timeout, **kwargs) as federation:
        return federation.fit(estimator, timeout=max(deadline - time.monotonic(), 1.0),
                              run_config=run_config)
