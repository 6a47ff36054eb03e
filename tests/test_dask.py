"""The ridge family on Dask collections equals the in-memory path (sklearn_fed.dask)."""

import functools
import itertools
import os
import pickle
import re
import subprocess
import sys

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal
from sklearn.base import clone

from sklearn_fed import (
    FederatedLogisticRegression,
    FederatedRidge,
    FederatedRidgeCV,
    FederatedStandardScaler,
    FESCRidge,
    IncrementalFederatedRidge,
    PrivateFederatedRidge,
    ProjectedFederatedRidge,
)
from sklearn_fed.linear_model._base import StatisticsClient
from sklearn_fed.protocol import simulate_through_bytes

da = pytest.importorskip("dask.array", reason="the 'dask' extra is not installed")
dd = pytest.importorskip("dask.dataframe", reason="the 'dask' extra is not installed")
pd = pytest.importorskip("pandas")
dask = pytest.importorskip("dask")

partition_labels = pytest.importorskip("sklearn_fed.dask").partition_labels

N, D = 121, 4
COLUMNS = ["age", "bmi", "bp", "s1"]
# Row chunkings: even, uneven with a chunk of one row, one partition, a row per partition
# at the end; columns split in two chunks for the first.
CHUNKINGS = [
    ((40, 40, 41), (2, 2)),
    ((50, 1, 30, 40), (4,)),
    ((121,), (4,)),
    ((60, 58, 1, 1, 1), (4,)),
]

ONE_SHOT = [
    FederatedRidge(alpha=0.5),
    FederatedRidge(fit_intercept=False),
    ProjectedFederatedRidge(n_components=2, random_state=0),
    ProjectedFederatedRidge(alpha=0.1, random_state=0),  # "auto": a count round first
]


def _data(seed=0, n=N, d=D, n_targets=None):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) + np.array([0.0, 1e6, -3.0, 5.0])[:d]  # an offset of 1e6
    coef = rng.normal(size=(d, n_targets or 1))
    y = (X - X.mean(axis=0)) @ coef + 0.1 * rng.normal(size=(n, n_targets or 1)) + 2.0
    if n_targets is None:
        y = y[:, 0]
    clients = rng.integers(0, 5, size=n)  # shuffled labels: every site in every partition
    weights = rng.uniform(0.5, 2.0, size=n)
    return X, y, clients, weights


def _as_dask(chunks, X, *others):
    rows, cols = chunks
    out = [da.from_array(X, chunks=(rows, cols))]
    for value in others:
        out.append(None if value is None else da.from_array(value, chunks=(rows, *value.shape[1:])))
    return out


def _frame(X, y, clients, weights, npartitions=3):
    frame = pd.DataFrame(X, columns=COLUMNS)
    frame["target"], frame["site"], frame["weight"] = y, clients, weights
    return dd.from_pandas(frame, npartitions=npartitions), frame


def _assert_same_model(dask_fit, numpy_fit, *, exact=False):
    coef, intercept = np.asarray(numpy_fit.coef_), np.asarray(numpy_fit.intercept_)
    if exact:
        assert_array_equal(np.asarray(dask_fit.coef_), coef)
        assert_array_equal(np.asarray(dask_fit.intercept_), intercept)
    else:
        assert_allclose(np.asarray(dask_fit.coef_), coef, rtol=1e-9, atol=1e-10)
        # y_mean - coef @ x_mean cancels terms of |coef| * 1e6 (the offset of _data):
        # its round-off is relative to them (measured 1.4e-5 of an intercept of 6e3
        # when a projection to 2 components mixes the offset into every coefficient).
        assert_allclose(np.asarray(dask_fit.intercept_), intercept, rtol=1e-9,
                        atol=1e-10 * max(1.0, 1e6 * np.abs(coef).max()))
    assert np.asarray(dask_fit.coef_).dtype == np.asarray(numpy_fit.coef_).dtype
    assert dask_fit.clients_.tolist() == numpy_fit.clients_.tolist()
    assert dask_fit.n_features_in_ == numpy_fit.n_features_in_
    assert_array_equal(getattr(dask_fit, "feature_names_in_", []),
                       getattr(numpy_fit, "feature_names_in_", []))


@pytest.mark.parametrize("chunks", CHUNKINGS, ids=lambda c: "x".join(map(str, c[0])))
@pytest.mark.parametrize("estimator", ONE_SHOT, ids=repr)
def test_one_shot_dask_array_equals_numpy(estimator, chunks):
    X, y, clients, weights = _data()
    for c, w in [(None, None), (clients, None), (clients, weights)]:
        Xd, yd, cd, wd = _as_dask(chunks, X, y, c, w)
        fitted = clone(estimator).fit(Xd, yd, sample_weight=wd, clients=cd)
        expected = clone(estimator).fit(X, y, sample_weight=w, clients=c)
        _assert_same_model(fitted, expected)
        if w is None:  # unit weights: every message has the same bytes as in memory
            assert (fitted.communication_.uplink_bytes_per_client
                    == expected.communication_.uplink_bytes_per_client)
            assert fitted.communication_.rounds == expected.communication_.rounds


@pytest.mark.parametrize("estimator", ONE_SHOT, ids=repr)
def test_one_shot_dask_dataframe_equals_pandas(estimator):
    X, y, clients, weights = _data(1)
    ddf, frame = _frame(X, y, clients, weights)
    fitted = clone(estimator).fit(ddf[COLUMNS], ddf["target"], sample_weight=ddf["weight"],
                                  clients=ddf["site"])
    expected = clone(estimator).fit(frame[COLUMNS], frame["target"],
                                    sample_weight=frame["weight"], clients=clients)
    _assert_same_model(fitted, expected)
    assert fitted.feature_names_in_.tolist() == COLUMNS


def test_sites_within_partitions_give_the_same_bits():
    """Each site's rows in one partition: the same blocks, the same merges, the same bits."""
    X, y, _, weights = _data(2)
    clients = np.repeat([3, 1, 2], [40, 40, 41])
    Xd, yd, cd, wd = _as_dask(((40, 40, 41), (4,)), X, y, clients, weights)
    for estimator in ONE_SHOT:
        fitted = clone(estimator).fit(Xd, yd, sample_weight=wd, clients=cd)
        expected = clone(estimator).fit(X, y, sample_weight=weights, clients=clients)
        _assert_same_model(fitted, expected, exact=True)
    one = FederatedRidge().fit(da.from_array(X, chunks=(N, 4)), da.from_array(y, chunks=N))
    _assert_same_model(one, FederatedRidge().fit(X, y), exact=True)


@pytest.mark.parametrize("noise", ["local", "distributed"])
@pytest.mark.parametrize("epsilon", [np.inf, 1.0])
def test_private_releases_once_per_site(epsilon, noise):
    """A site's clipped sums are merged over its partitions, then noised once: same release."""
    rng = np.random.default_rng(15)
    X = rng.uniform(-1, 1, size=(N, D)) / 2
    y = X @ [1.0, -1.0, 0.5, 0.2] + 0.05 * rng.normal(size=N)
    clients = rng.integers(0, 5, size=N)
    private = PrivateFederatedRidge(epsilon=epsilon, noise=noise, random_state=0)
    for chunks in CHUNKINGS[:2]:
        for c in (None, clients):
            Xd, yd, cd = _as_dask(chunks, X, y, c)
            fitted = clone(private).fit(Xd, yd, clients=cd)
            expected = clone(private).fit(X, y, clients=c)
            # the sums are rounded to the noise grid, which absorbs the round-off
            _assert_same_model(fitted, expected, exact=True)
            assert fitted.clipped_share_ == expected.clipped_share_ > 0
            assert fitted.privacy_spent_ == expected.privacy_spent_
            assert fitted.communication_.uplink_bytes == expected.communication_.uplink_bytes
    ddf, frame = _frame(X, y, clients, np.ones(N))
    fitted = clone(private).fit(ddf[COLUMNS], ddf["target"], clients=ddf["site"])
    _assert_same_model(fitted, clone(private).fit(frame[COLUMNS], y, clients=clients), exact=True)
    fitted.partial_fit(ddf[COLUMNS], ddf["target"], clients=ddf["site"])
    assert fitted.n_releases_ == 2


def test_a_key_exchange_reads_no_partition():
    """Distributed noise: keys first, then the release; only the release reads the rows."""
    reads = []

    def read(block):
        reads.append(len(block))
        return block

    rng = np.random.default_rng(16)
    X = rng.uniform(-1, 1, size=(N, D)) / 2
    y, clients = X @ [1.0, -1.0, 0.5, 0.2], rng.integers(0, 3, size=N)
    Xd, yd, cd = _as_dask(((40, 40, 41), (4,)), X, y, clients)
    private = PrivateFederatedRidge(noise="distributed", random_state=0)
    fitted = clone(private).fit(Xd.map_blocks(read, dtype=float), yd, clients=cd)
    assert sorted(n for n in reads if n) == [40, 40, 41]  # (dask calls read on no rows first)
    _assert_same_model(fitted, clone(private).fit(X, y, clients=clients), exact=True)


@pytest.mark.parametrize("store", [False, True])
@pytest.mark.parametrize("scoring", [None, "neg_median_absolute_error"])
@pytest.mark.parametrize("cv", [None, "clients"])
def test_cross_validation_equals_numpy(cv, scoring, store):
    """Leave-one-row-out and leave-one-client-out: every step is a reduction over blocks."""
    if store and cv == "clients" and scoring is not None:
        store = False  # per-client scores: stored as well without a second scorer path
    X, y, clients, weights = _data(3)
    estimator = FederatedRidgeCV(alphas=[1e-3, 1.0, 1e3], cv=cv, scoring=scoring,
                                 store_cv_results=store)
    for chunks in CHUNKINGS[:2]:
        Xd, yd, cd, wd = _as_dask(chunks, X, y, clients, weights)
        fitted = clone(estimator).fit(Xd, yd, sample_weight=wd, clients=cd)
        expected = clone(estimator).fit(X, y, sample_weight=weights, clients=clients)
        _assert_same_model(fitted, expected)
        assert fitted.alpha_ == expected.alpha_
        # A score of residuals ~0.06 computed next to products of ~1e6 (the offset):
        # ~1e-10 absolute is float64's limit (measured 9.4e-10 relative).
        assert_allclose(fitted.best_score_, expected.best_score_, rtol=1e-8)
        if store:  # per-row residuals of ~0.01 next to products of ~1e6 (the offset)
            assert_allclose(fitted.cv_results_, expected.cv_results_, rtol=1e-7, atol=1e-10)
    if cv is None:  # one site: its rows spread over every partition
        Xd, yd = _as_dask(CHUNKINGS[1], X, y)
        fitted = clone(estimator).fit(Xd, yd)
        expected = clone(estimator).fit(X, y)
        _assert_same_model(fitted, expected)
        if store:
            assert_allclose(fitted.cv_results_, expected.cv_results_, rtol=1e-7, atol=1e-10)
    ddf, frame = _frame(X, y, clients, weights)
    fitted = clone(estimator).fit(ddf[COLUMNS], ddf["target"], sample_weight=ddf["weight"],
                                  clients=ddf["site"])
    expected = clone(estimator).fit(frame[COLUMNS], y, sample_weight=weights, clients=clients)
    _assert_same_model(fitted, expected)
    assert fitted.alpha_ == expected.alpha_


def test_cross_validation_by_partition():
    X, y, _, _ = _data(4)
    Xd, yd = _as_dask(((30, 30, 30, 31), (4,)), X, y)
    cv = FederatedRidgeCV(cv="clients", store_cv_results=True)
    fitted = clone(cv).fit(Xd, yd, clients=partition_labels(Xd))
    expected = clone(cv).fit(X, y, clients=np.repeat(np.arange(4), [30, 30, 30, 31]))
    _assert_same_model(fitted, expected, exact=True)
    assert_array_equal(fitted.cv_results_, expected.cv_results_)


def test_cross_validation_refuses_folds_of_a_splitter():
    X, y, clients, _ = _data()
    Xd, yd, cd = _as_dask(CHUNKINGS[0], X, y, clients)
    with pytest.raises(ValueError, match="not folds of a splitter"):
        FederatedRidgeCV(cv=3).fit(Xd, yd, clients=cd)


def test_multi_output_float32_and_labels():
    X, y, clients, _ = _data(5, n_targets=2)
    X = X[:, [0, 2, 3]].astype(np.float32)  # no offset: float32 keeps ~7 digits
    labels = np.array(["b", "a", "c", "a", "b"], dtype=object)[clients]
    Xd, yd, cd = _as_dask(((50, 1, 70), (3,)), X, y, labels)
    fitted = FederatedRidge().fit(Xd, yd, clients=cd)
    expected = FederatedRidge().fit(X, y, clients=labels)
    assert fitted.coef_.shape == (2, 3) and fitted.coef_.dtype == np.float32
    _assert_same_model(fitted, expected)


def test_mixed_label_types_are_kept():
    X, y, clients, _ = _data(6)
    labels = np.array([1, "a", 2.5], dtype=object)[clients % 3]
    Xd, yd, cd = _as_dask(CHUNKINGS[1], X, y, labels)
    fitted = FederatedRidge().fit(Xd, yd, clients=cd)
    expected = FederatedRidge().fit(X, y, clients=labels)
    assert list(map(repr, fitted.clients_)) == list(map(repr, expected.clients_))
    _assert_same_model(fitted, expected)


@pytest.mark.parametrize("estimator", ONE_SHOT[:3], ids=repr)
def test_partial_fit_adds_partitions(estimator):
    X, y, clients, _ = _data(7)
    Xd, yd, cd = _as_dask(((30, 31), (4,)), X[60:], y[60:], clients[60:])
    model = clone(estimator).fit(X[:60], y[:60], clients=clients[:60])
    model.partial_fit(Xd, yd, clients=cd)
    expected = clone(estimator).fit(X[:60], y[:60], clients=clients[:60])
    expected.partial_fit(X[60:], y[60:], clients=clients[60:])
    _assert_same_model(model, expected)
    first = clone(estimator).partial_fit(Xd, yd, clients=cd)
    _assert_same_model(first, clone(estimator).partial_fit(X[60:], y[60:], clients=clients[60:]))


def test_through_bytes_gives_the_same_model_and_ledger():
    X, y, clients, weights = _data(8)
    Xd, yd, cd, wd = _as_dask(CHUNKINGS[1], X, y, clients, weights)
    in_process = FederatedRidge().fit(Xd, yd, sample_weight=wd, clients=cd)
    with simulate_through_bytes():
        encoded = FederatedRidge().fit(Xd, yd, sample_weight=wd, clients=cd)
    _assert_same_model(encoded, in_process, exact=True)
    assert (encoded.communication_.uplink_bytes_per_client
            == in_process.communication_.uplink_bytes_per_client)


def _rounds_by_hand(estimator, X, y, clients, lengths):
    bounds = np.cumsum((0, *lengths))
    for i, (start, stop) in enumerate(itertools.pairwise(bounds)):
        step = estimator.fit if i == 0 else estimator.partial_fit
        rows = slice(start, stop)
        step(X[rows], y[rows], clients=None if clients is None else clients[rows])
    return estimator


@pytest.mark.parametrize("chunks", CHUNKINGS, ids=lambda c: "x".join(map(str, c[0])))
def test_incremental_runs_one_round_per_partition(chunks):
    X, y, clients, _ = _data(9)
    incremental = IncrementalFederatedRidge(alpha=0.3, random_state=0)
    for c in (None, clients):
        Xd, yd, cd = _as_dask(chunks, X, y, c)
        fitted = clone(incremental).fit(Xd, yd, clients=cd)
        expected = _rounds_by_hand(clone(incremental), X, y, c, chunks[0])
        assert fitted.n_rounds_ == len(chunks[0])
        _assert_same_model(fitted, expected, exact=True)
        assert fitted.leaders_ == expected.leaders_
        more = clone(fitted).fit(Xd, yd, clients=cd).partial_fit(Xd, yd, clients=cd)
        assert more.n_rounds_ == 2 * len(chunks[0])


def test_incremental_dataframe_keeps_feature_names():
    X, y, clients, weights = _data(10)
    ddf, frame = _frame(X, y, clients, weights, npartitions=4)
    fitted = IncrementalFederatedRidge(random_state=0).fit(
        ddf[COLUMNS], ddf["target"], clients=ddf["site"])
    assert fitted.feature_names_in_.tolist() == COLUMNS
    lengths = tuple(ddf.map_partitions(len).compute())
    expected = _rounds_by_hand(IncrementalFederatedRidge(random_state=0), frame[COLUMNS],
                               frame["target"], clients, lengths)
    assert fitted.n_rounds_ == len(lengths) == 4
    _assert_same_model(fitted, expected, exact=True)


class _WholeRowsClient(StatisticsClient):
    """Answers from all of a site's rows at once (overrides _compute: not blockwise)."""

    def compute(self, task, X, y, sample_weight, rows):
        return self.finish(task, self.summarize(task, X, y, sample_weight, rows))


class _WholeRowsRidge(FederatedRidge):
    _client_role = _WholeRowsClient


def test_a_client_role_that_is_not_blockwise_needs_each_site_in_one_partition():
    X, y, clients, _ = _data(14)
    by_partition = np.repeat(["a", "b", "c"], [40, 40, 41])
    Xd, yd, cd = _as_dask(CHUNKINGS[0], X, y, by_partition)
    fitted = _WholeRowsRidge().fit(Xd, yd, clients=cd)
    with simulate_through_bytes():  # site by site, as on Dask (fit pools the round otherwise)
        numpy_fit = FederatedRidge().fit(X, y, clients=by_partition)
    _assert_same_model(fitted, numpy_fit, exact=True)
    model = _WholeRowsRidge().fit(X, y)
    shuffled = da.from_array(clients, chunks=((40, 40, 41),))
    _unchanged(model, lambda: model.fit(Xd, yd, clients=shuffled),
               r"site 0 has rows in partitions \[0, 1\].*not a BlockwiseClient")


@pytest.mark.parametrize("estimator", [FESCRidge(), FederatedStandardScaler(),
                                       FederatedLogisticRegression()])
def test_other_estimators_refuse_dask_collections(estimator):
    # Every estimator on the one fit template routes collections to sklearn_fed.dask,
    # which refuses those whose _dask_rows is None, before anything is fitted.
    X, y, clients, _ = _data(17)
    Xd, yd = _as_dask(CHUNKINGS[0], X, np.sign(y))
    with pytest.raises(TypeError, match=f"{type(estimator).__name__} cannot fit Dask "
                                        "collections: its sites' replies are not sums"):
        estimator.fit(Xd, yd, clients=clients)
    assert not hasattr(estimator, "n_features_in_")


def test_partition_labels():
    X = da.ones((7, 2), chunks=((3, 1, 3), (2,)))
    assert partition_labels(X).compute().tolist() == [0, 0, 0, 1, 2, 2, 2]
    frame = dd.from_pandas(pd.DataFrame({"a": np.arange(6.0)}), npartitions=2)
    assert partition_labels(frame).compute().tolist() == [0, 0, 0, 1, 1, 1]
    with pytest.raises(TypeError, match="Dask Array or DataFrame"):
        partition_labels(np.ones((3, 2)))


# ------------------------------------------------------------------ bad input
def _fitted():
    X, y, clients, _ = _data(11)
    return FederatedRidge().fit(X, y, clients=clients), X, y, clients


def _unchanged(estimator, call, match):
    before = pickle.dumps(estimator)
    with pytest.raises(ValueError, match=match):
        call()
    assert pickle.dumps(estimator) == before


def _explode(block):
    raise AssertionError("a partition was read before the inputs were checked")


def test_misaligned_chunks_are_refused_before_reading():
    model, X, y, clients = _fitted()
    Xd = da.from_array(X, chunks=(40, 4)).map_blocks(_explode, dtype=float)
    yd = da.from_array(y, chunks=((40, 30, 51),))
    for method in (model.fit, model.partial_fit):
        _unchanged(model, functools.partial(method, Xd, yd),
                   r"partition 1: X has 40 rows but y has 30; y must have X's row chunks")
    ddf, _ = _frame(X, y, clients, np.ones(N), npartitions=3)
    _unchanged(model, lambda: model.fit(Xd, da.from_array(y, chunks=40), clients=ddf["site"]),
               "X has 4 partitions but clients has 3")


def test_misaligned_dataframe_partitions_are_named():
    model, X, y, clients = _fitted()
    ddf, _ = _frame(X, y, clients, np.ones(N), npartitions=3)
    other = dd.from_pandas(pd.Series(y), npartitions=3).repartition(divisions=[0, 30, 90, 120])
    _unchanged(model, lambda: model.fit(ddf[COLUMNS], other),
               r"partition \d: (X has \d+ rows but y has \d+|the index of y differs)")
    _unchanged(model, lambda: model.fit(ddf[COLUMNS], y), "pass y as a Dask collection")


@pytest.mark.parametrize("what", ["X", "y", "sample_weight", "clients"])
def test_nan_names_the_partition(what):
    model, X, y, clients = _fitted()
    values = {"X": X.copy(), "y": y.copy(), "sample_weight": np.ones(N),
              "clients": clients.astype(float)}
    target = values[what]
    target[95] = np.nan  # partition 2 of (40, 40, 41)
    Xd, yd, wd, cd = _as_dask(CHUNKINGS[0], values["X"], values["y"], values["sample_weight"],
                              values["clients"])
    for method in (model.fit, model.partial_fit):
        _unchanged(model, functools.partial(method, Xd, yd, sample_weight=wd, clients=cd),
                   r"partition 2: .*(NaN|nan)")


@pytest.mark.filterwarnings("ignore:overflow:RuntimeWarning", "ignore:invalid:RuntimeWarning")
def test_finite_values_that_overflow_are_refused_as_in_memory():
    """Row sums that overflow pass the fast finite check; the exact one lets them through too."""
    model, X, y, _ = _fitted()
    X = X.copy()
    X[95, :2] = 1.5e308
    with pytest.raises(ValueError) as in_memory:
        clone(model).fit(X, y)
    Xd, yd = _as_dask(CHUNKINGS[0], X, y)
    _unchanged(model, lambda: model.fit(Xd, yd), re.escape(str(in_memory.value)))


def _bad_columns_array(X):
    good = dask.delayed(lambda: X[:60])()
    bad = dask.delayed(lambda: X[60:, :3])()
    return da.concatenate([da.from_delayed(good, shape=(60, 4), dtype=float),
                           da.from_delayed(bad, shape=(61, 4), dtype=float)])


def test_a_partition_with_other_columns_is_named():
    model, X, y, _ = _fitted()
    yd = da.from_array(y, chunks=((60, 61),))
    _unchanged(model, lambda: model.fit(_bad_columns_array(X), yd),
               r"partition 1: X has shape \(61, 3\), but the other partitions have 4 columns")
    frame = pd.DataFrame(X, columns=COLUMNS)
    parts = [dask.delayed(lambda: frame.iloc[:60])(),
             dask.delayed(lambda: frame.iloc[60:, :3])()]
    ddf = dd.from_delayed(parts, meta=frame.iloc[:0], verify_meta=False)
    ys = dd.from_delayed([dask.delayed(lambda: pd.Series(y[:60]))(),
                          dask.delayed(lambda: pd.Series(y[60:], index=range(60, N)))()],
                         meta=pd.Series(dtype=float), verify_meta=False)
    _unchanged(model, lambda: model.fit(ddf, ys), r"partition 1: it has 3 columns")


def test_incremental_failure_rolls_back_every_round():
    X, y, _, _ = _data(12)
    model = IncrementalFederatedRidge(random_state=0).fit(X[:30], y[:30])
    bad = X.copy()
    bad[100, 0] = np.nan
    Xd, yd = _as_dask(CHUNKINGS[0], bad, y)
    _unchanged(model, lambda: model.partial_fit(Xd, yd), "partition 2: .*NaN")
    _unchanged(model, lambda: model.fit(Xd, yd), "partition 2: .*NaN")


def test_other_bad_inputs():
    model, X, y, _ = _fitted()
    Xd, yd = _as_dask(CHUNKINGS[0], X, y)
    _unchanged(model, lambda: model.fit(Xd[:, 0], yd), "Expected a 2-D X")
    _unchanged(model, lambda: model.fit(Xd, y[:-1]), "X has 121 rows but y has 120")
    labels = (np.arange(N) % 3).astype(float)
    labels[47] = np.nan
    _unchanged(model, lambda: model.fit(Xd, yd, clients=labels),
               r"partition 1: clients has 1 missing label.*row 7")
    _unchanged(model, lambda: model.fit(Xd, yd, clients="region"),
               "clients must hold one label per row")
    ddf, _ = _frame(X, y, np.zeros(N), np.ones(N))
    _unchanged(model, lambda: model.fit(ddf[[*COLUMNS, "site"]], ddf["target"], clients="site"),
               r"clients='site' names a column of X; pass its values")


# --------------------------------------------------------------- out of core
def _random_block(block_info=None):
    info = block_info[None]
    rng = np.random.default_rng(info["chunk-location"][0])
    return rng.normal(size=info["chunk-shape"])


def test_memory_holds_a_few_partitions(peak_memory):
    """64 partitions of 0.5 MiB, never in memory at once: the peak is a few partitions."""
    rows, d, n_parts = 4096, 15, 64
    table = da.map_blocks(_random_block, chunks=((rows,) * n_parts, (d + 1,)), dtype=float)
    X, y = table[:, :d], table[:, d]
    partition_mib = rows * (d + 1) * 8 / 2**20
    for estimator in (FederatedRidge(), IncrementalFederatedRidge()):
        peak = peak_memory(lambda: estimator.fit(X, y))  # noqa: B023 (called at once)
        assert peak / 2**20 < 8 * partition_mib, f"{type(estimator).__name__}: {peak / 2**20} MiB"
    assert estimator.n_samples_seen_ == rows * n_parts


def test_memory_mapped_partitions_are_read_ahead(tmp_path, monkeypatch):
    """``.npy`` partitions through memory maps: each is advised to be read ahead, same model."""
    import mmap

    from sklearn_fed.dask import _partitions

    advised = []
    read_ahead = _partitions._read_ahead

    def spy(*blocks):
        advised.append(sum(isinstance(getattr(b, "_mmap", None), mmap.mmap) for b in blocks))
        read_ahead(*blocks)

    monkeypatch.setattr(_partitions, "_read_ahead", spy)
    X, y, _, _ = _data(18)
    table = da.from_array(np.column_stack([X, y]), chunks=((40, 1, 80), (D + 1,)))
    da.to_npy_stack(tmp_path, table, axis=0)
    stored = da.from_npy_stack(tmp_path, mmap_mode="r")
    fitted = FederatedRidge().fit(stored[:, :D], stored[:, D])
    _assert_same_model(fitted, FederatedRidge().fit(X, y))
    # every partition's X is a view of its file's map (y, one column, may be a copy)
    assert len(advised) == 3 and min(advised) >= 1


def test_import_sklearn_fed_does_not_import_dask():
    code = ("import sys, numpy as np, sklearn_fed; "
            "sklearn_fed.FederatedRidge().fit(np.eye(3), np.ones(3)); "
            "sys.exit(any(m == 'dask' or m.startswith('dask.') for m in sys.modules))")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=os.getcwd(), timeout=120)


# ------------------------------------------------------------ a real cluster
@pytest.fixture(scope="module")
def cluster_client():
    distributed = pytest.importorskip("distributed", reason="the 'dask' extra is not installed")
    import logging

    import psutil

    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
        dashboard_address=None, silence_logs=logging.CRITICAL, death_timeout=60,
    ) as cluster, distributed.Client(cluster, timeout=60) as client:
        pids = list(client.run(os.getpid).values())
        assert len(pids) == 2
        yield client
    for pid in pids:  # the workers' processes ended with the cluster
        try:
            psutil.Process(pid).wait(timeout=30)
        except psutil.NoSuchProcess:
            pass
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie"


@pytest.mark.slow
def test_two_worker_local_cluster(cluster_client):
    X, y, clients, weights = _data(13)
    Xd, yd, cd, wd = _as_dask(CHUNKINGS[1], X, y, clients, weights)
    fitted = FederatedRidge().fit(Xd, yd, sample_weight=wd, clients=cd)
    _assert_same_model(fitted, FederatedRidge().fit(X, y, sample_weight=weights, clients=clients))
    ddf, frame = _frame(X, y, clients, weights)
    projected = ProjectedFederatedRidge(random_state=0)
    fitted = clone(projected).fit(ddf[COLUMNS], ddf["target"], clients=ddf["site"])
    _assert_same_model(fitted, clone(projected).fit(frame[COLUMNS], y, clients=clients))
    private = PrivateFederatedRidge(noise="distributed", feature_bound=1e7, target_bound=1e7,
                                    random_state=0)
    fitted = clone(private).fit(Xd, yd, clients=cd)
    _assert_same_model(fitted, clone(private).fit(X, y, clients=clients), exact=True)
    cv = FederatedRidgeCV(store_cv_results=True)  # leave-one-row-out, rows in X's order
    fitted = clone(cv).fit(Xd, yd, clients=cd)
    expected = clone(cv).fit(X, y, clients=clients)
    _assert_same_model(fitted, expected)
    assert_allclose(fitted.cv_results_, expected.cv_results_, rtol=1e-7, atol=1e-10)
    incremental = IncrementalFederatedRidge(random_state=0)
    fitted = clone(incremental).fit(Xd, yd, clients=cd)
    expected = _rounds_by_hand(clone(incremental), X, y, clients, CHUNKINGS[1][0])
    _assert_same_model(fitted, expected, exact=True)
    with pytest.raises(ValueError, match="partition 2: .*NaN"):
        bad = X.copy()
        bad[90, 1] = np.nan
        FederatedRidge().fit(da.from_array(bad, chunks=40), da.from_array(y, chunks=40))
