"""The federated search equals scikit-learn's GridSearchCV with the equivalent pooled split."""

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import (
    GridSearchCV,
    PredefinedSplit,
    RandomizedSearchCV,
    cross_validate,
)

from sklearn_fed import FederatedLogisticRegression, FederatedRidge
from sklearn_fed.model_selection import (
    FederatedGridSearchCV,
    FederatedRandomizedSearchCV,
    LeaveSitesOut,
    SiteKFold,
    federated_cross_validate,
)
from sklearn_fed.protocol import SitePolicy, simulate_through_bytes


@pytest.fixture(scope="module")
def cancer():
    X, y = load_breast_cancer(return_X_y=True)
    X = (X - X.mean(0)) / X.std(0)
    sites = np.random.default_rng(0).permutation(np.arange(len(y)) % 5)
    return X, y, sites


def _regression(n=240, n_sites=4):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, 3))
    y = X @ [1.0, 0.0, -1.0] + rng.normal(size=n)
    return X, y, rng.permutation(np.arange(n) % n_sites)


@pytest.mark.parametrize("cv", [SiteKFold(3), SiteKFold(4, shuffle=True, random_state=3),
                                LeaveSitesOut(2), "sites"])
def test_ridge_grid_search_equals_grid_search_cv_on_pooled_rows(cv):
    X, y, sites = _regression()
    grid = {"alpha": [0.01, 1.0, 30.0, 300.0], "fit_intercept": [True, False]}
    search = FederatedGridSearchCV(FederatedRidge(), grid, cv=cv).fit(X, y, clients=sites)
    splitter = LeaveSitesOut() if cv == "sites" else cv
    pooled = GridSearchCV(FederatedRidge(), grid,
                          cv=PredefinedSplit(splitter.pooled_test_fold(sites)))
    pooled.fit(X, y, clients=sites)  # each fold fitted from the same sites' rows
    for key in ["mean_test_score", "std_test_score"] + [
            f"split{k}_test_score" for k in range(search.n_splits_)]:
        np.testing.assert_allclose(search.cv_results_[key], pooled.cv_results_[key],
                                   rtol=1e-10, err_msg=key)
    np.testing.assert_array_equal(search.cv_results_["rank_test_score"],
                                  pooled.cv_results_["rank_test_score"])
    assert search.best_params_ == pooled.best_params_
    assert search.best_index_ == pooled.best_index_
    assert search.cv_results_["params"] == pooled.cv_results_["params"]
    np.testing.assert_allclose(search.best_estimator_.coef_, pooled.best_estimator_.coef_,
                               rtol=1e-10)
    np.testing.assert_allclose(search.predict(X), pooled.predict(X), rtol=1e-10)


@pytest.mark.parametrize("scoring", [None, "neg_log_loss", "roc_auc"])
def test_logistic_search_equals_sklearn_newton_cholesky(cancer, scoring):
    X, y, sites = cancer
    grid = {"C": [0.01, 0.1, 1.0]}
    cv = SiteKFold(3, shuffle=True, random_state=0)
    search = FederatedGridSearchCV(FederatedLogisticRegression(tol=1e-10), grid, cv=cv,
                                   scoring=scoring).fit(X, y, clients=sites)
    pooled = GridSearchCV(LogisticRegression(solver="newton-cholesky", tol=1e-10), grid,
                          cv=PredefinedSplit(cv.pooled_test_fold(sites)),
                          scoring=scoring).fit(X, y)
    np.testing.assert_allclose(search.cv_results_["mean_test_score"],
                               pooled.cv_results_["mean_test_score"], rtol=1e-8)
    assert search.best_params_ == pooled.best_params_
    np.testing.assert_allclose(search.best_estimator_.coef_, pooled.best_estimator_.coef_,
                               rtol=1e-6, atol=1e-8)


def test_search_by_hand_with_keys_and_bytes_equals_fit(cancer):
    X, y, sites = cancer
    search = FederatedGridSearchCV(FederatedLogisticRegression(), {"C": [0.1, 1.0]},
                                   cv=LeaveSitesOut(), scoring="f1")
    fitted = FederatedGridSearchCV(**search.get_params(deep=False)).fit(X, y, clients=sites)
    with simulate_through_bytes():
        through = FederatedGridSearchCV(**search.get_params(deep=False)).fit(
            X, y, clients=sites)
    keys = {s: f"key-of-site-{s}-0123456789".encode() for s in range(5)}
    server = search.make_server(keys=keys)
    # each site builds its own copy of the search from the same parameters (a run config);
    # exact scores need sites that release exact tables (deployed sites apply SitePolicy())
    clients = {s: FederatedGridSearchCV(**search.get_params(deep=False)).make_client(
        key=keys[s], site=s, policy=SitePolicy.permissive()) for s in range(5)}
    tasks = server.next_tasks(list(range(5)))
    while tasks:
        server.receive({s: clients[s].respond(t, X[sites == s], y[sites == s])
                        for s, t in tasks.items()})
        tasks = server.next_tasks(list(range(5)))
    for other in (through, server.estimator):
        np.testing.assert_array_equal(other.cv_results_["mean_test_score"],
                                      fitted.cv_results_["mean_test_score"])
        np.testing.assert_array_equal(other.best_estimator_.coef_,
                                      fitted.best_estimator_.coef_)
    assert server.estimator.communication_.rounds == fitted.communication_.rounds


def test_randomized_search_draws_sklearn_candidates():
    from scipy.stats import loguniform

    X, y, sites = _regression()
    dist = {"alpha": loguniform(1e-2, 1e3)}
    cv = SiteKFold(3)
    search = FederatedRandomizedSearchCV(FederatedRidge(), dist, n_iter=5, random_state=7,
                                         cv=cv).fit(X, y, clients=sites)
    pooled = RandomizedSearchCV(FederatedRidge(), dist, n_iter=5, random_state=7,
                                cv=PredefinedSplit(cv.pooled_test_fold(sites))).fit(
        X, y, clients=sites)
    assert search.cv_results_["params"] == pooled.cv_results_["params"]
    np.testing.assert_allclose(search.cv_results_["mean_test_score"],
                               pooled.cv_results_["mean_test_score"], rtol=1e-10)
    with pytest.raises(TypeError, match="int random_state"):
        FederatedRandomizedSearchCV(FederatedRidge(), dist).fit(X, y, clients=sites)


def test_cross_validate_equals_sklearn(cancer):
    X, y, sites = cancer
    cv = SiteKFold(4)
    out = federated_cross_validate(FederatedLogisticRegression(tol=1e-10), X, y,
                                   clients=sites, cv=cv, scoring=["accuracy", "roc_auc"])
    pooled = cross_validate(LogisticRegression(solver="newton-cholesky", tol=1e-10), X, y,
                            cv=PredefinedSplit(cv.pooled_test_fold(sites)),
                            scoring=["accuracy", "roc_auc"])
    np.testing.assert_array_equal(out["test_accuracy"], pooled["test_accuracy"])
    np.testing.assert_allclose(out["test_roc_auc"], pooled["test_roc_auc"], rtol=1e-12)


def test_bad_cv_and_small_sites_are_refused():
    X, y, sites = _regression()
    with pytest.raises(ValueError, match="cv. parameter"):
        FederatedGridSearchCV(FederatedRidge(), {"alpha": [1.0]}, cv=PredefinedSplit(
            [0, 1])).fit(X, y, clients=sites)
    from sklearn_fed import IncrementalFederatedRidge

    with pytest.raises(ValueError, match="streaming protocol"):
        FederatedGridSearchCV(IncrementalFederatedRidge(), {"alpha": [1.0]}).fit(
            X, y, clients=sites)
    with pytest.raises(ValueError, match="n_splits"):
        FederatedGridSearchCV(FederatedRidge(), {"alpha": [1.0]}, cv=300).fit(
            X, y, clients=sites)


def test_a_pipeline_on_dataframes_is_searched_and_evaluated():
    from sklearn_fed import FederatedEvaluator, FederatedStandardScaler
    from sklearn_fed.pipeline import make_federated_pipeline

    X, y = load_breast_cancer(return_X_y=True, as_frame=True)
    sites = np.arange(len(y)) % 4
    pipe = make_federated_pipeline(FederatedStandardScaler(), FederatedLogisticRegression())
    grid = {"federatedlogisticregression__C": [0.1, 1.0]}
    search = FederatedGridSearchCV(pipe, grid, cv=3).fit(X, y, clients=sites)
    pooled = GridSearchCV(pipe, grid, cv=PredefinedSplit(SiteKFold(3).pooled_test_fold(sites)))
    pooled.fit(X, y, federatedlogisticregression__clients=sites,
               federatedstandardscaler__clients=sites)
    np.testing.assert_allclose(search.cv_results_["mean_test_score"],
                               pooled.cv_results_["mean_test_score"], rtol=1e-12)
    assert list(search.feature_names_in_) == list(X.columns)
    model = search.best_estimator_
    scores = FederatedEvaluator(model, metrics=["accuracy", "roc_auc"]).fit(
        X, y, clients=sites).scores_
    assert scores["accuracy"] == model.score(X, y)


def test_a_reply_with_parts_of_another_task_is_refused_naming_the_site():
    from sklearn_fed import InvalidClientMessage
    from sklearn_fed.protocol import decode, encode

    X, y, sites = _regression()
    search = FederatedGridSearchCV(FederatedRidge(), {"alpha": [0.1, 1.0]}, cv=2)
    server, client = search.make_server(), search.make_client()
    tasks = server.next_tasks(list(range(4)))
    replies = {s: client.respond(t, X[sites == s], y[sites == s]) for s, t in tasks.items()}
    for tamper in (lambda f: f.fields["parts"].reverse(),  # answers in another order
                   lambda f: f.fields["parts"].pop(),  # one part unanswered
                   lambda f: f.arrays.__setitem__("p9.x", np.zeros(1))):  # a stray array
        frame = decode(replies[2])
        tamper(frame)
        with pytest.raises(InvalidClientMessage, match="client 2"):
            server.receive({**replies, 2: encode(frame)})
    server.receive(replies)  # the honest round is still open, and applies
    assert server.round == 1
