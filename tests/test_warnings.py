"""Every warning of the package is reported at the user's line.

For each warning class the package issues, the warning is triggered by a
direct call and through the wrappers a user calls instead (a scikit-learn
Pipeline, GridSearchCV, a FederatedPipeline, a Dask collection, sites on
threads), and each recorded warning must point at the line of this file
that made the call (``line = _next_line()`` names the line after it).
"""

import inspect
import threading
import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from sklearn_fed import (
    FederatedLogisticRegression,
    FederatedStandardScaler,
    FedAvgRegressor,
    FESCRidge,
    MissingClientsWarning,
    PrivateFederatedRidge,
)
from sklearn_fed.pipeline import make_federated_pipeline
from sklearn_fed.privacy import ClippingWarning, classic_gaussian_std
from sklearn_fed.utils._warnings import WarningThreadPool, warn

rng = np.random.default_rng(0)
X = rng.normal(size=(120, 3))
y = X @ [1.0, 2.0, 3.0] + rng.normal(size=120)
CLIENTS = np.arange(120) % 4
LABELS = (X[:, 0] + 0.5 * rng.normal(size=120) > 0).astype(int)


def _next_line():
    """The line after the caller's."""
    return inspect.currentframe().f_back.f_lineno + 1


class _Recorded:
    """Every warning issued inside the block (filter "always")."""

    def __enter__(self):
        self._catcher = warnings.catch_warnings(record=True)
        self.record = self._catcher.__enter__()
        warnings.simplefilter("always")
        return self

    def __exit__(self, *exc):
        return self._catcher.__exit__(*exc)

    def assert_at(self, category, line):
        caught = [w for w in self.record if w.category is category]  # (not its subclasses)
        assert caught, f"no {category.__name__} was issued"
        for w in caught:
            assert (w.filename, w.lineno) == (__file__, line), (
                f"{category.__name__} reported at {w.filename}:{w.lineno}, "
                f"not at the user's line {__file__}:{line}: {w.message}")
        return caught


def _clipping_model(**params):
    return PrivateFederatedRidge(feature_bound=0.1, target_bound=0.1, random_state=0, **params)


def _diverging_fedavg():
    Xs = (X - X.mean(axis=0)) / X.std(axis=0)
    lr = 2.2 / np.linalg.eigvalsh(np.cov(Xs.T)).max()  # just unstable
    return FedAvgRegressor(learning_rate=lr, local_epochs=1, n_rounds=60)


# ------------------------------------------------------------ the function
def test_warn_reports_at_the_callers_line():
    with _Recorded() as recorded:
        line = _next_line()
        warn("a warning", RuntimeWarning)
    recorded.assert_at(RuntimeWarning, line)


def test_a_thread_pool_warning_is_issued_by_its_caller_at_the_users_line():
    main = threading.get_ident()

    def work(i):
        assert threading.get_ident() != main
        warn(f"from thread {i}", RuntimeWarning)

    with _Recorded() as recorded:
        line = _next_line()
        with WarningThreadPool(2) as pool:
            list(pool.map(work, range(3)))
    assert len(recorded.assert_at(RuntimeWarning, line)) == 3


# ------------------------------------------------------ MissingClientsWarning
def test_missing_clients_direct():
    with _Recorded() as recorded:
        line = _next_line()
        FESCRidge().fit(X, y)
    assert len(recorded.assert_at(MissingClientsWarning, line)) == 1


def test_missing_clients_partial_fit():
    with _Recorded() as recorded:
        line = _next_line()
        FedAvgRegressor(n_rounds=2).partial_fit(X, y)
    recorded.assert_at(MissingClientsWarning, line)


def test_missing_clients_pipeline():
    with _Recorded() as recorded:
        line = _next_line()
        make_pipeline(StandardScaler(), FESCRidge()).fit(X, y)
    recorded.assert_at(MissingClientsWarning, line)


def test_missing_clients_grid_search():
    with _Recorded() as recorded:
        line = _next_line()
        GridSearchCV(FESCRidge(), {"alpha": [1.0, 2.0]}, cv=2).fit(X, y)
    assert len(recorded.assert_at(MissingClientsWarning, line)) == 5  # 2 x 2 folds + refit


def test_missing_clients_federated_pipeline():
    with _Recorded() as recorded:
        line = _next_line()
        make_federated_pipeline(FederatedStandardScaler(), FESCRidge()).fit(X, y)
    recorded.assert_at(MissingClientsWarning, line)


# ------------------------------------------------------------ ClippingWarning
def test_clipping_direct():
    with _Recorded() as recorded:
        line = _next_line()
        _clipping_model().fit(X, y, clients=CLIENTS)
    assert len(recorded.assert_at(ClippingWarning, line)) == 1


def test_clipping_partial_fit():
    with _Recorded() as recorded:
        line = _next_line()
        _clipping_model().partial_fit(X, y, clients=CLIENTS)
    recorded.assert_at(ClippingWarning, line)


def test_clipping_pipeline():
    pipe = make_pipeline(StandardScaler(), _clipping_model())
    with _Recorded() as recorded:
        line = _next_line()
        pipe.fit(X, y, privatefederatedridge__clients=CLIENTS)
    recorded.assert_at(ClippingWarning, line)


def test_clipping_grid_search():
    with _Recorded() as recorded:
        line = _next_line()
        GridSearchCV(_clipping_model(), {"alpha": [1.0]}, cv=2).fit(X, y)
    recorded.assert_at(ClippingWarning, line)
    recorded.assert_at(MissingClientsWarning, line)


def test_clipping_of_a_deployed_site():
    model = _clipping_model()
    task = model.make_server().next_tasks(["a"])["a"]
    with _Recorded() as recorded:
        line = _next_line()
        model.make_client().respond(task, X, y)
    (caught,) = recorded.assert_at(ClippingWarning, line)
    assert "site 'a'" in str(caught.message)


def test_clipping_on_dask_collections():
    da = pytest.importorskip("dask.array")
    X_dask, y_dask = da.from_array(X, chunks=40), da.from_array(y, chunks=40)
    with _Recorded() as recorded:
        line = _next_line()
        _clipping_model().fit(X_dask, y_dask, clients=da.from_array(CLIENTS, chunks=40))
    recorded.assert_at(ClippingWarning, line)
    with _Recorded() as recorded:  # without clients: both warnings
        line = _next_line()
        _clipping_model().fit(X_dask, y_dask)
    recorded.assert_at(ClippingWarning, line)
    recorded.assert_at(MissingClientsWarning, line)


# ------------------------------------- UserWarning of the classic calibration
def test_classic_calibration_direct():
    with _Recorded() as recorded:
        line = _next_line()
        classic_gaussian_std(2.0, 1e-5)
    recorded.assert_at(UserWarning, line)


def test_classic_calibration_in_fit_and_pipeline():
    model = PrivateFederatedRidge(calibration="classic", epsilon=2.0, random_state=0)
    with _Recorded() as recorded:
        line = _next_line()
        model.fit(X, y, clients=CLIENTS)
    recorded.assert_at(UserWarning, line)
    with _Recorded() as recorded:
        line = _next_line()
        make_pipeline(StandardScaler(), model).fit(X, y, privatefederatedridge__clients=CLIENTS)
    recorded.assert_at(UserWarning, line)


@pytest.mark.parametrize("noise", ["local", "distributed"])
def test_classic_calibration_of_sites_on_threads(sites_on_threads, noise):
    # Local-noise sites release on parallel threads (which have no user
    # frame): their warnings still reach the user's line, from the caller.
    from sklearn_fed.linear_model._private_roles import PrivateClient

    threads = sites_on_threads(PrivateClient, 2)
    model = _clipping_model(calibration="classic", epsilon=2.0, noise=noise)
    with _Recorded() as recorded:
        line = _next_line()
        model.fit(X, y, clients=CLIENTS)
    assert (threading.get_ident() not in threads) == (noise == "local")
    # the server's plan and each of the 4 sites' releases
    assert len(recorded.assert_at(UserWarning, line)) == 5
    recorded.assert_at(ClippingWarning, line)


# --------------------------------------------------------- ConvergenceWarning
def test_convergence_logistic_regression():
    with _Recorded() as recorded:
        line = _next_line()
        FederatedLogisticRegression(max_iter=1).fit(X, LABELS, clients=CLIENTS)
    recorded.assert_at(ConvergenceWarning, line)
    with _Recorded() as recorded:
        line = _next_line()
        make_pipeline(StandardScaler(), FederatedLogisticRegression(max_iter=1)).fit(X, LABELS)
    recorded.assert_at(ConvergenceWarning, line)
    with _Recorded() as recorded:
        line = _next_line()
        GridSearchCV(FederatedLogisticRegression(max_iter=1), {"C": [1.0]}, cv=2).fit(X, LABELS)
    recorded.assert_at(ConvergenceWarning, line)


def test_convergence_fedavg_diverging():
    Xs = (X - X.mean(axis=0)) / X.std(axis=0)
    with _Recorded() as recorded:
        line = _next_line()
        _diverging_fedavg().fit(Xs, y, clients=CLIENTS)
    recorded.assert_at(ConvergenceWarning, line)
    pipe = make_pipeline(StandardScaler(), _diverging_fedavg())
    with _Recorded() as recorded:
        line = _next_line()
        pipe.fit(X, y, fedavgregressor__clients=CLIENTS)
    recorded.assert_at(ConvergenceWarning, line)


def test_convergence_fedmpdd_stalled():
    pytest.importorskip("torch")
    from sklearn_fed import FedMPDDClassifier

    def net():
        return FedMPDDClassifier(lr=1e-6, max_epochs=10, random_state=0)

    X32 = X.astype(np.float32)
    with _Recorded() as recorded:
        line = _next_line()
        net().fit(X32, LABELS, clients=CLIENTS)
    recorded.assert_at(ConvergenceWarning, line)
    with _Recorded() as recorded:
        line = _next_line()
        make_pipeline(StandardScaler(), net()).fit(X32, LABELS, fedmpddclassifier__clients=CLIENTS)
    recorded.assert_at(ConvergenceWarning, line)
