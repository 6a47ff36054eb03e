import math
import warnings

import numpy as np
import pytest
from scipy import integrate, stats

from sklearn_fed.simulation import (
    SAMPLE_SIZE_LAWS,
    drop_clients,
    partition_by_sizes,
    partition_dirichlet,
    partition_feature_shift,
    partition_iid,
    partition_label_shards,
    sample_client_sizes,
    sample_size_distribution,
)


def _clipped_mean(dist):
    """Exact mean of ``max(rint(eta), 1)`` for ``eta ~ dist`` (what ``sample_client_sizes`` draws).

    ``max(rint(x), 1) = 1 + sum_{k >= 1} [x >= k + 1/2]``, so the mean is
    ``1 + sum_k sf(k + 1/2)``; the far tail of continuous laws is integrated.
    """
    with np.errstate(divide="ignore"):
        top = int(np.ceil(dist.ppf(1.0 - 1e-9))) + 2
    k = np.arange(1, top + 1)
    total = 1.0 + float(dist.sf(k + 0.5).sum())
    if hasattr(dist.dist, "pdf"):  # continuous: add int_{top+1}^inf sf(x) dx
        c = top + 1.0
        with warnings.catch_warnings():  # the tail is tiny; quad's caution is moot
            warnings.simplefilter("ignore", integrate.IntegrationWarning)
            total += float(integrate.quad(dist.sf, c, np.inf, limit=200)[0])
    return total


def _check_partition(clients, n_samples, n_clients):
    assert clients.shape == (n_samples,)
    assert clients.dtype.kind == "i"
    # every row exactly once (one label per row) and every client non-empty
    np.testing.assert_array_equal(np.unique(clients), np.arange(n_clients))


# ----------------------------------------------------------------- iid / sizes
@pytest.mark.parametrize("n_samples, n_clients", [(10, 3), (7, 7), (100, 1), (1000, 13)])
def test_partition_iid(n_samples, n_clients):
    clients = partition_iid(n_samples, n_clients, random_state=0)
    _check_partition(clients, n_samples, n_clients)
    sizes = np.bincount(clients)
    assert sizes.max() - sizes.min() <= 1
    # a shuffle: not the trivial contiguous assignment, and reproducible
    np.testing.assert_array_equal(clients, partition_iid(n_samples, n_clients, random_state=0))
    if n_clients > 1 and n_samples >= 100:
        assert np.any(np.diff(clients) < 0)


def test_partition_iid_is_uniform():
    # row 0 lands in each of 4 clients with probability 1/4
    hits = np.bincount([partition_iid(8, 4, random_state=s)[0] for s in range(2000)], minlength=4)
    assert stats.chisquare(hits).pvalue > 1e-3


def test_partition_by_sizes():
    sizes = np.array([1, 50, 3, 7])
    clients = partition_by_sizes(sizes, random_state=1)
    _check_partition(clients, sizes.sum(), 4)
    np.testing.assert_array_equal(np.bincount(clients), sizes)
    np.testing.assert_array_equal(np.bincount(partition_by_sizes([4.0, 2.0])), [4, 2])


# ------------------------------------------------------------------ label skew
@pytest.mark.parametrize(
    "n_per_class, n_clients, c",
    [
        ([30] * 10, 100, 2),
        ([30] * 10, 20, 3),
        ([5, 40, 12, 3], 6, 2),
        ([9, 9, 9], 3, 3),
        ([4] * 5, 2, 3),
    ],
)
def test_label_shards_exact_classes(n_per_class, n_clients, c):
    rng = np.random.RandomState(0)
    y = rng.permutation(np.repeat(np.arange(len(n_per_class)), n_per_class))
    clients = partition_label_shards(y, n_clients, classes_per_client=c, random_state=3)
    _check_partition(clients, y.shape[0], n_clients)
    for k in range(n_clients):
        assert np.unique(y[clients == k]).shape[0] == c


def test_label_shards_varied_pairs_and_string_labels():
    y = np.repeat(list("abcdefghij"), 60)
    clients = partition_label_shards(y, 100, classes_per_client=2, random_state=0)
    pairs = {tuple(sorted(set(y[clients == k]))) for k in range(100)}
    assert len(pairs) > 10  # not just five repeated class pairs


def test_label_shards_infeasible():
    y = np.repeat([0, 1, 2], [1, 10, 10])
    with pytest.raises(ValueError, match="classes_per_client"):
        partition_label_shards(y, 3, classes_per_client=4)
    with pytest.raises(ValueError, match="some class would have no client"):
        partition_label_shards(y, 1, classes_per_client=2)
    # 4 clients x 3 classes needs class 0 (one row) in 4 shards
    with pytest.raises(ValueError, match="too few rows"):
        partition_label_shards(y, 4, classes_per_client=3)


def test_dirichlet():
    y = np.repeat(np.arange(10), 100)
    clients = partition_dirichlet(y, 50, alpha=0.1, random_state=0)
    _check_partition(clients, 1000, 50)
    # small alpha: clients are dominated by few classes; large alpha: near iid
    def top_share(a):
        c = partition_dirichlet(y, 10, alpha=a, random_state=0)
        return np.mean([np.bincount(y[c == k]).max() / (c == k).sum() for k in range(10)])

    assert top_share(0.05) > 0.7 > 0.2 > top_share(1000.0)
    # more clients than some class needs, tiny alpha: every client still non-empty
    _check_partition(partition_dirichlet(y[:30], 30, alpha=0.01, random_state=1), 30, 30)


@pytest.mark.parametrize("h", [0.0, 0.5, 1.0])
def test_feature_shift(h):
    X = np.random.RandomState(0).standard_normal((600, 4))
    clients = partition_feature_shift(X, 6, heterogeneity=h, random_state=0)
    _check_partition(clients, 600, 6)
    assert np.ptp(np.bincount(clients)) <= 1


def test_feature_shift_heterogeneity_increases_mean_spread():
    X = np.random.RandomState(0).standard_normal((3000, 5))

    def spread(h):
        c = partition_feature_shift(X, 10, heterogeneity=h, random_state=2)
        means = np.array([X[c == k].mean(axis=0) for k in range(10)])
        return np.linalg.norm(means - X.mean(axis=0), axis=1).mean()

    s = [spread(h) for h in (0.0, 0.5, 1.0)]
    assert s[0] < 0.15 < s[1] < s[2]
    # h = 1: clients are slabs along one direction, their projections do not overlap
    c = partition_feature_shift(X, 3, heterogeneity=1.0, random_state=2)
    rng = np.random.RandomState(2)
    u = rng.standard_normal(5)
    proj = ((X - X.mean(0)) / X.std(0)) @ (u / np.linalg.norm(u))
    ranges = sorted((proj[c == k].min(), proj[c == k].max()) for k in range(3))
    assert ranges[0][1] < ranges[1][0] and ranges[1][1] < ranges[2][0]


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: partition_iid(5, 0), "n_clients must be >= 1"),
        (lambda: partition_iid(5, 6), "exceeds n_samples"),
        (lambda: partition_iid(5, 2.0), "n_clients must be an int"),
        (lambda: partition_by_sizes([3, 0, 2]), "client 1 has size 0"),
        (lambda: partition_by_sizes([1.5, 2]), "whole numbers"),
        (lambda: partition_by_sizes([]), "non-empty"),
        (lambda: partition_dirichlet([0, 1, 1], 2, alpha=0), "alpha"),
        (lambda: partition_dirichlet([0, 1, 1], 4), "exceeds n_samples"),
        (lambda: partition_feature_shift(np.ones((4, 2)), 2, heterogeneity=1.5), "heterogeneity"),
        (lambda: partition_feature_shift(np.ones(4), 2), "2d"),
        (lambda: partition_label_shards(np.zeros((3, 2)), 2), "1d"),
    ],
)
def test_partition_bad_input(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call()


# ------------------------------------------------------------ sample-size laws
def test_thirteen_laws():
    assert len(SAMPLE_SIZE_LAWS) == 13 == len(set(SAMPLE_SIZE_LAWS))


@pytest.mark.parametrize("law", SAMPLE_SIZE_LAWS)
@pytest.mark.parametrize("m, gamma", [(100, 0.2), (100, 1.2), (37, 0.7), (1, 1.0)])
def test_law_has_mean_m_to_the_gamma(law, m, gamma):
    dist = sample_size_distribution(law, m, gamma)
    assert dist.mean() == pytest.approx(m**gamma, rel=1e-12)


@pytest.mark.parametrize("law", SAMPLE_SIZE_LAWS)
def test_law_empirical_mean(law):
    m, gamma = 3000, 0.7  # mean m**gamma ~ 271
    dist = sample_size_distribution(law, m, gamma)
    # continuous draws: mean m ** gamma within 5 standard errors
    raw = dist.rvs(size=m, random_state=np.random.RandomState(1))
    assert abs(raw.mean() - m**gamma) < 5 * dist.std() / math.sqrt(m)
    # the integer sizes: the exact mean of max(rint(eta), 1)
    sizes = sample_client_sizes(law, m, gamma, random_state=1)
    assert sizes.dtype.kind == "i" and sizes.shape == (m,) and sizes.min() >= 1
    assert abs(sizes.mean() - _clipped_mean(dist)) < 5 * dist.std() / math.sqrt(m)


def test_clipping_shifts_mean_as_documented():
    ratio = {
        law: _clipped_mean(sample_size_distribution(law, 100, 1.0)) / 100
        for law in SAMPLE_SIZE_LAWS
    }
    assert ratio["gaussian-high"] == pytest.approx(1.085, abs=0.002)
    assert ratio["laplace-medium"] == pytest.approx(1.034, abs=0.002)
    assert ratio["laplace-high"] == pytest.approx(1.186, abs=0.002)
    for law in ("lognormal-low", "poisson", "uniform-low", "pareto", "weibull"):
        assert ratio[law] == pytest.approx(1.0, abs=1e-3)


def test_lognormal_high_fixes_paper_scale():
    # the paper's stated scale m**gamma * e**2 would give mean m**gamma * e**4
    paper = stats.lognorm(2.0, scale=100 * math.e**2)
    assert paper.mean() == pytest.approx(100 * math.e**4)
    assert sample_size_distribution("lognormal-high", 100, 1.0).mean() == pytest.approx(100)


def test_sample_client_sizes_reproducible_and_bad_input():
    a = sample_client_sizes("pareto", 50, 1.0, random_state=4)
    np.testing.assert_array_equal(a, sample_client_sizes("pareto", 50, 1.0, random_state=4))
    with pytest.raises(ValueError, match="unknown sample-size law 'normal'"):
        sample_client_sizes("normal", 10, 1.0)
    for gamma in (-0.1, 2.5, float("nan"), "1"):
        with pytest.raises(ValueError, match="gamma must be a float in"):
            sample_client_sizes("poisson", 10, gamma)
    with pytest.raises(ValueError, match="n_clients must be >= 1"):
        sample_client_sizes("poisson", 0, 1.0)


# --------------------------------------------------------------------- dropout
def test_drop_clients_fraction():
    clients = np.repeat(np.arange(10), np.arange(1, 11))
    keep = drop_clients(clients, fraction=0.3, random_state=0)
    assert keep.shape == clients.shape and keep.dtype == bool
    survivors = np.unique(clients[keep])
    assert survivors.shape[0] == 7
    # whole clients survive or drop
    for k in range(10):
        assert keep[clients == k].all() or not keep[clients == k].any()
    assert drop_clients(clients, fraction=0.0).all()
    assert np.unique(clients[drop_clients(clients, fraction=0.99, random_state=0)]).shape[0] == 1


def test_drop_clients_mask_and_bad_input():
    clients = np.array(["x", "y", "x", "z"])
    np.testing.assert_array_equal(
        drop_clients(clients, mask=np.array([True, False, False])), [False, True, False, True]
    )
    with pytest.raises(ValueError, match="exactly one of"):
        drop_clients(clients)
    with pytest.raises(ValueError, match="exactly one of"):
        drop_clients(clients, fraction=0.5, mask=[True, False, False])
    with pytest.raises(ValueError, match="fraction must be"):
        drop_clients(clients, fraction=1.0)
    with pytest.raises(ValueError, match="one entry per client"):
        drop_clients(clients, mask=[True, False])
    with pytest.raises(ValueError, match="at least one must survive"):
        drop_clients(clients, mask=[True, True, True])
