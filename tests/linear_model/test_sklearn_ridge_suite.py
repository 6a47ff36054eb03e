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

import collections.abc
import inspect
import re
import sys
import types
from collections import Counter

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn import get_config
from sklearn.linear_model import Ridge, RidgeClassifier, RidgeClassifierCV, RidgeCV

from sklearn_fed import FederatedRidge, FederatedRidgeCV

sk = pytest.importorskip(
    "sklearn.linear_model.tests.test_ridge",
    reason="scikit-learn was installed without its test modules",
)

SKIP_RULE = """\
Which of scikit-learn's test_ridge.py tests apply, and what stands in for what:
  subject  A test that names RidgeCV (in its code, the module helpers it calls,
           or its parameters) tests RidgeCV: RidgeCV becomes the adapter of
           FederatedRidgeCV and Ridge stays scikit-learn's, as the reference.
           Any other test naming Ridge tests Ridge: Ridge becomes the adapter
           of FederatedRidge. Parameters that are these classes or instances
           of them are replaced the same way.
  skipped, in this order, with the reason shown:
   [not Ridge/RidgeCV]    the test names neither (classifiers, private helpers,
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

NOT_APPLICABLE = "[not Ridge/RidgeCV]"
RIDGE_ONLY = "[Ridge-only feature]"
LIMITATION = "[Ridge limitation]"
NO_SUBJECT = "[no subject fitted]"

_DIRECT_SOLVERS = {"auto", "svd", "cholesky"}
_built = []  # adapters constructed during the running test


def _deal(n_rows, n_clients):
    return np.arange(n_rows) % n_clients


def _refuse_array_api():
    if get_config().get("array_api_dispatch"):
        pytest.skip(f"{RIDGE_ONLY} array API dispatch")


# ------------------------------------------------------------------ adapters
class RidgeAdapter(FederatedRidge):
    """``Ridge``'s constructor on :class:`FederatedRidge`; fits split rows among clients."""

    n_clients = 1

    def __init__(
        self,
        alpha=1.0,
        *,
        fit_intercept=True,
        copy_X=True,
        max_iter=None,
        tol=1e-4,
        solver="auto",
        positive=False,
        random_state=None,
    ):
        _built.append(self)
        self.alpha = alpha
        self.fit_intercept = fit_intercept
        self.copy_X = copy_X
        self.max_iter = max_iter
        self.tol = tol
        self.solver = solver
        self.positive = positive
        self.random_state = random_state

    def fit(self, X, y, sample_weight=None):
        _refuse_array_api()
        if self.solver not in _DIRECT_SOLVERS:
            pytest.skip(f"{RIDGE_ONLY} iterative solver {self.solver!r}")
        if self.positive:
            pytest.skip(f"{RIDGE_ONLY} positive=True")
        if sp.issparse(X) and (self.solver == "svd" or (self.solver == "cholesky"
                                                         and self.fit_intercept)):
            pytest.skip(f"{LIMITATION} sparse X with solver={self.solver!r}")
        clients = _deal(X.shape[0], self.n_clients)
        return super().fit(X, y, sample_weight, clients=clients)

    def __getattr__(self, name):
        if name == "n_iter_":
            pytest.skip(f"{RIDGE_ONLY} the n_iter_ attribute")
        raise AttributeError(name)


_GCV_MODE_TO_SOLVER = {None: "auto", "auto": "auto", "svd": "svd", "eigen": "cholesky"}


class RidgeCVAdapter(FederatedRidgeCV):
    """``RidgeCV``'s constructor on :class:`FederatedRidgeCV`.

    ``gcv_mode`` picks the decomposition as in RidgeCV: ``"svd"`` of the rows
    (FederatedRidgeCV's factor messages), ``"eigen"`` of the Gram.
    """

    n_clients = 1
    criterion = "mean_fold_score"

    def __init__(
        self,
        alphas=(0.1, 1.0, 10.0),
        *,
        fit_intercept=True,
        scoring=None,
        cv=None,
        gcv_mode=None,
        store_cv_results=False,
        alpha_per_target=False,
    ):
        _built.append(self)
        self.alphas = alphas
        self.fit_intercept = fit_intercept
        self.scoring = scoring
        self.cv = cv
        self.gcv_mode = gcv_mode
        self.store_cv_results = store_cv_results
        self.alpha_per_target = alpha_per_target

    @property
    def solver(self):
        return _GCV_MODE_TO_SOLVER.get(self.gcv_mode, self.gcv_mode)

    def fit(self, X, y, sample_weight=None, **params):
        _refuse_array_api()
        if params:
            pytest.skip(f"{RIDGE_ONLY} metadata routed to the scorer ({sorted(params)})")
        if sp.issparse(X) and self.gcv_mode == "svd":
            pytest.skip(f"{LIMITATION} gcv_mode='svd' with sparse X")
        clients = _deal(X.shape[0], self.n_clients)
        return super().fit(X, y, sample_weight, clients=clients)


def _adapters(n_clients):
    """The adapter classes whose fits split rows among ``n_clients`` clients."""
    if n_clients == 1:
        return {Ridge: RidgeAdapter, RidgeCV: RidgeCVAdapter}
    return _MANY


_MANY = {
    Ridge: type("RidgeAdapter7", (RidgeAdapter,), {"n_clients": 7, "__module__": __name__}),
    RidgeCV: type("RidgeCVAdapter7", (RidgeCVAdapter,), {"n_clients": 7, "__module__": __name__}),
}
RidgeAdapter7, RidgeCVAdapter7 = _MANY[Ridge], _MANY[RidgeCV]


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


def _classes_in(value):
    if isinstance(value, type):
        return {value}
    if isinstance(value, (Ridge, RidgeCV, RidgeClassifier, RidgeClassifierCV)):
        return {type(value)}
    return set()


def _subject(test, params):
    """The class under test (Ridge or RidgeCV), or skip by the rule."""
    names = _names(test)
    classes = set()
    for value in params.values():
        names |= _names(value) if isinstance(value, types.FunctionType) else set()
        classes |= _classes_in(value)
    if classes & {RidgeClassifier, RidgeClassifierCV}:
        pytest.skip(f"{NOT_APPLICABLE} a parameter is a classifier")
    if "RidgeCV" in names or RidgeCV in classes:
        return RidgeCV
    if "Ridge" in names or Ridge in classes:
        return Ridge
    pytest.skip(f"{NOT_APPLICABLE} names neither Ridge nor RidgeCV")


def _substitute(value, subject, adapter):
    if value is subject:
        return adapter
    if type(value) is subject:
        return adapter(**value.get_params())
    return value


def _wrap(name, test):
    def run(n_clients, **params):
        subject = _subject(test, params)
        adapter = _adapters(n_clients)[subject]
        params = {k: _substitute(v, subject, adapter) for k, v in params.items()}
        original = getattr(sk, subject.__name__)
        setattr(sk, subject.__name__, adapter)
        del _built[:]
        try:
            test(**params)
        finally:
            setattr(sk, subject.__name__, original)
        if not _built:
            pytest.skip(f"{NO_SUBJECT} no {subject.__name__} adapter was built")

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


ols_ridge_dataset = sk.ols_ridge_dataset

for _name, _test in list(vars(sk).items()):
    if _name.startswith("test_") and callable(_test):
        globals()[_name] = _wrap(_name, _test)


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
