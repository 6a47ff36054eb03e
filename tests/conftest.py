"""Shared test settings and session hooks."""

import sys

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


def pytest_terminal_summary(terminalreporter):
    """After a run that included scikit-learn's Ridge tests, print their rule and counts."""
    stats = terminalreporter.stats
    if not any("test_sklearn_ridge_suite" in getattr(report, "nodeid", "")
               for reports in stats.values() for report in reports):
        return
    from test_sklearn_ridge_suite import SKIP_RULE, summarize

    terminalreporter.section("scikit-learn's test_ridge.py against the federated adapters")
    terminalreporter.write_line(SKIP_RULE)
    counts = summarize(stats)
    terminalreporter.write_line(f"  {'outcome':<34} {'1 client':>9} {'7 clients':>10}")
    for outcome in sorted({outcome for outcome, _ in counts}):
        terminalreporter.write_line(
            f"  {outcome:<34} {counts[(outcome, '1')]:>9} {counts[(outcome, '7')]:>10}")
