"""Shared test settings and session hooks."""

import gc
import importlib.util
import sys
import tracemalloc
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _one_torch_thread():
    # The tests train tiny networks on 2 shared cores: torch's thread pool
    # only adds contention (an idle OpenMP barrier costs more than the work).
    torch = sys.modules.get("torch")
    if torch is None:
        yield
        return
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def peak_memory():
    """``peak_memory(call)``: the peak of what ``call()`` allocates, in bytes (tracemalloc)."""

    def measure(call):
        gc.collect()
        tracemalloc.start()
        try:
            call()
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    return measure


@pytest.fixture
def sites_on_threads(monkeypatch):
    """``sites_on_threads(role, workers, method="summarize")``: simulated sites run as
    with ``workers`` BLAS threads, however few their rows; returns the set of the
    threads that run ``role.method`` from then on (emptied at each call)."""
    import threading

    from sklearn_fed.protocol import _roles, _simulate

    threads, spied = set(), set()

    def run(role, workers, method="summarize"):
        # where they are read: Client.site_workers (_roles) and pooled rounds (_simulate)
        for module in (_roles, _simulate):
            monkeypatch.setattr(module, "blas_threads", lambda: workers)
        monkeypatch.setattr(_roles, "MIN_VALUES_PER_THREAD", 1)
        if (role, method) not in spied:
            original = getattr(role, method)

            def spy(self, *args):
                threads.add(threading.get_ident())
                return original(self, *args)

            monkeypatch.setattr(role, method, spy)
            spied.add((role, method))
        threads.clear()
        return threads

    return run


#: scikit-learn's test files run against adapters: suite module -> the file it runs.
_SUITES = {"test_sklearn_ridge_suite": "test_ridge.py",
           "test_sklearn_logistic_suite": "test_logistic.py"}


def pytest_terminal_summary(terminalreporter):
    """After a run that included scikit-learn's own tests, print each suite's rule and counts."""
    stats = terminalreporter.stats
    for module, tests in _SUITES.items():
        if not any(module in getattr(report, "nodeid", "")
                   for reports in stats.values() for report in reports):
            continue
        # xdist's controller never imports the test modules: load this one by path.
        path = Path(__file__).with_name("linear_model") / f"{module}.py"
        spec = importlib.util.spec_from_file_location(module, path)  # summarize() reads it
        suite = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(suite)

        terminalreporter.section(f"scikit-learn's {tests} against the federated adapters")
        terminalreporter.write_line(suite.SKIP_RULE)
        counts = suite.summarize(stats)
        terminalreporter.write_line(f"  {'outcome':<34} {'1 client':>9} {'7 clients':>10}")
        for outcome in sorted({outcome for outcome, _ in counts}):
            terminalreporter.write_line(
                f"  {outcome:<34} {counts[(outcome, '1')]:>9} {counts[(outcome, '7')]:>10}")
