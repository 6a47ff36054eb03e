"""Errors that say what is wrong and what to do (issue 29): one test per case, on the text."""

import re
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import sklearn_fed
from sklearn_fed import (
    FederatedLogisticRegression,
    FederatedRidge,
    FederatedSimpleImputer,
    FederatedStandardScaler,
    FESCRidge,
    InvalidClientMessage,
    MissingClientsWarning,
)
from sklearn_fed.pipeline import make_federated_pipeline
from sklearn_fed.protocol import FederatedMixin, SitePolicy

ROOT = Path(__file__).resolve().parents[1]
COLUMNS = ["age", "bmi", "income"]


def _sites(n=30):
    rng = np.random.default_rng(0)
    data = {}
    for site in ("north", "south", "east"):
        X = rng.normal(size=(n, 3))
        data[site] = (pd.DataFrame(X, columns=COLUMNS), X @ [1.0, -2.0, 0.5])
    return data


def _round(server, data, client=None):
    client = client or FederatedRidge().make_client()
    tasks = server.next_tasks(list(data))
    server.receive({s: client.respond(task, *data[s]) for s, task in tasks.items()})
    return server


def test_columns_in_another_order_are_named_with_the_flower_option():
    data = _sites()
    data["south"] = (data["south"][0][["income", "age", "bmi"]], data["south"][1])
    with pytest.raises(ValueError) as error:
        _round(FederatedRidge().make_server(), data)
    text = str(error.value)
    assert "site(s) ['east', 'north'] have columns ['age', 'bmi', 'income'];" in text
    assert "site(s) ['south'] have columns ['income', 'age', 'bmi']" in text
    assert "run config's feature-names" in text and "make_server(feature_names=" in text
    assert not re.search(r"[0-9a-f]{32}", text)  # names, not digests
    # what the message says fixes it: declared names, every table reordered by name
    fixed = _round(FederatedRidge().make_server(feature_names=COLUMNS), data).estimator
    X = pd.concat([data[s][0][COLUMNS] for s in data])
    np.testing.assert_allclose(
        fixed.coef_, FederatedRidge().fit(X, np.concatenate([data[s][1] for s in data]),
                                          clients=np.repeat(list(data), 30)).coef_)


def test_a_bare_array_under_named_features_needs_the_sites_word():
    data = _sites()
    bare = {s: (X.to_numpy(), y) for s, (X, y) in data.items()}
    server = FederatedRidge().make_server(feature_names=COLUMNS)
    task = server.next_tasks(["north"])["north"]
    with pytest.raises(ValueError, match=(
            r"site 'north': the task names its features \['age', 'bmi', 'income'\] but this "
            r"site's rows have no column names, so their order cannot be checked.*"
            r"SitePolicy\(columns_in_order=True\).*node config's columns-in-order=true")):
        FederatedRidge().make_client().respond(task, *bare["north"])
    trusted = FederatedRidge().make_client(policy=SitePolicy(columns_in_order=True))
    by_name = _round(FederatedRidge().make_server(feature_names=COLUMNS), data).estimator
    on_trust = _round(FederatedRidge().make_server(feature_names=COLUMNS), bare, trusted)
    np.testing.assert_array_equal(on_trust.estimator.coef_, by_name.coef_)


@pytest.mark.parametrize("site_key, expected", [
    (b"w" * 32, (r"site 'north' cannot read the server's task: the task does not verify under "
                r"site 'north''s key: the server's keys file holds another key for site "
                r"'north'.*run config's keys-file and this node's key-file")),
    (None, (r"site 'north' cannot read the server's task: the server signs site 'north''s "
           r"tasks with a key, and site 'north' has none.*node config's key-file")),
])
def test_a_wrong_key_is_described_from_the_sites_side(site_key, expected):
    data = _sites()
    server = FederatedRidge().make_server(keys={"north": b"k" * 32})
    task = server.next_tasks(["north"])["north"]
    client = FederatedRidge().make_client(key=site_key, site="north")
    with pytest.raises(InvalidClientMessage, match=expected) as error:
        client.respond(task, *data["north"])
    assert "client 'server'" not in str(error.value)


def test_missing_values_name_the_site_and_the_federated_imputer():
    data = _sites()
    data["south"][0].iloc[3, 1] = np.nan
    X = pd.concat([data[s][0] for s in data])
    y = np.concatenate([data[s][1] for s in data])
    clients = np.repeat(list(data), 30)
    advice = r"FederatedSimpleImputer first \(make_federated_pipeline\(FederatedSimpleImputer"
    for estimator in (FederatedRidge(), FederatedLogisticRegression()):
        target = y if isinstance(estimator, FederatedRidge) else (y > 0).astype(int)
        with pytest.raises(ValueError, match=r"(?s)contains NaN.*The missing values are at "
                                             rf"site\(s\) \['south'\]\. .*{advice}"):
            estimator.fit(X, target, clients=clients)
    server = FederatedRidge().make_server(feature_names=COLUMNS)
    task = server.next_tasks(["south"])["south"]
    with pytest.raises(ValueError, match=rf"(?s)site 'south': .*NaN.*{advice}"):
        FederatedRidge().make_client().respond(task, *data["south"])
    pipe = make_federated_pipeline(FederatedSimpleImputer(), FederatedRidge())
    assert pipe.fit(X, y, clients=clients).predict(X).shape == (90,)  # what it advises works
    with pytest.raises(ValueError, match=r"Input y contains NaN") as error:  # not an X problem
        FederatedRidge().fit(X.fillna(0), np.where(clients == "east", np.nan, y), clients=clients)
    assert "FederatedSimpleImputer" not in str(error.value)


def _warns(estimator, X, y):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        estimator.fit(X, y)
    return [w for w in caught if issubclass(w.category, MissingClientsWarning)]


def test_missing_clients_warning_exactly_where_clients_change_the_answer():
    data = _sites()
    X, y = pd.concat([data[s][0] for s in data]), np.concatenate([data[s][1] for s in data])
    labels = (y > 0).astype(int)
    # exact: any split of the rows gives the pooled model, so no clients are needed
    assert _warns(FederatedLogisticRegression(), X, labels) == []
    assert _warns(make_federated_pipeline(FederatedStandardScaler(), FederatedRidge()), X, y) == []
    # FESC's average of local models changes with the split: the pipeline warns, once
    caught = _warns(make_federated_pipeline(FederatedStandardScaler(), FESCRidge()), X, y)
    assert len(caught) == 1 and "FederatedPipeline was fitted without clients" in str(
        caught[0].message)


def test_readme_lists_every_public_estimator():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    first_cells = re.findall(r"^\| ([^|]*)\|", readme, flags=re.MULTILINE)
    listed = {name for cell in first_cells for name in re.findall(r"`(\w+)`", cell)}
    public = {name for name in sklearn_fed.__all__
              if isinstance(getattr(sklearn_fed, name, None), type)
              and issubclass(getattr(sklearn_fed, name), FederatedMixin)}
    assert public, "the API list is empty?"
    assert sorted(public - listed) == []
    assert {"FederatedPipeline", "FederatedColumnTransformer"} <= listed
    assert "every estimator but\n`FederatedRidge` and `ProjectedFederatedRidge`" not in readme
