"""Disclosure control: every reply of every estimator, decoded, under the default site policy."""

import importlib.util
import itertools
import math
import re

import numpy as np
import pandas as pd
import pytest
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
    PrivateFederatedRidge,
    ProjectedFederatedRidge,
)
from sklearn_fed.compose import FederatedColumnTransformer
from sklearn_fed.flower import NodeSettings
from sklearn_fed.metrics import FederatedEvaluator
from sklearn_fed.model_selection import (
    FederatedGridSearchCV,
    FederatedRandomizedSearchCV,
    LeaveSitesOut,
)
from sklearn_fed.model_selection._search import _CrossValidation
from sklearn_fed.pipeline import make_federated_pipeline
from sklearn_fed.protocol import SitePolicy, TaskRefused, decode, simulated_policy
from sklearn_fed.utils.estimator_checks import run_protocol_by_hand

ESTIMATORS = [
    FederatedRidge(),
    FederatedRidgeCV(cv="clients"),
    ProjectedFederatedRidge(n_components=2, random_state=0),
    IncrementalFederatedRidge(random_state=0),
    FESCRidge(),
    FedAvgRegressor(n_rounds=2, batch_size=7, random_state=0),
    FedProxRegressor(n_rounds=2),
    FedNovaRegressor(n_rounds=2, batch_size=11, random_state=0),
    DPFedAvgRegressor(n_rounds=2, epsilon=10.0, random_state=0),
    PrivateFederatedRidge(epsilon=2.0, feature_bound=5.0, target_bound=10.0, random_state=0),
    FederatedStandardScaler(),
    FederatedMinMaxScaler(),
    FederatedOneHotEncoder(handle_unknown="ignore"),
    FederatedOneHotEncoder(handle_unknown="ignore", min_frequency=4),
    FederatedSimpleImputer(strategy="most_frequent", add_indicator=True),
    FederatedSimpleImputer(),
    FederatedPCA(n_components=2),
    FederatedEmpiricalCovariance(),
    FederatedRidgeClassifier(),
    FederatedRidgeClassifierCV(cv="clients"),
    FederatedLogisticRegression(),
    make_federated_pipeline(FederatedSimpleImputer(), FederatedStandardScaler(), FederatedRidge()),
    make_federated_pipeline(
        FederatedColumnTransformer([
            ("minmax", FederatedMinMaxScaler(), [0, 1]),
            ("onehot", FederatedOneHotEncoder(handle_unknown="ignore"), [2]),
            ("mode", FederatedSimpleImputer(strategy="most_frequent"), [2, 3])]),
        FederatedRidge()),
]
if all(importlib.util.find_spec(m) for m in ("torch", "skorch")):  # the `nn` extra
    from sklearn_fed import FedMPDDClassifier

    ESTIMATORS.append(FedMPDDClassifier(n_directions=4, max_epochs=1, batch_size=16,
                                        random_state=0))

SINGLETON, PAIR, OUTLIER = 7.25, 8.5, 12345.678


def disclosive_data(estimator, n_per_site=60, sites=3, seed=0):
    """Rows with singleton values, a value seen twice, an outlier and rare levels per site.

    Column 0 is continuous (every value a singleton), column 1 holds one
    outlier per site, columns 2 and 3 are levels 0..3 (each seen often)
    plus one singleton and one pair per site.
    """
    rng = np.random.default_rng(seed)
    n = n_per_site * sites
    X = np.column_stack([rng.normal(size=n), rng.normal(size=n),
                         rng.integers(0, 4, n).astype(float), rng.integers(0, 4, n).astype(float)])
    clients = np.repeat(np.arange(sites), n_per_site)
    for s in range(sites):
        first = s * n_per_site
        X[first, 1] = OUTLIER + s
        X[first + 1, 2:] = SINGLETON + s, SINGLETON + s + 0.5
        X[first + 2 : first + 4, 3] = PAIR + s
    if is_classifier(estimator):
        y = (X[:, 0] > 0).astype(int)
    else:
        y = X[:, 0] - np.clip(X[:, 1], -3, 3) + rng.normal(size=n)
    return X, y, clients


def _numbers(value):
    if isinstance(value, dict):
        return [v for item in value.values() for v in _numbers(item)]
    if isinstance(value, list):
        return [v for item in value for v in _numbers(item)]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return [float(value)]
    if isinstance(value, str):
        return [value]
    return []


def released(frame):
    """Every number and string of a decoded reply (fields and arrays)."""
    values = _numbers(frame.fields)
    for array in frame.arrays.values():
        array = np.asarray(getattr(array, "matrix", array))
        values += array.ravel().tolist()
    return values


def rare_values(rows, y):
    """The values of a site's rows (and targets) seen fewer than 3 times there."""
    values, counts = np.unique(np.concatenate([rows.ravel(), np.asarray(y, float)]),
                               return_counts=True)
    return set(values[counts < 3].tolist()) - {0.0, 1.0}


def replies_of(estimator, X, y, clients, policy):
    """Every reply of a run driven by hand with bytes, decoded; and the run's error if any."""
    replies = []

    def keep(site, reply):
        replies.append((site, decode(reply)))
        return reply

    try:
        run_protocol_by_hand(clone(estimator), X, y, clients, tamper=keep, policy=policy,
                             max_rounds=4)
        error = None
    except (TaskRefused, ValueError) as exc:  # a refusal, or nothing left to fit
        error = exc
    return replies, error


@pytest.mark.parametrize("estimator", ESTIMATORS, ids=lambda e: type(e).__name__)
def test_default_policy_releases_nothing_backed_by_fewer_rows_than_the_threshold(estimator):
    X, y, clients = disclosive_data(estimator)
    replies, error = replies_of(estimator, X, y, clients, SitePolicy())
    assert replies, error
    for site, frame in replies:
        rows = clients == site
        rare = rare_values(X[rows], y[rows])
        assert {SINGLETON + site, PAIR + site, OUTLIER + site} <= rare
        leaked = [v for v in released(frame) if isinstance(v, float) and v in rare]
        assert not leaked, f"site {site!r} released {leaked[:3]} ({frame.kind})"


@pytest.mark.parametrize("estimator", [
    FederatedMinMaxScaler(), FederatedOneHotEncoder(handle_unknown="ignore"),
    FederatedSimpleImputer(strategy="most_frequent"),
], ids=lambda e: type(e).__name__)
def test_the_opt_ins_release_them(estimator):
    X, y, clients = disclosive_data(estimator)
    policy = (SitePolicy(exact_extremes=True) if isinstance(estimator, FederatedMinMaxScaler)
              else SitePolicy(min_count=1, max_levels=None))
    replies, error = replies_of(estimator, X, y, clients, policy)
    assert error is None
    for site, frame in replies:
        values = {v for v in released(frame) if isinstance(v, float)}
        expected = OUTLIER + site if isinstance(estimator, FederatedMinMaxScaler) else (
            SINGLETON + site)
        assert expected in values


def test_rare_text_categories_are_suppressed_and_the_model_encodes_them_as_unknown():
    X = pd.DataFrame({"region": ["north"] * 5 + ["south"] * 4 + ["patient-0042"] + ["east"] * 2,
                      "smoker": ["yes", "no"] * 6})
    sites = np.zeros(12, dtype=int)
    encoder = FederatedOneHotEncoder(handle_unknown="ignore", sparse_output=False)
    replies, error = replies_of(encoder, X, None, sites, SitePolicy())
    assert error is None
    text = {v for _, frame in replies for v in released(frame) if isinstance(v, str)}
    assert "patient-0042" not in text and "east" not in text and {"north", "south"} <= text
    with simulated_policy(SitePolicy()):
        fitted = clone(encoder).fit(X, clients=sites)
    assert [list(c) for c in fitted.categories_] == [["north", "south"], ["no", "yes"]]
    assert fitted.transform(pd.DataFrame({"region": ["patient-0042"], "smoker": ["no"]})
                            ).tolist() == [[0.0, 0.0, 1.0, 0.0]]
    # without a policy, fit simulates permissive sites: scikit-learn's categories
    assert list(clone(encoder).fit(X, clients=sites).categories_[0]) == [
        "east", "north", "patient-0042", "south"]


def test_most_frequent_histograms_only_above_the_threshold():
    X = np.array([[1.0]] * 2 + [[2.0]] * 3 + [[9.0]] + [[np.nan]] * 2)
    imputer = FederatedSimpleImputer(strategy="most_frequent")
    replies, _ = replies_of(imputer, X, None, np.zeros(8, dtype=int), SitePolicy())
    (_, frame), = replies
    assert frame.arrays["v0"].tolist() == [2.0] and frame.arrays["k0"].tolist() == [3]
    with pytest.raises(ValueError, match="column 0: most_frequent: no site released a value"
                       ".*min_count.*strategy='mean'"), simulated_policy(SitePolicy(min_count=4)):
        clone(imputer).fit(X, clients=np.zeros(8, dtype=int))


def test_minmax_bounds_are_padded_order_statistics():
    X = np.array([[0.0], [1.0], [2.0], [3.0], [4.0], [5.0], [6.0], [7.0], [100.0]])
    with simulated_policy(SitePolicy()):
        scaler = FederatedMinMaxScaler().fit(X, clients=np.zeros(9, dtype=int))
    # the 3rd smallest (2) and 3rd largest (6), rounded outward: the outlier 100 is not seen
    assert scaler.data_min_.tolist() == [1.9] and scaler.data_max_.tolist() == [6.1]
    with simulated_policy(SitePolicy(exact_extremes=True)):
        exact = FederatedMinMaxScaler().fit(X, clients=np.zeros(9, dtype=int))
    assert exact.data_max_.tolist() == [100.0]


@pytest.mark.parametrize("policy, estimator, n, message", [
    (SitePolicy(), FederatedStandardScaler(), 2,
     (r"rule min_rows=3: it has 2 rows, fewer than the policy's minimum 3\. What you can do: "
      r"fit with more rows")),
    (SitePolicy(), FederatedRidge(), 20,
     (r"rule max_parameters_per_row=0\.33: a model of 11 parameters from 20 rows exceeds "
      r"0\.33 parameters per row\. What you can do: use fewer features, or at least 34 rows")),
    (SitePolicy(max_levels=3, min_count=1), FederatedOneHotEncoder(), 20,
     r"rule max_levels=3: column 0 has \d+ levels, more than 3\. What you can do: group"),
])
def test_refusals_name_the_rule_the_threshold_and_what_to_do(policy, estimator, n, message):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, 10)).round(0) if isinstance(estimator, FederatedOneHotEncoder) else (
        rng.normal(size=(n, 10)))
    y = rng.normal(size=n)
    server = estimator.make_server()
    client = estimator.make_client(policy=policy, site="a")
    tasks = server.next_tasks(["a"])
    with pytest.raises(TaskRefused, match=message) as refused:
        client.respond(tasks["a"], X, y)
    assert refused.value.site == "a"
    # the same site, permissive: answers
    estimator.make_client(policy=SitePolicy.permissive()).respond(tasks["a"], X, y)


def test_a_client_without_a_policy_applies_the_defaults_when_deployed():
    X = np.arange(6.0).reshape(3, 2)
    server = FederatedMinMaxScaler().make_server()
    task = server.next_tasks(["a"])["a"]
    frame = decode(FederatedMinMaxScaler().make_client().respond(task, X))
    assert frame.arrays["data_min"].tolist() != [0.0, 1.0]  # not the exact extremes
    with pytest.raises(TaskRefused, match="min_rows=3"):
        FederatedMinMaxScaler().make_client().respond(task, X[:2])


def test_simulated_policy_makes_fit_release_what_deployed_sites_would():
    X, _, clients = disclosive_data(FederatedMinMaxScaler())
    with simulated_policy(SitePolicy()):
        fitted = FederatedMinMaxScaler().fit(X, clients=clients)
    server, _ = run_protocol_by_hand(FederatedMinMaxScaler(), X, None, clients,
                                     policy=SitePolicy())
    np.testing.assert_array_equal(fitted.data_max_, server.estimator.data_max_)
    assert fitted.data_max_[1] < OUTLIER


def test_flower_node_config_sets_the_disclosure_rules():
    node = NodeSettings.from_node_config({"site": "a", "data-path": "a.csv"})
    assert (node.policy.min_rows, node.policy.min_count, node.policy.max_parameters_per_row,
            node.policy.max_levels, node.policy.exact_extremes) == (3, 3, 0.33, 40, False)
    node = NodeSettings.from_node_config({
        "site": "a", "data-path": "a.csv", "min-rows": 0, "min-count": 5,
        "max-parameters-per-row": 0.1, "max-levels": 0, "exact-extremes": True,
        "exact-scores": True})
    assert (node.policy.min_rows, node.policy.min_count, node.policy.max_parameters_per_row,
            node.policy.max_levels, node.policy.exact_extremes) == (None, 5, 0.1, None, True)
    assert node.policy.exact_scores and not NodeSettings.from_node_config(
        {"site": "a", "data-path": "a.csv"}).policy.exact_scores
    with pytest.raises(ValueError, match="exact-extremes"):
        NodeSettings.from_node_config({"site": "a", "data-path": "a.csv",
                                       "exact-extremes": "yes"})


def test_policy_thresholds_are_checked():
    with pytest.raises(ValueError, match="min_count must be a positive number"):
        SitePolicy(min_count=0)
    assert not SitePolicy.permissive().controls_disclosure and SitePolicy().controls_disclosure
    assert math.isclose(SitePolicy().max_parameters_per_row, 0.33)


# ---------------------------------------------------------------- evaluation and searches
def _noisy_labels(X, rng):
    # labels a linear model gets wrong often enough that no confusion cell is small
    return (X[:, 0] + rng.normal(scale=1.5, size=len(X)) > 0).astype(int)


def _evaluation_data():
    X, _, clients = disclosive_data(FederatedLogisticRegression())
    rng = np.random.default_rng(1)
    return X, _noisy_labels(X, rng), X[:, 0] - np.clip(X[:, 1], -3, 3) + rng.normal(
        size=len(X)), clients


def _evaluators():
    X, y_class, y_reg, clients = _evaluation_data()
    classifier = FederatedLogisticRegression().fit(X, y_class, clients=clients)
    regressor = FederatedRidge().fit(X, y_reg, clients=clients)
    return [
        (FederatedEvaluator(classifier, metrics=[
            "accuracy", "f1", "confusion_matrix", "roc_auc", "average_precision", "log_loss",
            "brier_score"]), True),
        (FederatedEvaluator(regressor, metrics=["r2", "mean_absolute_error"]), False),
    ]


SEARCHES = [
    (FederatedGridSearchCV(FederatedLogisticRegression(), {"C": [0.1, 1.0]}, cv=2,
                           scoring="roc_auc"), True),
    (FederatedRandomizedSearchCV(FederatedRidge(), {"alpha": [0.1, 10.0, 100.0]}, n_iter=2,
                                 random_state=0, cv=LeaveSitesOut()), False),
    # the steps inside a search are screened as the steps of a fit: no outlier from min-max
    (FederatedGridSearchCV(make_federated_pipeline(
        FederatedColumnTransformer([
            ("minmax", FederatedMinMaxScaler(), [0, 1]),
            ("onehot", FederatedOneHotEncoder(handle_unknown="ignore"), [2])]),
        FederatedRidge()), {"federatedridge__alpha": [1.0, 10.0]}, cv=2), False),
    (_CrossValidation(FederatedLogisticRegression(), scoring=["roc_auc", "neg_log_loss"], cv=2),
     True),
]


def _check_tables(site, frame):
    """Every score bin and confusion cell of a (possibly nested) reply backed by 0 or >= 3 rows."""
    for name, array in frame.arrays.items():
        base = name.rsplit(".", 1)[-1]
        if base in ("cm_counts", "pos_counts", "neg_counts"):
            small = (array > 0) & (array < 3)
            assert not small.any(), f"site {site!r} released {base} {array.tolist()}"


def _evaluation_replies(estimator, X, y, clients, policy):
    replies = []

    def keep(site, reply):
        replies.append((site, decode(reply)))
        return reply

    server, _ = run_protocol_by_hand(estimator, X, y, clients, tamper=keep, policy=policy)
    return server, replies


@pytest.mark.parametrize("case", range(len(SEARCHES) + 2))
def test_default_policy_screens_every_evaluation_and_search_message(case):
    X, y_class, y_reg, clients = _evaluation_data()
    estimator, classifies = (_evaluators() + SEARCHES)[case]
    y = y_class if classifies else y_reg
    server, replies = _evaluation_replies(clone(estimator) if case >= 2 else estimator,
                                          X, y, clients, SitePolicy())
    assert replies and server.round >= 1
    scores_seen = 0
    for site, frame in replies:
        rows = clients == site
        rare = rare_values(X[rows], y[rows])
        leaked = [v for v in released(frame) if isinstance(v, float) and v in rare]
        assert not leaked, f"site {site!r} released {leaked[:3]} ({frame.kind})"
        _check_tables(site, frame)
        if case == 0:  # the evaluator: no released score is a single row's score
            own = set(estimator.estimator.decision_function(X[rows]).tolist())
            assert not own & set(frame.arrays["scores"].tolist())
            scores_seen += len(frame.arrays["scores"])
    assert case != 0 or scores_seen > 0


def _binned_from_the_release(scores, labels, frame, k=3):
    """Each row's score replaced by the mean score of the bin the site released it in.

    The released bins are read back onto the site's rows (sorted by score, whole
    groups of equal scores), checking that they partition them and that every
    class count of every bin is 0 or at least ``k``.
    """
    counts = frame.arrays["pos_counts"] + frame.arrays["neg_counts"]
    order = np.argsort(scores, kind="stable")
    edges = np.r_[0, np.cumsum(counts)]
    assert edges[-1] == len(scores)
    out = np.empty(len(scores))
    for j, (a, b) in enumerate(itertools.pairwise(edges)):
        rows = order[a:b]
        assert b == len(scores) or scores[order[b - 1]] < scores[order[b]]  # whole groups
        positives = int(labels[rows].sum())
        assert positives == frame.arrays["pos_counts"][j]
        assert all(c == 0 or c >= k for c in (positives, len(rows) - positives))
        out[rows] = scores[rows].mean()
        assert math.isclose(out[rows][0], frame.arrays["scores"][j], rel_tol=1e-12)
    return out


def test_roc_auc_under_the_default_policy_is_exact_on_the_site_bins_and_exact_with_the_opt_in():
    from sklearn.metrics import average_precision_score, roc_auc_score

    X, y, _, clients = _evaluation_data()
    model = FederatedLogisticRegression().fit(X, y, clients=clients)
    scores = model.decision_function(X)
    evaluator = FederatedEvaluator(model, metrics=["roc_auc", "average_precision"])
    server, replies = _evaluation_replies(evaluator, X, y, clients, SitePolicy())
    binned = np.empty(len(y))
    for site, frame in replies:
        rows = clients == site
        binned[rows] = _binned_from_the_release(scores[rows], y[rows], frame)
    assert len(np.unique(binned)) < len(np.unique(scores)) / 3  # merged, much
    controlled = server.estimator.scores_
    assert math.isclose(controlled["roc_auc"], roc_auc_score(y, binned), rel_tol=1e-12)
    assert math.isclose(controlled["average_precision"], average_precision_score(y, binned),
                        rel_tol=1e-12)
    with simulated_policy(SitePolicy()):  # fit's simulated sites: the same
        assert clone(evaluator).set_params(estimator=model).fit(
            X, y, clients=clients).scores_ == controlled
    with simulated_policy(SitePolicy(exact_scores=True)):  # the opt-in: every distinct score
        exact = clone(evaluator).set_params(estimator=model).fit(X, y, clients=clients)
    assert exact.scores_["roc_auc"] == roc_auc_score(y, scores)
    assert exact.scores_["average_precision"] == average_precision_score(y, scores)


def test_evaluation_refusals_name_the_rule_and_the_threshold():
    X, y, _, clients = _evaluation_data()
    rows = clients == 0
    model = FederatedLogisticRegression().fit(X, y, clients=clients)
    y_one = np.zeros(rows.sum(), dtype=int)
    y_one[0] = 1  # one positive row: every table of this site has a cell of 1
    for metric, message in [
        ("accuracy", (r"rule min_count=3: its confusion matrix has \d+ cell\(s\) of 1 to 2 "
                      r"rows \(the smallest: 1\), fewer than 3\. What you can do: Evaluate")),
        ("roc_auc", (r"rule min_count=3: its rows' scores cannot be binned with at least 3 "
                     r"rows of each class per bin: the classes have \[1, 59\] rows\. What you")),
    ]:
        evaluator = FederatedEvaluator(model, metrics=[metric])
        task = evaluator.make_server().next_tasks(["a"])["a"]
        with pytest.raises(TaskRefused, match=message):
            evaluator.make_client(site="a").respond(task, X[rows], y_one)
        # the opt-ins release it
        policy = SitePolicy(min_count=1) if metric == "accuracy" else SitePolicy(
            exact_scores=True)
        evaluator.make_client(policy=policy).respond(task, X[rows], y_one)
    with pytest.raises(TaskRefused, match="rule min_rows=3"):
        evaluator.make_client().respond(task, X[:2], y[:2])
    # an evaluation fits no model: many features from few rows are not refused for that
    task = FederatedEvaluator(model, metrics=["log_loss"]).make_server().next_tasks(["a"])["a"]
    FederatedEvaluator(model, metrics=["log_loss"]).make_client().respond(task, X[:6], y[:6])


def test_a_deployed_search_site_screens_its_parts_with_the_default_policy():
    X, _, y_reg, clients = _evaluation_data()
    search = SEARCHES[2][0]
    replies_default = _evaluation_replies(clone(search), X, y_reg, clients, SitePolicy())[1]
    permissive = _evaluation_replies(clone(search), X, y_reg, clients,
                                     SitePolicy.permissive())[1]
    outliers = {OUTLIER + s for s in range(3)}
    assert outliers & {v for _, f in permissive for v in released(f)}  # released without rules
    assert not outliers & {v for _, f in replies_default for v in released(f)}
    # a site made without a policy applies SitePolicy() to every part it answers
    server, site = clone(search).make_server(), clone(search).make_client()
    tasks, seen = server.next_tasks([0, 1, 2]), set()
    while tasks:
        replies = {s: site.respond(t, X[clients == s], y_reg[clients == s])
                   for s, t in tasks.items()}
        seen.update(v for r in replies.values() for v in released(decode(r)))
        server.receive(replies)
        tasks = server.next_tasks([0, 1, 2])
    assert len(seen) > 100 and not outliers & seen


CLASSIFIERS = [e for e in ESTIMATORS if is_classifier(e)]


@pytest.mark.parametrize("estimator", CLASSIFIERS, ids=lambda e: type(e).__name__)
def test_a_label_held_by_fewer_rows_than_the_threshold_is_refused(estimator):
    # A site's labels are categories: one held by 1 or 2 rows names them (DataSHIELD's
    # glm refuses a binomial outcome with a level below nfilter.tab). Refused, not
    # suppressed: a classifier cannot fit rows whose label it may not name.
    X, _, clients = disclosive_data(estimator)
    y = np.where(X[:, 0] > 0, "yes", "no").astype(object)
    y[[0, 1]] = "zebra"  # two rows of site 0
    replies, error = replies_of(estimator, X, y, clients, SitePolicy())
    assert isinstance(error, TaskRefused), error
    assert error.site == 0
    assert re.search(r"rule min_count=3: 1 of its classes has 1 to 2 rows, fewer than 3\. "
                     r"What you can do: ", str(error))
    assert "zebra" not in str(error)
    assert all("zebra" not in released(frame) for _, frame in replies)
    # permissive sites answer, and no reply carries the policy's own counts
    replies, error = replies_of(estimator, X, y, clients, SitePolicy.permissive())
    assert error is None and replies
    assert all("class_rows" not in frame.arrays for _, frame in replies)


@pytest.mark.parametrize("estimator", [FederatedLogisticRegression(), FederatedRidgeClassifier()],
                         ids=lambda e: type(e).__name__)
def test_a_multiclass_model_counts_a_coefficient_row_per_class(estimator):
    # 10 features and 3 classes: 33 parameters, more than 0.33 x 60 rows; two classes: 11
    rng = np.random.default_rng(0)
    X = rng.normal(size=(180, 10))
    clients = np.repeat(np.arange(3), 60)
    y3 = np.tile(np.arange(3), 60)
    _, error = replies_of(estimator, X, y3, clients, SitePolicy())
    assert isinstance(error, TaskRefused)
    assert "rule max_parameters_per_row=0.33: a model of 33 parameters from 60 rows" in str(error)
    replies, error = replies_of(estimator, X, y3 % 2, clients, SitePolicy())
    assert error is None and replies
