"""scikit-learn's own LogisticRegression tests, run against FederatedLogisticRegression.

The installed scikit-learn's ``sklearn/linear_model/tests/test_logistic.py``
is imported at test time (never copied here). Each of its test functions is
collected twice, with ``n_clients`` 1 and 7: every fit of the subject splits
its rows among that many clients (row ``i`` goes to client ``i % n_clients``)
and runs the protocol. The adapter below has exactly the constructor
signature of ``LogisticRegression`` and no numerics of its own: whatever
solver is asked for, the L2 (or unpenalized) objective is minimized by
FederatedLogisticRegression's Newton rounds; it refuses (skips) only what a
particular solver or an L1 penalty would add.

Run ``python tests/linear_model/test_sklearn_logistic_suite.py`` to print the
rule and the counts (pytest prints them too, in its summary, when this module
ran).
"""

import collections.abc
import inspect
import re
import sys
import types
import warnings
from collections import Counter

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn import get_config
from sklearn.linear_model import LogisticRegression, LogisticRegressionCV
from sklearn.linear_model._logistic import _check_solver
from sklearn.utils.validation import _num_samples

from sklearn_fed import FederatedLogisticRegression

sk = pytest.importorskip(
    "sklearn.linear_model.tests.test_logistic",
    reason="scikit-learn was installed without its test modules",
)

SKIP_RULE = """\
Which of scikit-learn's test_logistic.py tests apply, and what stands in for what:
  subject  A test that names LogisticRegression (in its code, the module helpers
           it calls, or its parameters) tests it: LogisticRegression becomes the
           adapter of FederatedLogisticRegression (each fit split over 1 or 7
           clients); LogisticRegressionCV and the private path functions stay
           scikit-learn's, as references. Parameters that are the class or
           instances of it are replaced the same way.
  solvers  lbfgs, newton-cg, newton-cholesky, sag and saga all minimize the same
           L2-penalized (or, with C=inf or penalty=None, unpenalized) objective:
           each is answered by the Newton rounds, tol and max_iter passed on.
  skipped, in this order, with the reason shown:
   [not LogisticRegression]  the test names neither LogisticRegression nor a
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
   [no subject fitted]       the test ran but built no adapter.
  Tests also skip themselves, as in scikit-learn, counted as "by the test itself".
  Everything else must pass (or xfail where scikit-learn marks it so)."""

NOT_APPLICABLE = "[not LogisticRegression]"
SOLVER_SPECIFIC = "[solver-specific]"
L1 = "[l1 penalty]"
NO_WARM_START = "[no warm_start]"
NO_SUBJECT = "[no subject fitted]"

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

_built = []  # adapters constructed during the running test


def _refuse(reason):
    pytest.skip(reason)


class LogisticRegressionAdapter(FederatedLogisticRegression):
    """``LogisticRegression``'s constructor on :class:`FederatedLogisticRegression`."""

    n_clients = 1
    _parameter_constraints = LogisticRegression._parameter_constraints

    def __init__(
        self,
        penalty="deprecated",
        *,
        C=1.0,
        l1_ratio=0.0,
        dual=False,
        tol=1e-4,
        fit_intercept=True,
        intercept_scaling=1,
        class_weight=None,
        random_state=None,
        solver="lbfgs",
        max_iter=100,
        verbose=0,
        warm_start=False,
        n_jobs=None,
    ):
        _built.append(self)
        self.penalty = penalty
        self.C = C
        self.l1_ratio = l1_ratio
        self.dual = dual
        self.tol = tol
        self.fit_intercept = fit_intercept
        self.intercept_scaling = intercept_scaling
        self.class_weight = class_weight
        self.random_state = random_state
        self.solver = solver
        self.max_iter = max_iter
        self.verbose = verbose
        self.warm_start = warm_start
        self.n_jobs = n_jobs

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

    def _federated(self, X):
        """The FederatedLogisticRegression this configuration asks for, or skip."""
        penalty, C = self._penalty()
        if get_config().get("array_api_dispatch"):
            _refuse(f"{SOLVER_SPECIFIC} array API dispatch")
        if self.solver == "liblinear" or self.dual:
            _refuse(f"{SOLVER_SPECIFIC} liblinear (penalized intercept, one-vs-rest, dual)")
        if penalty in ("l1", "elasticnet"):
            _refuse(f"{L1} penalty={self.penalty!r}, l1_ratio={self.l1_ratio!r}")
        if self.warm_start:
            _refuse(f"{NO_WARM_START} warm_start=True")
        if self.solver in ("sag", "saga") and sp.issparse(X) and X.indices.dtype != np.int32:
            _refuse(f"{SOLVER_SPECIFIC} sag and saga refuse 64-bit sparse indices")
        return FederatedLogisticRegression(C=C, fit_intercept=self.fit_intercept,
                                           class_weight=self.class_weight, tol=self.tol,
                                           max_iter=self.max_iter)

    def fit(self, X, y, sample_weight=None):
        self._validate_params()
        model = self._federated(X)
        clients = np.arange(_num_samples(X)) % self.n_clients
        model.fit(X, y, sample_weight=sample_weight, clients=clients)
        for name, value in vars(model).items():
            if name.endswith("_") and not name.startswith("_"):
                setattr(self, name, value)
        self.__dict__.pop("feature_names_in_", None)
        if hasattr(model, "feature_names_in_"):
            self.feature_names_in_ = model.feature_names_in_
        return self

    def set_callbacks(self, *args, **kwargs):
        _refuse(f"{SOLVER_SPECIFIC} the callbacks API")


def _adapter(n_clients):
    return LogisticRegressionAdapter if n_clients == 1 else LogisticRegressionAdapter7


LogisticRegressionAdapter7 = type("LogisticRegressionAdapter7", (LogisticRegressionAdapter,),
                                  {"n_clients": 7, "__module__": __name__})


# ------------------------------------------------------------ the rule, in code
def _names(obj, seen=None):
    """Global names a function's code uses, following module helpers it calls."""
    seen = set() if seen is None else seen
    code = getattr(inspect.unwrap(obj), "__code__", None) if callable(obj) else None
    if code is None or code in seen:
        return set()
    seen.add(code)
    names, stack = set(), [code]
    while stack:
        current = stack.pop()
        names.update(current.co_names)
        stack.extend(c for c in current.co_consts if isinstance(c, types.CodeType))
    for name in list(names):
        helper = getattr(sk, name, None)
        if isinstance(helper, types.FunctionType) and helper.__module__ == sk.__name__:
            names |= _names(helper, seen)
    return names


def _is_subject(value):
    return value is LogisticRegression or type(value) is LogisticRegression


def _check_subject(name, test, params):
    """Skip by the rule unless the test exercises LogisticRegression."""
    applies, why = SOLVER_SPECIFIC_TESTS.get(name, (False, ""))
    if applies is None or (applies and applies(params)):
        pytest.skip(f"{SOLVER_SPECIFIC} {why}")
    names = _names(test)
    for value in params.values():
        names |= _names(value) if isinstance(value, types.FunctionType) else set()
    if "LogisticRegression" in names or any(map(_is_subject, params.values())):
        return
    pytest.skip(f"{NOT_APPLICABLE} names neither LogisticRegression nor a parameter that is it")


def _substitute(value, adapter):
    if value is LogisticRegression:
        return adapter
    if type(value) is LogisticRegression:
        return adapter(**value.get_params())
    return value


def _wrap(name, test):
    def run(n_clients, **params):
        _check_subject(name, test, params)
        adapter = _adapter(n_clients)
        params = {k: _substitute(v, adapter) for k, v in params.items()}
        original = sk.LogisticRegression
        sk.LogisticRegression = adapter
        del _built[:]
        try:
            test(**params)
        finally:
            sk.LogisticRegression = original
        if not _built:
            pytest.skip(f"{NO_SUBJECT} no LogisticRegression adapter was built")

    signature = inspect.signature(test)
    run.__signature__ = signature.replace(parameters=[
        inspect.Parameter("n_clients", inspect.Parameter.POSITIONAL_OR_KEYWORD),
        *signature.parameters.values(),
    ])
    run.__name__ = run.__qualname__ = name
    run.__doc__ = test.__doc__
    run.pytestmark = [*map(_listed, getattr(test, "pytestmark", [])),
                      pytest.mark.parametrize("n_clients", [1, 7])]
    return run


def _listed(mark):
    """A parametrize mark whose values are a list (scikit-learn passes some generators)."""
    if mark.name != "parametrize" or isinstance(mark.args[1], collections.abc.Collection):
        return mark
    return pytest.mark.parametrize(mark.args[0], list(mark.args[1]), *mark.args[2:],
                                   **mark.kwargs)


@pytest.fixture
def global_random_seed():
    """scikit-learn's default seed (its conftest parametrizes it from an environment variable)."""
    return 42


for _name, _test in list(vars(sk).items()):
    if _name.startswith("test_") and callable(_test):
        globals()[_name] = _wrap(_name, _test)

assert LogisticRegressionCV is sk.LogisticRegressionCV  # stays scikit-learn's reference


# ------------------------------------------------------------ counts
def summarize(stats):
    """Counts per (outcome or skip reason, n_clients) from a pytest terminal reporter's stats."""
    module = __name__.rsplit(".", 1)[-1]
    counts = Counter()
    for outcome, reports in stats.items():
        for report in reports:
            nodeid = getattr(report, "nodeid", "")
            if module not in nodeid or getattr(report, "when", "call") not in ("call", "setup"):
                continue
            if outcome == "skipped":
                reason = str(report.longrepr[-1]) if isinstance(report.longrepr, tuple) else ""
                reason = reason.removeprefix("Skipped: ")
                label = "skipped " + (reason.split("]")[0] + "]" if reason.startswith("[")
                                      else "by the test itself")
            elif outcome in ("passed", "failed", "xfailed", "xpassed", "error"):
                label = outcome
            else:
                continue
            clients = re.search(r"[\[-](\d+)\]$", nodeid)
            counts[(label, clients[1] if clients else "?")] += 1
    return counts


if __name__ == "__main__":
    print(SKIP_RULE)
    sys.exit(pytest.main([__file__, "-q", "-n", "2", "-p", "no:cacheprovider"]))
