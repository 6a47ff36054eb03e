import csv

import numpy as np
import pytest

from sklearn_fed.datasets import make_fesc_regression
from reproductions import EXPERIMENTS
from reproductions.__main__ import main
from reproductions.fesc import GAMMAS, simulate, summary_rows


def test_make_fesc_regression_is_the_papers_model():
    sizes = [4000, 3000, 3000]
    X, y, clients, coef = make_fesc_regression(sizes, n_features=5, random_state=0)
    assert X.shape == (10_000, 5) and y.shape == (10_000,)
    np.testing.assert_array_equal(np.bincount(clients), sizes)
    assert np.all(np.diff(clients) >= 0)  # client blocks in order
    assert np.all((coef >= 0) & (coef <= 1))
    # x ~ N(0, I): mean 0, unit variance; noise ~ N(0, 1); no intercept
    np.testing.assert_allclose(X.mean(axis=0), 0, atol=0.05)
    np.testing.assert_allclose(X.var(axis=0), 1, atol=0.06)
    residual = y - X @ coef
    assert abs(residual.mean()) < 0.05 and abs(residual.var() - 1) < 0.06
    shuffled = make_fesc_regression(sizes, n_features=5, shuffle=True, random_state=0)[2]
    np.testing.assert_array_equal(np.bincount(shuffled), sizes)
    assert np.any(np.diff(shuffled) < 0)
    with pytest.raises(ValueError, match="client 1 has size 0"):
        make_fesc_regression([3, 0])
    with pytest.raises(ValueError, match="n_features"):
        make_fesc_regression([3], n_features=0)


def test_demo_quick_writes_figures_and_tables(tmp_path, capsys):
    assert EXPERIMENTS["fesc"] == "fesc"
    out = tmp_path / "demo"
    argv = ["fesc", "--quick", "--out", str(out), "--no-progress", "--distribution", "pareto"]
    code = main(argv)
    assert code == 0
    for name in ("sizes_hist.png", "mse_vs_gamma.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with open(out / "mse_vs_gamma.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert [float(r["gamma"]) for r in rows] == list(GAMMAS)
    # same seed, same numbers: the CSV is the simulation's summary
    expected = summary_rows(simulate("pareto", 20, 10, 2, seed=0))
    for row, ref in zip(rows, expected):
        for key in ("mse_centralized", "mse_federated", "mse_fesc"):
            assert float(row[key]) == pytest.approx(ref[key], rel=1e-12)
            assert float(row[key]) > 0
    table = (out / "mse_vs_gamma.md").read_text().strip().splitlines()
    assert len(table) == 2 + len(GAMMAS)
    assert table[2].startswith("| 0.2 |") and table[-1].startswith("| 1.2 |")
    printed = capsys.readouterr().out
    assert "FESC below plain federated" in printed and "| 1.2 |" in printed


def test_simulation_mse_shrinks_with_gamma():
    # more rows per client -> smaller error for every estimator (fixed seed)
    res = simulate("lognormal-low", 30, 5, 6, gammas=(0.2, 1.2), seed=1)
    for name, mse in res["mse"].items():
        assert mse[1].mean() < mse[0].mean() / 5, name
    # centralized ridge on all rows beats both one-shot averages on average
    assert res["mse"]["centralized"].mean() < res["mse"]["fesc"].mean()
    assert res["mse"]["centralized"].mean() < res["mse"]["federated"].mean()


def test_demo_bad_law(capsys):
    with pytest.raises(SystemExit):
        main(["fesc", "--distribution", "normal"])
    assert "invalid choice" in capsys.readouterr().err
