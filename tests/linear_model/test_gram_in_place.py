"""The server's Gram lends its upper triangle to the PSD check and the solve: no second d x d."""

import numpy as np
import pytest

from sklearn_fed import ClientStatistics, FederatedRidge, InvalidClientMessage
from sklearn_fed.linear_model._solver import _solve_gram
from sklearn_fed.statistics import StreamingMerge
from sklearn_fed.statistics._inplace import _CHUNK_BYTES, lend_upper, restore_upper
from sklearn_fed.statistics._validation import _is_psd


def _gram(d, seed=0, rank=None):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((rank or 2 * d, d)) * rng.uniform(0.1, 10.0, d)
    gram = A.T @ A
    return np.triu(gram) + np.triu(gram, 1).T  # symmetric bit for bit, as merges keep it


# d = 1,000: one Gram is 8 MB, the row chunks of the in-place work 1 MB each
# (_CHUNK_BYTES), so the fit's extra memory is the Gram it keeps plus about a
# quarter of one; a second d x d work array (the PSD check's, the solve's or
# an np.abs of the Gram, as before) makes it at least 2.
@pytest.mark.parametrize("solver", ["cholesky", "auto"])
def test_pooled_fit_holds_one_gram(solver, peak_memory):
    n, d = 1200, 1000
    rng = np.random.default_rng(0)
    X = rng.standard_normal((n, d))
    y = X[:, 0] + rng.standard_normal(n)
    clients = np.arange(n) % 4
    assert _CHUNK_BYTES <= 8 * d * d / 4  # the work arrays stay small next to the Gram
    fit = lambda: FederatedRidge(solver=solver).fit(X, y, clients=clients)
    assert peak_memory(fit) / (8 * d * d) < 1.5  # in d x d float64 matrices


@pytest.mark.parametrize("d", [40, 700])  # one row chunk; several
@pytest.mark.parametrize("alpha", [1.0, 1e-12, np.array([1.0, 1e-12, 1.0])])
@pytest.mark.parametrize("rank", [None, 30])  # Cholesky; eigen fallback for tiny alpha
def test_in_place_solve_gives_the_same_bits_and_restores_the_gram(d, alpha, rank):
    gram = _gram(d, rank=rank)
    original = gram.copy()
    moment = np.random.default_rng(1).standard_normal((d, 3))
    expected = _solve_gram(gram.copy(), moment, alpha)
    got = _solve_gram(gram, moment, alpha, in_place=True)
    assert got[1] == expected[1]
    np.testing.assert_array_equal(got[0], expected[0])
    np.testing.assert_array_equal(gram, original)


@pytest.mark.parametrize("d", [40, 700])
def test_in_place_psd_check_agrees_and_restores_the_gram(d):
    gram = _gram(d)
    not_psd = gram.copy()
    not_psd[-1, -1] = -1.0
    for matrix, expected in [(gram, True), (not_psd, False)]:
        original = matrix.copy()
        assert _is_psd(matrix) is expected
        assert _is_psd(matrix, in_place=True) is expected
        np.testing.assert_array_equal(matrix, original)


# Found in the first row chunk; in the last one (the chunks above restored).
@pytest.mark.parametrize("row", [0, 698])
def test_gram_not_symmetric_bit_for_bit_is_left_alone(row):
    gram = _gram(700)
    gram[row, row + 1] *= 1 + 2 * np.finfo(float).eps  # round-off asymmetry
    original = gram.copy()
    filled = []

    def fill(rows, part):
        filled.append(rows)
        part.fill(np.nan)

    assert lend_upper(gram, fill) is None
    assert (len(filled) > 0) == (row > 0)  # rows lent before the asymmetry was found
    np.testing.assert_array_equal(gram, original)
    moment = np.ones((700, 1))
    expected = _solve_gram(gram.copy(), moment, 1.0)
    np.testing.assert_array_equal(_solve_gram(gram, moment, 1.0, in_place=True)[0], expected[0])
    assert _is_psd(gram, in_place=True)
    np.testing.assert_array_equal(gram, original)


def test_lend_and_restore_round_trip():
    gram = _gram(500)
    original = gram.copy()
    diagonal = lend_upper(gram, lambda rows, part: part.fill(np.nan))
    lower = np.tril_indices(500, -1)
    np.testing.assert_array_equal(gram[lower], original[lower])  # the backup
    assert np.isnan(gram[np.triu_indices(500)]).all()
    restore_upper(gram, diagonal)
    np.testing.assert_array_equal(gram, original)


def test_read_only_gram_is_solved_from_a_copy():
    gram = _gram(300)
    gram.flags.writeable = False
    moment = np.ones((300, 1))
    np.testing.assert_array_equal(_solve_gram(gram, moment, 1.0, in_place=True)[0],
                                  _solve_gram(gram, moment, 1.0)[0])
    assert _is_psd(gram, in_place=True)


def test_a_single_message_is_not_the_mergers_own():
    rng = np.random.default_rng(0)
    stats = [ClientStatistics.from_data(rng.standard_normal((20, 3)), rng.standard_normal(20))
             for _ in range(2)]
    one, two, owned = StreamingMerge(), StreamingMerge(), StreamingMerge(owned=True)
    one.add(stats[0])
    owned.add(stats[0])
    for s in stats:
        two.add(s)
    assert not one.owns_result and two.owns_result and owned.owns_result


def test_failed_check_leaves_messages_and_model_unchanged():
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((300, 200)), rng.standard_normal(300)
    good = [ClientStatistics.from_data(X[i::3], y[i::3]) for i in range(3)]
    model = FederatedRidge().fit_statistics(good)
    coef, gram = model.coef_.copy(), model._aggregate.gram.copy()
    # Within every per-message check (pairwise Cauchy-Schwarz), not PSD: the server's
    # PSD test of the merge (on its own Gram, in place) fails, then each message's.
    bad = ClientStatistics.from_data(100 * X[:50], y[:50])
    root = np.sqrt(np.diag(bad.gram)[:3])
    correlation = np.array([[1.0, 0.9, 0.9], [0.9, 1.0, -0.9], [0.9, -0.9, 1.0]])
    bad.gram[:3, :3] = correlation * np.outer(root, root)
    messages = good + [bad]
    grams = [m.gram.copy() for m in messages]
    with pytest.raises(InvalidClientMessage, match="client 3: gram is not positive"):
        model.fit_statistics(messages)
    for message, original in zip(messages, grams):
        np.testing.assert_array_equal(message.gram, original)
    np.testing.assert_array_equal(model.coef_, coef)
    np.testing.assert_array_equal(model._aggregate.gram, gram)


def test_signed_zeros_count_as_asymmetric():
    gram = _gram(50)
    gram[3, 7], gram[7, 3] = -0.0, 0.0
    original = gram.copy()
    assert lend_upper(gram, lambda rows, part: part.fill(np.nan)) is None
    np.testing.assert_array_equal(gram.view(np.int64), original.view(np.int64))
