"""ClientStatistics: exact computation, merging, serialization and validation."""

import dataclasses
import hashlib
import json
import struct

import numpy as np
import pytest
import scipy.sparse as sp

from sklearn_fed import ClientStatistics, InvalidClientMessage, merge_statistics
from sklearn_fed.statistics import StreamingMerge
from sklearn_fed.statistics._validation import _check_gram, _gram_plainly_valid


def _reference(X, y, w, centered=True):
    """Two-pass float64 reference computed on a full centered copy."""
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64).reshape(len(y), -1)
    W = w.sum()
    mx, my = w @ X / W, w @ y / W
    if centered:
        X, y = X - mx, y - my
    return W, mx, my, (X * w[:, None]).T @ X, (X * w[:, None]).T @ y, w @ (y * y)


def _assert_close(stats, ref, rtol=1e-12):
    W, mx, my, gram, moment, tss = ref
    assert stats.weight_sum == pytest.approx(W, rel=1e-14)
    np.testing.assert_allclose(stats.x_mean, mx, rtol=1e-12, atol=1e-14 * np.abs(mx).max())
    np.testing.assert_allclose(stats.y_mean, my, rtol=1e-12, atol=1e-14)
    scale = np.abs(gram).max()
    np.testing.assert_allclose(stats.gram, gram, rtol=0, atol=rtol * scale)
    np.testing.assert_allclose(stats.moment, moment, rtol=0, atol=rtol * np.abs(moment).max())
    np.testing.assert_allclose(stats.target_ss, tss, rtol=rtol)


@pytest.mark.parametrize("centered", [True, False])
@pytest.mark.parametrize("weighted", [False, True])
def test_from_data_matches_reference(centered, weighted, monkeypatch):
    # Small blocks so the blocked path and its Chan merges are exercised.
    monkeypatch.setattr("sklearn_fed.statistics._kernels._BLOCK_BYTES", 8 * 4 * 7)
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(101, 4)), rng.normal(size=(101, 2))
    w = rng.uniform(0, 2, size=101) if weighted else np.ones(101)
    stats = ClientStatistics.from_data(X, y, w if weighted else None, centered=centered)
    _assert_close(stats, _reference(X, y, w, centered))
    assert stats.n_samples == 101 and not stats.single_target


def test_offset_1e6_keeps_precision(monkeypatch):
    monkeypatch.setattr("sklearn_fed.statistics._kernels._BLOCK_BYTES", 8 * 3 * 50)
    rng = np.random.default_rng(1)
    noise = rng.normal(size=(2000, 3))
    X = noise + 1e6
    y = noise @ [1.0, 2.0, 3.0]
    stats = ClientStatistics.from_data(X, y)
    exact = np.cov(noise.T, bias=True) * 2000  # centered Gram does not see the offset
    np.testing.assert_allclose(stats.gram, exact, rtol=1e-9)
    # The naive raw-Gram formula loses every digit at this offset.
    naive = X.T @ X - 2000 * np.outer(X.mean(0), X.mean(0))
    assert np.abs(naive - exact).max() > 1e-3 * np.abs(exact).max()


def test_rows_subset_and_sparse_match_dense():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(60, 5)) * (rng.uniform(size=(60, 5)) < 0.4)
    y, w = rng.normal(size=60), rng.uniform(size=60)
    rows = np.flatnonzero(rng.uniform(size=60) < 0.5)
    dense = ClientStatistics.from_data(X, y, w, rows=rows)
    subset = ClientStatistics.from_data(X[rows], y[rows], w[rows])
    sparse = ClientStatistics.from_data(sp.csr_matrix(X), y, w, rows=rows)
    for other in (subset, sparse):
        np.testing.assert_allclose(dense.gram, other.gram, atol=1e-12)
        np.testing.assert_allclose(dense.moment, other.moment, atol=1e-12)
        np.testing.assert_allclose(dense.target_ss, other.target_ss, rtol=1e-12)
        assert dense.n_samples == other.n_samples == len(rows)


def test_float32_accumulates_in_float64():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(500, 3)).astype(np.float32)
    stats = ClientStatistics.from_data(X, X[:, 0])
    assert stats.gram.dtype == np.float64
    _assert_close(stats, _reference(X, X[:, 0], np.ones(500)), rtol=1e-10)


@pytest.mark.parametrize("centered", [True, False])
def test_merge_is_exact_for_any_partition(centered):
    rng = np.random.default_rng(4)
    X = rng.normal(size=(300, 4)) + 1e6 * rng.uniform(size=4)
    y = rng.normal(size=300)
    w = rng.uniform(size=300)
    clients = rng.integers(0, 17, size=300)
    parts = [
        ClientStatistics.from_data(X, y, w, centered=centered, rows=np.flatnonzero(clients == k))
        for k in range(17)
    ]
    whole = ClientStatistics.from_data(X, y, w, centered=centered)
    merged = merge_statistics(parts)
    np.testing.assert_allclose(merged.gram, whole.gram, rtol=1e-9, atol=1e-9 * np.abs(whole.gram).max())
    np.testing.assert_allclose(merged.moment, whole.moment, rtol=1e-9, atol=1e-9 * np.abs(whole.moment).max())
    np.testing.assert_allclose(merged.x_mean, whole.x_mean, rtol=1e-14)
    assert merged.n_samples == 300


def test_merge_rejects_incompatible():
    a = ClientStatistics.from_data(np.ones((3, 2)), np.ones(3))
    with pytest.raises(ValueError, match="features"):
        a.merge(ClientStatistics.from_data(np.ones((3, 3)), np.ones(3)))
    with pytest.raises(ValueError, match="centered"):
        a.merge(ClientStatistics.from_data(np.ones((3, 2)), np.ones(3), centered=False))


def _stats(seed=5, d=4, t=1):
    rng = np.random.default_rng(seed)
    y = rng.normal(size=(40, t)) if t > 1 else rng.normal(size=40)
    return ClientStatistics.from_data(rng.normal(size=(40, d)), y)


@pytest.mark.parametrize("t", [1, 3])
def test_bytes_round_trip_is_exact(t):
    stats = _stats(t=t)
    data = stats.to_bytes()
    assert len(data) == stats.nbytes
    back = ClientStatistics.from_bytes(data)
    for field in dataclasses.fields(stats):
        np.testing.assert_array_equal(getattr(back, field.name), getattr(stats, field.name))


def test_wire_format_has_no_pickle_and_documented_header():
    data = _stats().to_bytes()
    assert data[:8] == b"SKFEDMSG"
    version, flags, meta_length = struct.unpack_from("<HHI", data, 8)
    assert (version, flags) == (2, 0)
    meta = json.loads(data[16 : 16 + meta_length])
    assert meta["kind"] == "ridge.statistics/reply"
    assert meta["fields"] == {
        "n_samples": 40, "weight_sum": 40.0, "centered": True, "single_target": True
    }
    assert [entry[0] for entry in meta["arrays"]] == [
        "x_mean", "y_mean", "gram", "moment", "target_ss"
    ]
    d = 4
    assert len(data) == 16 + meta_length + 8 * (d + 1 + d * (d + 1) // 2 + d + 1) + 32
    assert b"\x80\x04" not in data[:2]  # not a pickle protocol header


def test_format_1_messages_are_still_read():
    """Statistics saved by sklearn-fed 0.1 (magic SKFEDSTA) still parse, exactly."""
    stats = _stats()
    d, t = stats.n_features, stats.n_targets
    header = struct.pack("<8sHHIIQd", b"SKFEDSTA", 1, 3, d, t, stats.n_samples,
                         stats.weight_sum)
    upper = np.triu_indices(d)
    payload = np.concatenate([stats.x_mean, stats.y_mean, stats.gram[upper],
                              stats.moment.ravel(), stats.target_ss]).astype("<f8")
    body = header + payload.tobytes()
    old = ClientStatistics.from_bytes(body + hashlib.sha256(body).digest())
    np.testing.assert_array_equal(old.gram, stats.gram)
    np.testing.assert_array_equal(old.moment, stats.moment)
    with pytest.raises(InvalidClientMessage, match="checksum"):
        ClientStatistics.from_bytes(body + bytes(32))
    # every other refusal of a format-1 message names the client too
    signed = body + hashlib.sha256(body).digest()
    for data, message in [
        (signed[:40], "message is truncated .* shorter than the fixed header"),
        (signed[:8] + struct.pack("<H", 2) + signed[10:], "version 2"),
        (signed[:12] + struct.pack("<I", 0) + signed[16:], "implausible shape n_features=0"),
        (signed + bytes(8), "header announces .* \\(truncated or padded\\)"),
    ]:
        with pytest.raises(InvalidClientMessage, match="client 'x': .*" + message):
            ClientStatistics.from_bytes(data, client="x")


def test_truncated_message_names_the_client():
    data = _stats().to_bytes()
    for cut in (0, 10, len(data) - 1):
        with pytest.raises(InvalidClientMessage, match="client 'site-7'") as info:
            ClientStatistics.from_bytes(data[:cut], client="site-7")
        assert info.value.client == "site-7"


def test_tampered_message_fails_checksum():
    data = bytearray(_stats().to_bytes())
    data[60] ^= 1
    with pytest.raises(InvalidClientMessage, match="checksum"):
        ClientStatistics.from_bytes(bytes(data), client=3)


def test_bad_magic_and_version():
    data = bytearray(_stats().to_bytes())
    with pytest.raises(InvalidClientMessage, match="magic"):
        ClientStatistics.from_bytes(b"X" + bytes(data[1:]))
    data[8] = 9
    with pytest.raises(InvalidClientMessage, match="version 9"):
        ClientStatistics.from_bytes(bytes(data))


def _with(stats, **changes):
    return dataclasses.replace(stats, **changes)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda s: {"n_samples": 0}, "n_samples must be a positive integer"),
        (lambda s: {"weight_sum": -1.0}, "weight_sum"),
        (lambda s: {"x_mean": s.x_mean * np.nan}, "x_mean contains NaN"),
        (lambda s: {"gram": s.gram - 10 * np.abs(s.gram).max() * np.eye(4)}, "negative diagonal"),
        (lambda s: {"gram": s.gram + np.diag([0, 0, 0, 1e-3]) @ np.ones((4, 4))}, "not symmetric"),
        (lambda s: {"target_ss": -s.target_ss}, "target_ss is negative"),
        (lambda s: {"moment": s.moment * 1e6}, "Cauchy-Schwarz"),
        (lambda s: {"gram": s.gram[:3, :3]}, "gram has shape"),
    ],
)
def test_validation_rejects_impossible_statistics(change, message):
    stats = _stats()
    with pytest.raises(InvalidClientMessage, match=message):
        _with(stats, **change(stats)).validate(client="a")


def test_validation_rejects_indefinite_gram():
    stats = _stats()
    # Symmetric with a positive diagonal, but |G_01| > sqrt(G_00 G_11).
    gram = stats.gram.copy()
    gram[0, 1] = gram[1, 0] = 2 * np.sqrt(gram[0, 0] * gram[1, 1])
    bad = _with(stats, gram=gram)
    with pytest.raises(InvalidClientMessage, match="Cauchy-Schwarz bound gram_ij"):
        bad.validate()
    # Every 2x2 minor fine, yet indefinite: caught by the PSD test.
    corr = np.array([[1.0, 0.9, -0.9], [0.9, 1.0, 0.9], [-0.9, 0.9, 1.0]])
    assert np.linalg.eigvalsh(corr).min() < -0.5
    bad = _with(stats, gram=corr, moment=np.zeros((3, 1)), x_mean=np.zeros(3))
    with pytest.raises(InvalidClientMessage, match="positive semi-definite"):
        bad.validate()
    bad.validate(psd=False)  # the O(d^2) checks alone cannot see it


@pytest.mark.parametrize("seed", range(40))
def test_fast_gram_check_never_accepts_what_the_full_check_refuses(seed):
    """``_gram_plainly_valid`` is a sufficient test: True only where ``_check_gram`` passes."""
    rng = np.random.default_rng(seed)
    stats = _stats()
    d = stats.n_features
    gram = stats.gram.copy()
    i, j = rng.choice(d, 2, replace=False)
    bound = np.sqrt(gram[i, i] * gram[j, j])
    # Entries around the Cauchy-Schwarz bound (both sides of its round-off
    # allowance), asymmetric by an ulp, NaN, a zero diagonal, beyond the cap.
    kind = seed % 5
    if kind == 0:
        gram[i, j] = gram[j, i] = bound * (1 + rng.choice([-1e-9, 1e-7, 1e-6, 2e-6, 1e-3]))
    elif kind == 1:
        gram[i, j] = np.nextafter(gram[i, j], np.inf)
    elif kind == 2:
        gram[i, j] = gram[j, i] = np.nan
    elif kind == 3:
        gram[i, :] = gram[:, i] = 0.0
        gram[i, j] = gram[j, i] = rng.choice([0.0, 1e-300, 1e-3])
    else:
        gram *= rng.choice([1e199, 3e199, 1e200])
    diag = np.diag(gram)
    bad = _with(stats, gram=gram)

    def fail(reason):
        raise InvalidClientMessage(reason, None)

    for symmetric in (False, True) if kind != 1 else (False,):
        if _gram_plainly_valid(gram, diag, symmetric):
            _check_gram(bad, fail, diag)  # must not raise
    # A well-formed Gram takes the fast path.
    assert _gram_plainly_valid(stats.gram, np.diag(stats.gram), False)


def test_validation_of_expected_shape():
    with pytest.raises(InvalidClientMessage, match="has 4 features, expected 5"):
        _stats().validate(client=1, n_features=5)


def test_negative_sample_weight_is_rejected():
    with pytest.raises(ValueError, match="Negative values"):
        ClientStatistics.from_data(np.ones((2, 2)), np.ones(2), np.array([1.0, -1.0]))


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("offset", [0.0, 1e6])
def test_rows_of_a_shared_X_give_the_bits_of_the_site_alone(order, offset, monkeypatch):
    """Read in place, gathered by index, or F-ordered: the same bits as the site's own copy."""
    monkeypatch.setattr("sklearn_fed.statistics._kernels._BLOCK_BYTES", 8 * 7 * 40)  # 40-row blocks
    rng = np.random.default_rng(5)
    X = np.asarray(rng.normal(size=(500, 6)) + offset, order=order)
    y = rng.normal(size=(500, 1))
    for rows in (slice(30, 430), np.flatnonzero(rng.uniform(size=500) < 0.6)):
        shared = ClientStatistics.from_data(X, y, rows=rows, check_input=False)
        alone = ClientStatistics.from_data(np.ascontiguousarray(X[rows]), y[rows])
        for name in ("x_mean", "y_mean", "gram", "moment", "target_ss"):
            np.testing.assert_array_equal(getattr(shared, name), getattr(alone, name))


def test_unrepresentative_first_rows_fall_back_to_the_chan_path():
    """First rows at 1e6, the rest near 0: one shift would cancel digits; Chan does not."""
    rng = np.random.default_rng(6)
    noise = rng.normal(size=(3000, 3))
    X = noise.copy()
    X[:100] += 1e6
    stats = ClientStatistics.from_data(X, noise[:, 0])
    exact = np.cov(X.T, bias=True) * 3000
    np.testing.assert_allclose(stats.gram, exact, rtol=1e-9)


def test_constant_columns_center_to_exact_zeros():
    rng = np.random.default_rng(7)
    X = rng.normal(size=(300, 4))
    X[:, 1] = 0.1 + 1e6
    stats = ClientStatistics.from_data(X, np.full(300, 3.3))
    assert not stats.gram[1].any() and not stats.moment.any() and not stats.target_ss.any()


@pytest.mark.parametrize("weighted", [False, True])
def test_columns_constant_per_block_center_exactly_and_others_keep_their_spread(
        monkeypatch, weighted):
    from sklearn_fed.statistics import _kernels

    monkeypatch.setattr(_kernels, "_BLOCK_BYTES", 8 * 8 * 50)  # 50 rows per block
    rng = np.random.default_rng(8)
    X = rng.normal(size=(300, 6)) + 1e6  # an offset: the shifted (Chan) path
    X[:, 1] = 0.1 + 1e6  # constant everywhere
    X[:, 2] = np.repeat(rng.normal(size=6), 50) * 7.3  # constant on each block, not overall
    X[:, 3] = 1e6 + np.where(np.arange(300) % 2, 0.0, np.spacing(1e6))  # one ulp of spread
    w = rng.uniform(0.5, 2.0, size=300) if weighted else None
    stats = ClientStatistics.from_data(X, np.full(300, 3.3), w)
    assert not stats.gram[1].any() and not stats.moment.any() and not stats.target_ss.any()
    weights = np.ones(300) if w is None else w
    exact = np.cov(X.T, aweights=weights, bias=True) * weights.sum()
    np.testing.assert_allclose(stats.gram[2, 2], exact[2, 2], rtol=1e-9)
    assert stats.gram[3, 3] > 0  # a real (if tiny) spread is not rounded away


def _balanced_blocks(parts):
    """merge_statistics's tree written out: perfect blocks of 2^a, 2^b, ... parts, right-folded."""
    def balanced(block):
        if len(block) == 1:
            return block[0]
        return balanced(block[: len(block) // 2]).merge(balanced(block[len(block) // 2:]))

    blocks, start = [], 0
    for bit in reversed(range(len(parts).bit_length())):
        if len(parts) >> bit & 1:
            blocks.append(balanced(parts[start:start + 2**bit]))
            start += 2**bit
    merged = blocks.pop()
    while blocks:
        merged = blocks.pop().merge(merged)
    return merged


@pytest.mark.parametrize("n_parts", [1, 2, 3, 7, 8, 13])
def test_streaming_merge_is_the_balanced_tree_bit_for_bit(n_parts):
    rng = np.random.default_rng(n_parts)
    X, y = rng.normal(size=(20 * n_parts, 4)) * 1e3 + 7.0, rng.normal(size=20 * n_parts)
    parts = [ClientStatistics.from_data(X[i::n_parts], y[i::n_parts]) for i in range(n_parts)]
    merger = StreamingMerge()
    for stats in parts:
        merger.add(stats)
    assert len(merger) == n_parts.bit_count()  # one partial merge per bit of the count
    streamed, tree = merger.result(), _balanced_blocks(parts)
    for name in ("x_mean", "y_mean", "gram", "moment", "target_ss"):
        np.testing.assert_array_equal(getattr(streamed, name), getattr(tree, name))
        np.testing.assert_array_equal(getattr(merge_statistics(parts), name), getattr(tree, name))
    assert merger.result() is streamed
    with pytest.raises(ValueError, match="the stream has ended"):
        merger.add(parts[0])
    with pytest.raises(ValueError, match="at least one"):
        StreamingMerge().result()


def test_merging_never_modifies_the_messages():
    """Partial merges add in place into their own Gram; a caller's messages stay as given."""
    rng = np.random.default_rng(3)
    X, y = rng.normal(size=(70, 4)), rng.normal(size=70)
    parts = [ClientStatistics.from_data(X[i::7], y[i::7]) for i in range(7)]
    copies = [dataclasses.replace(p, gram=p.gram.copy(), moment=p.moment.copy(),
                                  target_ss=p.target_ss.copy()) for p in parts]
    merged = merge_statistics(parts)
    for part, copy in zip(parts, copies):
        for name in ("gram", "moment", "target_ss", "x_mean", "y_mean"):
            assert np.array_equal(getattr(part, name), getattr(copy, name))
    assert all(merged.gram is not part.gram for part in parts)
    # A stream that owns its messages gives the same bits.
    owned = StreamingMerge(owned=True)
    for copy in copies:
        owned.add(copy)
    assert np.array_equal(owned.result().gram, merged.gram)


def test_large_work_blocks_are_not_kept():
    """A Gram-sized work block (blocks of p rows at large d) is freed after use."""
    from sklearn_fed.statistics._kernels import _scratch, _workspace

    small = _scratch(10, 10, "test-keep")
    assert getattr(_workspace, "test-keep") is small.base
    large = _scratch(9000, 1000, "test-free")  # 72 MB
    assert large.shape == (9000, 1000) and not hasattr(_workspace, "test-free")
