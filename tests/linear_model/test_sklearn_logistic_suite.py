"""scikit-learn's own LogisticRegression tests, run against FederatedLogisticRegression.

The installed scikit-learn's ``sklearn/linear_model/tests/test_logistic.py``
through ``tests/_sklearn_suite.py``: each of its test functions is collected
twice, every fit of the subject split among 1 and 7 clients. The adapter
has exactly the constructor and parameter validation of
``LogisticRegression`` and no numerics of its own: whatever solver is asked
for, the L2 (or unpenalized) objective is minimized by
FederatedLogisticRegression's Newton rounds; it refuses (skips) only what a
particular solver or an L1 penalty would add.
"""

import sys
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn import get_config
from sklearn.linear_model import LogisticRegression
from sklearn.linear_model._logistic import _check_solver

from sklearn_fed import FederatedLogisticRegression
from tests._sklearn_suite import (
    SLOW_SUITES,
    SplitFits,
    adapter,
    clients_for,
    install,
    main,
    scikit_learn_tests,
)

sk = scikit_learn_tests("sklearn.linear_model.tests.test_logistic")

TITLE = "scikit-learn's test_logistic.py against the federated adapter"
SKIP_RULE = """\
Which of scikit-learn's test_logistic.py tests apply, and what stands in for what:
  subject  A test that names LogisticRegression (in its code, the module helpers
           it calls, or its parameters) tests it: LogisticRegression becomes the
           adapter of FederatedLogisticRegression; LogisticRegressionCV and the
           private path functions stay scikit-learn's, as references.
           Parameters that are the class or instances of it are replaced the
           same way.
  solvers  lbfgs, newton-cg, newton-cholesky, sag and saga all minimize the same
           L2-penalized (or, with C=inf or penalty=None, unpenalized) objective:
           each is answered by the Newton rounds, tol and max_iter passed on.
  skipped, with the reason shown:
   [not applicable]          the test names neither LogisticRegression nor a
                             parameter that is it (LogisticRegressionCV only,
                             the private path and loss functions, SGD);
   [solver-specific]         the adapter was asked for what one solver adds
                             to the objective or reports: liblinear (it
                             penalizes the intercept, intercept_scaling, one-
                             vs-rest, dual=True); the callbacks API (lbfgs
                             only); array API dispatch; sag/saga's refusal of
                             64-bit sparse indices; or the test is one of
                             SOLVER_SPECIFIC_TESTS below, each with its reason;
   [l1 penalty]              penalty 'l1' or 'elasticnet', or l1_ratio > 0:
                             FederatedLogisticRegression is L2 only;
   [no warm_start]           warm_start=True: FederatedLogisticRegression has
                             no warm start yet (a gap of the estimator, not of
                             a solver: its Newton rounds always start at 0);
   [no subject fitted]       the test ran but built no adapter;
   [slow]                    one of SLOW_TESTS below, run by `make sklearn-suites`."""

SOLVER_SPECIFIC = "[solver-specific]"
L1 = "[l1 penalty]"
NO_WARM_START = "[no warm_start]"

#: Tests (or parametrizations, by a predicate on their parameters) whose
#: assertions are about one solver's own behaviour, with why.
SOLVER_SPECIFIC_TESTS = {
    "test_max_iter": (None, ("matches each solver's own ConvergenceWarning text (the "
                             "ConvergenceWarning itself and n_iter_ == max_iter are "
                             "test_logistic_regression_stops_with_a_warning's)")),
    "test_newton_cholesky_fallback_to_lbfgs": (
        None, ("expects newton-cholesky's fallback to lbfgs (its iteration count and "
               "'lbfgs failed to converge'); the no-warning half is "
               "test_wide_nearly_unpenalized_problem_converges_without_warning's")),
    "test_logistic_cv_multinomial_score": (
        lambda params: params["scoring"] == "neg_log_loss",
        ("compares to 6 decimals with _log_reg_scoring_path's lbfgs at tol=1e-4, itself "
         "3.3e-4 from the optimum's log-loss (the Newton fit is 2e-10 from it)")),
}

#: Tests whose time goes to scikit-learn's own cross-validated references (a
#: minute or more each on 2 cores): run by ``make sklearn-suites``
#: (SKLEARN_FED_SLOW_SUITES=1), not by ``make test``.
SLOW = "[slow]"
SLOW_TESTS = frozenset({
    "test_multinomial_cv_iris",
    "test_l1_ratio_None_deprecated",
    "test_multinomial_logistic_regression_string_inputs",
})


class _LogisticFits(SplitFits):
    """LogisticRegression's fits on a :class:`FederatedLogisticRegression` it configures.

    The parameters are translated as ``LogisticRegression.fit`` reads them
    (``penalty=None`` or ``C=inf``: unpenalized), so the fit delegates to a
    fresh FederatedLogisticRegression and takes its fitted attributes.
    """

    _parameter_constraints = LogisticRegression._parameter_constraints

    def _penalty(self):
        """``(penalty, C)`` as LogisticRegression.fit reads its parameters, with its warnings.

        scikit-learn's own translation (1.8's deprecation of ``penalty``,
        ``l1_ratio=None`` and ``n_jobs``; ``penalty=None`` ignoring ``C``),
        so that the tests of these parameters run; then its solver check.
        """
        if self.penalty == "deprecated":
            penalty = "l2" if self.l1_ratio in (0, None) else (
                "l1" if self.l1_ratio == 1 else "elasticnet")
            if self.l1_ratio is None:
                warnings.warn("'l1_ratio=None' was deprecated in version 1.8 and will trigger "
                              "an error in 1.10. Use 0<=l1_ratio<=1 instead.", FutureWarning)
            if self.C == np.inf:
                penalty = None
        else:
            penalty = self.penalty
            warnings.warn("'penalty' was deprecated in version 1.8 and will be removed in "
                          "1.10.", FutureWarning)
        _check_solver(self.solver, penalty, self.dual)
        if penalty != "elasticnet" and self.l1_ratio is not None and 0 < self.l1_ratio < 1:
            warnings.warn("l1_ratio parameter is only used when penalty is 'elasticnet'. "
                          f"Got (penalty={penalty})")
        if (self.penalty == "l2" and self.l1_ratio != 0) or (
                self.penalty == "l1" and self.l1_ratio != 1):
            warnings.warn(f"Inconsistent values: penalty={self.penalty} with "
                          f"l1_ratio={self.l1_ratio}. penalty is deprecated. Please use "
                          "l1_ratio only.")
        if penalty == "elasticnet" and self.l1_ratio is None:
            raise ValueError("l1_ratio must be specified when penalty is elasticnet.")
        C = self.C
        if self.penalty is None:
            if self.C != 1.0:
                warnings.warn("Setting penalty=None will ignore the C and l1_ratio parameters")
            C, penalty = np.inf, "l2"
        if self.n_jobs is not None:
            warnings.warn("'n_jobs' has no effect since 1.8 and will be removed in 1.10. "
                          f"You provided 'n_jobs={self.n_jobs}', please leave it unspecified.",
                          FutureWarning)
        return penalty, C

    def refuse(self, X, y, kwargs):
        penalty = kwargs["penalty"]
        if get_config().get("array_api_dispatch"):
            pytest.skip(f"{SOLVER_SPECIFIC} array API dispatch")
        if self.solver == "liblinear" or self.dual:
            pytest.skip(f"{SOLVER_SPECIFIC} liblinear (penalized intercept, one-vs-rest, dual)")
        if penalty in ("l1", "elasticnet"):
            pytest.skip(f"{L1} penalty={self.penalty!r}, l1_ratio={self.l1_ratio!r}")
        if self.warm_start:
            pytest.skip(f"{NO_WARM_START} warm_start=True")
        if self.solver in ("sag", "saga") and sp.issparse(X) and X.indices.dtype != np.int32:
            pytest.skip(f"{SOLVER_SPECIFIC} sag and saga refuse 64-bit sparse indices")

    def fit(self, X, y, sample_weight=None):
        self._validate_params()
        penalty, C = self._penalty()
        self.refuse(X, y, {"penalty": penalty})
        model = FederatedLogisticRegression(C=C, fit_intercept=self.fit_intercept,
                                            class_weight=self.class_weight, tol=self.tol,
                                            max_iter=self.max_iter)
        model.fit(X, y, sample_weight=sample_weight, clients=clients_for(X, self.n_clients))
        for name, value in vars(model).items():
            if name.endswith("_") and not name.startswith("_"):
                setattr(self, name, value)
        self.__dict__.pop("feature_names_in_", None)
        if hasattr(model, "feature_names_in_"):
            self.feature_names_in_ = model.feature_names_in_
        return self

    def set_callbacks(self, *args, **kwargs):
        pytest.skip(f"{SOLVER_SPECIFIC} the callbacks API")


ADAPTERS = {LogisticRegression: adapter(FederatedLogisticRegression, LogisticRegression,
                                        _LogisticFits)}
LogisticRegressionAdapter, LogisticRegressionAdapter7 = (ADAPTERS[LogisticRegression](1),
                                                         ADAPTERS[LogisticRegression](7))


def _solver_specific_or_slow(name, names, classes, params):
    if name in SLOW_TESTS and not SLOW_SUITES:
        pytest.skip(f"{SLOW} run by `make sklearn-suites` (SKLEARN_FED_SLOW_SUITES=1)")
    applies, why = SOLVER_SPECIFIC_TESTS.get(name, (False, ""))
    if applies is None or (applies and applies(params)):
        pytest.skip(f"{SOLVER_SPECIFIC} {why}")


install(globals(), sk, [(LogisticRegression,)], ADAPTERS, veto=_solver_specific_or_slow)

if __name__ == "__main__":
    sys.exit(main(__file__, SKIP_RULE))
