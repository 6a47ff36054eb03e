"""The ``clients`` argument: loud when missing and it matters, strict about labels."""

import warnings

import numpy as np
import pandas as pd
import pytest
from sklearn import config_context
from sklearn.model_selection import GridSearchCV, GroupKFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from sklearn_fed import (
    DPFedAvgRegressor,
    FedAvgRegressor,
    FederatedRidge,
    FederatedRidgeCV,
    FedNovaRegressor,
    FedProxRegressor,
    FESCRidge,
    IncrementalFederatedRidge,
    MissingClientsWarning,
    PrivateFederatedRidge,
    ProjectedFederatedRidge,
)
from sklearn_fed._clients import group_rows_by_client

rng = np.random.default_rng(0)
X = rng.normal(size=(60, 3))
y = X @ [1.0, -2.0, 0.5] + 0.1 * rng.normal(size=60)
CLIENTS = np.repeat(["a", "b", "c"], 20)

# Estimators whose answer depends on how rows are split into clients.
DEPENDS_ON_CLIENTS = [
    (FESCRidge(), "one local model"),
    (PrivateFederatedRidge(random_state=0), "noise is added once"),
    (IncrementalFederatedRidge(min_clients=2), "quorum min_clients=2"),
    (FedAvgRegressor(n_rounds=2), "one client holding every row"),
    (FedProxRegressor(n_rounds=2), "one client holding every row"),
    (FedNovaRegressor(n_rounds=2), "one client holding every row"),
    (DPFedAvgRegressor(n_rounds=2, random_state=0), "one client holding every row"),
]
# Estimators that give the same model for any split: no warning.
EXACT = [
    FederatedRidge(),
    ProjectedFederatedRidge(n_components=2, random_state=0),
    IncrementalFederatedRidge(),
    FederatedRidgeCV(),  # leave-one-row-out, as RidgeCV, whatever the clients
    FederatedRidgeCV(cv=3),
    PrivateFederatedRidge(epsilon=np.inf),
    PrivateFederatedRidge(noise="distributed", random_state=0),
]


def _missing_clients_warnings(fit):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit()
    return [w for w in caught if issubclass(w.category, MissingClientsWarning)]


@pytest.mark.parametrize(
    "estimator, consequence", DEPENDS_ON_CLIENTS, ids=lambda e: type(e).__name__
)
def test_fit_without_clients_warns_once_and_says_what_happens(estimator, consequence):
    caught = _missing_clients_warnings(lambda: estimator.fit(X, y))
    assert len(caught) == 1
    message = str(caught[0].message)
    assert type(estimator).__name__ in message and consequence in message
    assert "clients=" in message
    assert caught[0].filename == __file__  # it points at the user's fit call
    assert not _missing_clients_warnings(lambda: estimator.fit(X, y, clients=CLIENTS))


@pytest.mark.parametrize("estimator", EXACT, ids=lambda e: type(e).__name__)
def test_exact_estimators_do_not_warn(estimator):
    with warnings.catch_warnings():
        warnings.simplefilter("error", MissingClientsWarning)
        estimator.fit(X, y)


def test_fedmpdd_without_clients_says_it_simulates_a_split():
    pytest.importorskip("torch")
    from sklearn_fed import FedMPDDClassifier

    labels = (X[:, 0] > 0).astype(int)
    net = FedMPDDClassifier(n_clients=4, max_epochs=1, n_directions=2, random_state=0)
    caught = _missing_clients_warnings(lambda: net.fit(X.astype(np.float32), labels))
    assert len(caught) == 1
    assert "n_clients=4 simulated clients" in str(caught[0].message)


def test_pipeline_without_step_clients_warns():
    pipe = make_pipeline(StandardScaler(), FESCRidge())
    caught = _missing_clients_warnings(lambda: pipe.fit(X, y))
    assert len(caught) == 1 and "fescridge__clients" not in str(caught[0].message)
    assert "<step>__clients" in str(caught[0].message)
    assert caught[0].filename == __file__  # past the Pipeline's frames too
    assert not _missing_clients_warnings(lambda: pipe.fit(X, y, fescridge__clients=CLIENTS))


def test_routing_on_without_request_says_to_request():
    with config_context(enable_metadata_routing=True):
        search = GridSearchCV(
            FESCRidge(), {"weighting": ["fesc", "uniform"]}, cv=GroupKFold(n_splits=3)
        )
        # groups reach the splitter only: FESCRidge never sees its clients
        caught = _missing_clients_warnings(lambda: search.fit(X, y, groups=CLIENTS))
        assert caught and "set_fit_request(clients=True)" in str(caught[0].message)
        requested = FESCRidge().set_fit_request(clients="groups", sample_weight=False)
        search = GridSearchCV(
            requested, {"weighting": ["fesc", "uniform"]}, cv=GroupKFold(n_splits=3)
        )
        assert not _missing_clients_warnings(lambda: search.fit(X, y, groups=CLIENTS))
        caught = _missing_clients_warnings(lambda: requested.fit(X, y))
        assert "Pass groups=..." in str(caught[0].message)


@pytest.mark.parametrize(
    "clients",
    [
        np.array(["a", None, "b"] * 20, dtype=object),
        np.array([1.0, np.nan, 2.0] * 20),
        pd.Series(["a", np.nan, "b"] * 20).to_numpy(),
        pd.array(["a", pd.NA, "b"] * 20, dtype="string"),
        pd.Series(pd.Categorical(["a", None, "b"] * 20)),
        np.array(["2024-01-01", "NaT", "2024-01-02"] * 20, dtype="datetime64[D]"),
    ],
    ids=["None", "nan", "object-nan", "pd.NA", "categorical", "NaT"],
)
def test_missing_labels_are_refused_not_made_a_client(clients):
    with pytest.raises(ValueError, match="20 missing labels .* first at row 1"):
        FESCRidge().fit(X, y, clients=clients)
    with pytest.raises(ValueError, match="missing labels"):
        group_rows_by_client(clients, 60)


def test_column_name_says_how_to_pass_the_column():
    frame = pd.DataFrame(X, columns=["age", "bmi", "bp"]).assign(region=CLIENTS)
    with pytest.raises(ValueError, match=r"X.drop\(columns='region'\), y, clients=X\['region'\]"):
        FederatedRidge().fit(frame, y, clients="region")
    with pytest.raises(ValueError, match="one label per row; got the single value 'region'"):
        FederatedRidge().fit(X, y, clients="region")
    # inside a Pipeline the step sees a transformed array: same clear message
    pipe = make_pipeline(StandardScaler(), FESCRidge())
    with pytest.raises(ValueError, match="single value 'region'"):
        pipe.fit(frame.drop(columns="region"), y, fescridge__clients="region")
    # what the message says to write works
    fitted = FESCRidge().fit(frame.drop(columns="region"), y, clients=frame["region"])
    assert fitted.clients_.tolist() == ["a", "b", "c"]


def test_series_of_labels_is_aligned_to_the_frame_by_index():
    frame = pd.DataFrame(X, columns=["age", "bmi", "bp"], index=np.arange(100, 160))
    aligned = pd.Series(CLIENTS, index=frame.index)
    shuffled = aligned.sample(frac=1.0, random_state=0)
    assert not np.array_equal(shuffled.to_numpy(), CLIENTS)
    for estimator in (FESCRidge(), FederatedRidgeCV(cv=GroupKFold(n_splits=3))):
        by_position = estimator.fit(frame, y, clients=CLIENTS)
        coef = by_position.coef_.copy()
        by_index = estimator.fit(frame, y, clients=shuffled)
        np.testing.assert_array_equal(by_index.coef_, coef)
    with pytest.raises(ValueError, match="index does not match X's index.*to_numpy"):
        FESCRidge().fit(frame, y, clients=pd.Series(CLIENTS))
    # without a DataFrame there is no index to align to: labels are taken by position
    positional = FESCRidge().fit(X, y, clients=shuffled)
    np.testing.assert_array_equal(
        positional.coef_, FESCRidge().fit(X, y, clients=shuffled.to_numpy()).coef_
    )


def test_fedmpdd_accepts_clients_whose_rows_are_contiguous():
    pytest.importorskip("torch")
    from sklearn_fed import FedMPDDClassifier

    labels = (X[:, 0] > 0).astype(int)
    sorted_clients = np.repeat([0, 1, 2], 20)  # grouped as slices of rows
    net = FedMPDDClassifier(max_epochs=2, n_directions=2, random_state=0)
    net.fit(X.astype(np.float32), labels, clients=sorted_clients)
    assert [rows.tolist() for rows in net.client_rows_] == [
        list(range(0, 20)), list(range(20, 40)), list(range(40, 60))
    ]


@pytest.mark.parametrize("estimator", [FESCRidge()], ids=lambda e: type(e).__name__)
def test_scikit_learn_checks_pass_with_the_warning_shown(estimator):
    """scikit-learn's checks fit without clients: the warning must not break any of them."""
    from sklearn.utils.estimator_checks import check_estimator

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", MissingClientsWarning)
        check_estimator(estimator)
    assert any(issubclass(w.category, MissingClientsWarning) for w in caught)


def _grouped_by_unique(clients):
    """The grouping spelled out: np.unique's labels, each with its rows in order."""
    labels, inverse = np.unique(clients, return_inverse=True)
    return labels, [np.flatnonzero(inverse == i) for i in range(len(labels))]


@pytest.mark.parametrize("clients", [
    np.arange(50) % 5,                        # interleaved: every label comes back
    np.repeat([3, 1, 2], [4, 1, 5]),          # runs out of order
    np.repeat([-2, 0, 7], 3),                 # sorted runs: slices without a sort
    np.array([5, 5, 10**9, 5]),               # too wide a range to count
    np.array([2.5, 0.5, 2.5, 0.5]),           # floats
    np.array(["b", "a", "b", "c"]),           # strings
    np.arange(70000) % 66000,                 # more labels than 16 bits
])
def test_group_rows_by_client_matches_unique(clients):
    labels, rows = group_rows_by_client(clients, len(clients))
    expected_labels, expected_rows = _grouped_by_unique(clients)
    np.testing.assert_array_equal(labels, expected_labels)
    assert labels.dtype == expected_labels.dtype
    for got, want in zip(rows, expected_rows, strict=True):
        np.testing.assert_array_equal(np.arange(len(clients))[got], want)
        contiguous = want[-1] - want[0] + 1 == len(want)
        assert isinstance(got, slice) == contiguous  # contiguous rows: a view, no copy
