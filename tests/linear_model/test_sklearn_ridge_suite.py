"""scikit-learn's own Ridge and RidgeCV tests, run against FederatedRidge and FederatedRidgeCV.

The installed scikit-learn's ``sklearn/linear_model/tests/test_ridge.py`` is
imported at test time (never copied here). Each of its test functions is
collected twice, with ``n_clients`` 1 and 7: every fit of a subject splits its
rows among that many clients (row ``i`` goes to client ``i % n_clients``) and
runs the protocol. The adapters below have exactly the constructor signatures
of ``Ridge`` and ``RidgeCV`` and no numerics of their own; they translate
parameters (``gcv_mode`` -> ``solver``) and refuse what only Ridge has.
"""

import sys

import pytest
import scipy.sparse as sp
from sklearn.linear_model import Ridge, RidgeClassifier, RidgeClassifierCV, RidgeCV

from sklearn_fed import FederatedRidge, FederatedRidgeCV
from tests._sklearn_suite import (
    NOT_APPLICABLE,
    adapter,
    install,
    main,
    scikit_learn_tests,
)
from tests.linear_model._ridge_suite import LIMITATION, RidgeCVFits, RidgeFits

sk = scikit_learn_tests("sklearn.linear_model.tests.test_ridge")

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
  Among the tests that skip themselves: sparse X with a solver Ridge does not
  support."""

_GCV_MODE_TO_SOLVER = {None: "auto", "auto": "auto", "svd": "svd", "eigen": "cholesky"}


class _RidgeCVFits(RidgeCVFits):
    """RidgeCV's fits on :class:`FederatedRidgeCV`.

    ``gcv_mode`` picks the decomposition as in RidgeCV: ``"svd"`` of the rows
    (FederatedRidgeCV's factor messages), ``"eigen"`` of the Gram.
    """

    criterion = "mean_fold_score"

    @property
    def solver(self):
        return _GCV_MODE_TO_SOLVER.get(self.gcv_mode, self.gcv_mode)

    def refuse(self, X, y, kwargs):
        super().refuse(X, y, kwargs)
        if sp.issparse(X) and self.gcv_mode == "svd":
            pytest.skip(f"{LIMITATION} gcv_mode='svd' with sparse X")


ADAPTERS = {
    Ridge: adapter(FederatedRidge, Ridge, RidgeFits),
    RidgeCV: adapter(FederatedRidgeCV, RidgeCV, _RidgeCVFits),
}
RidgeAdapter, RidgeAdapter7 = ADAPTERS[Ridge](1), ADAPTERS[Ridge](7)
RidgeCVAdapter, RidgeCVAdapter7 = ADAPTERS[RidgeCV](1), ADAPTERS[RidgeCV](7)


def _no_classifier(name, names, classes, params):
    if classes & {RidgeClassifier, RidgeClassifierCV}:
        pytest.skip(f"{NOT_APPLICABLE} a parameter is a classifier")


install(globals(), sk, [(RidgeCV, Ridge)], ADAPTERS, veto=_no_classifier)


if __name__ == "__main__":
    sys.exit(main(__file__, SKIP_RULE))
