"""FederatedLogisticRegression's Newton safeguards against a hostile site (issue 27).

One site of three answers every Newton round with a tampered message; the
server must refuse it naming that site (``on_invalid="raise"``), or leave it
out and fit the honest sites' pooled model (``"drop"``), and never name an
honest site, stall, or commit a non-finite model.
"""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import load_breast_cancer, make_classification
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler

from sklearn_fed import FederatedLogisticRegression
from sklearn_fed.linear_model import _logistic
from sklearn_fed.linear_model._logistic import origin_terms, site_newton_terms
from sklearn_fed.linear_model._newton import (
    SiteBounds,
    check_reply_terms,
    curvature_model,
    is_psd,
    loss_bracket,
)
from sklearn_fed.protocol import (
    BytesTransport,
    Frame,
    InvalidClientMessage,
    decode,
    encode,
    run_rounds,
)
from sklearn_fed.statistics import ClientStatistics

SITES = ("a", "b", "evil")


def _data():
    """Two features, three sites; pooled, the honest coefficients are large (~3 and ~-2)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(240, 2))
    y = (X @ [3.0, -2.0] + rng.logistic(size=240) > 0).astype(int)
    return X, y, np.array(SITES)[np.arange(240) % 3]


def _run(tamper, on_invalid="raise", estimator=None, X=None, y=None, sites=None):
    if X is None:
        X, y, sites = _data()
    model = estimator or FederatedLogisticRegression()
    server = model.make_server(on_invalid=on_invalid)
    labels = sorted(set(sites.tolist()))
    clients = {site: model.make_client() for site in labels}
    data = {site: (X[sites == site], y[sites == site]) for site in labels}
    run_rounds(server, BytesTransport(clients, data, tamper=tamper), labels)
    return server


def _newton_tamper(site_name, change):
    """Apply ``change(fields, arrays)`` to ``site_name``'s Newton replies (plain arrays)."""
    def tamper(site, reply):
        frame = decode(reply)
        if site != site_name or frame.fields.get("step") != "newton":
            return reply
        fields, arrays = dict(frame.fields), {k: np.array(v) for k, v in frame.arrays.items()}
        change(fields, arrays)
        return encode(Frame(frame.kind, frame.federation, frame.round, frame.site, frame.schema,
                            fields, arrays))
    return tamper


def _honest_fit(X, y, sites, keep=("a", "b")):
    rows = np.isin(sites, keep)
    return LogisticRegression(solver="newton-cholesky", tol=1e-14, max_iter=1000).fit(
        X[rows], y[rows])


# ------------------------------------------------------- each finding of issue 27
def test_an_asymmetric_hessian_is_refused_naming_its_site():
    """It passed the entrywise Cauchy-Schwarz check; sent as a plain (not packed) array."""
    def skew(fields, arrays):
        h = arrays["hessian"]
        h[0, 1] += 0.5 * np.sqrt(h[0, 0] * h[1, 1])  # still within Cauchy-Schwarz

    with pytest.raises(InvalidClientMessage, match="client 'evil'.*not symmetric") as caught:
        _run(_newton_tamper("evil", skew))
    assert caught.value.client == "evil"


def test_a_huge_finite_gradient_is_refused_naming_its_site():
    def huge(fields, arrays):
        arrays["gradient"][0] = 1e308

    with pytest.raises(InvalidClientMessage, match="client 'evil'.*gradient entry exceeds"):
        _run(_newton_tamper("evil", huge))


def test_a_hessian_beyond_its_cap_is_refused():
    def big(fields, arrays):
        arrays["hessian"] *= 1e6  # PSD and symmetric, but no rows of this site give it

    with pytest.raises(InvalidClientMessage, match="client 'evil'.*Hessian entry exceeds"):
        _run(_newton_tamper("evil", big))


def test_a_loss_of_1e300_is_refused_and_the_honest_sites_fit_their_model():
    """Issue 27: a site reporting a loss of 1e300 halved every step until max_iter
    (coef 1.36 instead of 3.89, with only a ConvergenceWarning)."""
    X, y, sites = _data()

    def inflate(fields, arrays):
        fields["loss"] = 1e300

    with pytest.raises(InvalidClientMessage, match="client 'evil'.*loss 1e\\+300 is incons"):
        _run(_newton_tamper("evil", inflate))
    with pytest.warns(UserWarning, match="inconsistent.*\\['evil'\\]") as caught:
        server = _run(_newton_tamper("evil", inflate), on_invalid="drop")
    assert not [w for w in caught if issubclass(w.category, ConvergenceWarning)]
    fitted = server.estimator
    assert list(server.dropped_) == ["evil"]
    reference = _honest_fit(X, y, sites)
    np.testing.assert_allclose(fitted.coef_, reference.coef_, atol=1e-8)
    np.testing.assert_allclose(fitted.intercept_, reference.intercept_, atol=1e-8)
    assert fitted.coef_[0, 0] > 2.0  # not stalled near the origin (the honest 2.38)


@pytest.mark.parametrize("shift", [5.0, -5.0])
def test_a_loss_off_its_convexity_bracket_is_refused(shift):
    """A loss within every cap that jumps where the site's own gradients do not allow
    (up: the server would back off; down: it would accept a worse point)."""
    seen = []

    def jump(fields, arrays):
        seen.append(fields["loss"])
        if len(seen) == 3:
            fields["loss"] += shift

    with pytest.raises(InvalidClientMessage, match="client 'evil'.*inconsistent with its own"):
        _run(_newton_tamper("evil", jump))


def test_a_constant_offset_of_the_loss_changes_nothing():
    """Differences decide, so an offset kept from the first Newton reply on is harmless
    (the origin's loss, W log 2, is the server's own: the first reply's bracket holds it
    to the first step's curvature)."""
    honest = _run(None).estimator

    def offset(fields, arrays):
        fields["loss"] += 1.0

    shifted = _run(_newton_tamper("evil", offset)).estimator
    np.testing.assert_array_equal(shifted.coef_, honest.coef_)


def test_an_indefinite_hessian_that_passes_cauchy_schwarz_is_refused_by_the_aggregate():
    """Entrywise |H_jl| <= sqrt(H_jj H_ll), yet indefinite: the aggregate's Cholesky fails,
    and only the site whose own Hessian is indefinite is named."""
    X, y, _ = _data()
    X = np.column_stack([X, np.random.default_rng(1).normal(size=len(y))])
    sites = np.array(["a", "b", "evil", "evil", "evil", "evil"])[np.arange(len(y)) % 6]

    def indefinite(fields, arrays):  # eigenvalues 2, 2, -1 (scaled) and 1
        h = arrays["hessian"]
        root = np.sqrt(np.diag(h))
        pattern = np.array([[1, 1, -1, 0], [1, 1, 1, 0], [-1, 1, 1, 0], [0, 0, 0, 1.0]])
        arrays["hessian"] = pattern * np.outer(root, root)

    with pytest.raises(InvalidClientMessage, match="client 'evil'.*not positive semi-def"):
        _run(_newton_tamper("evil", indefinite), X=X, y=y, sites=sites)
    with pytest.warns(UserWarning, match="inconsistent.*\\['evil'\\]") as caught:
        server = _run(_newton_tamper("evil", indefinite), on_invalid="drop", X=X, y=y,
                      sites=sites)
    # no stop at a last good iterate: without the culprit the sum is sound
    assert not [w for w in caught if issubclass(w.category, ConvergenceWarning)]
    assert list(server.dropped_) == ["evil"]
    reference = _honest_fit(X, y, sites)
    np.testing.assert_allclose(server.estimator.coef_, reference.coef_, atol=1e-8)


HOSTILE = {
    "flip gradient": lambda f, a: a.__setitem__("gradient", -a["gradient"]),
    "zero hessian": lambda f, a: a.__setitem__("hessian", np.zeros_like(a["hessian"])),
    "tiny hessian": lambda f, a: a.__setitem__("hessian", a["hessian"] * 1e-6),
    "halve loss": lambda f, a: f.__setitem__("loss", f["loss"] / 2),
    "zero loss": lambda f, a: f.__setitem__("loss", 0.0),
    "gradient at cap": lambda f, a: a.__setitem__("gradient", np.sign(a["gradient"]) * 10.0),
    "weight sum": lambda f, a: f.__setitem__("weight_sum", f["weight_sum"] * 2),
    "loss 1e300": lambda f, a: f.__setitem__("loss", 1e300),
}


@pytest.mark.parametrize("how", list(HOSTILE))
@pytest.mark.parametrize("on_invalid", ["raise", "drop"])
def test_honest_sites_are_never_named_after_a_hostile_round(how, on_invalid):
    """Whatever the hostile site sends: only it is named, the model is finite, and a fit
    that left it out is the honest sites' pooled model."""
    X, y, sites = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            server = _run(_newton_tamper("evil", HOSTILE[how]), on_invalid=on_invalid)
        except InvalidClientMessage as exc:
            assert exc.client == "evil" and "'evil'" in str(exc)
            return
    fitted = server.estimator
    assert set(server.dropped_) <= {"evil"}
    assert np.all(np.isfinite(fitted.coef_)) and np.all(np.isfinite(fitted.intercept_))
    if server.dropped_:
        reference = _honest_fit(X, y, sites)
        np.testing.assert_allclose(fitted.coef_, reference.coef_, atol=1e-8)


def test_a_site_consistent_with_its_own_messages_is_never_named():
    """The checks hold for honest terms at points far from the optimum, with offsets,
    weights, several classes, and without an intercept (the slack is round-off's)."""
    rng = np.random.default_rng(3)
    for n_classes, fit_intercept in [(2, True), (3, True), (4, False)]:
        X = rng.normal(size=(300, 4)) * [1, 10, 1e-3, 1] + [0, 1e4, 0, -5]
        y = rng.integers(0, n_classes, 300)
        weight = rng.random(300) * 3
        center = X.mean(axis=0) if fit_intercept else np.zeros(4)
        k = 1 if n_classes == 2 else n_classes
        indicators = np.eye(n_classes)[y]
        stats = ClientStatistics.from_data(X, indicators, weight, check_input=False)
        loss0, gradient0, block, _ = origin_terms(stats, center, k, n_classes, fit_intercept)
        bounds = SiteBounds(stats.weight_sum, np.diag(block).copy())
        previous = (np.zeros((k, 5)), loss0, gradient0)
        p = 5 if fit_intercept else 4
        for scale in [1e-3, 0.1, 1.0, 10.0, 300.0]:
            coef = rng.normal(size=(k, 5)) * scale / np.array([1, 10, 1e-3, 1, 1])
            if not fit_intercept:
                coef[:, 4] = 0
            loss, gradient, hessian = site_newton_terms(
                X, None, y, weight, coef, center, fit_intercept, n_classes)
            assert check_reply_terms(loss, weight.sum(), gradient, hessian, bounds, k,
                                     residual_bound=1.0, curvature_bound=0.25) is None
            delta = (coef - previous[0])[:, :p].ravel()
            curvature = curvature_model(delta, bounds, k, 0.25 if k == 1 else 0.5)
            low, high, change, slack = loss_bracket(previous[1], previous[2], gradient, delta,
                                                    curvature)
            assert low - slack <= loss <= high + slack
            assert -slack <= change <= curvature + slack
            assert is_psd(hessian)
            previous = (coef, loss, gradient)



@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("n_classes", [2, 3])
def test_site_terms_are_the_same_however_its_rows_are_given(monkeypatch, n_classes,
                                                            fit_intercept):
    """A site's rows of a shared X (a slice, an index array, a list, CSR, Fortran order)
    give the bits of its gathered rows; blocks of a few rows give them to round-off, and
    the user's X is never written."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(400, 6)) * [1, 10, 1, 1, 1, 1] + [0, 1e3, 0, 0, 0, -5]
    before = X.copy()
    index, weight = rng.integers(0, n_classes, 400), rng.random(400) * 2
    k = 1 if n_classes == 2 else n_classes
    coef, center = rng.normal(size=(k, 7)) * 0.1, X.mean(axis=0)
    rows = np.flatnonzero(rng.random(400) < 0.5)

    def terms(X, rows, site):
        return site_newton_terms(X, rows, index[site], weight[site], coef, center,
                                 fit_intercept, n_classes)

    reference = terms(X[rows], None, rows)
    for given in (rows, list(rows), rows.astype(np.int32)):
        for same_rows in (X, sp.csr_matrix(X), np.asfortranarray(X)):
            for got, expected in zip(terms(same_rows, given, rows), reference):
                np.testing.assert_array_equal(got, expected)
    for got, expected in zip(terms(X, slice(100, 300), slice(100, 300)),
                             terms(X[100:300].copy(), None, slice(100, 300))):
        np.testing.assert_array_equal(got, expected)
    monkeypatch.setattr(_logistic, "_BLOCK_BYTES", 8)  # blocks of p rows
    for got, expected in zip(terms(X, rows, rows), reference):
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12 * np.max(
            np.abs(expected)))
    monkeypatch.undo()
    assert np.all(terms(X, rows, rows)[2] == terms(X, rows, rows)[2].T)
    empty = terms(X, rows[:0], rows[:0])
    assert empty[0] == 0 and not np.any(empty[1]) and not np.any(empty[2])
    np.testing.assert_array_equal(X, before)


# ------------------------------------------------------- scikit-learn's failures
def test_wide_nearly_unpenalized_problem_converges_without_warning():
    """10 x 20 with C=1e30 (scikit-learn's test_newton_cholesky_fallback_to_lbfgs): the
    steps never shrink (separable rows), the loss flattens; no warning within 100 rounds."""
    X, y = make_classification(n_samples=10, n_features=20, random_state=42)
    for C in (1e30, np.inf):
        for n_sites in (1, 7):
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                fed = FederatedLogisticRegression(C=C, max_iter=100).fit(
                    X, y, clients=np.arange(10) % n_sites)
            assert fed.n_iter_[0] < 100
            np.testing.assert_array_equal(fed.predict(X), y)
            assert fed.predict_proba(X)[np.arange(10), y].min() > 1 - 1e-6


def test_C_inf_equals_unpenalized_newton_cholesky():
    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X)[:, :5]
    exact = LogisticRegression(C=np.inf, solver="newton-cholesky", tol=1e-14).fit(X, y)
    fed = FederatedLogisticRegression(C=np.inf).fit(X, y, clients=np.arange(len(y)) % 7)
    np.testing.assert_allclose(fed.coef_, exact.coef_, atol=1e-8)
    np.testing.assert_allclose(fed.intercept_, exact.intercept_, atol=1e-8)


@pytest.mark.parametrize("class_weight", [None, "balanced"])
def test_max_iter_zero_is_the_state_before_any_update(class_weight):
    X, y, sites = _data()
    with pytest.warns(ConvergenceWarning, match="max_iter=0"):
        fed = FederatedLogisticRegression(max_iter=0, class_weight=class_weight).fit(
            X, y, clients=sites)
    assert fed.n_iter_[0] == 0
    np.testing.assert_array_equal(fed.coef_, np.zeros((1, 2)))
    np.testing.assert_array_equal(fed.intercept_, [0.0])
    np.testing.assert_array_equal(fed.predict_proba(X), 0.5)


def test_sparsify_and_densify():
    X, y, sites = _data()
    fed = FederatedLogisticRegression().fit(X, y, clients=sites)
    dense = fed.coef_.copy()
    assert fed.sparsify() is fed and hasattr(fed.coef_, "toarray")
    np.testing.assert_array_equal(fed.predict(X), (X @ dense.T + fed.intercept_ > 0).ravel())
    assert fed.densify() is fed
    np.testing.assert_array_equal(fed.coef_, dense)


def test_balanced_weights_take_their_bounds_from_the_reply_at_the_origin():
    """With class_weight="balanced" Newton starts in round 2, at the origin: there a
    site's loss must be W log 2 and its Hessian gives its caps."""
    X, y, sites = _data()
    model = FederatedLogisticRegression(class_weight="balanced")

    def inflate(fields, arrays):
        fields["loss"] = 1e300

    with pytest.raises(InvalidClientMessage, match="client 'evil'.*origin must be"):
        _run(_newton_tamper("evil", inflate), estimator=model)
    with pytest.warns(UserWarning, match="inconsistent.*\\['evil'\\]"):
        server = _run(_newton_tamper("evil", inflate), on_invalid="drop",
                      estimator=FederatedLogisticRegression(class_weight="balanced"))
    assert list(server.dropped_) == ["evil"]
    # the class weights are the federation's (every site's counts in round 1)
    weights = dict(zip(server.classes_.tolist(), server.class_weight_))
    rows = sites != "evil"
    reference = LogisticRegression(class_weight=weights, solver="newton-cholesky",
                                   tol=1e-14).fit(X[rows], y[rows])
    np.testing.assert_allclose(server.estimator.coef_, reference.coef_, atol=1e-8)

    def huge(fields, arrays):
        arrays["gradient"][0] = 1e308

    with pytest.raises(InvalidClientMessage, match="client 'evil'.*gradient entry exceeds"):
        _run(_newton_tamper("evil", huge), estimator=model)
