"""Federated metrics equal sklearn.metrics on the pooled rows: exactly for counts, to round-off
for sums; for 1, 7 and 100 sites, with and without sample weights."""

import numpy as np
import pytest
from sklearn import metrics as M
from sklearn.datasets import load_breast_cancer, load_iris

from sklearn_fed import (
    FederatedLogisticRegression,
    FederatedRidge,
    InvalidClientMessage,
)
from sklearn_fed.metrics import FederatedEvaluator, federated_score
from sklearn_fed.protocol import SitePolicy, decode, encode, simulate_through_bytes


def _breast_cancer():
    X, y = load_breast_cancer(return_X_y=True)
    return (X - X.mean(0)) / X.std(0), y


BINARY = ["accuracy", "balanced_accuracy", "confusion_matrix", "precision", "recall", "f1",
          "f1_macro", "precision_weighted", "recall_micro", "roc_auc", "average_precision",
          "log_loss", "neg_log_loss", "brier_score"]
COUNTS = {"accuracy", "balanced_accuracy", "confusion_matrix", "precision", "recall", "f1",
          "f1_macro", "precision_weighted", "recall_micro", "roc_auc", "average_precision"}


def _binary_reference(model, X, y, w):
    p, proba, d = model.predict(X), model.predict_proba(X), model.decision_function(X)
    kw = {"sample_weight": w}
    return {
        "accuracy": M.accuracy_score(y, p, **kw),
        "balanced_accuracy": M.balanced_accuracy_score(y, p, **kw),
        "confusion_matrix": M.confusion_matrix(y, p, **kw),
        "precision": M.precision_score(y, p, **kw),
        "recall": M.recall_score(y, p, **kw),
        "f1": M.f1_score(y, p, **kw),
        "f1_macro": M.f1_score(y, p, average="macro", **kw),
        "precision_weighted": M.precision_score(y, p, average="weighted", **kw),
        "recall_micro": M.recall_score(y, p, average="micro", **kw),
        "roc_auc": M.roc_auc_score(y, d, **kw),
        "average_precision": M.average_precision_score(y, d, **kw),
        "log_loss": M.log_loss(y, proba, **kw),
        "neg_log_loss": -M.log_loss(y, proba, **kw),
        "brier_score": M.brier_score_loss(y, proba[:, 1], **kw),
    }


def _sites(n, n_sites, seed=0):
    rng = np.random.default_rng(seed)
    sites = rng.permutation(np.arange(n) % n_sites)  # every site has rows, in mixed order
    return sites


@pytest.mark.parametrize("n_sites", [1, 7, 100])
@pytest.mark.parametrize("weighted", [False, True])
def test_binary_metrics_equal_sklearn_on_pooled_rows(n_sites, weighted):
    X, y = _breast_cancer()
    sites = _sites(len(y), n_sites)
    model = FederatedLogisticRegression(C=0.05).fit(X, y, clients=sites)
    w = np.random.default_rng(1).integers(0, 4, len(y)) * 0.75 if weighted else None
    evaluator = FederatedEvaluator(model, metrics=BINARY).fit(X, y, sample_weight=w,
                                                              clients=sites)
    reference = _binary_reference(model, X, y, w)
    for name in BINARY:
        got, want = evaluator.scores_[name], reference[name]
        if name in COUNTS and not weighted:
            np.testing.assert_array_equal(got, want, err_msg=name)  # exact: from counts
            assert np.asarray(got).dtype == np.asarray(want).dtype
        else:
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=0, err_msg=name)
    assert evaluator.n_clients_ == n_sites and evaluator.n_samples_ == len(y)
    # per site: the metric on that site's rows alone
    site = max(evaluator.site_scores_)
    rows = sites == site
    alone = _binary_reference(model, X[rows], y[rows], None if w is None else w[rows])
    for name in ("accuracy", "log_loss", "confusion_matrix"):
        np.testing.assert_allclose(evaluator.site_scores_[site][name], alone[name], rtol=1e-12)


@pytest.mark.parametrize("n_sites", [1, 7, 100])
@pytest.mark.parametrize("weighted", [False, True])
def test_regression_metrics_equal_sklearn_on_pooled_rows(n_sites, weighted):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(700, 4)) + 1e4  # offsets: R²'s denominator must not cancel
    Y = np.c_[X @ [1.0, -2.0, 0.5, 0.0], X[:, 0] * 3.0] + rng.normal(size=(700, 2)) + 1e5
    sites = _sites(len(X), n_sites)
    w = rng.uniform(0, 2, len(X)) if weighted else None
    for y in (Y[:, 0], Y):
        model = FederatedRidge(alpha=1.0).fit(X, y, clients=sites)
        predicted = model.predict(X)
        for multioutput in ("uniform_average", "raw_values"):
            evaluator = FederatedEvaluator(
                model, metrics=["r2", "mean_squared_error", "neg_root_mean_squared_error",
                                "mean_absolute_error"], multioutput=multioutput,
            ).fit(X, y, sample_weight=w, clients=sites)
            kw = {"sample_weight": w, "multioutput": multioutput}
            reference = {
                "r2": M.r2_score(y, predicted, **kw),
                "mean_squared_error": M.mean_squared_error(y, predicted, **kw),
                "neg_root_mean_squared_error": -M.root_mean_squared_error(y, predicted, **kw),
                "mean_absolute_error": M.mean_absolute_error(y, predicted, **kw),
            }
            for name, want in reference.items():
                np.testing.assert_allclose(evaluator.scores_[name], want, rtol=1e-9,
                                           err_msg=name)


@pytest.mark.parametrize("n_sites", [1, 7, 100])
def test_multiclass_metrics_equal_sklearn(n_sites):
    X, y = load_iris(return_X_y=True)
    labels = np.array(["setosa", "versicolor", "virginica"])[y]  # string labels
    sites = _sites(len(y), n_sites)
    model = FederatedLogisticRegression().fit(X, labels, clients=sites)
    names = ["accuracy", "confusion_matrix", "f1_macro", "f1_weighted", "precision_micro",
             "log_loss", "brier_score"]
    evaluator = FederatedEvaluator(model, metrics=names).fit(X, labels, clients=sites)
    p, proba = model.predict(X), model.predict_proba(X)
    assert evaluator.scores_["accuracy"] == M.accuracy_score(labels, p)
    np.testing.assert_array_equal(evaluator.scores_["confusion_matrix"],
                                  M.confusion_matrix(labels, p))
    assert evaluator.scores_["f1_macro"] == M.f1_score(labels, p, average="macro")
    assert evaluator.scores_["f1_weighted"] == M.f1_score(labels, p, average="weighted")
    assert evaluator.scores_["precision_micro"] == M.precision_score(labels, p, average="micro")
    np.testing.assert_allclose(evaluator.scores_["log_loss"], M.log_loss(labels, proba),
                               rtol=1e-12)
    np.testing.assert_allclose(evaluator.scores_["brier_score"],
                               M.brier_score_loss(labels, proba, labels=model.classes_),
                               rtol=1e-12)


def test_score_decimals_equal_sklearn_on_rounded_scores():
    X, y = _breast_cancer()
    sites = _sites(len(y), 7)
    model = FederatedLogisticRegression().fit(X, y, clients=sites)
    score = federated_score(model, X, y, clients=sites, metric="roc_auc", score_decimals=1)
    assert score == M.roc_auc_score(y, np.round(model.decision_function(X), 1))
    assert score != M.roc_auc_score(y, model.decision_function(X))


def test_through_bytes_and_by_hand_equal_fit():
    X, y = _breast_cancer()
    sites = _sites(len(y), 5)
    model = FederatedLogisticRegression().fit(X, y, clients=sites)
    fitted = FederatedEvaluator(model, metrics=["f1", "roc_auc", "log_loss"]).fit(
        X, y, clients=sites)
    with simulate_through_bytes():
        through = FederatedEvaluator(model, metrics=["f1", "roc_auc", "log_loss"]).fit(
            X, y, clients=sites)
    assert through.scores_ == fitted.scores_
    # a site holds only an unfitted copy of the estimator: the task carries the model
    evaluator = FederatedEvaluator(model, metrics=["f1", "roc_auc", "log_loss"])
    keys = {s: f"key-of-site-{s}-0123456789".encode() for s in range(5)}
    server = evaluator.make_server(keys=keys)
    site_copy = FederatedEvaluator(FederatedLogisticRegression(),
                                   metrics=["f1", "roc_auc", "log_loss"])
    # exact scores need sites that release exact tables (deployed sites apply SitePolicy())
    clients = {s: site_copy.make_client(key=keys[s], site=s, policy=SitePolicy.permissive())
               for s in range(5)}
    tasks = server.next_tasks(list(range(5)))
    while tasks:
        server.receive({s: clients[s].respond(t, X[sites == s], y[sites == s])
                        for s, t in tasks.items()})
        tasks = server.next_tasks(list(range(5)))
    assert server.estimator.scores_ == fitted.scores_


HOSTILE = {
    "negative count": lambda a: a.__setitem__("cm_counts", a["cm_counts"] * -1),
    "nan weight": lambda a: a.__setitem__("cm_weights", a["cm_weights"] * np.nan),
    "unsorted scores": lambda a: a.__setitem__("scores", a["scores"][::-1].copy()),
    "counts not n_rows": lambda a: a.__setitem__("pos_counts", a["pos_counts"] + 1),
    "wrong shape": lambda a: a.__setitem__("cm_counts", a["cm_counts"][:1]),
    "extra array": lambda a: a.__setitem__("junk", np.zeros(2)),
    "missing array": lambda a: a.pop("log_loss_sum"),
    "float counts": lambda a: a.__setitem__("neg_counts", a["neg_counts"] + 0.5),
}


@pytest.fixture(scope="module")
def fitted_binary():
    X, y = _breast_cancer()
    return X, y, FederatedLogisticRegression().fit(X, y)


@pytest.mark.parametrize("attack", sorted(HOSTILE))
def test_hostile_reply_is_refused_naming_the_site(attack, fitted_binary):
    X, y, model = fitted_binary
    evaluator = FederatedEvaluator(model, metrics=["accuracy", "roc_auc", "log_loss"])
    server, client = evaluator.make_server(), evaluator.make_client(policy=SitePolicy.permissive())
    tasks = server.next_tasks(["a", "b"])
    replies = {s: client.respond(t, X[i::2], y[i::2]) for i, (s, t) in enumerate(tasks.items())}
    frame = decode(replies["b"])
    HOSTILE[attack](frame.arrays)
    replies["b"] = encode(frame)
    with pytest.raises(InvalidClientMessage, match="'b'"):
        server.receive(replies)
    assert not hasattr(evaluator, "scores_")


def test_unknown_label_and_wrong_columns_name_the_site(fitted_binary):
    X, y, model = fitted_binary
    evaluator = FederatedEvaluator(model)
    server, client = evaluator.make_server(), evaluator.make_client()
    task = server.next_tasks(["north"])["north"]
    with pytest.raises(ValueError, match="north.*labels the model does not know"):
        client.respond(task, X[:10], np.full(10, 7))
    with pytest.raises(ValueError, match="north"):
        client.respond(task, X[:10, :5], y[:10])


def test_unknown_metric_is_refused_before_any_site_computes():
    model = FederatedRidge().fit(np.eye(3), [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="unknown metric 'r3'"):
        FederatedEvaluator(model, metrics="r3").make_server()
    with pytest.raises(ValueError, match="unknown metric 'neg_r2'"):
        FederatedEvaluator(model, metrics="neg_r2").make_server()
