"""FedMPDDClassifier: protocol, ledger, equivalence with SGD, errors, sklearn integration."""

import pickle

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("skorch")

from skorch.callbacks import GradientNormClipping  # noqa: E402
from sklearn.base import clone  # noqa: E402
from sklearn.datasets import load_digits, load_iris, make_blobs  # noqa: E402
from sklearn.model_selection import GridSearchCV  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler, scale  # noqa: E402
from sklearn.utils.estimator_checks import parametrize_with_checks  # noqa: E402

from sklearn_fed.neural_network import FedMPDDClassifier, LeNet, MLP  # noqa: E402


@pytest.fixture(autouse=True)
def _one_thread():
    # 2 shared cores: torch's thread pool only adds contention for tiny nets
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def iris():
    X, y = load_iris(return_X_y=True)
    return scale(X).astype(np.float32), y


def _check_instance():
    return FedMPDDClassifier(
        n_clients=2, client_fraction=1.0, n_directions=256, max_epochs=20, lr=0.2,
        batch_size=-1, random_state=0,
        callbacks=[("clip", GradientNormClipping(5.0))],
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


@parametrize_with_checks(
    [_check_instance()], expected_failed_checks=lambda est: EXPECTED_FAILED_CHECKS
)
def test_sklearn_compatible(estimator, check):
    check(estimator)


def test_ledger_bytes_equal_formula(iris):
    X, y = iris
    m, n_clients, beta = 12, 10, 0.3
    net = FedMPDDClassifier(n_clients=n_clients, client_fraction=beta, n_directions=m,
                            max_epochs=4, random_state=0).fit(X, y)
    d = sum(p.numel() for p in net.module_.parameters())
    n_part = 3  # ceil(0.3 * 10)
    assert net.history[:, "participants"] == [n_part] * 4
    assert net.history[:, "uplink_bytes"] == [n_part * (4 * m + 8)] * 4
    assert net.history[:, "uplink_bytes_total"] == [n_part * (4 * m + 8) * r for r in (1, 2, 3, 4)]
    assert net.history[:, "downlink_bytes"] == [n_part * 4 * d] * 4
    assert net.history[-1, "downlink_bytes_total"] == 4 * n_part * 4 * d
    assert net.communication_.uplink_bytes == 4 * n_part * (4 * m + 8)
    assert net.communication_.rounds == 4
    # partial_fit continues the ledger and the round count
    net.partial_fit(X, y)
    assert net.history[-1, "round"] == 7
    assert net.history[-1, "uplink_bytes_total"] == 8 * n_part * (4 * m + 8)


@pytest.mark.parametrize("uplink, per_client", [
    ("full", lambda d: 4 * d), ("qsgd", lambda d: 4 + -(-d * 5 // 8)),
    ("topk", lambda d: 8 * 7), ("laplace", lambda d: 4 * d),
])
def test_baseline_ledgers(iris, uplink, per_client):
    X, y = iris
    net = FedMPDDClassifier(n_clients=4, client_fraction=1.0, uplink=uplink,
                            quantization_levels=15, topk=7, max_epochs=2,
                            random_state=0).fit(X, y)
    d = sum(p.numel() for p in net.module_.parameters())
    assert net.history[-1, "uplink_bytes"] == 4 * per_client(d)


def test_full_uplink_all_clients_equals_pooled_sgd(iris):
    X, y = iris
    clients = np.arange(len(y)) % 5  # equal sizes: mean of client means = pooled mean
    kw = dict(uplink="full", client_fraction=1.0, batch_size=-1, lr=0.3, random_state=3,
              module__hidden_units=(8,))
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
    kw = dict(uplink="full", client_fraction=1.0, batch_size=4, lr=0.5, random_state=1)
    net = FedMPDDClassifier(max_epochs=0, **kw).fit(X, y, clients=clients)
    before = {k: v.clone() for k, v in net.module_.state_dict().items()}
    net.history.new_epoch()  # the batch round 0 will draw
    Xb, yb, wb, nb, part = next(iter(net.get_iterator(net.get_dataset(X, y), training=True)))
    net.history.clear()
    assert part.tolist() == [0, 1, 2, 3, 4] and nb.tolist() == [4.0] * 5
    ref = MLP(4, 3)
    ref.load_state_dict(before)
    torch.nn.functional.cross_entropy(ref(Xb.reshape(-1, 4)), yb.reshape(-1)).backward()
    net.set_params(max_epochs=1)
    net.partial_fit(X, y, clients=clients)
    after = net.module_.state_dict()
    for k, p in ref.named_parameters():
        torch.testing.assert_close(after[k], before[k] - 0.5 * p.grad, rtol=1e-5, atol=1e-6)


def test_vectorized_equals_loop(iris):
    X, y = iris
    kw = dict(n_clients=6, n_directions=30, max_epochs=3, batch_size=5, random_state=2)
    a = FedMPDDClassifier(vectorize=True, **kw).fit(X, y)
    b = FedMPDDClassifier(vectorize=False, **kw).fit(X, y)
    for p, q in zip(a.module_.parameters(), b.module_.parameters()):
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
              random_state=0)
    mpdd = FedMPDDClassifier(n_directions=100, **kw).fit(X, y)
    assert mpdd.score(X, y) > 0.85
    gauss = FedMPDDClassifier(n_directions=100, direction="gaussian", **kw).fit(X, y)
    assert gauss.score(X, y) > 0.8
    pdd = FedMPDDClassifier(n_directions=1, **kw).fit(X, y)
    assert np.isfinite(pdd.predict_proba(X)).all()


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
])
def test_bad_parameters_raise_clear_errors(iris, params, match):
    X, y = iris
    with pytest.raises(ValueError, match=match):
        FedMPDDClassifier(max_epochs=1, **params).fit(X, y)


def test_failed_fit_leaves_estimator_unchanged(iris):
    X, y = iris
    net = FedMPDDClassifier(n_clients=5, n_directions=8, max_epochs=2, random_state=0).fit(X, y)
    state = {k: v.clone() for k, v in net.module_.state_dict().items()}
    n_hist = len(net.history)
    with pytest.raises(ValueError, match="clients must have one label per row"):
        net.partial_fit(X, y, clients=np.zeros(3))
    with pytest.raises(ValueError, match="not seen at the first fit"):
        net.partial_fit(X, y + 7)
    assert len(net.history) == n_hist
    for k, v in net.module_.state_dict().items():
        assert torch.equal(v, state[k])


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
        n_clients=6, n_directions=32, max_epochs=30, lr=0.3, random_state=0))
    pipe.fit(X_raw, y_raw, fedmpddclassifier__clients=np.arange(150) % 6)
    assert pipe.score(X_raw, y_raw) > 0.6
    grid = GridSearchCV(
        FedMPDDClassifier(n_clients=4, max_epochs=5, random_state=0),
        {"n_directions": [4, 16], "lr": [0.1, 0.3], "module__hidden_units": [(4,), (8,)]},
        cv=2,
    ).fit(X, y)
    assert set(grid.best_params_) == {"n_directions", "lr", "module__hidden_units"}
    assert grid.best_estimator_.module_.net[0].out_features == grid.best_params_[
        "module__hidden_units"][0]


def test_string_labels_and_lenet_shape():
    X, y = make_blobs(40, n_features=4, centers=2, random_state=0)
    labels = np.array(["cat", "dog"])[y]
    net = FedMPDDClassifier(n_clients=4, n_directions=16, max_epochs=20, lr=0.3,
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


def test_verbose_prints_ledger_table(iris, capsys):
    X, y = iris
    FedMPDDClassifier(n_clients=3, n_directions=4, max_epochs=2, verbose=1,
                      random_state=0).fit(X, y)
    out = capsys.readouterr().out
    assert "uplink_bytes_total" in out and "train_loss" in out
