"""FedMPDDClassifier: the protocol's roles, ledger, SGD equivalence, untrusted messages,
defaults, and scikit-learn integration."""

import pickle
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("skorch")

from skorch.callbacks import EarlyStopping, GradientNormClipping  # noqa: E402
from sklearn.base import clone  # noqa: E402
from sklearn.datasets import load_digits, load_iris, make_blobs  # noqa: E402
from sklearn.exceptions import ConvergenceWarning  # noqa: E402
from sklearn.model_selection import GridSearchCV, train_test_split  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler, scale  # noqa: E402
from sklearn.utils.estimator_checks import check_set_params, parametrize_with_checks  # noqa: E402

from sklearn_fed.neural_network import FedMPDDClassifier, LeNet, MLP  # noqa: E402
from sklearn_fed.neural_network._roles import minibatch  # noqa: E402
from sklearn_fed.protocol import (  # noqa: E402
    InvalidClientMessage,
    SitePolicy,
    TaskRefused,
    decode,
    encode,
    simulate_through_bytes,
)
from sklearn_fed.utils.estimator_checks import run_protocol_by_hand  # noqa: E402

SGD = dict(optimizer=torch.optim.SGD)
# Sites driven by hand release as fit's simulated sites (the default policy refuses a network
# of more parameters than 0.33 x its rows, e.g. 259 from iris' 150 rows).
PERMISSIVE = SitePolicy.permissive()


@pytest.fixture(scope="module")
def iris():
    X, y = load_iris(return_X_y=True)
    return scale(X).astype(np.float32), y


def _check_instance():
    return FedMPDDClassifier(
        n_clients=2, client_fraction=1.0, n_directions=256, max_epochs=20,
        batch_size=-1, random_state=0, callbacks=[("clip", GradientNormClipping(5.0))],
    )


EXPECTED_FAILED_CHECKS = {
    "check_no_attributes_set_in_init": (
        "skorch.NeuralNet.__init__ sets history_, initialized_ and virtual_params_"
    ),
    "check_sample_weight_equivalence_on_dense_data": (
        "training is stochastic and federated: repeating rows changes the client "
        "partition and every sampled minibatch, so weights cannot equal repetition"
    ),
}


# The checks fit on noise for 20 rounds: "training did not progress" is true there.
@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@parametrize_with_checks(
    [_check_instance()], expected_failed_checks=lambda est: EXPECTED_FAILED_CHECKS
)
def test_sklearn_compatible(estimator, check):
    check(estimator)


def test_set_params_check_warns_nothing():
    # skorch built callbacks from the old value before storing the new one, so
    # one fuzz value broke every later set_params (22 warnings in the suite).
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_set_params("FedMPDDClassifier", _check_instance())


def test_repr_shows_the_users_parameters():
    net = FedMPDDClassifier(LeNet, n_directions=50, module__channels=6,
                            callbacks=[("clip", GradientNormClipping(5.0))])
    text = repr(net)
    assert text.startswith("FedMPDDClassifier(module=LeNet, ")
    assert "n_directions=50" in text and "module__channels=6" in text
    assert "GradientNormClipping(gradient_clip_value=5.0" in text
    assert "uninitialized" not in text and " at 0x" not in text
    assert repr(FedMPDDClassifier()) == "FedMPDDClassifier()"


def test_verbose_table_has_the_ledger_and_no_colour_codes(iris, capsys):
    X, y = iris
    FedMPDDClassifier(n_clients=3, n_directions=4, max_epochs=3, verbose=1,
                      random_state=0).fit(X, y)
    out = capsys.readouterr().out  # not a terminal
    assert "uplink_bytes_total" in out and "train_loss" in out
    assert "\x1b[" not in out


# ------------------------------------------------------------------ protocol


def _by_hand_rounds(estimator, X, y, clients):
    """Drive the roles with bytes; returns the server and each round's byte sums."""
    labels = sorted(set(clients.tolist()))
    server = estimator.make_server()
    sites = {label: estimator.make_client(policy=SitePolicy.permissive()) for label in labels}
    rounds = []
    tasks = server.next_tasks(labels)
    while tasks:
        replies = {s: sites[s].respond(t, X[clients == s], y[clients == s])
                   for s, t in tasks.items()}
        rounds.append((len(tasks), sum(map(len, tasks.values())),
                       sum(map(len, replies.values()))))
        server.receive(replies)
        tasks = server.next_tasks(labels)
    return server, rounds


def test_history_records_the_bytes_of_real_messages(iris):
    X, y = iris
    clients = np.arange(len(y)) % 10
    kw = dict(client_fraction=0.3, n_directions=12, max_epochs=4, random_state=0)
    server, rounds = _by_hand_rounds(FedMPDDClassifier(**kw), X, y, clients)
    describe, training = rounds[0], rounds[1:]
    assert describe[0] == 10 and [r[0] for r in training] == [3] * 4  # ceil(0.3 * 10)
    fitted = FedMPDDClassifier(**kw).fit(X, y, clients=clients)
    for net in (server.estimator, fitted):
        assert net.history[:, "participants"] == [3] * 4
        assert net.history[:, "round"] == [0, 1, 2, 3]
        assert net.history[:, "uplink_bytes"] == [r[2] for r in training]
        assert net.history[:, "downlink_bytes"] == [r[1] for r in training]
        assert net.history[-1, "uplink_bytes_total"] == sum(r[2] for r in rounds)
        assert net.history[-1, "downlink_bytes_total"] == sum(r[1] for r in rounds)
        assert net.communication_.uplink_bytes == sum(r[2] for r in rounds)
        assert net.communication_.rounds == 5 and net.n_rounds_ == 4
    # a reply is one frame: the codec's m float32 values, its seed and loss, the framing
    net = FedMPDDClassifier(**kw)
    server = net.make_server()
    site = net.make_client(policy=PERMISSIVE)
    server.receive({0: site.respond(server.next_tasks([0])[0], X, y)})
    reply = site.respond(server.next_tasks([0])[0], X, y)
    frame = decode(reply, client=0)
    assert set(frame.fields) == {"seed", "loss"} and frame.arrays["s"].nbytes == 4 * 12
    assert frame.nbytes == len(reply)


def test_partial_fit_continues_rounds_seeds_and_ledger(iris):
    X, y = iris
    net = FedMPDDClassifier(n_directions=8, max_epochs=3, random_state=0).fit(X, y)
    total = net.communication_.uplink_bytes
    net.partial_fit(X, y)
    assert net.history[:, "round"] == [0, 1, 2, 3, 4, 5] and net.n_rounds_ == 6
    assert net.communication_.uplink_bytes > total
    once = FedMPDDClassifier(n_directions=8, max_epochs=6, random_state=0).fit(X, y)
    for p, q in zip(net.module_.parameters(), once.module_.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=0)  # same rounds, same seeds


def test_fit_through_bytes_equals_fit_with_objects(iris):
    X, y = iris
    kw = dict(n_clients=5, n_directions=16, max_epochs=4, random_state=3)
    a = FedMPDDClassifier(**kw).fit(X, y)
    with simulate_through_bytes():
        b = FedMPDDClassifier(**kw).fit(X, y)
    for p, q in zip(a.module_.parameters(), b.module_.parameters()):
        assert torch.equal(p, q)
    assert a.communication_.as_dict() == b.communication_.as_dict()


def test_signed_deployment_with_site_keys(iris):
    X, y = iris
    clients = np.arange(len(y)) % 3
    keys = {s: f"key-of-site-{s}-0123456789" for s in range(3)}
    kw = dict(n_directions=8, max_epochs=2, random_state=0)
    server, _ = run_protocol_by_hand(FedMPDDClassifier(**kw), X, y, clients, keys=keys)
    plain = FedMPDDClassifier(**kw).fit(X, y, clients=clients)
    for p, q in zip(server.estimator.module_.parameters(), plain.module_.parameters()):
        assert torch.equal(p, q)


def test_sites_report_their_labels_and_the_server_takes_the_union():
    X, y = make_blobs(90, n_features=3, centers=3, random_state=0)
    labels = np.array(["cat", "dog", "emu"])[y]
    order = np.argsort(y, kind="stable")  # site 0 holds cats and dogs, site 1 dogs and emus
    X, labels = X[order], labels[order]
    clients = np.repeat([0, 1], 45)
    net = FedMPDDClassifier(n_directions=8, max_epochs=2, random_state=0)
    net.fit(X, labels, clients=clients)
    assert net.classes_.tolist() == ["cat", "dog", "emu"]
    assert set(net.predict(X)) <= {"cat", "dog", "emu"}
    # skorch's `classes`: the user's order; a site label outside it is refused
    ordered = FedMPDDClassifier(n_directions=8, max_epochs=1, classes=["emu", "dog", "cat"],
                                random_state=0).fit(X, labels, clients=clients)
    assert ordered.classes_.tolist() == ["emu", "dog", "cat"]
    with pytest.raises(ValueError, match=r"labels \['emu'\] that are not in `classes`"):
        FedMPDDClassifier(max_epochs=1, classes=["cat", "dog"]).fit(X, labels, clients=clients)
    # partial_fit's `classes`: labels a first call does not see
    first = FedMPDDClassifier(n_directions=8, max_epochs=1, random_state=0)
    first.partial_fit(X[:45], labels[:45], classes=["cat", "dog", "emu"])
    assert first.classes_.tolist() == ["cat", "dog", "emu"]
    first.partial_fit(X[45:], labels[45:])
    assert first.n_rounds_ == 2


def test_full_uplink_all_clients_equals_pooled_sgd(iris):
    X, y = iris
    clients = np.arange(len(y)) % 5  # equal sizes: mean of client means = pooled mean
    kw = dict(uplink="full", client_fraction=1.0, batch_size=-1, lr=0.3, random_state=3,
              module__hidden_units=(8,), **SGD)
    start = FedMPDDClassifier(max_epochs=0, **kw).fit(X, y, clients=clients)
    net = FedMPDDClassifier(max_epochs=6, **kw).fit(X, y, clients=clients)

    ref = MLP(4, 3, hidden_units=(8,))
    ref.load_state_dict(start.module_.state_dict())
    opt = torch.optim.SGD(ref.parameters(), lr=0.3)
    Xt, yt = torch.from_numpy(X), torch.from_numpy(y)
    for _ in range(6):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(ref(Xt), yt).backward()
        opt.step()
    for (k, a), b in zip(net.module_.state_dict().items(), ref.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=k)


def test_full_uplink_minibatch_round_equals_pooled_batch(iris):
    # one round with per-client minibatches: the step equals SGD on the pooled minibatch
    X, y = iris
    clients = np.arange(len(y)) % 5
    kw = dict(uplink="full", client_fraction=1.0, batch_size=4, lr=0.5, random_state=1, **SGD)
    net = FedMPDDClassifier(max_epochs=1, **kw)
    server = net.make_server()
    sites = {s: net.make_client(policy=PERMISSIVE) for s in range(5)}
    tasks = server.next_tasks(range(5))
    server.receive({s: sites[s].respond(t, X[clients == s], y[clients == s])
                    for s, t in tasks.items()})
    before = {k: v.clone() for k, v in net.module_.state_dict().items()}
    tasks = server.next_tasks(range(5))
    rows = []
    for s, task in tasks.items():
        seed = decode(task, client="server").fields["minibatch_seed"]
        rows.append(np.flatnonzero(clients == s)[minibatch(30, 4, seed)])
    server.receive({s: sites[s].respond(t, X[clients == s], y[clients == s])
                    for s, t in tasks.items()})
    ref = MLP(4, 3)
    ref.load_state_dict(before)
    pooled = np.concatenate(rows)
    torch.nn.functional.cross_entropy(ref(torch.from_numpy(X[pooled])),
                                      torch.from_numpy(y[pooled])).backward()
    after = net.module_.state_dict()
    for k, p in ref.named_parameters():
        torch.testing.assert_close(after[k], before[k] - 0.5 * p.grad, rtol=1e-5, atol=1e-6)


def test_vectorized_gradients_match_the_sites_to_round_off(iris):
    X, y = iris
    kw = dict(n_clients=6, n_directions=30, max_epochs=3, batch_size=5, random_state=2)
    exact = FedMPDDClassifier(**kw).fit(X, y)
    for mode in (True, "auto"):
        fast = FedMPDDClassifier(vectorize=mode, **kw).fit(X, y)
        for p, q in zip(fast.module_.parameters(), exact.module_.parameters()):
            torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)


def test_reproducible_and_seeded(iris):
    X, y = iris
    kw = dict(n_clients=8, n_directions=16, max_epochs=3)
    p1 = FedMPDDClassifier(random_state=5, **kw).fit(X, y).predict_proba(X)
    p2 = FedMPDDClassifier(random_state=5, **kw).fit(X, y).predict_proba(X)
    p3 = FedMPDDClassifier(random_state=6, **kw).fit(X, y).predict_proba(X)
    np.testing.assert_array_equal(p1, p2)
    assert not np.allclose(p1, p3)


def test_learns_iris_with_fedpdd_and_mpdd(iris):
    X, y = iris
    kw = dict(n_clients=10, client_fraction=1.0, batch_size=8, lr=0.3, max_epochs=60,
              random_state=0, **SGD)
    mpdd = FedMPDDClassifier(n_directions=100, **kw).fit(X, y)
    assert mpdd.score(X, y) > 0.85
    gauss = FedMPDDClassifier(n_directions=100, direction="gaussian", **kw).fit(X, y)
    assert gauss.score(X, y) > 0.8
    pdd = FedMPDDClassifier(n_directions=1, **kw).fit(X, y)
    assert np.isfinite(pdd.predict_proba(X)).all()


def test_defaults_learn_digits_raw_or_standardized():
    X, y = load_digits(return_X_y=True)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.25, stratify=y, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        pipe = make_pipeline(StandardScaler(), FedMPDDClassifier(random_state=0))
        assert pipe.fit(Xtr, ytr).score(Xte, yte) >= 0.9
        raw = FedMPDDClassifier(random_state=0).fit(Xtr, ytr)
    assert raw.score(Xte, yte) >= 0.9


def test_training_that_does_not_progress_warns():
    X, y = load_digits(return_X_y=True)
    with pytest.warns(ConvergenceWarning, match="did not progress.*StandardScaler"):
        FedMPDDClassifier(lr=1e-6, max_epochs=20, random_state=0).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)  # not on a model that learns
        FedMPDDClassifier(max_epochs=20, random_state=0).fit(X / 16, y)


def test_early_stopping_ends_the_protocol(iris):
    X, y = iris
    net = FedMPDDClassifier(
        n_directions=8, max_epochs=50, lr=1e-7, random_state=0,
        callbacks=[("stop", EarlyStopping(monitor="train_loss", patience=2, threshold=0.1))],
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        net.fit(X, y)
    assert 3 <= net.n_rounds_ < 50 and len(net.history) == net.n_rounds_


def test_shards_partition_gives_two_classes_per_client():
    X, y = load_digits(return_X_y=True)
    net = FedMPDDClassifier(n_clients=50, partition="shards", n_directions=8, max_epochs=1,
                            random_state=0).fit(X / 16, y)
    assert len(net.client_rows_) == 50
    assert all(len(np.unique(y[r])) == 2 for r in net.client_rows_)


@pytest.mark.parametrize("params, match", [
    ({"client_fraction": 0.0}, "client_fraction"),
    ({"client_fraction": 1.5}, "client_fraction"),
    ({"n_directions": 0}, "n_directions"),
    ({"uplink": "gzip"}, "uplink"),
    ({"n_clients": 151}, "n_clients=151 exceeds n_samples=150"),
    ({"train_split": 5}, "train_split must be None"),
])
def test_bad_parameters_raise_clear_errors(iris, params, match):
    X, y = iris
    with pytest.raises(ValueError, match=match):
        FedMPDDClassifier(max_epochs=1, **params).fit(X, y)


def test_fit_parameters_cannot_reach_sites(iris):
    X, y = iris
    with pytest.raises(TypeError, match="no extra fit parameters"):
        FedMPDDClassifier(max_epochs=1).fit(X, y, epochs=3)


def test_failed_calls_leave_the_estimator_as_it_was(iris):
    X, y = iris
    net = FedMPDDClassifier(n_clients=5, n_directions=8, max_epochs=2, lr=0.1, random_state=0,
                            **SGD).fit(X, y)
    before = pickle.dumps(net)
    with pytest.raises(ValueError, match="one label per row"):
        net.partial_fit(X, y, clients=np.zeros(3))
    with pytest.raises(ValueError, match="not seen at the first fit"):
        net.partial_fit(X, y + 7)
    # 3e38 is a finite float32, but the sites' gradients overflow (issue: it used
    # to leave a half-written history row)
    with pytest.raises(FloatingPointError, match=r"site \d+: its gradient is not finite"):
        net.partial_fit(np.full_like(X, 3e38), y)
    assert pickle.dumps(net) == before
    assert len(net.history) == 2 and net.n_rounds_ == 2
    # a later round's server step overflows (SGD with a huge rate): the call is undone
    net.set_params(lr=1e38, max_epochs=3)
    net.initialize_optimizer()
    snapshot = pickle.dumps(net)
    with pytest.raises(FloatingPointError, match="non-finite"):
        net.partial_fit(X * 1e3, y)
    assert pickle.dumps(net) == snapshot


def test_a_round_that_fails_at_the_server_is_undone(iris):
    X, y = iris
    net = FedMPDDClassifier(n_directions=8, max_epochs=3, lr=1e38, random_state=0, **SGD)
    server = net.make_server()
    site = net.make_client(policy=PERMISSIVE)
    tasks = server.next_tasks([0])
    server.receive({0: site.respond(tasks[0], X, y)})
    params = [p.detach().clone() for p in net.module_.parameters()]
    tasks = server.next_tasks([0])
    with pytest.raises(FloatingPointError, match="non-finite"):
        server.receive({0: site.respond(tasks[0], X * 1e3, y)})
    assert len(net.history) == 0 and net.n_rounds_ == 0
    for p, q in zip(net.module_.parameters(), params):
        assert torch.equal(p, q)


def _tampered(reply, change):
    frame = decode(reply, client="site")
    change(frame)
    return encode(frame)


@pytest.mark.parametrize("change, match", [
    (lambda f: f.fields.update(seed=f.fields["seed"] + 1), "not the one its task gave"),
    (lambda f: f.fields.update(seed=-1), r"seed must be an integer in \[0, 2\*\*63\)"),
    (lambda f: f.fields.update(seed=1.5), "seed must be an integer"),
    (lambda f: f.fields.update(seed="7"), "seed must be an integer"),
    (lambda f: f.fields.update(loss=float("nan")), "loss must be a finite number"),
    (lambda f: f.fields.update(extra=1), "must have the fields"),
    (lambda f: f.arrays.update(s=np.ones(7, np.float32)), r"shape \(8,\)"),
    (lambda f: f.arrays.update(s=np.ones(8)), "must be float32"),
    (lambda f: f.arrays.update(s=np.full(8, np.inf, np.float32)), "non-finite"),
])
def test_a_malformed_reply_is_rejected_naming_the_site(iris, change, match):
    X, y = iris
    net = FedMPDDClassifier(n_directions=8, max_epochs=2, client_fraction=1.0, random_state=0)
    server = net.make_server()
    sites = {s: net.make_client(policy=PERMISSIVE) for s in (0, 1)}
    tasks = server.next_tasks([0, 1])
    server.receive({s: sites[s].respond(t, X[s::2], y[s::2]) for s, t in tasks.items()})
    before = pickle.dumps(net)
    tasks = server.next_tasks([0, 1])
    replies = {s: sites[s].respond(t, X[s::2], y[s::2]) for s, t in tasks.items()}
    replies[1] = _tampered(replies[1], change)
    with pytest.raises(InvalidClientMessage, match=match) as info:
        server.receive(replies)
    assert info.value.client == 1 and "client 1" in str(info.value)
    assert pickle.dumps(net) == before


@pytest.mark.parametrize("change, match", [
    (lambda f: f.arrays.update(params=f.arrays["params"][:-1]), "this site's module has"),
    (lambda f: f.arrays.update(params=np.full_like(f.arrays["params"], np.nan)), "not finite"),
    (lambda f: f.fields.update(minibatch_seed=-3), "seeds must be integers"),
    (lambda f: f.fields.update(seed="1"), "seeds must be integers"),
    (lambda f: f.fields.update(batch_size=0), "batch_size"),
    (lambda f: f.fields.update(n_directions=2**30), "codec settings"),
    (lambda f: f.fields.update(uplink="zip"), "codec settings"),
    (lambda f: f.fields.update(classes=[0, "a"]), "class labels"),
])
def test_a_site_refuses_a_malformed_task(iris, change, match):
    X, y = iris
    net = FedMPDDClassifier(n_directions=8, max_epochs=2, random_state=0)
    server = net.make_server()
    site = net.make_client(policy=PERMISSIVE)
    tasks = server.next_tasks([0])
    server.receive({0: site.respond(tasks[0], X, y)})
    task = _tampered(server.next_tasks([0])[0], change)
    with pytest.raises(InvalidClientMessage, match=match):
        site.respond(task, X, y)


def test_a_site_with_unknown_labels_says_so(iris):
    X, y = iris
    net = FedMPDDClassifier(n_directions=8, max_epochs=1, random_state=0)
    server = net.make_server()
    site = net.make_client(policy=PERMISSIVE)
    server.receive({0: site.respond(server.next_tasks([0])[0], X, y)})
    with pytest.raises(ValueError, match="not among the task's classes"):
        site.respond(server.next_tasks([0])[0], X, y + 5)


def test_local_noise_comes_from_the_site_unless_seeded(iris):
    X, y = iris
    kw = dict(uplink="gaussian", noise_scale=1.0, max_epochs=1, client_fraction=1.0)
    net = FedMPDDClassifier(random_state=None, **kw)
    server = net.make_server()
    site = net.make_client(policy=PERMISSIVE)
    server.receive({0: site.respond(server.next_tasks([0])[0], X, y)})
    task = server.next_tasks([0])[0]
    one, two = (decode(net.make_client(policy=PERMISSIVE).respond(task, X, y)).arrays["g"] for _ in range(2))
    assert not np.array_equal(one, two)  # the server cannot know (or remove) the noise
    seeded = FedMPDDClassifier(random_state=0, **kw)  # reproducible: for simulations
    one, two = (decode(seeded.make_client(policy=PERMISSIVE).respond(task, X, y)).arrays["g"] for _ in range(2))
    np.testing.assert_array_equal(one, two)


def test_dataframe_sites_may_order_columns_differently(iris):
    pd = pytest.importorskip("pandas")
    X, y = iris
    names = ["a", "b", "c", "d"]
    frame = pd.DataFrame(X, columns=names)
    kw = dict(n_directions=8, max_epochs=2, client_fraction=1.0, random_state=0)
    net = FedMPDDClassifier(**kw)
    server = net.make_server(feature_names=names)
    sites = {s: net.make_client(policy=PERMISSIVE) for s in range(3)}
    parts = {s: frame.iloc[s::3][list(reversed(names)) if s == 1 else names] for s in range(3)}
    tasks = server.next_tasks(range(3))
    while tasks:
        server.receive({s: sites[s].respond(t, parts[s], y[s::3]) for s, t in tasks.items()})
        tasks = server.next_tasks(range(3))
    clients = np.arange(len(y)) % 3
    order = np.argsort(clients, kind="stable")
    ref = FedMPDDClassifier(**kw).fit(frame.iloc[order], y[order], clients=clients[order])
    assert net.feature_names_in_.tolist() == names
    for p, q in zip(net.module_.parameters(), ref.module_.parameters()):
        assert torch.equal(p, q)
    describe = FedMPDDClassifier(**kw).make_server(feature_names=names).next_tasks([0])[0]
    with pytest.raises(ValueError, match=r"site 0: .*missing columns \['d'\]"):
        sites[0].respond(describe, parts[0].drop(columns="d"), y[0::3])


def test_clone_pickle_pipeline_gridsearch(iris):
    X, y = iris
    net = FedMPDDClassifier(n_clients=5, n_directions=16, max_epochs=5, random_state=0,
                            module__hidden_units=(4,))
    c = clone(net)
    assert c.get_params()["module__hidden_units"] == (4,)
    assert c.get_params()["n_directions"] == 16
    net.fit(X, y)
    again = pickle.loads(pickle.dumps(net))
    np.testing.assert_array_equal(again.predict_proba(X), net.predict_proba(X))

    X_raw, y_raw = load_iris(return_X_y=True)
    pipe = make_pipeline(StandardScaler(), FedMPDDClassifier(
        n_clients=6, n_directions=32, max_epochs=30, random_state=0))
    pipe.fit(X_raw, y_raw, fedmpddclassifier__clients=np.arange(150) % 6)
    assert pipe.score(X_raw, y_raw) > 0.6
    grid = GridSearchCV(
        FedMPDDClassifier(n_clients=4, max_epochs=5, random_state=0),
        {"n_directions": [4, 16], "lr": [0.01, 0.03], "module__hidden_units": [(4,), (8,)]},
        cv=2,
    ).fit(X, y)
    assert set(grid.best_params_) == {"n_directions", "lr", "module__hidden_units"}
    assert grid.best_estimator_.module_.net[0].out_features == grid.best_params_[
        "module__hidden_units"][0]


def test_string_labels_and_lenet_shape():
    X, y = make_blobs(40, n_features=4, centers=2, random_state=0)
    labels = np.array(["cat", "dog"])[y]
    net = FedMPDDClassifier(n_clients=4, n_directions=16, max_epochs=20,
                            random_state=0).fit(X, labels)
    assert set(net.predict(X)) <= {"cat", "dog"}
    assert sum(p.numel() for p in LeNet().parameters()) == 13426


def test_import_without_torch_is_lazy():
    import subprocess
    import sys

    code = ("import sys, sklearn_fed; assert 'torch' not in sys.modules; "
            "from sklearn_fed import FedMPDDClassifier; assert 'torch' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_inversion_audit_full_leaks_mpdd_does_not():
    from sklearn_fed.datasets import load_mnist_idx  # noqa: F401  (public loader exists)
    from sklearn_fed.privacy import inversion_audit, reconstruction_ssim

    X, _ = load_digits(return_X_y=True)
    img = np.kron(X[0].reshape(8, 8) / 16.0, np.ones((4, 4)))[2:30, 2:30]  # 28x28 digit
    torch.manual_seed(0)
    net = LeNet()
    full = inversion_audit(net, img.ravel(), 0, uplink="full", n_iter=8)
    mpdd = inversion_audit(net, img.ravel(), 0, uplink="mpdd", n_directions=200, n_iter=8)
    assert full.label_recovered
    assert full.ssim > 0.6
    assert mpdd.ssim < 0.3
    assert reconstruction_ssim(img, img) == pytest.approx(1.0)


def test_missing_torch_names_the_extra(monkeypatch):
    import importlib.util

    import sklearn_fed.neural_network as nn_pkg

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "skorch" else real(name, *a))
    with pytest.raises(ImportError, match=r"sklearn-fed\[nn\]"):
        nn_pkg.__getattr__("FedMPDDClassifier")


def test_the_parameters_per_row_rule_counts_the_networks_parameters(iris):
    # an MLP of 4 features, 8 hidden units, 3 classes: 4*8+8 + 8*3+3 = 67 parameters, not
    # the (4 + 1) * 1 of a linear model; 0.33 * 150 rows allow 49
    X, y = iris
    net = FedMPDDClassifier(module__hidden_units=8, n_directions=4, max_epochs=1,
                            random_state=0)
    server = net.make_server()
    labels = [0]
    describe = server.next_tasks(labels)
    server.receive({0: net.make_client().respond(describe[0], X, y)})  # labels only: answered
    train = server.next_tasks(labels)[0]
    with pytest.raises(TaskRefused, match=(
            r"rule max_parameters_per_row=0\.33: a model of 67 parameters from 150 rows "
            r"exceeds 0\.33 parameters per row\. What you can do: use fewer features, or at "
            r"least 204 rows")):
        net.make_client().respond(train, X, y)
    assert sum(p.numel() for p in server.estimator.module_.parameters()) == 67
    net.make_client(policy=SitePolicy(max_parameters_per_row=0.5)).respond(train, X, y)
