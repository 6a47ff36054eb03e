"""scikit-learn's own PCA tests, run against FederatedPCA.

The installed scikit-learn's ``sklearn/decomposition/tests/test_pca.py``
through ``tests/_sklearn_suite.py``: each test that names ``PCA`` runs twice,
every fit of a subject split among 1 and 7 clients. The adapter has exactly
PCA's constructor and parameter validation, and no numerics of its own.
"""

import sys

import pytest
from sklearn import get_config
from sklearn.decomposition import PCA

from sklearn_fed.decomposition import FederatedPCA
from tests._sklearn_suite import (
    SLOW_SUITES,
    SplitFits,
    adapter,
    install,
    main,
    scikit_learn_tests,
)

sk = scikit_learn_tests("sklearn.decomposition.tests.test_pca")

TITLE = "scikit-learn's test_pca.py against the federated adapter"
SKIP_RULE = """\
Which of scikit-learn's test_pca.py tests apply, and what stands in for what:
  subject  A test that names PCA (in its code, the module helpers it calls, or
           its parameters) tests it: PCA becomes the adapter of FederatedPCA.
           global_dtype runs float64 and float32.
  not collected  tests that cannot name PCA.
  skipped, with the reason shown:
   [PCA-only solver]      svd_solver "arpack" or "randomized" (iterative or
                          randomized approximations; FederatedPCA computes
                          the exact decomposition of the merged covariance,
                          as "covariance_eigh", for "auto", "full" and
                          "covariance_eigh" alike);
   [solver name]          tests of which solver PCA picks or names
                          (test_pca_svd_solver_auto, test_pca_validation's
                          message naming svd_solver='full') and of PCA refusing
                          sparse input with svd_solver='full'
                          (test_sparse_pca_solver_error): FederatedPCA has one
                          exact solver, reports it as "covariance_eigh", and
                          accepts sparse input;
   [thinned]              test_pca_sparse runs with density=0.1 and scale=1
                          only: its other 96 parametrizations (densities 0.01
                          and 0.3, scales 10 and 100) take the same code path
                          on a 1000 x 300 matrix at several seconds each
                          (`make sklearn-suites`, SKLEARN_FED_SLOW_SUITES=1,
                          runs them all);
   [array API]            array API dispatch (sklearn_fed computes with numpy);
   [no subject fitted]    the test ran but fitted no adapter."""


class _Fits(SplitFits):
    _parameter_constraints = PCA._parameter_constraints

    def refuse(self, X, y, kwargs):
        if get_config().get("array_api_dispatch"):
            pytest.skip("[array API] dispatch")
        if self.svd_solver in ("arpack", "randomized"):
            pytest.skip(f"[PCA-only solver] svd_solver={self.svd_solver!r}")


ADAPTERS = {PCA: adapter(FederatedPCA, PCA, _Fits)}
_SOLVER_NAME = {"test_pca_svd_solver_auto", "test_sparse_pca_solver_error"}


def _solver_name(name, names, classes, params):
    if name in _SOLVER_NAME or (name == "test_pca_validation"
                                and "svd_solver='full'" in str(params.get("err_msg"))):
        pytest.skip("[solver name] FederatedPCA's one solver is 'covariance_eigh'")
    if name == "test_pca_sparse" and not SLOW_SUITES and (
            params.get("density") != 0.1 or params.get("scale") != 1):
        pytest.skip("[thinned] test_pca_sparse: density=0.1 and scale=1 only "
                    "(all of them: `make sklearn-suites`)")


LEFT_OUT = install(globals(), sk, [(PCA,)], ADAPTERS, prefilter=True, veto=_solver_name)

if __name__ == "__main__":
    sys.exit(main(__file__, SKIP_RULE))
