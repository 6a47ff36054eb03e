"""scikit-learn's own RidgeClassifier and RidgeClassifierCV tests, against the federated ones.

The installed scikit-learn's ``sklearn/linear_model/tests/test_ridge.py``
(the classifier tests; ``test_sklearn_ridge_suite.py`` runs the regression
ones) through ``tests/_sklearn_suite.py``: each test twice, every fit of a
subject split among 1 and 7 clients. The adapters have exactly the
constructor signatures of ``RidgeClassifier`` and ``RidgeClassifierCV`` and
no numerics of their own.
"""

import sys

import pytest
from sklearn.linear_model import Ridge, RidgeClassifier, RidgeClassifierCV, RidgeCV

from sklearn_fed import FederatedRidgeClassifier, FederatedRidgeClassifierCV
from tests._sklearn_suite import (
    NOT_APPLICABLE,
    adapter,
    install,
    main,
    scikit_learn_tests,
)
from tests.linear_model._ridge_suite import RidgeCVFits, RidgeFits

sk = scikit_learn_tests("sklearn.linear_model.tests.test_ridge")

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
   [no subject fitted]    the test ran but built no adapter."""

class _ClassifierCVFits(RidgeCVFits):
    solver = "auto"  # RidgeClassifierCV has no solver: the federated default


ADAPTERS = {
    RidgeClassifier: adapter(FederatedRidgeClassifier, RidgeClassifier, RidgeFits),
    RidgeClassifierCV: adapter(FederatedRidgeClassifierCV, RidgeClassifierCV,
                               _ClassifierCVFits),
}


def _no_regressor(name, names, classes, params):
    if classes & {Ridge, RidgeCV}:
        pytest.skip(f"{NOT_APPLICABLE} a parameter is a regressor")


LEFT_OUT = install(globals(), sk, [(RidgeClassifierCV, RidgeClassifier)], ADAPTERS,
                   prefilter=True, veto=_no_regressor)


if __name__ == "__main__":
    sys.exit(main(__file__, SKIP_RULE))
