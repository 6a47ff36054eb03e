"""Run one of scikit-learn's own test files against federated adapters (shared machinery).

A suite module (``tests/**/test_sklearn_*_suite.py``) imports the installed
scikit-learn test module (never copied here) and calls :func:`install` with

- ``groups``: tuples of scikit-learn classes in priority order. For each
  group, a test's *subject* is the first class of the group that the test
  names (in its code, the module helpers it calls, or its parameters). At
  most one class per group is replaced, so a test of ``RidgeCV`` keeps
  scikit-learn's ``Ridge`` as its reference; classes of different groups
  (``StandardScaler`` and ``MinMaxScaler``) are replaced together.
- ``adapters``: for each such class, a factory ``n_clients -> adapter class``
  (:func:`adapter`): the federated estimator under the scikit-learn
  constructor, whose every fit splits its rows among ``n_clients`` clients
  (row ``i`` goes to client ``i % n_clients``) and runs the protocol.

Each test function of the module is collected twice, with ``n_clients`` 1
and 7. A test that names no subject is skipped ``[not applicable]``; one that
ran without building any adapter is skipped ``[no subject fitted]``; the
adapters skip, with a reason in brackets, what the federated estimator does
not offer. :func:`summarize` counts the outcomes per reason and client count
(``tests/conftest.py`` prints them, with each suite's rule, after a run that
included a suite; ``python -m tests.<folder>.test_sklearn_<name>_suite``, from
the repository root, prints the rule and runs that suite alone).

A suite module is, besides its adapters and rule::

    sk = scikit_learn_tests("sklearn.<...>.tests.test_<...>")
    SKIP_RULE = "..."  # what stands in for what, and each bracketed skip
    install(globals(), sk, groups, ADAPTERS, ...)
    if __name__ == "__main__":
        sys.exit(main(__file__, SKIP_RULE))
"""

import collections.abc
import inspect
import os
import re
import types
from collections import Counter

import numpy as np
import pytest
from _pytest.fixtures import FixtureFunctionDefinition
from sklearn.utils.validation import _num_samples

NOT_APPLICABLE = "[not applicable]"
NO_SUBJECT = "[no subject fitted]"
CLIENT_COUNTS = (1, 7)

#: Suite modules (paths relative to ``tests/``) whose counts conftest prints.
SUITES = (
    "linear_model/test_sklearn_ridge_suite.py",
    "linear_model/test_sklearn_ridge_classifier_suite.py",
    "linear_model/test_sklearn_logistic_suite.py",
    "preprocessing/test_sklearn_data_suite.py",
    "preprocessing/test_sklearn_encoders_suite.py",
    "impute/test_sklearn_impute_suite.py",
    "decomposition/test_sklearn_pca_suite.py",
)

#: Where set (``make sklearn-suites``), suites also run the tests they leave out
#: of ``make test`` for time, each skipped there with its reason.
SLOW_SUITES = bool(os.environ.get("SKLEARN_FED_SLOW_SUITES"))

RULE_END = """\
  Tests also skip themselves, as in scikit-learn, counted as "by the test itself".
  Everything else must pass (or xfail where scikit-learn marks it so)."""

built = []  # adapters constructed during the running test


def scikit_learn_tests(name):
    """The installed scikit-learn test module ``name`` (a suite is skipped without it)."""
    return pytest.importorskip(name, reason="scikit-learn was installed without its test modules")


def main(path, rule):
    """``python SUITE.py``: print the suite's rule and run it (pytest prints the counts)."""
    print(rule)
    print(RULE_END)
    return pytest.main([path, "-q", "-n", "2", "-p", "no:cacheprovider"])


def deal(n_rows, n_clients):
    """Client labels: row ``i`` goes to client ``i % n_clients``."""
    return np.arange(n_rows) % n_clients


def clients_for(X, n_clients):
    """:func:`deal` for the rows of ``X``; None where ``X`` is not rows at all."""
    try:
        return deal(_num_samples(X), n_clients)
    except TypeError:
        return None  # the estimator's own validation raises its own error


class SplitFits:
    """Mixed in first: ``fit`` and ``partial_fit`` split the rows among ``n_clients`` clients.

    ``refuse(self, X, y, kwargs)`` is called before each fit and may
    ``pytest.skip`` (with a bracketed reason) what the adapter does not offer.
    """

    n_clients = 1

    def refuse(self, X, y, kwargs):
        """Skip what the federated estimator does not offer; nothing by default."""

    def _split(self, X, y, kwargs):
        self.refuse(X, y, kwargs)
        if kwargs.get("clients") is None:
            kwargs["clients"] = clients_for(X, self.n_clients)
        return kwargs

    def fit(self, X, y=None, *args, **kwargs):
        return super().fit(X, y, *args, **self._split(X, y, kwargs))

    def partial_fit(self, X, y=None, *args, **kwargs):
        return super().partial_fit(X, y, *args, **self._split(X, y, kwargs))


def adapter(federated, counterpart, mixin=SplitFits, name=None):
    """A factory ``n_clients -> class``: ``federated`` with ``counterpart``'s constructor.

    The class's ``__init__`` has exactly ``counterpart.__init__``'s signature
    (so ``get_params``, ``clone`` and ``set_params`` see scikit-learn's
    parameters) and stores each parameter as given, as scikit-learn's
    constructors do; each instance is recorded in :data:`built`.
    """
    signature = inspect.signature(counterpart.__init__)
    name = name or f"{counterpart.__name__}Adapter"
    classes = {}

    def __init__(self, *args, **kwargs):
        built.append(self)
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        for key, value in list(bound.arguments.items())[1:]:
            setattr(self, key, value)

    __init__.__signature__ = signature

    def make(n_clients):
        if n_clients not in classes:
            suffix = "" if n_clients == 1 else str(n_clients)
            classes[n_clients] = type(f"{name}{suffix}", (mixin, federated), {
                "__init__": __init__, "n_clients": n_clients, "__module__": __name__,
            })
        return classes[n_clients]

    return make


# ------------------------------------------------------------ the rule, in code
def _names(obj, module, seen=None):
    """Global names a function's code uses, following ``module``'s helpers it calls."""
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
        helper = getattr(module, name, None)
        if isinstance(helper, types.FunctionType) and helper.__module__ == module.__name__:
            names |= _names(helper, module, seen)
    return names


def _classes_in(value, known):
    if isinstance(value, type):
        return {value}
    if isinstance(value, tuple(known)):
        return {type(value)}
    if isinstance(value, (list, tuple)):  # e.g. a parameter listing estimators
        return set().union(*(_classes_in(v, known) for v in value)) if value else set()
    return set()


def _wrap(name, test, module, groups, adapters, veto):
    known = {cls for group in groups for cls in group}

    def run(n_clients, **params):
        names = _names(test, module)
        classes = set()
        for value in params.values():
            names |= _names(value, module) if isinstance(value, types.FunctionType) else set()
            classes |= _classes_in(value, known)
        if veto is not None:
            veto(name, names, classes, params)
        subjects = []
        for group in groups:
            for cls in group:
                if cls.__name__ in names or cls in classes:
                    subjects.append(cls)
                    break
        if not subjects:
            pytest.skip(f"{NOT_APPLICABLE} names none of "
                        f"{', '.join(c.__name__ for g in groups for c in g)}")
        swap = {cls: adapters[cls](n_clients) for cls in subjects}

        def substitute(value):
            if isinstance(value, type) and value in swap:
                return swap[value]
            if type(value) in swap:
                return swap[type(value)](**value.get_params(deep=False))
            if isinstance(value, (list, tuple)):
                return type(value)(substitute(v) for v in value)
            return value

        params = {k: substitute(v) for k, v in params.items()}
        originals = {cls: getattr(module, cls.__name__, None) for cls in subjects}
        for cls in subjects:
            setattr(module, cls.__name__, swap[cls])
        del built[:]
        try:
            test(**params)
        finally:
            for cls, original in originals.items():
                setattr(module, cls.__name__, original)
        if not built:
            pytest.skip(f"{NO_SUBJECT} no adapter of "
                        f"{', '.join(c.__name__ for c in subjects)} was built")

    signature = inspect.signature(test)
    run.__signature__ = signature.replace(parameters=[
        inspect.Parameter("n_clients", inspect.Parameter.POSITIONAL_OR_KEYWORD),
        *signature.parameters.values(),
    ])
    run.__name__ = run.__qualname__ = name
    run.__doc__ = test.__doc__
    run.pytestmark = [*map(_listed, getattr(test, "pytestmark", [])),
                      pytest.mark.parametrize("n_clients", list(CLIENT_COUNTS),
                                              ids=[f"clients{n}" for n in CLIENT_COUNTS])]
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


@pytest.fixture(params=[np.float64, np.float32])
def global_dtype(request):
    """Both float dtypes (scikit-learn runs float32 only when an environment variable says so)."""
    return request.param


def _may_name(test, module, groups):
    """Whether ``test`` could name a subject: the rule of ``_wrap``, before parametrization."""
    known = {cls for group in groups for cls in group}
    names = _names(test, module)
    for mark in getattr(test, "pytestmark", []):
        if mark.name != "parametrize":
            continue
        for value in mark.args[1]:
            for item in value if isinstance(value, (list, tuple)) else [value]:
                if isinstance(item, types.FunctionType):
                    names |= _names(item, module)
                names |= {cls.__name__ for cls in _classes_in(item, known)}
    return bool(names & {cls.__name__ for cls in known})


def install(namespace, module, groups, adapters, *, prefilter=False, veto=None):
    """Put ``module``'s tests, wrapped, and its fixtures into ``namespace`` (a suite's globals).

    ``prefilter``: collect only the tests that may name a subject (the same
    rule as at run time, applied before parametrization: for a large file of
    which few tests apply); returns the names of those left out.
    ``veto(name, names, classes, params)``: may skip a test before it runs,
    with a bracketed reason.
    """
    namespace.setdefault("global_random_seed", global_random_seed)
    namespace.setdefault("global_dtype", global_dtype)
    left_out = []
    for name, value in list(vars(module).items()):
        if isinstance(value, FixtureFunctionDefinition):
            namespace[name] = value
        elif name.startswith("test_") and callable(value):
            if prefilter:
                value = _listed_marks(value)
                if not _may_name(value, module, groups):
                    left_out.append(name)
                    continue
            namespace[name] = _wrap(name, value, module, groups, adapters, veto)
    return left_out


def _listed_marks(test):
    """``test`` with its parametrize values as lists, so they can be read twice."""
    marks = getattr(test, "pytestmark", None)
    if marks:
        test.pytestmark = [_listed(mark) for mark in marks]
    return test


# ------------------------------------------------------------ counts
def summarize(stats, module):
    """Counts per (outcome or skip reason, n_clients) of the tests of suite ``module``.

    ``stats`` is a pytest terminal reporter's ``stats``; ``module`` the suite's
    file name without ``.py``.
    """
    counts = Counter()
    for outcome, reports in stats.items():
        for report in reports:
            nodeid = getattr(report, "nodeid", "")
            if f"{module}.py::" not in nodeid or getattr(report, "when", "call") not in (
                    "call", "setup"):
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
            clients = re.search(r"[\[-]clients(\d+)[-\]]", nodeid)
            counts[(label, clients[1] if clients else "?")] += 1
    return counts


def write_counts(write_line, counts):
    """Write ``counts`` (from :func:`summarize`) as a table, one line per outcome."""
    write_line(f"  {'outcome':<34} {'1 client':>9} {'7 clients':>10}")
    for outcome in sorted({outcome for outcome, _ in counts}):
        write_line(f"  {outcome:<34} {counts[(outcome, '1')]:>9} {counts[(outcome, '7')]:>10}")
