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

    from sklearn_fed.protocol import _client, _simulate

    threads, spied = set(), set()

    def run(role, workers, method="summarize"):
        # where they are read: Client.site_workers (_client) and pooled rounds (_simulate)
        for module in (_client, _simulate):
            monkeypatch.setattr(module, "blas_threads", lambda: workers)
        monkeypatch.setattr(_client, "MIN_VALUES_PER_THREAD", 1)
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


def _load(path, name):
    # xdist's controller never imports the test modules: load them by path.
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pytest_terminal_summary(terminalreporter):
    """After a run that included scikit-learn's own tests (tests/_sklearn_suite.py's
    SUITES), print each suite's rule and counts."""
    stats = terminalreporter.stats
    ran = {getattr(report, "nodeid", "").split("::")[0]
           for reports in stats.values() for report in reports}
    here = Path(__file__).parent
    machinery = None
    for suite in _suites(here):
        if not any(node.endswith(suite) for node in ran):
            continue
        machinery = machinery or _load(here / "_sklearn_suite.py", "_sklearn_suite_summary")
        stem = Path(suite).stem
        module = _load(here / suite, stem)
        terminalreporter.section(module.TITLE)
        terminalreporter.write_line(module.SKIP_RULE)
        terminalreporter.write_line(machinery.RULE_END)
        machinery.write_counts(terminalreporter.write_line, machinery.summarize(stats, stem))


def _suites(here):
    # SUITES without importing the machinery (and scikit-learn's test modules) on every run
    text = (here / "_sklearn_suite.py").read_text()
    block = text.split("SUITES = (", 1)[1].split(")", 1)[0]
    return [line.strip().strip('",') for line in block.splitlines() if line.strip()]
