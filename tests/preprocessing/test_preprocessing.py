"""Federated transformers equal scikit-learn's fitted on the pooled rows (1, 7 and 100 sites)."""

import warnings

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from sklearn.datasets import load_diabetes, load_digits
from sklearn.decomposition import PCA
from sklearn.impute import SimpleImputer
from sklearn.preprocessing import MinMaxScaler, OneHotEncoder, StandardScaler

from sklearn_fed import (
    FederatedMinMaxScaler,
    FederatedOneHotEncoder,
    FederatedPCA,
    FederatedSimpleImputer,
    FederatedStandardScaler,
)
from sklearn_fed.protocol import (
    InvalidClientMessage,
    SitePolicy,
    simulate_through_bytes,
)
from sklearn_fed.statistics import ColumnMoments, merge_statistics
from sklearn_fed.utils.estimator_checks import run_protocol_by_hand

N_SITES = (1, 7, 100)


def _sites(n, n_sites, seed=0):
    return np.random.default_rng(seed).integers(0, n_sites, n)


def _with_missing(X, share=0.15, seed=0):
    X = np.array(X, dtype=np.float64)
    X[np.random.default_rng(seed).random(X.shape) < share] = np.nan
    return X


def _assert_same(a, b, names, rtol=1e-10):
    for name in names:
        left, right = getattr(a, name), getattr(b, name)
        if left is None or right is None:
            assert left is None and right is None, name
            continue
        assert np.shape(left) == np.shape(right), name
        assert np.asarray(left).dtype == np.asarray(right).dtype, name
        np.testing.assert_allclose(right, left, rtol=rtol, atol=1e-12, equal_nan=True,
                                   err_msg=name)


# ------------------------------------------------------------ column moments
def test_column_moments_merge_equals_one_pass():
    rng = np.random.default_rng(0)
    X = _with_missing(rng.normal(size=(300, 4)) * 3 + 1e4)
    w = rng.random(300)
    parts = [ColumnMoments.from_data(X, w, rows=slice(i, i + 30)) for i in range(0, 300, 30)]
    merged, whole = merge_statistics(parts), ColumnMoments.from_data(X, w)
    present = ~np.isnan(X)
    np.testing.assert_array_equal(merged.n_samples, present.sum(axis=0))
    np.testing.assert_allclose(merged.mean, whole.mean, rtol=1e-14)
    np.testing.assert_allclose(merged.m2, whole.m2, rtol=1e-9)
    # per column, against numpy on the present values
    for j in range(4):
        values, weights = X[present[:, j], j], w[present[:, j]]
        mean = np.average(values, weights=weights)
        np.testing.assert_allclose(merged.m2[j], weights @ (values - mean) ** 2, rtol=1e-8)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("weighted", [False, True])
def test_column_moments_without_missing_values_are_the_general_paths_bits(
        dtype, weighted, monkeypatch):
    # Rows without NaN skip the masks; a site's rows of a shared X are gathered
    # block by block. Both must give the bits of the masked passes over X[rows].
    rng = np.random.default_rng(0)
    X = (rng.normal(size=(30_000, 7)) * 3 + 1e4).astype(dtype)
    X[:, 1] = 0.1  # constant (its running sum is not exact)
    X[:200, 2] = 4.0  # constant on the first rows of a block only
    X[:, 3] = rng.choice([0.0, -0.0], size=len(X))  # constant, zeros of both signs
    w = rng.random(len(X)) + 0.5 if weighted else None
    rows = np.flatnonzero(rng.random(len(X)) < 0.8)
    fast = [ColumnMoments.from_data(X, w, order=order, rows=rows) for order in (1, 2)]
    monkeypatch.setattr("sklearn_fed.statistics._moments._is_nan", lambda value: False)
    general = [ColumnMoments.from_data(X[rows], None if w is None else w[rows], order=order)
               for order in (1, 2)]
    for a, b in zip(fast, general):
        for name in ("n_samples", "weight_sum", "mean", "m2")[: a.order + 2]:
            left, right = getattr(a, name), getattr(b, name)
            assert left.dtype == right.dtype
            np.testing.assert_array_equal(left.view(np.uint8), right.view(np.uint8), name)
    assert fast[1].m2[1] == 0 and fast[1].mean[1] == X[0, 1] and fast[1].m2[2] > 0


@pytest.mark.parametrize("bad, message", [
    ({"m2": -np.ones(2)}, "m2 must be non-negative"),
    ({"weight_sum": np.array([1.0, np.inf])}, "must be finite"),
    ({"n_samples": np.array([0, 2])}, "zero in a column without values"),
    ({"mean": np.array([1e80, 0.0])}, "at most"),
])
def test_column_moments_refuse_impossible_messages(bad, message):
    fields, arrays = ColumnMoments.from_data(np.array([[1.0, 2.0], [3.0, 5.0]])).to_payload()
    arrays = {**arrays, **bad}
    with pytest.raises(InvalidClientMessage, match=message):
        ColumnMoments.from_payload(fields, arrays, client="x")


# ---------------------------------------------------------- standard scaler
@pytest.mark.parametrize("n_sites", N_SITES)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("missing", [False, True])
def test_standard_scaler_equals_pooled(n_sites, weighted, missing):
    X = load_diabetes().data * 100 + 50
    X = _with_missing(X) if missing else X
    w = np.random.default_rng(1).random(X.shape[0]) if weighted else None
    pooled = StandardScaler().fit(X, sample_weight=w)
    fed = FederatedStandardScaler().fit(X, sample_weight=w, clients=_sites(len(X), n_sites))
    _assert_same(pooled, fed, ["n_samples_seen_", "mean_", "var_", "scale_"])
    np.testing.assert_allclose(fed.transform(X), pooled.transform(X), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(fed.inverse_transform(fed.transform(X)), X, rtol=1e-12)
    assert fed.n_clients_ == len(np.unique(_sites(len(X), n_sites)))


@pytest.mark.parametrize("with_mean, with_std", [(True, False), (False, True), (False, False)])
def test_standard_scaler_options_dtypes_and_sparse(with_mean, with_std):
    X = _with_missing(load_diabetes().data).astype(np.float32)
    sites = _sites(len(X), 7)
    kw = {"with_mean": with_mean, "with_std": with_std}
    pooled, fed = StandardScaler(**kw).fit(X), FederatedStandardScaler(**kw).fit(X, clients=sites)
    _assert_same(pooled, fed, ["n_samples_seen_", "mean_", "var_", "scale_"], rtol=1e-6)
    if not with_mean:
        sparse = sp.csr_matrix(np.nan_to_num(X))
        pooled = StandardScaler(**kw).fit(sparse)
        fed = FederatedStandardScaler(**kw).fit(sparse, clients=sites)
        _assert_same(pooled, fed, ["n_samples_seen_", "mean_", "var_", "scale_"], rtol=1e-6)


def test_standard_scaler_partial_fit_and_constant_column():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3))
    X[:, 2] = 7.0  # constant: unit scale, as StandardScaler decides it
    pooled, fed = StandardScaler(), FederatedStandardScaler()
    for batch in np.array_split(np.arange(200), 4):
        pooled.partial_fit(X[batch])
        fed.partial_fit(X[batch], clients=batch % 5)
    _assert_same(pooled, fed, ["n_samples_seen_", "mean_", "var_", "scale_"])
    assert fed.scale_[2] == 1.0
    assert fed.communication_.rounds == 4


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("form", [np.array, sp.csr_matrix, sp.csc_matrix])
def test_standard_scaler_constant_column_has_exactly_zero_variance(weighted, form):
    # sum/n of a constant and the two-pass sum of squares carry round-off
    # (var_ ~1e-50 before); a column whose weighted values are one value has
    # that value as its exact mean and exactly 0 as its variance, merged or not.
    rng = np.random.default_rng(0)
    X = np.column_stack([np.full(101, 0.1), np.full(101, 1e8 + 0.3), rng.normal(size=101)])
    X[::9, 1] = np.nan  # missing entries do not break the constant
    if form is not np.array:
        X = np.nan_to_num(X, nan=1e8 + 0.3)
    weight = rng.uniform(0.1, 3.0, 101) if weighted else None
    kw = {"with_mean": form is np.array}
    for n_sites in (1, 7):
        fed = FederatedStandardScaler(**kw).fit(form(X), sample_weight=weight,
                                                clients=np.arange(101) % n_sites)
        assert fed.var_[0] == 0.0 and fed.var_[1] == 0.0 and fed.var_[2] > 0.5
        assert fed.scale_[0] == 1.0 and fed.scale_[1] == 1.0
        if kw["with_mean"]:
            assert fed.mean_[0] == 0.1 and fed.mean_[1] == 1e8 + 0.3
        pooled = StandardScaler(**kw).fit(form(X), sample_weight=weight)
        _assert_same(pooled, fed, ["mean_", "scale_"] if kw["with_mean"] else ["scale_"])


@pytest.mark.parametrize("weighted", [False, True])
def test_standard_scaler_sparse_column_without_stored_entries(weighted):
    # a CSC column with no stored entry made np.bincount return int64 and
    # `m2 += float` raised UFuncOutputCastingError
    X = sp.csc_matrix(np.column_stack([np.zeros(12), np.arange(12.0)]))
    weight = np.linspace(0.5, 2.0, 12) if weighted else None
    for n_sites in (1, 7):
        fed = FederatedStandardScaler(with_mean=False).fit(
            X, sample_weight=weight, clients=np.arange(12) % n_sites)
        pooled = StandardScaler(with_mean=False).fit(X, sample_weight=weight)
        _assert_same(pooled, fed, ["n_samples_seen_", "mean_", "var_", "scale_"])
        assert fed.var_[0] == 0.0


def test_standard_scaler_site_refuses_sparse_centering():
    scaler = FederatedStandardScaler()
    server = scaler.make_server()
    tasks = server.next_tasks(["a"])
    with pytest.raises(ValueError, match="site 'a'.*Cannot center sparse"):
        scaler.make_client().respond(tasks["a"], sp.csr_matrix(np.eye(3)))


def test_set_output_pandas_and_feature_names():
    frame = pd.DataFrame(load_diabetes().data[:, :3], columns=["age", "sex", "bmi"])
    fed = FederatedStandardScaler().set_output(transform="pandas")
    out = fed.fit_transform(frame, clients=_sites(len(frame), 7))
    assert list(out.columns) == ["age", "sex", "bmi"]
    expected = StandardScaler().fit_transform(frame)
    np.testing.assert_allclose(out.to_numpy(), expected, rtol=1e-9, atol=1e-12)


# ----------------------------------------------------------- min-max scaler
@pytest.mark.parametrize("n_sites", N_SITES)
def test_minmax_scaler_equals_pooled(n_sites):
    X = _with_missing(load_diabetes().data)
    kw = {"feature_range": (-1, 2), "clip": True}
    pooled = MinMaxScaler(**kw).fit(X)
    fed = FederatedMinMaxScaler(**kw).fit(X, clients=_sites(len(X), n_sites))
    _assert_same(pooled, fed, ["scale_", "min_", "data_min_", "data_max_", "data_range_"], 0)
    assert fed.n_samples_seen_ == pooled.n_samples_seen_
    np.testing.assert_array_equal(fed.transform(X), pooled.transform(X))
    for batch in np.array_split(np.arange(len(X)), 3):
        pooled.partial_fit(X[batch])
        fed.partial_fit(X[batch], clients=batch % 4)
    _assert_same(pooled, fed, ["data_min_", "data_max_"], 0)


# ------------------------------------------------------------------ encoder
def _categorical_frame(n=400, seed=0):
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({
        "city": rng.choice(["Oslo", "Lima", "Pune", "Kiev", None], n, p=[.4, .3, .2, .07, .03]),
        "rooms": rng.choice([3, 1, 2, 7], n),
        "grade": rng.choice([0.5, 1.5, np.nan], n),
    })
    frame["city"] = frame["city"].astype(object)
    return frame


@pytest.mark.parametrize("n_sites", N_SITES)
@pytest.mark.parametrize("params", [
    {}, {"drop": "first"}, {"drop": "if_binary"}, {"min_frequency": 20},
    {"max_categories": 3}, {"min_frequency": 0.1, "handle_unknown": "infrequent_if_exist"},
    {"handle_unknown": "ignore"},
])
def test_onehot_encoder_equals_pooled(n_sites, params):
    frame = _categorical_frame()
    pooled = OneHotEncoder(sparse_output=False, **params).fit(frame)
    fed = FederatedOneHotEncoder(sparse_output=False, **params).fit(
        frame, clients=_sites(len(frame), n_sites))
    assert repr(fed.categories_) == repr(pooled.categories_)
    assert [c.dtype for c in fed.categories_] == [c.dtype for c in pooled.categories_]
    assert repr(fed.drop_idx_) == repr(pooled.drop_idx_)
    if "min_frequency" in params or "max_categories" in params:
        assert repr(fed.infrequent_categories_) == repr(pooled.infrequent_categories_)
    np.testing.assert_array_equal(fed.transform(frame), pooled.transform(frame))
    np.testing.assert_array_equal(fed.get_feature_names_out(), pooled.get_feature_names_out())
    unseen = frame.iloc[:3].assign(city="Rome")
    if params.get("handle_unknown") in ("ignore", "infrequent_if_exist"):
        np.testing.assert_array_equal(fed.transform(unseen), pooled.transform(unseen))
    decoded = fed.inverse_transform(fed.transform(frame.iloc[:5]))
    expected = pooled.inverse_transform(pooled.transform(frame.iloc[:5]))
    assert pd.DataFrame(decoded).equals(pd.DataFrame(expected))


def test_onehot_encoder_given_categories_and_unknown_error():
    frame = _categorical_frame()
    given = [["Kiev", "Lima", "Oslo", "Pune", np.nan], [1, 2, 3, 7, 9], [0.5, 1.5, np.nan]]
    pooled = OneHotEncoder(categories=given, min_frequency=5).fit(frame)
    fed = FederatedOneHotEncoder(categories=given, min_frequency=5).fit(
        frame, clients=_sites(len(frame), 7))
    assert repr(fed.infrequent_categories_) == repr(pooled.infrequent_categories_)
    short = [["Lima", "Oslo"], [1, 2, 3, 7], [0.5, 1.5, np.nan]]
    with pytest.raises(ValueError, match="Found unknown categories"):
        FederatedOneHotEncoder(categories=short).fit(frame, clients=_sites(len(frame), 7))


def test_onehot_encoder_given_categories_infrequent_with_a_site_lacking_them():
    # a site none of whose values are among the given categories encoded an
    # empty array as a float index (IndexError) when counting for infrequent grouping
    X = np.array([["a"] * 5 + ["e"] * 30], dtype=object).T
    kw = {"categories": [["c", "d", "a", "b"]], "sparse_output": False,
              "handle_unknown": "infrequent_if_exist", "max_categories": 2}
    pooled = OneHotEncoder(**kw).fit(X)
    for n_sites in (1, 7):
        fed = FederatedOneHotEncoder(**kw).fit(X, clients=np.arange(35) % n_sites)
        assert repr(fed.infrequent_categories_) == repr(pooled.infrequent_categories_)
        test = [["a"], ["b"], ["e"]]
        np.testing.assert_array_equal(fed.transform(test), pooled.transform(test))


@pytest.mark.parametrize("given", [None, [[b"b", b"a"]]])
def test_onehot_encoder_bytes_categories(given):
    X = np.array([[b"b"], [b"a"], [b"c"], [b"a"]])
    kw = {} if given is None else {"categories": given, "handle_unknown": "ignore"}
    pooled = OneHotEncoder(**kw).fit(X)
    for n_sites in (1, 3):
        fed = FederatedOneHotEncoder(**kw).fit(X, clients=np.arange(4) % n_sites)
        assert [c.dtype for c in fed.categories_] == [c.dtype for c in pooled.categories_]
        np.testing.assert_array_equal(fed.categories_[0], pooled.categories_[0])
        np.testing.assert_array_equal(fed.transform(X).toarray(), pooled.transform(X).toarray())


def test_onehot_encoder_mixed_bytes_and_str_error_is_scikit_learns():
    X = np.array([["b"], ["a"]], dtype="U")
    with pytest.raises(ValueError) as pooled:
        OneHotEncoder(categories=[np.array([b"a", b"b"], dtype=object)]).fit(X)
    with pytest.raises(ValueError) as fed:
        FederatedOneHotEncoder(categories=[np.array([b"a", b"b"], dtype=object)]).fit(
            X, clients=[0, 1])
    assert str(fed.value) == str(pooled.value)


def test_onehot_encoder_sites_of_different_kinds_are_refused():
    encoder = FederatedOneHotEncoder()
    server = encoder.make_server()
    tasks = server.next_tasks(["a", "b"])
    client = encoder.make_client(policy=SitePolicy.permissive())  # two rows a site
    replies = {"a": client.respond(tasks["a"], np.array([["x"], ["y"]])),
               "b": client.respond(tasks["b"], np.array([[b"x"], [b"y"]]))}
    with pytest.raises(ValueError, match="different kinds: bytes at \\['b'\\]"):
        server.receive(replies)
    assert not hasattr(encoder, "categories_")


def test_onehot_encoder_messages_are_category_sets():
    frame = _categorical_frame(60)
    sites = np.repeat(["a", "b", "c"], 20)
    server, sent = run_protocol_by_hand(FederatedOneHotEncoder(), frame, None, sites)
    assert server.estimator.categories_[1].tolist() == [1, 2, 3, 7]
    assert sum(sent["replies"].values()) < 3 * 600  # a few category sets, no rows


# ------------------------------------------------------------------ imputer
@pytest.mark.parametrize("n_sites", N_SITES)
@pytest.mark.parametrize("strategy", ["mean", "most_frequent", "constant"])
@pytest.mark.parametrize("options", [{}, {"add_indicator": True, "keep_empty_features": True}])
def test_simple_imputer_equals_pooled(n_sites, strategy, options):
    X = np.round(_with_missing(load_diabetes().data * 20))
    X[:, 4] = np.nan  # a column without values
    pooled = SimpleImputer(strategy=strategy, **options).fit(X)
    fed = FederatedSimpleImputer(strategy=strategy, **options).fit(
        X, clients=_sites(len(X), n_sites))
    np.testing.assert_allclose(fed.statistics_.astype(float), pooled.statistics_.astype(float),
                               rtol=1e-12, equal_nan=True)
    assert fed.statistics_.dtype == pooled.statistics_.dtype
    np.testing.assert_allclose(fed.transform(X), pooled.transform(X), rtol=1e-12)
    np.testing.assert_array_equal(fed.get_feature_names_out(), pooled.get_feature_names_out())


def test_simple_imputer_text_and_sparse():
    rng = np.random.default_rng(0)
    text = rng.choice(np.array(["x", "y", "z", None], dtype=object), size=(120, 2))
    kw = {"strategy": "most_frequent", "missing_values": None}
    pooled, fed = SimpleImputer(**kw).fit(text), FederatedSimpleImputer(**kw).fit(
        text, clients=_sites(120, 7))
    np.testing.assert_array_equal(fed.statistics_, pooled.statistics_)
    sparse = sp.random(120, 5, density=0.3, format="csc", random_state=0)
    sparse.data[::5] = np.nan
    for strategy in ("mean", "most_frequent"):
        pooled = SimpleImputer(strategy=strategy).fit(sparse)
        fed = FederatedSimpleImputer(strategy=strategy).fit(sparse, clients=_sites(120, 7))
        np.testing.assert_allclose(fed.statistics_, pooled.statistics_, rtol=1e-12)


def test_simple_imputer_most_frequent_text_with_a_site_missing_a_column():
    # a site whose column has no present value sent an empty numeric array, and
    # its encoding against the object union raised IndexError in _most_frequent
    X = np.array([["a", "x"], [np.nan, "y"], ["a", "y"], [np.nan, "z"], ["b", "y"],
                  [np.nan, "x"]], dtype=object)
    for n_sites in (2, 7):
        fed = FederatedSimpleImputer(strategy="most_frequent").fit(
            X, clients=np.arange(6) % n_sites)
        pooled = SimpleImputer(strategy="most_frequent").fit(X)
        np.testing.assert_array_equal(fed.statistics_, pooled.statistics_)
        np.testing.assert_array_equal(fed.transform(X), pooled.transform(X))


def test_simple_imputer_has_no_median():
    with pytest.raises(ValueError, match="strategy"):
        FederatedSimpleImputer(strategy="median").fit(np.ones((3, 2)))


# ---------------------------------------------------------------------- PCA
@pytest.mark.parametrize("n_sites", N_SITES)
@pytest.mark.parametrize("n_components, whiten", [(10, False), (0.9, True), ("mle", False)])
def test_pca_equals_pooled_covariance_eigh(n_sites, n_components, whiten):
    X = load_digits().data[:, 8:24] + np.random.default_rng(0).normal(size=(1797, 16))
    kw = {"n_components": n_components, "whiten": whiten}
    pooled = PCA(svd_solver="covariance_eigh", **kw).fit(X)
    fed = FederatedPCA(**kw).fit(X, clients=_sites(len(X), n_sites))
    assert fed.n_components_ == pooled.n_components_
    _assert_same(pooled, fed, ["components_", "explained_variance_", "explained_variance_ratio_",
                               "singular_values_", "mean_", "noise_variance_"], rtol=1e-8)
    np.testing.assert_allclose(fed.transform(X), pooled.transform(X), rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(fed.inverse_transform(fed.transform(X)),
                               pooled.inverse_transform(pooled.transform(X)), atol=1e-8)
    np.testing.assert_allclose(fed.score(X), pooled.score(X), rtol=1e-9)
    np.testing.assert_array_equal(fed.get_feature_names_out(), pooled.get_feature_names_out())


def test_pca_pools_a_large_fit_with_the_per_site_ledger(monkeypatch):
    # From MIN_ROWS_PER_THREAD rows, fit computes one reply from every site's rows:
    # the model equals the per-site run's to round-off, the ledger byte for byte.
    import sklearn_fed.protocol._simulate as simulate

    rng = np.random.default_rng(0)
    X = rng.normal(size=(20_000, 6)) @ rng.normal(size=(6, 6)) + 3.0
    sites = rng.choice(np.array(["a", "bb", "ccc"]), size=len(X))
    pooled_rounds = []
    pool_round = simulate.pool_round
    monkeypatch.setattr(simulate, "pool_round", lambda *args: pooled_rounds.append(
        pool_round(*args)) or pooled_rounds[-1])
    fed = FederatedPCA(n_components=3).fit(X, clients=sites)
    assert pooled_rounds == [True, False]  # the round pooled, then none is left
    with simulate_through_bytes():  # never pooled: each site's message, as sent
        per_site = FederatedPCA(n_components=3).fit(X, clients=sites)
    assert pooled_rounds == [True, False]
    assert fed.communication_ == per_site.communication_
    _assert_same(per_site, fed, ["components_", "explained_variance_", "singular_values_",
                                 "mean_", "noise_variance_"], rtol=1e-12)
    fed = FederatedPCA(n_components=3).fit(X[:300], clients=sites[:300])  # small: per site
    assert True not in pooled_rounds[2:]


def test_pca_keeps_digits_at_large_offsets():
    """The merged centered Gram has no cancellation: offsets of 1e4 lose nothing.

    PCA's own covariance_eigh forms X^T X - n m m^T and loses digits there; the
    exact reference is the SVD of the centered rows (svd_solver="full").
    """
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 5)) @ rng.normal(size=(5, 5)) + 1e4
    exact = PCA(svd_solver="full").fit(X)
    fed = FederatedPCA().fit(X, clients=_sites(300, 7))
    np.testing.assert_allclose(fed.components_, exact.components_, atol=1e-11)
    np.testing.assert_allclose(fed.singular_values_, exact.singular_values_, rtol=1e-12)


def test_pca_float32_and_sparse():
    X = load_digits().data[:, 8:24].astype(np.float32)
    fed = FederatedPCA(n_components=4).fit(X, clients=_sites(len(X), 7))
    pooled = PCA(n_components=4, svd_solver="covariance_eigh").fit(X)
    assert fed.components_.dtype == np.float32
    np.testing.assert_allclose(fed.explained_variance_, pooled.explained_variance_, rtol=1e-4)
    sparse = sp.random(300, 6, density=0.4, format="csr", random_state=0)
    fed = FederatedPCA(n_components=3).fit(sparse, clients=_sites(300, 7))
    pooled = PCA(n_components=3, svd_solver="covariance_eigh").fit(sparse)
    np.testing.assert_allclose(fed.explained_variance_, pooled.explained_variance_, rtol=1e-10)


# ------------------------------------------------------------- deployment
@pytest.mark.parametrize("estimator", [
    FederatedStandardScaler(), FederatedMinMaxScaler(), FederatedSimpleImputer(),
    FederatedPCA(n_components=2), FederatedOneHotEncoder(),
])
def test_transformers_are_identical_through_bytes(estimator):
    X = np.round(load_diabetes().data[:120, :4] * 30)
    sites = _sites(120, 7)
    in_process = estimator.fit(X, clients=sites).transform(X)
    with simulate_through_bytes():
        through_bytes = estimator.fit(X, clients=sites).transform(X)
    if sp.issparse(in_process):
        in_process, through_bytes = in_process.toarray(), through_bytes.toarray()
    np.testing.assert_array_equal(in_process, through_bytes)


def test_transformer_reply_with_a_lie_is_refused():
    X = load_diabetes().data[:60]
    scaler = FederatedStandardScaler()
    server = scaler.make_server()
    tasks = server.next_tasks(["honest", "liar"])
    from sklearn_fed.protocol import Frame, decode, encode

    honest = scaler.make_client().respond(tasks["honest"], X[:30])
    frame = decode(scaler.make_client().respond(tasks["liar"], X[30:]))
    frame.arrays = {**frame.arrays, "m2": -np.asarray(frame.arrays["m2"])}
    forged = encode(Frame(frame.kind, frame.federation, frame.round, frame.site, frame.schema,
                          frame.fields, frame.arrays))
    with pytest.raises(InvalidClientMessage, match="client 'liar'.*m2"):
        server.receive({"honest": honest, "liar": forged})
    assert not hasattr(scaler, "mean_")


def test_warnings_free_on_regular_data():
    X = load_diabetes().data
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        FederatedStandardScaler().fit(X, clients=_sites(len(X), 7))
        FederatedPCA(n_components=3).fit(X, clients=_sites(len(X), 7))
