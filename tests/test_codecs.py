"""Uplink codecs: exact regeneration, unbiasedness, Lemma 1 and Lemma 3, byte counts."""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from sklearn_fed.neural_network._codecs import (  # noqa: E402
    FullCodec,
    LDPCodec,
    MPDDCodec,
    Message,
    QSGDCodec,
    TopKCodec,
    derive_seed,
    make_codec,
)


def _estimates(codec, g, n, seed0=0):
    d = g.shape[0]
    return torch.stack(
        [codec.decode(codec.encode(g, seed=derive_seed(seed0, r, 3)), d) for r in range(n)]
    ).double()


def test_server_regenerates_client_directions_bit_for_bit():
    d = 5000  # 192 directions per block: three blocks
    codec = MPDDCodec(n_directions=400)
    assert codec.block_rows(d) < codec.n_directions
    seed = derive_seed(7, 2, 11)
    client = torch.cat([b for _, b in codec.directions(seed, d)])
    server = torch.cat([b for _, b in codec.directions(seed, d)])
    assert client.shape == (400, d)
    assert torch.equal(client, server)
    assert set(torch.unique(client).tolist()) == {-1.0, 1.0}
    g = torch.randn(d, generator=torch.Generator().manual_seed(0))
    msg = codec.encode(g, seed=seed)
    torch.testing.assert_close(msg.payload["s"], client @ g, rtol=1e-5, atol=1e-3)
    decoded = codec.decode(msg, d)
    torch.testing.assert_close(decoded, client.T @ msg.payload["s"] / 400, rtol=1e-5, atol=1e-4)
    # another seed gives other directions
    other = torch.cat([b for _, b in codec.directions(seed + 10**6, d)])
    assert not torch.equal(client, other)


def test_derive_seed_distinct_over_rounds_and_clients():
    seeds = {derive_seed(0, r, c) for r in range(30) for c in range(30)}
    assert len(seeds) == 900
    assert all(0 <= s < 2**63 for s in seeds)


@pytest.mark.parametrize("direction", ["rademacher", "gaussian"])
def test_mpdd_estimate_is_unbiased(direction):
    d, m, n = 20, 5, 1200
    g = torch.linspace(-1.0, 2.0, d)
    est = _estimates(MPDDCodec(m, direction), g, n)
    gd = g.double()
    sq = float(gd @ gd)
    # per-coordinate variance of one estimate (derived in the docs)
    var = (sq - gd**2) / m if direction == "rademacher" else (sq + gd**2) / m
    z = (est.mean(0) - gd) / torch.sqrt(var / n)
    assert z.abs().max() < 4.5


@pytest.mark.parametrize("d, m", [(50, 10), (3, 1)])
def test_relative_squared_error_matches_lemma3(d, m):
    n = 1500
    g = torch.sin(torch.arange(d, dtype=torch.float32)) + 0.3
    est = _estimates(MPDDCodec(m), g, n)
    gd = g.double()
    rel = ((est - gd) ** 2).sum(1) / (gd @ gd)
    expected = (d - 1) / m
    se = rel.std() / math.sqrt(n)
    assert abs(rel.mean() - expected) < 4 * se, (float(rel.mean()), expected, float(se))


def test_rademacher_variance_below_gaussian_lemma1():
    # total variance: Rademacher (d - 1)/m ||g||^2, Gaussian (d + 1)/m ||g||^2;
    # per coordinate the gap is 2 g_j^2 / m (the paper's Lemma 1 states 2 ||g||^2 I).
    d, m, n = 3, 1, 2000
    g = torch.tensor([1.0, -2.0, 0.5])
    gd = g.double()
    rad = _estimates(MPDDCodec(m, "rademacher"), g, n)
    gau = _estimates(MPDDCodec(m, "gaussian"), g, n, seed0=1)
    rel_rad = (((rad - gd) ** 2).sum(1) / (gd @ gd)).mean()
    rel_gau = (((gau - gd) ** 2).sum(1) / (gd @ gd)).mean()
    assert rel_rad < rel_gau
    assert abs(rel_rad - (d - 1) / m) < 0.15 * (d - 1) / m
    assert abs(rel_gau - (d + 1) / m) < 0.15 * (d + 1) / m
    gap = gau.var(0) - rad.var(0)
    torch.testing.assert_close(gap, 2 * gd**2 / m, rtol=0.25, atol=0.2)


def test_fedpdd_single_direction_is_projection():
    codec = MPDDCodec(1)
    g = torch.tensor([1.0, 2.0, 3.0, 4.0])
    msg = codec.encode(g, seed=5)
    u = next(codec.directions(5, 4))[1][0]
    torch.testing.assert_close(codec.decode(msg, 4), (u @ g) * u)


@pytest.mark.parametrize(
    "codec, formula",
    [
        (MPDDCodec(37), lambda d: 4 * 37 + 8),
        (FullCodec(), lambda d: 4 * d),
        (QSGDCodec(255), lambda d: 4 + math.ceil(d * 9 / 8)),
        (QSGDCodec(1), lambda d: 4 + math.ceil(d * 2 / 8)),
        (TopKCodec(5), lambda d: 8 * 5),
        (LDPCodec("gaussian", 1.0), lambda d: 4 * d),
        (LDPCodec("laplace", 1.0), lambda d: 4 * d),
    ],
)
def test_message_bytes_equal_formula(codec, formula):
    for d in (13, 1000):
        g = torch.randn(d, generator=torch.Generator().manual_seed(d))
        msg = codec.encode(g, seed=1)
        assert msg.nbytes == codec.nbytes(d) == formula(d)
        assert codec.decode(msg, d).shape == (d,)


def test_qsgd_unbiased_and_topk_exact():
    g = torch.tensor([0.5, -1.5, 0.0, 2.0, -0.25])
    codec = QSGDCodec(levels=2)
    est = torch.stack([codec.decode(codec.encode(g, seed=s), 5) for s in range(1500)]).double()
    torch.testing.assert_close(est.mean(0), g.double(), atol=0.08, rtol=0)
    top = TopKCodec(2)
    torch.testing.assert_close(top.decode(top.encode(g, seed=0), 5),
                               torch.tensor([0.0, -1.5, 0.0, 2.0, 0.0]))


@pytest.mark.parametrize("noise, var", [("gaussian", 0.25), ("laplace", 2 * 0.5**2)])
def test_ldp_noise_has_stated_variance(noise, var):
    codec = LDPCodec(noise, scale=0.5)
    g = torch.zeros(20000)
    noisy = codec.decode(codec.encode(g, seed=3), 20000).double()
    assert abs(noisy.mean()) < 0.03
    assert abs(noisy.var() - var) < 0.06 * var


def test_bad_arguments_and_messages_rejected():
    with pytest.raises(ValueError, match="n_directions"):
        MPDDCodec(0)
    with pytest.raises(ValueError, match="direction"):
        MPDDCodec(3, "uniform")
    with pytest.raises(ValueError, match="uplink"):
        make_codec("zip")
    codec = MPDDCodec(4)
    with pytest.raises(ValueError, match="4 finite values"):
        codec.decode(Message("mpdd", {"s": torch.ones(3), "seed": 1}), 10)
    with pytest.raises(ValueError, match="4 finite values"):
        codec.decode(Message("mpdd", {"s": torch.tensor([1.0, np.nan, 0, 0]), "seed": 1}), 10)
    with pytest.raises(ValueError, match="flat"):
        codec.encode(torch.ones(2, 2), seed=0)


def test_directions_do_not_depend_on_block_size(monkeypatch):
    from sklearn_fed.neural_network import _codecs

    codec = MPDDCodec(203)
    d = 1000
    whole = torch.cat([b for _, b in codec.directions(99, d)])
    monkeypatch.setattr(_codecs, "BLOCK_ELEMENTS", 64 * 1000)  # 64 directions per block
    assert codec.block_rows(d) == 64
    blocked = torch.cat([b for _, b in codec.directions(99, d)])
    assert torch.equal(whole, blocked)


@pytest.mark.parametrize("d", [1, 7, 8, 13, 1000])
def test_compiled_and_numpy_sign_loops_agree(d):
    # The numba loops generate each row themselves; the numpy path and the
    # inspection API (sign_rows) must see exactly the same signs.
    from sklearn_fed.neural_network import _sign_kernels as kernels

    groups, seed = 5, derive_seed(1, 2, 3)
    rng = np.random.default_rng(d)
    g, s = rng.standard_normal(d), rng.standard_normal(8 * groups)
    dense = kernels.SIGNS[kernels.sign_rows(seed, d, 0, groups)]  # (groups, d, 8)
    dense = dense.transpose(0, 2, 1).reshape(8 * groups, d)
    for encode, decode in [(kernels._encode, kernels._decode),
                           (kernels._encode_numpy, kernels._decode_numpy)]:
        got = np.empty(8 * groups)
        encode(seed, d, g, got)
        np.testing.assert_allclose(got, dense @ g, rtol=1e-12, atol=1e-12)
        out = np.ones(d)  # decode adds into its output
        decode(seed, d, s, out)
        np.testing.assert_allclose(out, 1 + dense.T @ s, rtol=1e-12, atol=1e-12)


def test_sign_bits_are_balanced_and_independent_across_rows():
    from sklearn_fed.neural_network._sign_kernels import sign_rows

    bits = np.unpackbits(sign_rows(derive_seed(0, 0, 0), 4096, 0, 64), axis=1)
    assert abs(bits.mean() - 0.5) < 3 * 0.5 / math.sqrt(bits.size)
    # directions are uncorrelated: off-diagonal correlations ~ N(0, 1/d)
    signs = (2.0 * bits.reshape(64, 4096, 8).transpose(0, 2, 1).reshape(512, 4096)) - 1
    corr = signs @ signs.T / 4096
    off = corr[~np.eye(512, dtype=bool)]
    assert np.abs(off).max() < 6 / math.sqrt(4096)
    assert abs(off.std() * math.sqrt(4096) - 1) < 0.05
