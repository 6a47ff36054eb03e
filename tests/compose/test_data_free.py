"""Steps whose fit reads no rows (data-free) in federated pipelines: fitted alike everywhere."""

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.compose import ColumnTransformer
from sklearn.kernel_approximation import RBFSampler
from sklearn.linear_model import Ridge
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import (
    FunctionTransformer,
    Normalizer,
    PolynomialFeatures,
    SplineTransformer,
    StandardScaler,
)
from sklearn.random_projection import GaussianRandomProjection, SparseRandomProjection

from sklearn_fed import FederatedRidge, FederatedStandardScaler, InvalidClientMessage
from sklearn_fed.compose import FederatedColumnTransformer
from sklearn_fed.pipeline import make_federated_pipeline
from sklearn_fed.privacy import RangeScaler
from sklearn_fed.protocol import run_simulation

KNOTS = np.repeat(np.linspace(-3.0, 3.0, 5)[:, None], 3, axis=1)
DATA_FREE_STEPS = [
    RangeScaler([(-3.0, 3.0)] * 3),
    FunctionTransformer(np.tanh),
    PolynomialFeatures(degree=2),
    SplineTransformer(knots=KNOTS),
    GaussianRandomProjection(n_components=2, random_state=0),
    SparseRandomProjection(n_components=2, random_state=1),
    RBFSampler(n_components=15, random_state=0),
    Normalizer(),
]


def _rows(n=90):
    rng = np.random.default_rng(0)
    return rng.normal(size=(n, 3)), rng.normal(size=n), np.arange(n) % 3


@pytest.mark.parametrize("step", DATA_FREE_STEPS, ids=lambda s: type(s).__name__)
def test_data_free_step_equals_the_pooled_pipeline(step):
    X, y, clients = _rows()
    fed = make_federated_pipeline(clone(step), FederatedStandardScaler(), FederatedRidge())
    fed.fit(X, y, clients=clients)
    pooled = make_pipeline(clone(step), StandardScaler(), Ridge()).fit(X, y)
    np.testing.assert_allclose(fed.predict(X), pooled.predict(X), rtol=1e-10, atol=1e-12)
    # one round of digests for the data-free step, then one per federated step
    assert fed.communication_.rounds == 3


def test_data_free_part_of_a_column_transformer():
    X, _, clients = _rows()
    frame = pd.DataFrame(X, columns=["a", "b", "c"])
    fed = FederatedColumnTransformer([("poly", PolynomialFeatures(2), ["a", "b"]),
                                      ("scale", FederatedStandardScaler(), ["c"])])
    pooled = ColumnTransformer([("poly", PolynomialFeatures(2), ["a", "b"]),
                                ("scale", StandardScaler(), ["c"])])
    np.testing.assert_allclose(fed.fit(frame, clients=clients).transform(frame),
                               pooled.fit_transform(frame), rtol=1e-12)


@pytest.mark.parametrize("step, message", [
    (RBFSampler(), (r"step 'rbfsampler' \(RBFSampler\) draws random numbers at every site.*"
                    r"integer random_state \(got None\)")),
    (GaussianRandomProjection(n_components=2, random_state=np.random.RandomState(0)),
     "integer random_state"),
    (SplineTransformer(), r"knots='uniform' places its knots from the rows; state them"),
    (SparseRandomProjection(random_state=0), "n_components='auto' sizes itself from the number"),
])
def test_data_free_steps_that_would_read_the_rows_are_refused(step, message):
    X, y, clients = _rows()
    with pytest.raises(ValueError, match=message):
        make_federated_pipeline(step, FederatedRidge()).fit(X, y, clients=clients)


def test_a_site_whose_fit_differs_is_named():
    X, y, clients = _rows()
    pipe = make_federated_pipeline(PolynomialFeatures(2), FederatedRidge())
    other = make_federated_pipeline(PolynomialFeatures(2, include_bias=False), FederatedRidge())
    roles = {0: pipe.make_client(), 1: other.make_client(), 2: pipe.make_client()}
    rows = [np.flatnonzero(clients == c) for c in range(3)]
    with pytest.raises(InvalidClientMessage, match=r"client 1: its PolynomialFeatures fitted on "
                                                   r"its rows differs from the server's"):
        run_simulation(pipe.make_server(), roles, X, y, None, [0, 1, 2], rows)
    assert not hasattr(pipe, "communication_")
