"""What the adapters of the two Ridge suites share (``test_sklearn_ridge_suite.py``
and ``test_sklearn_ridge_classifier_suite.py``, both over scikit-learn's
``test_ridge.py``): Ridge and RidgeClassifier have the same solvers and refuse
the same sparse configurations; RidgeCV and RidgeClassifierCV route metadata
to their scorer."""

import pytest
import scipy.sparse as sp
from sklearn import get_config

from tests._sklearn_suite import SplitFits

RIDGE_ONLY = "[Ridge-only feature]"
LIMITATION = "[Ridge limitation]"

_DIRECT_SOLVERS = {"auto", "svd", "cholesky"}


def _refuse_array_api():
    if get_config().get("array_api_dispatch"):
        pytest.skip(f"{RIDGE_ONLY} array API dispatch")


class RidgeFits(SplitFits):
    """Ridge's (or RidgeClassifier's) fits: refuse what only scikit-learn's has.

    Its iterative solvers, ``positive=True`` and ``n_iter_``; and sparse X
    with ``solver="svd"``, or ``"cholesky"`` with an intercept, which Ridge
    refuses or deprecates and the federated estimator fits.
    """

    def refuse(self, X, y, kwargs):
        _refuse_array_api()
        if self.solver not in _DIRECT_SOLVERS:
            pytest.skip(f"{RIDGE_ONLY} iterative solver {self.solver!r}")
        if self.positive:
            pytest.skip(f"{RIDGE_ONLY} positive=True")
        if sp.issparse(X) and (self.solver == "svd" or (self.solver == "cholesky"
                                                         and self.fit_intercept)):
            pytest.skip(f"{LIMITATION} sparse X with solver={self.solver!r}")

    def __getattr__(self, name):
        if name == "n_iter_":
            pytest.skip(f"{RIDGE_ONLY} the n_iter_ attribute")
        raise AttributeError(name)


class RidgeCVFits(SplitFits):
    """RidgeCV's (or RidgeClassifierCV's) fits: refuse metadata routed to the scorer."""

    def refuse(self, X, y, kwargs):
        _refuse_array_api()
        params = {k: v for k, v in kwargs.items() if k not in ("sample_weight", "clients")}
        if params:
            pytest.skip(f"{RIDGE_ONLY} metadata routed to the scorer ({sorted(params)})")

    def fit(self, X, y=None, sample_weight=None, **params):
        self.refuse(X, y, params)
        return super().fit(X, y, sample_weight)
