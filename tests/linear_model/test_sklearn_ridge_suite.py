"""scikit-learn's own Ridge and RidgeCV tests, run against FederatedRidge and FederatedRidgeCV.

The installed scikit-learn's ``sklearn/linear_model/tests/test_ridge.py`` is
imported at test time (never copied here). Each of its test functions is
collected twice, with ``n_clients`` 1 and 7: every fit of a subject splits its
rows among that many clients (row ``i`` goes to client ``i % n_clients``) and
runs the protocol. The adapters below have exactly the constructor signatures
of ``Ridge`` and ``RidgeCV`` and no numerics of their own; they translate
parameters (``gcv_mode`` -> ``solver``) and refuse what only Ridge has.

Run ``python tests/linear_model/test_sklearn_ridge_suite.py`` to print the rule and the
counts (pytest prints them too, in its summary, when this module ran).
"""

import sys

import pytest
import scipy.sparse as sp
from sklearn import get_config
from sklearn.linear_model import Ridge, RidgeClassifier, RidgeClassifierCV, RidgeCV

from sklearn_fed import FederatedRidge, FederatedRidgeCV
from tests._sklearn_suite import NOT_APPLICABLE, SplitFits, adapter, install

sk = pytest.importorskip(
    "sklearn.linear_model.tests.test_ridge",
    reason="scikit-learn was installed without its test modules",
)

TITLE = "scikit-learn's test_ridge.py against the federated adapters"
SKIP_RULE = """\
Which of scikit-learn's test_ridge.py tests apply, and what stands in for what:
  subject  A test that names RidgeCV (in its code, the module helpers it calls,
           or its parameters) tests RidgeCV: RidgeCV becomes the adapter of
           FederatedRidgeCV and Ridge stays scikit-learn's, as the reference.
           Any other test naming Ridge tests Ridge: Ridge becomes the adapter
           of FederatedRidge. Parameters that are these classes or instances
           of them are replaced the same way.
  skipped, in this order, with the reason shown:
   [not applicable]       the test names neither (classifiers, private helpers,
                          ridge_regression) or one of its parameters is a
                          classifier (RidgeClassifier, RidgeClassifierCV);
   [Ridge-only feature]   the adapter was asked for something only Ridge has:
                          an iterative solver (sparse_cg, lsqr, sag, saga,
                          lbfgs), positive=True, the n_iter_ attribute, array
                          API dispatch, or a scorer's metadata routing;
   [Ridge limitation]     the adapter was asked for a configuration Ridge
                          refuses or deprecates and FederatedRidge fits (sparse
                          X with solver='svd', or with solver='cholesky' and an
                          intercept; gcv_mode='svd' with sparse X);
   [no subject fitted]    the test ran but built no adapter (e.g. a
                          parametrization of a RidgeCV test that only fits the
                          Ridge reference).
  Tests also skip themselves, as in scikit-learn (e.g. sparse X with a solver
  Ridge does not support), counted as "by the test itself".
  Everything else must pass (or xfail where scikit-learn marks it so)."""

RIDGE_ONLY = "[Ridge-only feature]"
LIMITATION = "[Ridge limitation]"

_DIRECT_SOLVERS = {"auto", "svd", "cholesky"}


def _refuse_array_api():
    if get_config().get("array_api_dispatch"):
        pytest.skip(f"{RIDGE_ONLY} array API dispatch")


# ------------------------------------------------------------------ adapters
class _RidgeFits(SplitFits):
    """Ridge's fits on :class:`FederatedRidge`: refuse what only Ridge has."""

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


_GCV_MODE_TO_SOLVER = {None: "auto", "auto": "auto", "svd": "svd", "eigen": "cholesky"}


class _RidgeCVFits(SplitFits):
    """RidgeCV's fits on :class:`FederatedRidgeCV`.

    ``gcv_mode`` picks the decomposition as in RidgeCV: ``"svd"`` of the rows
    (FederatedRidgeCV's factor messages), ``"eigen"`` of the Gram.
    """

    criterion = "mean_fold_score"

    @property
    def solver(self):
        return _GCV_MODE_TO_SOLVER.get(self.gcv_mode, self.gcv_mode)

    def refuse(self, X, y, kwargs):
        _refuse_array_api()
        params = {k: v for k, v in kwargs.items() if k not in ("sample_weight", "clients")}
        if params:
            pytest.skip(f"{RIDGE_ONLY} metadata routed to the scorer ({sorted(params)})")
        if sp.issparse(X) and self.gcv_mode == "svd":
            pytest.skip(f"{LIMITATION} gcv_mode='svd' with sparse X")

    def fit(self, X, y=None, sample_weight=None, **params):
        self.refuse(X, y, params)
        return super().fit(X, y, sample_weight)


ADAPTERS = {
    Ridge: adapter(FederatedRidge, Ridge, _RidgeFits),
    RidgeCV: adapter(FederatedRidgeCV, RidgeCV, _RidgeCVFits),
}
RidgeAdapter, RidgeAdapter7 = ADAPTERS[Ridge](1), ADAPTERS[Ridge](7)
RidgeCVAdapter, RidgeCVAdapter7 = ADAPTERS[RidgeCV](1), ADAPTERS[RidgeCV](7)


def _no_classifier(name, names, classes, params):
    if classes & {RidgeClassifier, RidgeClassifierCV}:
        pytest.skip(f"{NOT_APPLICABLE} a parameter is a classifier")


install(globals(), sk, [(RidgeCV, Ridge)], ADAPTERS, veto=_no_classifier)


if __name__ == "__main__":
    print(SKIP_RULE)
    sys.exit(pytest.main([__file__, "-q", "-n", "2", "-p", "no:cacheprovider"]))
