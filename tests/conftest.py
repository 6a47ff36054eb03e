"""Test-session hooks."""


def pytest_terminal_summary(terminalreporter):
    """After a run that included scikit-learn's Ridge tests, print their rule and counts."""
    stats = terminalreporter.stats
    if not any("test_sklearn_ridge_suite" in getattr(report, "nodeid", "")
               for reports in stats.values() for report in reports):
        return
    from test_sklearn_ridge_suite import SKIP_RULE, summarize

    terminalreporter.section("scikit-learn's test_ridge.py against the federated adapters")
    terminalreporter.write_line(SKIP_RULE)
    for key, count in sorted(summarize(stats).items()):
        terminalreporter.write_line(f"  {key:<34} {count:>5}")
