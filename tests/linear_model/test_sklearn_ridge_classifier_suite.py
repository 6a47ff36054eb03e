"""scikit-learn's own RidgeClassifier and RidgeClassifierCV tests, against the federated ones.

The installed scikit-learn's ``sklearn/linear_model/tests/test_ridge.py``
(the classifier tests; ``test_sklearn_ridge_suite.py`` runs the regression
ones) through ``tests/_sklearn_suite.py``: each test twice, every fit of a
subject split among 1 and 7 clients. The adapters have exactly the
constructor signatures of ``RidgeClassifier`` and ``RidgeClassifierCV`` and
no numerics of their own.

Run ``python tests/linear_model/test_sklearn_ridge_classifier_suite.py`` to print
the rule and the counts (pytest prints them too, in its summary).
"""

import sys

import pytest
import scipy.sparse as sp
from sklearn import get_config
from sklearn.linear_model import Ridge, RidgeClassifier, RidgeClassifierCV, RidgeCV

from sklearn_fed import FederatedRidgeClassifier, FederatedRidgeClassifierCV
from tests._sklearn_suite import NOT_APPLICABLE, SplitFits, adapter, install

sk = pytest.importorskip(
    "sklearn.linear_model.tests.test_ridge",
    reason="scikit-learn was installed without its test modules",
)

TITLE = "scikit-learn's test_ridge.py (classifiers) against the federated adapters"
SKIP_RULE = """\
Which of scikit-learn's test_ridge.py tests apply, and what stands in for what:
  subject  A test that names RidgeClassifierCV (in its code, the module helpers
           it calls, or its parameters) tests it: RidgeClassifierCV becomes the
           adapter of FederatedRidgeClassifierCV, RidgeClassifier stays
           scikit-learn's. Any other test naming RidgeClassifier tests it.
           Ridge and RidgeCV stay scikit-learn's (references).
  not collected  tests that cannot name either classifier (the regression ones).
  skipped, in this order, with the reason shown:
   [not applicable]       the test names neither classifier, or one of its
                          parameters is a regressor (Ridge, RidgeCV): those
                          run in test_sklearn_ridge_suite.py;
   [Ridge-only feature]   the adapter was asked for something only
                          RidgeClassifier has: an iterative solver (sparse_cg,
                          lsqr, sag, saga, lbfgs), positive=True, the n_iter_
                          attribute, array API dispatch, or a scorer's
                          metadata routing;
   [Ridge limitation]     sparse X with solver='svd', or with
                          solver='cholesky' and an intercept (RidgeClassifier
                          refuses these; FederatedRidgeClassifier fits them);
   [no subject fitted]    the test ran but built no adapter.
  Tests also skip themselves, as in scikit-learn, counted as "by the test itself".
  Everything else must pass (or xfail where scikit-learn marks it so)."""

RIDGE_ONLY = "[Ridge-only feature]"
LIMITATION = "[Ridge limitation]"

_DIRECT_SOLVERS = {"auto", "svd", "cholesky"}


def _refuse_array_api():
    if get_config().get("array_api_dispatch"):
        pytest.skip(f"{RIDGE_ONLY} array API dispatch")


class _ClassifierFits(SplitFits):
    """RidgeClassifier's fits on :class:`FederatedRidgeClassifier`."""

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


class _ClassifierCVFits(SplitFits):
    """RidgeClassifierCV's fits on :class:`FederatedRidgeClassifierCV`."""

    solver = "auto"  # RidgeClassifierCV has no solver: the federated default

    def refuse(self, X, y, kwargs):
        _refuse_array_api()
        params = {k: v for k, v in kwargs.items() if k not in ("sample_weight", "clients")}
        if params:
            pytest.skip(f"{RIDGE_ONLY} metadata routed to the scorer ({sorted(params)})")

    def fit(self, X, y=None, sample_weight=None, **params):
        self.refuse(X, y, params)
        return super().fit(X, y, sample_weight)


ADAPTERS = {
    RidgeClassifier: adapter(FederatedRidgeClassifier, RidgeClassifier, _ClassifierFits),
    RidgeClassifierCV: adapter(FederatedRidgeClassifierCV, RidgeClassifierCV,
                               _ClassifierCVFits),
}


def _no_regressor(name, names, classes, params):
    if classes & {Ridge, RidgeCV}:
        pytest.skip(f"{NOT_APPLICABLE} a parameter is a regressor")


LEFT_OUT = install(globals(), sk, [(RidgeClassifierCV, RidgeClassifier)], ADAPTERS,
                   prefilter=True, veto=_no_regressor)


if __name__ == "__main__":
    print(SKIP_RULE)
    sys.exit(pytest.main([__file__, "-q", "-n", "2", "-p", "no:cacheprovider"]))
