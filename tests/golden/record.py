"""Golden corpus of sklearn_fed's fitted models and protocol messages.

The corpus pins what every public estimator computes, so that a refactor of
the protocol framework (the role hooks of ``sklearn_fed/protocol/_roles.py``,
the round loop, ``sklearn_fed/statistics.py``) can be checked to change
nothing. It was recorded at commit ``5867048`` (see ``corpus.json``,
``base_commit``) and is checked by ``tests/golden/test_golden.py``.

What a case is
--------------
:func:`cases` lists every case; :func:`compute_case` computes one with the
current code. Both this script and the test use them, so the recorded and the
checked cases never diverge. A case is one estimator configuration (a
*group*: one public estimator class, in one or more parameter *variants*) run
one way (*kind*) on one data set:

- ``fit``: ``fit(X, y, clients=...)`` for two shapes (60x4 and 300x12), 1, 7
  and 100 clients, with and without ``sample_weight``, float32 and CSR input
  where the estimator takes them;
- ``partial_fit``: two calls (the first half of the rows, then the second);
- ``by_hand``: the protocol driven through bytes with the public roles only
  (``make_server``, ``make_client``, ``next_tasks``, ``respond``,
  ``receive``), 60x4 rows on 7 sites; the SHA-256 of every task and reply is
  recorded in ``(round, site)`` order;
- ``dask``: ``fit`` on Dask arrays (only when Dask is installed).

Each case records every public fitted attribute (names ending in ``_``:
numbers, strings, arrays, nested fitted estimators, a torch module's and
optimizer's state), the output of ``predict``/``predict_proba``/
``decision_function``/``transform`` on a fixed test matrix, and every
:class:`~sklearn_fed.protocol.CommunicationLedger` (rounds, totals and bytes
per client; a ``partial_fit`` case records one after each call). Attributes
that are not deterministic run to run are left out (:data:`VOLATILE`).

Case ids read ``group[variant]/kind/shape{n}x{d}/w{0,1}/{dtype}/sparse{0,1}/k{clients}``
(e.g. ``FederatedRidge/fit/shape60x4/w1/f32/sparse0/k7``); an array's key in
``corpus.npz`` is the case id, ``/`` and the attribute's path (e.g.
``.../k7/coef_``, ``.../k7/steps.federatedridge.coef_``,
``.../k7/call1/predict(X_test)``).

The input data are made from fixed seeds with elementwise arithmetic only
(no BLAS product), so they are the same on every machine; ``corpus.json``
keeps their digest, and the test refuses to compare a case whose inputs differ.

Determinism
-----------
:func:`deterministic` fixes what a run would otherwise draw from the
operating system: ``secrets.token_hex`` (the federation id of every
:class:`~sklearn_fed.protocol.Server`) returns :data:`FEDERATION_ID`, and
``secrets.randbits`` (a FedMPDD site's local secret) a constant; the
``secrets`` module's own functions are patched, so this holds wherever the
server code moves. Every estimator with a ``random_state`` gets an integer one,
and torch runs on one thread, as in the test suite (``tests/conftest.py``).
Secure aggregation (``PrivateFederatedRidge(noise="distributed")``) draws
its X25519 keys from the operating system by design, so its messages change
every run: it is recorded by ``fit`` only, whose model does not depend on
the keys (the masks cancel exactly).

Files
-----
``corpus.npz``
    Every recorded array of one or more dimensions, by key; no pickles
    (``np.load(..., allow_pickle=False)``), strings as fixed-width unicode arrays.
``corpus.json``
    The base commit, the environment of the recording (library versions,
    BLAS kernels, SIMD features; see :func:`environment`), and per case: its
    parameters, the digest of its inputs, its scalar attributes (numbers,
    bools and strings as ``[dtype, value]``, exact: a float as its shortest
    repr), its ledgers and its message digests.
    :func:`load_corpus` reads both back.

Re-recording
------------
Only deliberately: a change of behaviour that is intended (a bug fix, a new
fitted attribute, a new wire format) is a reason, a refactor is not. Set
:data:`BASE_COMMIT` to the commit whose ``sklearn_fed/`` is recorded (the
script refuses to record a ``sklearn_fed/`` that differs from it, or one
imported from another checkout), run from the repository root::

    python -m tests.golden.record          # or: python tests/golden/record.py

and commit ``corpus.npz``, ``corpus.json`` and ``BASE_COMMIT`` with a message
that says why the recorded behaviour changed.
``python -m tests.golden.record --check-twice [--group NAME]`` computes the
cases twice in one process and reports any that differ between the runs
(nondeterminism), writing nothing; recording twice and comparing the files
checks the same across processes.
"""

import argparse
import contextlib
import hashlib
import json
import secrets
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import scipy.sparse as sp

HERE = Path(__file__).resolve().parent
REPOSITORY = HERE.parents[1]
CORPUS_NPZ = HERE / "corpus.npz"
CORPUS_JSON = HERE / "corpus.json"

#: The commit the corpus was recorded at.
BASE_COMMIT = "5867048"
#: Federation id of every server while recording and checking (32 hex digits).
FEDERATION_ID = "90d1e4c0ffee5eed90d1e4c0ffee5eed"
#: What ``secrets.randbits`` returns while recording and checking.
LOCAL_SECRET = 20240607

#: Last components of attribute paths left out of the corpus: not deterministic run to run.
VOLATILE = {
    "dur": "skorch's History: wall-clock duration of an epoch",
    "solve_seconds": "IncrementalFederatedRidge.round_history_: wall-clock time",
    "merge_seconds": "IncrementalFederatedRidge.round_history_: wall-clock time",
}

#: Rows of the fixed test matrix every fitted model predicts or transforms.
N_TEST = 10
SMALL, LARGE = (60, 4), (300, 12)


# ----------------------------------------------------------------------------- estimators
def _fedmpdd(**params):
    from sklearn_fed import FedMPDDClassifier

    base = {"n_directions": 8, "max_epochs": 2, "batch_size": 8,
            "module__hidden_units": (8,), "random_state": 0}
    return FedMPDDClassifier(**{**base, **params})


def _pipeline(*steps):
    from sklearn_fed.pipeline import make_federated_pipeline

    return make_federated_pipeline(*steps)


def _column_transformer(sparse_output):
    from sklearn_fed import FederatedOneHotEncoder, FederatedStandardScaler
    from sklearn_fed.compose import FederatedColumnTransformer

    # the last column holds categories (data "mixed"); the others are numbers
    return FederatedColumnTransformer(
        [("scale", FederatedStandardScaler(), [0, 1]),
         ("onehot", FederatedOneHotEncoder(sparse_output=sparse_output), [-1])],
        remainder="passthrough",
    )


def make_estimator(group, variant):
    """A fresh estimator of ``group`` in parameter ``variant`` (``""``: the default one)."""
    import sklearn_fed as f

    make = {
        "FederatedRidge": {
            "": lambda: f.FederatedRidge(),
            "fit_intercept=False,solver=svd": lambda: f.FederatedRidge(
                fit_intercept=False, solver="svd"),
        },
        "FederatedRidgeCV": {
            "": lambda: f.FederatedRidgeCV(),
            "cv=clients": lambda: f.FederatedRidgeCV(
                cv="clients", scoring="neg_mean_absolute_error"),
        },
        "IncrementalFederatedRidge": {
            "": lambda: f.IncrementalFederatedRidge(random_state=0),
            "fit_intercept=False,min_clients=2": lambda: f.IncrementalFederatedRidge(
                fit_intercept=False, min_clients=2, random_state=0),
        },
        "PrivateFederatedRidge": {
            "": lambda: f.PrivateFederatedRidge(
                epsilon=2.0, feature_bound=5.0, target_bound=10.0, random_state=0),
            "noise=distributed": lambda: f.PrivateFederatedRidge(
                epsilon=2.0, feature_bound=5.0, target_bound=10.0, noise="distributed",
                random_state=0),
        },
        "ProjectedFederatedRidge": {
            "": lambda: f.ProjectedFederatedRidge(n_components=3, random_state=0),
        },
        "FESCRidge": {
            "": lambda: f.FESCRidge(),
            "weighting=proportional": lambda: f.FESCRidge(
                alpha=0.5, weighting="proportional", fit_intercept=False),
        },
        "FedAvgRegressor": {
            "": lambda: f.FedAvgRegressor(
                n_rounds=3, batch_size=7, client_fraction=0.7, random_state=0),
        },
        "FedProxRegressor": {
            "": lambda: f.FedProxRegressor(n_rounds=3, learning_rate=0.05, random_state=0),
        },
        "FedNovaRegressor": {
            "": lambda: f.FedNovaRegressor(n_rounds=3, batch_size=11, random_state=0),
        },
        "DPFedAvgRegressor": {
            "": lambda: f.DPFedAvgRegressor(n_rounds=3, epsilon=10.0, random_state=0),
        },
        "FederatedStandardScaler": {
            "": lambda: f.FederatedStandardScaler(),
            "with_mean=False": lambda: f.FederatedStandardScaler(with_mean=False),
        },
        "FederatedMinMaxScaler": {
            "": lambda: f.FederatedMinMaxScaler(),
        },
        "FederatedOneHotEncoder": {
            "": lambda: f.FederatedOneHotEncoder(),
            "drop=first,dense": lambda: f.FederatedOneHotEncoder(
                drop="first", sparse_output=False),
        },
        "FederatedSimpleImputer": {
            "": lambda: f.FederatedSimpleImputer(),
            "most_frequent,add_indicator": lambda: f.FederatedSimpleImputer(
                strategy="most_frequent", add_indicator=True),
        },
        "FederatedPCA": {
            "": lambda: f.FederatedPCA(n_components=3),
            "whiten": lambda: f.FederatedPCA(n_components=2, whiten=True),
        },
        "FederatedRidgeClassifier": {
            "": lambda: f.FederatedRidgeClassifier(),
            "class_weight=balanced": lambda: f.FederatedRidgeClassifier(
                class_weight="balanced"),
        },
        "FederatedRidgeClassifierCV": {
            "": lambda: f.FederatedRidgeClassifierCV(),
            "cv=clients": lambda: f.FederatedRidgeClassifierCV(cv="clients"),
        },
        "FederatedLogisticRegression": {
            "": lambda: f.FederatedLogisticRegression(),
        },
        "FedMPDDClassifier": {
            "": lambda: _fedmpdd(),
            "uplink=qsgd": lambda: _fedmpdd(uplink="qsgd", quantization_levels=15,
                                            client_fraction=1.0),
            "uplink=laplace": lambda: _fedmpdd(uplink="laplace", noise_scale=0.01),
        },
        "FederatedPipeline": {
            "": lambda: _pipeline(f.FederatedSimpleImputer(), f.FederatedStandardScaler(),
                                  f.FederatedRidge()),
            "pca,logistic": lambda: _pipeline(f.FederatedPCA(n_components=3),
                                              f.FederatedLogisticRegression()),
            "columns,ridge": lambda: _pipeline(_column_transformer(True), f.FederatedRidge()),
        },
        "FederatedColumnTransformer": {
            "": lambda: _column_transformer(False),
            "sparse_output": lambda: _column_transformer(True),
        },
    }
    return make[group][variant]()


@dataclass(frozen=True)
class Group:
    """One public estimator class, and what it is fitted on (see :func:`cases`).

    ``data`` is the kind of rows it gets (:func:`make_data`), ``variant_data``
    the kind a variant gets where that differs; ``weights``, ``float32``,
    ``sparse``, ``partial_fit`` and ``extra_dtypes`` say which cases its
    ``fit`` takes; ``variants`` are further parameter sets (of
    :func:`make_estimator`), each fitted on two data sets.
    """

    name: str
    data: str = "regression"
    weights: bool = True
    float32: bool = True
    sparse: bool = True
    partial_fit: bool = False
    variants: tuple = ()
    variant_data: dict = field(default_factory=dict)
    #: A variant that is fitted instead of the default on sparse rows.
    sparse_variant: str = ""
    #: ``max_rounds`` of the hand-driven server (a streaming protocol never finishes).
    by_hand_rounds: int = None
    by_hand: bool = True
    #: The keyword that carries sample weights to ``fit``.
    weight_param: str = "sample_weight"
    extra_dtypes: tuple = ()
    dask: bool = False


GROUPS = (
    Group("FederatedRidge", partial_fit=True, variants=("fit_intercept=False,solver=svd",),
          dask=True),
    Group("FederatedRidgeCV", variants=("cv=clients",)),
    Group("IncrementalFederatedRidge", partial_fit=True,
          variants=("fit_intercept=False,min_clients=2",), by_hand_rounds=1, dask=True),
    Group("PrivateFederatedRidge", partial_fit=True, variants=("noise=distributed",)),
    Group("ProjectedFederatedRidge", partial_fit=True),
    Group("FESCRidge", partial_fit=True, variants=("weighting=proportional",)),
    Group("FedAvgRegressor", partial_fit=True),
    Group("FedProxRegressor", partial_fit=True),
    Group("FedNovaRegressor", partial_fit=True),
    Group("DPFedAvgRegressor", partial_fit=True),
    Group("FederatedStandardScaler", partial_fit=True, variants=("with_mean=False",),
          sparse_variant="with_mean=False"),
    Group("FederatedMinMaxScaler", weights=False, sparse=False, partial_fit=True),
    Group("FederatedOneHotEncoder", data="categorical", weights=False, sparse=False,
          variants=("drop=first,dense",), extra_dtypes=("str",)),
    Group("FederatedSimpleImputer", data="missing", weights=False,
          variants=("most_frequent,add_indicator",)),
    Group("FederatedPCA", weights=False, variants=("whiten",)),
    Group("FederatedRidgeClassifier", data="classification",
          variants=("class_weight=balanced",)),
    Group("FederatedRidgeClassifierCV", data="classification", variants=("cv=clients",)),
    Group("FederatedLogisticRegression", data="classification"),
    Group("FedMPDDClassifier", data="classification", sparse=False, partial_fit=True,
          variants=("uplink=qsgd", "uplink=laplace")),
    Group("FederatedPipeline", data="missing", sparse=False,
          variants=("pca,logistic", "columns,ridge"),
          variant_data={"pca,logistic": "classification", "columns,ridge": "mixed"},
          weight_param="federatedridge__sample_weight"),
    Group("FederatedColumnTransformer", data="mixed", weights=False, sparse=False,
          variants=("sparse_output",)),
)
GROUP_BY_NAME = {group.name: group for group in GROUPS}


@dataclass(frozen=True)
class Case:
    """One recorded computation (see the module docstring)."""

    group: str
    variant: str
    kind: str  # "fit", "partial_fit", "by_hand" or "dask"
    shape: tuple
    weighted: bool
    dtype: str  # "f64", "f32" or "str"
    sparse: bool
    n_clients: int

    @property
    def id(self):
        name = self.group + (f"[{self.variant}]" if self.variant else "")
        n, d = self.shape
        return (f"{name}/{self.kind}/shape{n}x{d}/w{int(self.weighted)}/{self.dtype}/"
                f"sparse{int(self.sparse)}/k{self.n_clients}")

    @property
    def data(self):
        group = GROUP_BY_NAME[self.group]
        return group.variant_data.get(self.variant, group.data)


def cases(group=None):
    """Every case of the corpus (of one group, when named), in a fixed order."""
    groups = GROUPS if group is None else (GROUP_BY_NAME[group],)
    out = [case for g in groups for case in _cases_of(g)]
    ids = [case.id for case in out]
    assert len(set(ids)) == len(ids), "two cases with one id"
    return out


def _cases_of(g):
    out = []

    def case(kind="fit", shape=SMALL, k=7, weighted=False, dtype="f64", sparse=False,
             variant=""):
        out.append(Case(g.name, variant, kind, shape, weighted, dtype, sparse, k))

    case(k=1)
    case(k=7)
    case(shape=LARGE, k=7)
    case(shape=LARGE, k=100)
    if g.weights:
        case(weighted=True)
    if g.float32:
        case(dtype="f32")
        case(shape=LARGE, k=100, dtype="f32", weighted=g.weights)
    for dtype in g.extra_dtypes:
        case(dtype=dtype)
        case(shape=LARGE, k=100, dtype=dtype)
    if g.sparse:
        case(sparse=True, variant=g.sparse_variant)
        case(shape=LARGE, k=100, sparse=True, variant=g.sparse_variant)
    if g.partial_fit:
        case(kind="partial_fit")
        case(kind="partial_fit", shape=LARGE, k=100)
    if g.by_hand:
        case(kind="by_hand")
    for variant in g.variants:
        case(variant=variant)
        case(variant=variant, shape=LARGE, k=100)
    if g.dask:
        case(kind="dask", shape=LARGE, k=7)
        case(kind="dask", shape=LARGE, k=7, weighted=True)
    return out


# ----------------------------------------------------------------------------- data
_DATA_KINDS = ("regression", "classification", "missing", "categorical", "mixed")


def make_data(case):
    """``(X, y, sample_weight, clients, X_test)`` of a case (numpy or CSR; fixed seeds).

    The rows depend on the data kind and the shape only (CSR cases: 60% of the
    entries zero), the clients on the number of rows and of clients, each
    site holding ``n / k`` rows (rounded) in shuffled order; float32 and
    string categories are conversions of the same rows. The test matrix has
    :data:`N_TEST` rows of the same kind, type and format.
    """
    n, d = case.shape
    kind = case.data
    seed = [n, d, _DATA_KINDS.index(kind)]
    X, y = _rows(kind, n, d, np.random.default_rng(seed + [0]), zeros=case.sparse)
    X_test, _ = _rows(kind, N_TEST, d, np.random.default_rng(seed + [1]), zeros=case.sparse)
    rng = np.random.default_rng([n, case.n_clients, 2])
    clients = rng.permutation(np.arange(n) % case.n_clients)
    # in [0.2, 1]: DPFedAvgRegressor takes weights of at most 1
    sample_weight = np.random.default_rng([n, 3]).uniform(0.2, 1.0, n) if case.weighted else None
    if case.dtype == "f32":
        X, X_test = X.astype(np.float32), X_test.astype(np.float32)
    elif case.dtype == "str":
        X, X_test = (np.char.add("c", A.astype(int).astype(str)).astype(object)
                     for A in (X, X_test))
    if case.sparse:
        X, X_test = sp.csr_matrix(X), sp.csr_matrix(X_test)
    return X, y, sample_weight, clients, X_test


def _rows(kind, n, d, rng, zeros=False):
    scale = np.linspace(0.5, 3.0, d)
    offset = np.linspace(-1.0, 2.0, d)
    X = rng.normal(size=(n, d)) * scale + offset
    if zeros:  # a sparse matrix: 60% zeros
        X[rng.random((n, d)) < 0.6] = 0.0
    beta = np.linspace(1.0, -1.0, d)
    noise = rng.normal(size=n)
    # elementwise, never X @ beta: a BLAS product's bits depend on the CPU kernel
    y = 3.0 + 0.1 * noise
    for j in range(d):
        y = y + X[:, j] * beta[j]
    if kind == "classification":
        z = (X - offset) / scale
        y = np.digitize(z[:, 0] + 0.5 * z[:, 1] + 0.3 * noise, [-0.5, 0.5])
    elif kind == "missing":
        missing = rng.random((n, d)) < 0.1
        missing[0] = False  # no column is all missing
        X[missing] = np.nan
    elif kind == "categorical":
        X = np.floor(rng.random((n, d)) * np.arange(3, 3 + d)).astype(np.float64)
        m = min(n, d + 2)  # so that every category occurs (in the training rows)
        X[:m] = np.arange(m)[:, None] % np.arange(3, 3 + d)
        y = X[:, 0] + X[:, 1] + 0.1 * noise
    elif kind == "mixed":
        X[:, -1] = np.arange(n) % 4
    return X, y


def _digest(*arrays):
    h = hashlib.sha256()
    for a in arrays:
        if a is None:
            h.update(b"None")
        elif sp.issparse(a):
            a = a.tocsr()
            for part in (a.data, a.indices, a.indptr, np.asarray(a.shape)):
                h.update(np.ascontiguousarray(part).tobytes())
        else:
            a = np.asarray(a)
            h.update(str(a.dtype).encode() + str(a.shape).encode())
            h.update(a.astype(str).tobytes() if a.dtype == object else
                     np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


# ----------------------------------------------------------------------------- determinism
@contextlib.contextmanager
def deterministic():
    """Fix the federation id, a site's local secret and torch's threads for a block.

    ``secrets.token_hex`` and ``secrets.randbits`` of the :mod:`secrets`
    module itself are replaced, so the patch holds wherever the code that
    calls them moves (code that imported the functions by name would escape
    it: then the message digests differ, and the test says so).
    """
    saved = secrets.token_hex, secrets.randbits
    secrets.token_hex = lambda nbytes=None: (FEDERATION_ID * 8)[: 2 * (nbytes or 32)]
    secrets.randbits = lambda k: LOCAL_SECRET % (1 << k)
    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch is not None else None
    try:
        if torch is not None:
            torch.set_num_threads(1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        secrets.token_hex, secrets.randbits = saved
        if torch is not None:
            torch.set_num_threads(threads)


# ----------------------------------------------------------------------------- computing
@dataclass
class Result:
    """What a case computes: arrays by path, ledgers by path, message digests."""

    arrays: dict = field(default_factory=dict)
    ledgers: dict = field(default_factory=dict)
    messages: list = field(default_factory=list)
    skipped: list = field(default_factory=list)
    inputs: str = ""


def compute_case(case):
    """Compute ``case`` with the current code; returns a :class:`Result`."""
    if case.group == "FedMPDDClassifier":
        import sklearn_fed.neural_network  # noqa: F401 - torch loaded before threads are fixed
    with deterministic():
        return _compute(case)


def _compute(case):
    X, y, sample_weight, clients, X_test = make_data(case)
    group = GROUP_BY_NAME[case.group]
    result = Result(inputs=_digest(X, y, sample_weight, clients, X_test))
    estimator = make_estimator(case.group, case.variant)
    weights = {} if sample_weight is None else {group.weight_param: sample_weight}
    if case.kind == "fit":
        estimator.fit(X, y, clients=clients, **weights)
        _record(result, estimator, X_test)
    elif case.kind == "partial_fit":
        half = X.shape[0] // 2
        for call, part in enumerate((slice(0, half), slice(half, None))):
            estimator.partial_fit(X[part], y[part], clients=clients[part])
            _record(result, estimator, X_test, prefix=f"call{call}/")
    elif case.kind == "by_hand":
        estimator, result.messages = run_by_hand(
            estimator, X, y, clients, max_rounds=group.by_hand_rounds)
        _record(result, estimator, X_test)
    elif case.kind == "dask":
        import dask.array as da

        chunks = 50
        dask_weights = {k: da.from_array(v, chunks=chunks) for k, v in weights.items()}
        estimator.fit(da.from_array(X, chunks=(chunks, X.shape[1])),
                      da.from_array(y, chunks=chunks),
                      clients=da.from_array(clients, chunks=chunks), **dask_weights)
        _record(result, estimator, X_test)
    else:
        raise ValueError(f"unknown kind {case.kind!r}")
    return result


def run_by_hand(estimator, X, y, clients, max_rounds=None):
    """Drive ``estimator``'s roles through bytes, one site per client label (public API only).

    Returns the fitted estimator (the server's) and the digests of every
    message, ``"r{round} site={label} {task|reply} {length} {sha256}"`` in
    round, then site order.
    """
    sites = sorted({label.item() for label in clients})
    rows = {site: np.flatnonzero(clients == site) for site in sites}
    server = estimator.make_server(n_features=X.shape[1], max_rounds=max_rounds)
    # Permissive sites: the corpus records the protocols' messages as they are built
    # (a deployed site's default disclosure rules would hold some back; a checkout
    # older than those rules has no permissive policy and holds nothing back).
    from sklearn_fed.protocol import SitePolicy

    policy = SitePolicy.permissive() if hasattr(SitePolicy, "permissive") else None
    roles = {site: estimator.make_client(site=site, policy=policy) for site in sites}
    messages = []
    tasks = server.next_tasks(sites)
    for round_ in range(10_000):
        if not tasks:
            break
        replies = {site: roles[site].respond(task, X[rows[site]], y[rows[site]])
                   for site, task in tasks.items()}
        for site in sorted(tasks):
            for what, data in (("task", tasks[site]), ("reply", replies[site])):
                messages.append(f"r{round_} site={site!r} {what} {len(data)} "
                                f"{hashlib.sha256(data).hexdigest()}")
        server.receive(replies)
        tasks = server.next_tasks(sites)
    else:
        raise RuntimeError("the protocol did not finish in 10,000 rounds")
    return server.estimator, messages


_METHODS = ("predict", "predict_proba", "decision_function", "transform")


def _record(result, estimator, X_test, prefix=""):
    _flatten(result, estimator, prefix, seen=set())
    for method in _METHODS:
        if hasattr(estimator, method):
            out = getattr(estimator, method)(X_test)
            _flatten(result, out.toarray() if sp.issparse(out) else out,
                     f"{prefix}{method}(X_test)", seen=set())


def _is_ledger(value):
    return all(hasattr(value, a) for a in (
        "uplink_bytes_per_client", "downlink_bytes_per_client", "rounds", "n_parameters"))


def ledger_record(ledger):
    """A ledger's public content as JSON: rounds, totals, bytes per client."""
    def per_client(counts):
        return sorted([repr(_plain(label)), int(n)] for label, n in counts.items())

    return {
        "rounds": int(ledger.rounds),
        "n_parameters": int(ledger.n_parameters),
        "uplink_bytes": int(ledger.uplink_bytes),
        "downlink_bytes": int(ledger.downlink_bytes),
        "uplink_bytes_per_client": per_client(ledger.uplink_bytes_per_client),
        "downlink_bytes_per_client": per_client(ledger.downlink_bytes_per_client),
    }


def _plain(value):
    return value.item() if isinstance(value, np.generic) else value


def _fitted_names(estimator):
    return [name for name in dir(estimator) if name.endswith("_") and not name.startswith("_")]


def _flatten(result, value, path, seen):
    """Add ``value`` (at ``path``) to ``result``: arrays, ledgers, or recurse into it."""
    from sklearn.base import BaseEstimator
    from sklearn.pipeline import Pipeline

    if path.rsplit("/", 1)[-1].rsplit(".", 1)[-1] in VOLATILE:
        return
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    if isinstance(value, (np.ndarray, np.generic, int, float, bool, str, complex)) or (
            value is None):
        result.arrays[path] = _as_array(value)
    elif isinstance(value, slice):  # a column transformer's output_indices_
        result.arrays[path] = np.array(repr(value))
    elif sp.issparse(value):
        result.arrays[path] = value.toarray()
    elif _is_ledger(value):
        result.ledgers[path] = ledger_record(value)
    elif torch is not None and isinstance(value, (torch.nn.Module, torch.optim.Optimizer)):
        _flatten(result, value.state_dict(), path, seen)
    elif isinstance(value, BaseEstimator):
        if id(value) in seen:
            return
        seen = seen | {id(value)}
        base = f"{path}." if path and not path.endswith("/") else path
        for name in _fitted_names(value):
            try:
                attribute = getattr(value, name)
            except AttributeError:  # not fitted here (e.g. an available_if, a property)
                continue
            _flatten(result, attribute, base + name, seen)
        if isinstance(value, Pipeline):  # its fitted state lives in its steps
            for name, step in value.steps:
                _flatten(result, step, f"{base}steps.{name}", seen)
    elif isinstance(value, dict):
        for key, item in value.items():
            _flatten(result, item, f"{path}.{key}", seen)
    elif isinstance(value, (list, tuple)) and value and all(
            isinstance(item, _SCALARS) for item in value):
        # one array: labels, names, a history's numbers (mixed types as their repr)
        same = len({type(item) for item in value}) == 1
        result.arrays[path] = _as_array(np.asarray(value) if same else _objects(value))
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _flatten(result, item, f"{path}.{i}", seen)
    else:
        result.skipped.append(f"{path}: {type(value).__name__}")


_SCALARS = (np.generic, int, float, bool, str, complex)


def _objects(values):
    array = np.empty(len(values), dtype=object)
    array[:] = values
    return array


def _as_array(value):
    """A value as an array ``np.load(allow_pickle=False)`` can read (no object dtype)."""
    if value is None:
        return np.array("None")
    array = np.asarray(value)
    if array.dtype == object:  # labels, names: their repr (str as itself), fixed width
        return np.array([x if isinstance(x, str) else repr(_plain(x)) for x in array.ravel()],
                        dtype=str).reshape(array.shape)
    return array


# ----------------------------------------------------------------------------- environment
def environment():
    """What decides the bits of a result besides the code: library versions, BLAS kernels,
    the SIMD features numpy dispatches to, torch's CPU capability."""
    import scipy
    import scipy.linalg  # loads scipy's BLAS, so that it is listed
    import sklearn
    from threadpoolctl import threadpool_info

    env = {
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "scikit-learn": sklearn.__version__,
        "blas": sorted(
            f"{info.get('internal_api')} {info.get('version')} {info.get('architecture')}"
            for info in threadpool_info() if info.get("user_api") == "blas"
        ),
    }
    try:
        from numpy._core._multiarray_umath import __cpu_features__
    except ImportError:  # another numpy layout: unknown, so never equal
        env["numpy_simd"] = None
    else:
        env["numpy_simd"] = sorted(k for k, on in __cpu_features__.items() if on)
    try:
        import torch
    except ImportError:
        env["torch"] = None
    else:
        env["torch"] = f"{torch.__version__} {torch.backends.cpu.get_cpu_capability()}"
    return env


# ----------------------------------------------------------------------------- recording
def _json_scalar(array):
    """``[dtype, value]`` of a 0-d array, read back exactly by :func:`_scalar_from_json`."""
    value = array.item()
    if isinstance(value, float) and not np.isfinite(value):
        value = str(value)  # "nan", "inf", "-inf": numpy parses them back
    return [array.dtype.str, value]


def _scalar_from_json(entry):
    dtype, value = entry
    return np.array(value, dtype=np.dtype(dtype))


def _in_json(array):
    """Whether an array is stored in ``corpus.json`` (a number, bool or string) or the npz."""
    return array.ndim == 0 and array.dtype.kind in "biufU"


def load_corpus(directory=HERE):
    """``(document, expected)``: ``corpus.json`` and, per case id, ``{path: array}``."""
    directory = Path(directory)
    document = json.loads((directory / CORPUS_JSON.name).read_text())
    expected = {case_id: {} for case_id in document["cases"]}
    with np.load(directory / CORPUS_NPZ.name, allow_pickle=False) as npz:
        for key in npz.files:
            case_id, path = _split_key(key, expected)
            expected[case_id][path] = npz[key]
    for case_id, meta in document["cases"].items():
        for path, entry in meta["scalars"].items():
            expected[case_id][path] = _scalar_from_json(entry)
    return document, expected


def _split_key(key, case_ids):
    parts = key.split("/")
    case_id = "/".join(parts[:7])  # group/kind/shape/w/dtype/sparse/k
    if case_id not in case_ids:
        raise KeyError(f"{key!r} of corpus.npz belongs to no case of corpus.json")
    return case_id, "/".join(parts[7:])


def record_all(selected):
    """Compute every case; returns ``(arrays, meta)`` for ``corpus.npz`` and ``corpus.json``."""
    arrays, meta = {}, {}
    for case in selected:
        start = time.perf_counter()
        result = compute_case(case)
        scalars = {}
        for path, array in result.arrays.items():
            if _in_json(array):
                scalars[path] = _json_scalar(array)
            else:
                arrays[f"{case.id}/{path}"] = array
        meta[case.id] = {
            "group": case.group,
            "variant": case.variant,
            "estimator": repr(make_estimator(case.group, case.variant)),
            "kind": case.kind,
            "data": case.data,
            "shape": list(case.shape),
            "dtype": case.dtype,
            "weighted": case.weighted,
            "sparse": case.sparse,
            "n_clients": case.n_clients,
            "inputs_sha256": result.inputs,
            "scalars": scalars,
            "ledgers": result.ledgers,
            "messages": result.messages,
            "not_recorded": result.skipped,
        }
        print(f"{time.perf_counter() - start:6.2f}s {case.id}", file=sys.stderr)
    return arrays, meta


def differences(first, second):
    """Paths whose values differ between two :class:`Result` of one case (bit for bit)."""
    out = []
    for path in sorted(set(first.arrays) | set(second.arrays)):
        a, b = first.arrays.get(path), second.arrays.get(path)
        if a is None or b is None or a.dtype != b.dtype or a.shape != b.shape or not (
                np.array_equal(a, b, equal_nan=a.dtype.kind in "fc")):
            out.append(path)
    if first.ledgers != second.ledgers:
        out.append("ledgers")
    if first.messages != second.messages:
        out.append("messages")
    return out


def dumps(value, indent=""):
    """JSON with one line per dict entry or string of a list (a message), other lists on one
    line; ``json.loads`` reads it as any JSON."""
    inner = indent + " "
    if isinstance(value, dict) and value:
        items = [f"{inner}{json.dumps(key)}: {dumps(item, inner)}" for key, item in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + indent + "}"
    if isinstance(value, list) and len(value) > 2 and all(isinstance(v, str) for v in value):
        return "[\n" + ",\n".join(inner + json.dumps(v) for v in value) + "\n" + indent + "]"
    return json.dumps(value, separators=(",", ":"))


def _check_source():
    """Refuse to record anything but this checkout's sklearn_fed, as of :data:`BASE_COMMIT`."""
    import subprocess

    import sklearn_fed

    where = Path(sklearn_fed.__file__).resolve().parents[1]
    if where != REPOSITORY:
        sys.exit(f"sklearn_fed is imported from {where}, not from this checkout {REPOSITORY}: "
                 f"run `python -m tests.golden.record` from {REPOSITORY}.")
    diff = subprocess.run(["git", "diff", "--quiet", BASE_COMMIT, "--", "sklearn_fed"],
                          cwd=REPOSITORY, capture_output=True, text=True, check=False)
    if diff.returncode != 0:
        sys.exit(f"sklearn_fed/ differs from BASE_COMMIT {BASE_COMMIT} (or git failed: "
                 f"{diff.stderr.strip()}): to re-record, set BASE_COMMIT to the commit "
                 "whose sklearn_fed/ you record, deliberately (see the module docstring).")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check-twice", action="store_true",
                        help="compute every case twice and report differences; write nothing")
    parser.add_argument("--group", action="append", help="only this group (repeatable)")
    args = parser.parse_args(argv)
    selected = [c for g in (args.group or [None]) for c in cases(g)]
    if args.check_twice:
        unstable = 0
        for case in selected:
            diff = differences(compute_case(case), compute_case(case))
            if diff:
                unstable += 1
                print(f"NOT DETERMINISTIC {case.id}: {diff}")
        print(f"{len(selected)} cases, {unstable} not deterministic")
        return 1 if unstable else 0
    if args.group:
        parser.error("--group is for --check-twice; the corpus is recorded whole")
    _check_source()
    arrays, meta = record_all(selected)
    np.savez_compressed(CORPUS_NPZ, **arrays)
    document = {
        "about": "Golden corpus of sklearn_fed; see tests/golden/record.py.",
        "base_commit": BASE_COMMIT,
        "federation_id": FEDERATION_ID,
        "environment": environment(),
        "volatile": VOLATILE,
        "cases": meta,
    }
    CORPUS_JSON.write_text(dumps(document) + "\n")
    size = CORPUS_NPZ.stat().st_size + CORPUS_JSON.stat().st_size
    print(f"{len(meta)} cases, {len(arrays)} arrays, {size / 1e6:.2f} MB", file=sys.stderr)
    return 0


if __name__ == "__main__":
    if str(REPOSITORY) not in sys.path:  # run as a script: this checkout's package
        sys.path.insert(0, str(REPOSITORY))
    sys.exit(main())
