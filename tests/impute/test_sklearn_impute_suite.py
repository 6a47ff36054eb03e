"""scikit-learn's own SimpleImputer tests, run against FederatedSimpleImputer.

The installed scikit-learn's ``sklearn/impute/tests/test_impute.py`` through
``tests/_sklearn_suite.py``: each test that names ``SimpleImputer`` runs
twice, every fit of a subject split among 1 and 7 clients. The adapter has
exactly SimpleImputer's constructor and parameter validation, and no
numerics of its own.
"""

import sys

import pytest
from sklearn.impute import SimpleImputer

from sklearn_fed.impute import FederatedSimpleImputer
from tests._sklearn_suite import SplitFits, adapter, install, main, scikit_learn_tests

sk = scikit_learn_tests("sklearn.impute.tests.test_impute")

TITLE = "scikit-learn's test_impute.py (SimpleImputer) against the federated adapter"
SKIP_RULE = """\
Which of scikit-learn's test_impute.py tests apply, and what stands in for what:
  subject  A test that names SimpleImputer (in its code, the module helpers it
           calls, or its parameters) tests it: SimpleImputer becomes the
           adapter of FederatedSimpleImputer; IterativeImputer, KNNImputer and
           MissingIndicator stay scikit-learn's (an IterativeImputer builds
           its own SimpleImputer from sklearn.impute, not the adapter).
  not collected  tests that cannot name SimpleImputer.
  skipped, with the reason shown:
   [no median]            strategy="median" or a callable strategy: an exact
                          pooled median (or any function of the pooled
                          column) needs the sites' values, not an aggregate,
                          so FederatedSimpleImputer does not offer them;
   [no subject fitted]    the test ran but fitted no adapter."""


class _Fits(SplitFits):
    _parameter_constraints = SimpleImputer._parameter_constraints

    def refuse(self, X, y, kwargs):
        if callable(self.strategy) or self.strategy == "median":
            pytest.skip(f"[no median] strategy={self.strategy!r}")


ADAPTERS = {SimpleImputer: adapter(FederatedSimpleImputer, SimpleImputer, _Fits)}
LEFT_OUT = install(globals(), sk, [(SimpleImputer,)], ADAPTERS, prefilter=True)

if __name__ == "__main__":
    sys.exit(main(__file__, SKIP_RULE))
