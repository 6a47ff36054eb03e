"""Validation of untrusted statistics: one message in O(d^2), the merge once.

A server checks every :class:`~sklearn_fed.statistics.ClientStatistics` it
reads (:func:`validate_statistics`, behind
:meth:`ClientStatistics.validate <sklearn_fed.statistics.ClientStatistics.validate>`),
then the merged statistics once before solving (:func:`check_aggregate`),
blaming the message that broke them. The magnitude caps :data:`MAX_MEAN`,
:data:`MAX_WEIGHT` and :data:`MAX_SECOND` are shared with the estimators
that read statistics in other shapes (:mod:`sklearn_fed.linear_model`).
"""

import math

import numpy as np
from scipy import linalg

from ..protocol._errors import InvalidClientMessage, failing
from ..protocol._errors import who as _who
from ._inplace import _max_abs, _row_chunks, lend_upper, lendable, restore_upper

__all__ = [
    "MAX_MEAN",
    "MAX_SECOND",
    "MAX_WEIGHT",
    "check_aggregate",
    "most_extreme_client",
    "parts_within_caps",
    "validate_statistics",
]

# The arrays of a message in each form (what is checked, and what travels).
_ARRAYS = ("x_mean", "y_mean", "gram", "moment", "target_ss")
_FACTOR_ARRAYS = ("x_mean", "y_mean", "factor")

# Magnitude caps of a message. No real data comes near them, and they make the
# server safe: merging up to 2**32 messages (Chan terms <= W * (2 * mean)^2 <=
# 4.3e84 * 4e150) and solving cannot overflow float64 (max ~1.8e308).

#: Cap on the magnitude of a mean (``x_mean``, ``y_mean``) in a message; the
#: estimators that read statistics in other shapes apply the same cap.
MAX_MEAN = 1e75
#: Cap on a message's ``weight_sum`` (and on any weight a server sums).
MAX_WEIGHT = 1e75
#: Cap on the magnitude of a second moment (``gram``, ``moment``,
#: ``target_ss``); ``sqrt(MAX_SECOND)`` bounds a factor's entries.
MAX_SECOND = 1e200
# Relative round-off allowed in a computed Gram entry (far above what a
# blocked float64 computation loses, far below any real inconsistency).
_RELATIVE_SLACK = 1e-6
# Round-off allowed in a centered entry relative to its raw (uncentered) scale:
# thousands of times what blocked float64 sums lose, a billionth of any real signal.
_ROUNDOFF = 1e-12
_TINY = 1e-300
# A Gram is accepted as PSD when its Jacobi-scaled form (unit diagonal) plus
# this times the identity has a Cholesky factor.
_PSD_TOLERANCE = 1e-7


def validate_statistics(stats, client, n_features, n_targets, psd, *, symmetric):
    """:meth:`ClientStatistics.validate <sklearn_fed.statistics.ClientStatistics.validate>`
    of ``stats``, check by check in a fixed order; the first that fails raises.

    ``symmetric``: the Gram is known to be symmetric bit for bit (it came as a
    :class:`~sklearn_fed.protocol.SymmetricMatrix`). Returns ``stats``.

    Raises
    ------
    InvalidClientMessage
        Naming ``client`` and the first check that failed.
    """
    fail = failing(client)
    n = stats.n_samples
    if isinstance(n, np.integer):  # a numpy integer is read as an int
        n = int(n)
    if not (type(n) is int and 0 < n < 2**63):
        fail(f"n_samples must be a positive integer below 2**63, got {stats.n_samples!r}.")
    weight = stats.weight_sum
    if not (isinstance(weight, (int, float, np.floating, np.integer))
            and not isinstance(weight, bool)
            and math.isfinite(weight) and 0 <= weight <= MAX_WEIGHT):
        fail(f"weight_sum must be a finite number in [0, {MAX_WEIGHT:g}], got {weight!r}.")
    if not (type(stats.centered) is bool and type(stats.single_target) is bool):
        fail("centered and single_target must be booleans.")
    for name in _ARRAYS if stats.factor is None else _FACTOR_ARRAYS:
        value = getattr(stats, name)
        if not (isinstance(value, np.ndarray) and value.dtype == np.float64):
            fail(f"{name} must be a float64 ndarray, got "
                 f"{getattr(value, 'dtype', type(value).__name__)}.")
    if stats.x_mean.ndim != 1 or stats.y_mean.ndim != 1:
        fail("x_mean and y_mean must be vectors.")
    d, t = stats.n_features, stats.n_targets
    if d == 0 or (t == 0 and n_targets != 0):  # no targets only when asked for
        fail("has no features or no targets.")
    if stats.single_target and t != 1:
        fail(f"declares a single target but has {t}.")
    if n_features is not None and d != n_features:
        fail(f"has {d} features, expected {n_features}.")
    if n_targets is not None and t != n_targets:
        fail(f"has {t} targets, expected {n_targets}.")
    if stats.factor is not None:
        return _validate_factor(stats, fail, weight, n)
    for name, want in (("gram", (d, d)), ("moment", (d, t)), ("target_ss", (t,))):
        if getattr(stats, name).shape != want:
            fail(f"{name} has shape {getattr(stats, name).shape}, expected {want}.")
    _check_caps(stats, fail, x_mean=MAX_MEAN, y_mean=MAX_MEAN, moment=MAX_SECOND,
                target_ss=MAX_SECOND)
    diag = np.diag(stats.gram)
    if not _gram_plainly_valid(stats.gram, diag, symmetric):
        _check_gram(stats, fail, diag)
    _check_targets(stats, fail, diag)
    _check_no_second_moments(stats, fail, weight, n)
    if psd and not _is_psd(stats.gram):
        fail("gram is not positive semi-definite.")
    return stats


def _check_targets(stats, fail, diag):
    """Non-negative target sums of squares, and ``moment_ij^2 <= gram_ii target_ss_j``
    (with the round-off allowances of :func:`_check_gram`)."""
    target_ss = stats.target_ss
    if np.any(target_ss < -_RELATIVE_SLACK * np.max(target_ss, initial=0.0) - _TINY):
        fail("target_ss is negative.")
    root = np.sqrt(np.maximum(diag, 0.0))
    raw_x, raw_y = _raw_scales(stats)
    target_root = np.sqrt(np.maximum(target_ss, 0.0))
    bound = np.outer(root, target_root)
    roundoff = _ROUNDOFF * np.outer(raw_x, raw_y)
    if np.any(np.abs(stats.moment) > bound * (1 + _RELATIVE_SLACK) + roundoff + _TINY):
        fail("moment violates the Cauchy-Schwarz bound of gram and target_ss.")


def _check_no_second_moments(stats, fail, weight, n):
    """Zero second moments (either form) where there can be none: a zero weight sum, or
    one centered row (minus its own mean: zero up to the round-off of that mean)."""
    if weight == 0:
        why = "a zero weight sum"
    elif stats.centered and n == 1:
        why = "one centered row"
    else:
        return
    if stats.factor is not None:  # |R| bounds the roots of the second moments
        room = math.sqrt(weight) * _RELATIVE_SLACK * max(
            float(np.max(np.abs(stats.x_mean), initial=0.0)),
            float(np.max(np.abs(stats.y_mean), initial=0.0))) + _TINY
        nonzero = np.max(np.abs(stats.factor), initial=0.0) > room
    else:
        x_room = weight * (_RELATIVE_SLACK * stats.x_mean) ** 2 + _TINY
        y_room = weight * (_RELATIVE_SLACK * stats.y_mean) ** 2 + _TINY
        nonzero = np.any(np.diag(stats.gram) > x_room) or np.any(stats.target_ss > y_room)
    if nonzero:
        fail(f"has {why} but non-zero second moments.")


def _check_gram(stats, fail, diag):
    """The Gram's caps, symmetry, diagonal and Cauchy-Schwarz bounds, each with its
    round-off allowance (what :func:`_gram_plainly_valid` could not prove)."""
    _check_caps(stats, fail, gram=MAX_SECOND)
    root = np.sqrt(np.maximum(diag, 0.0))
    raw_x, _ = _raw_scales(stats)
    # d x d work in place: three temporaries.
    limit = np.outer(root, root)
    # Round-off allowance of a computed Gram entry: relative to its own pair,
    # and to the pair's raw magnitudes (a column constant at a site has a zero
    # centered variance but cross-products at the round-off of its mean).
    slack = np.multiply(limit, _RELATIVE_SLACK)
    slack += _TINY
    work = np.outer(raw_x, raw_x, out=np.empty_like(limit))
    work *= _ROUNDOFF
    slack += work
    np.subtract(stats.gram, stats.gram.T, out=work)
    if np.any(np.abs(work, out=work) > slack):
        fail("gram is not symmetric.")
    if np.any(diag < -_RELATIVE_SLACK * np.max(diag, initial=0.0) - _TINY):
        fail("gram has a negative diagonal entry.")
    limit += slack
    if np.any(np.abs(stats.gram, out=work) > limit):
        fail("gram violates the Cauchy-Schwarz bound gram_ij^2 <= gram_ii gram_jj.")


def _check_caps(stats, fail, **caps):
    """Finite values within the magnitude caps that keep merging overflow-free."""
    for name, cap in caps.items():
        value = getattr(stats, name)
        largest = _max_abs(value)  # NaN if any entry is NaN
        if largest <= cap:  # the common case: one reduction
            continue
        if not np.all(np.isfinite(value)):
            fail(f"{name} contains NaN or infinity.")
        if largest > cap:
            fail(f"{name} has entries beyond {cap:g} in magnitude (no real data does; "
                 "such values could overflow the merge).")


def _validate_factor(stats, fail, weight, n):
    """The checks of the factor form. ``R^T R`` is positive semi-definite and
    obeys Cauchy-Schwarz by construction; what remains is its shape, finite
    values within the caps (``|R| <= sqrt(cap)`` bounds ``R^T R``), and
    no second moments from a zero weight sum or a single centered row."""
    width = stats.n_features + stats.n_targets
    shape = stats.factor.shape
    if len(shape) != 2 or shape[1] != width or shape[0] > width:
        fail(f"factor has shape {shape}, expected (n_rows <= {width}, {width}).")
    _check_caps(stats, fail, x_mean=MAX_MEAN, y_mean=MAX_MEAN,
                factor=math.sqrt(MAX_SECOND))
    _check_no_second_moments(stats, fail, weight, n)
    return stats


def _raw_scales(stats):
    """Square roots of the raw (uncentered) second moments of each feature and target."""
    with np.errstate(over="ignore", invalid="ignore"):
        if stats.centered:
            raw_x = np.diag(stats.gram) + stats.weight_sum * stats.x_mean**2
            raw_y = stats.target_ss + stats.weight_sum * stats.y_mean**2
        else:
            raw_x, raw_y = np.diag(stats.gram), stats.target_ss
    return np.sqrt(np.maximum(raw_x, 0.0)), np.sqrt(np.maximum(raw_y, 0.0))


def _gram_plainly_valid(gram, diag, symmetric):
    """Whether ``gram`` passes every Gram check of :meth:`ClientStatistics.validate`
    with no round-off allowance needed: a fast sufficient test (False proves nothing).

    Positive finite diagonal well within the cap, exact symmetry (skipped
    when ``symmetric`` says it holds by construction), and
    ``|gram_ij| <= c_i c_j`` with ``c = sqrt(diag (1 + slack / 2))``, read
    row by row as ``max_j |gram_ij| / c_j <= c_i``: three passes over one
    temporary instead of the dozen of the full check. Any NaN fails it.
    """
    if not (np.all(diag > 0) and np.max(diag) <= MAX_SECOND / 2):
        return False
    if not (symmetric or np.array_equal(gram, gram.T)):
        return False
    scale = np.sqrt(diag * (1 + _RELATIVE_SLACK / 2))
    for rows, ratios in _row_chunks(gram):
        np.divide(gram[rows], scale, out=ratios)
        if not np.all(np.abs(ratios, out=ratios).max(axis=1) <= scale[rows]):
            return False
    return True


def _is_psd(gram, *, in_place=False):
    """PSD test on the Jacobi-scaled Gram: a tolerance relative to every pair of features.

    Features with a zero variance are scaled by 1, so a non-zero entry in
    their row fails unless it is negligible against the other feature.

    With ``in_place`` (for a Gram no one else reads meanwhile), a Gram that
    is symmetric bit for bit lends its upper triangle as the work array (see
    :func:`lend_upper`) and gets it back unchanged: no d x d allocation.
    """
    diag = np.diag(gram)
    inverse = 1.0 / np.sqrt(np.where(diag > 0, diag, 1.0))

    def scale(rows, part, mirror):
        # The upper part of these rows of the scaled, symmetrized Gram (all that
        # the factorization reads); ``part`` holds gram[rows], ``mirror`` the
        # same entries of gram.T.
        upper = slice(rows.start, None)
        np.add(part[:, upper], mirror, out=part[:, upper])
        part[:, upper] *= 0.5 * inverse[rows, None]
        part[:, upper] *= inverse[upper]
        np.einsum("ii->i", part[:, rows])[...] += _PSD_TOLERANCE  # the diagonal

    if in_place and lendable(gram):
        # lend_upper checked that the rows equal their mirror: add them to themselves
        # (the same bits), without reading the mirror again.
        saved = lend_upper(gram, lambda rows, part: scale(rows, part, part[:, rows.start:]))
        if saved is not None:
            try:
                return _cholesky_succeeds(gram.T)
            finally:
                restore_upper(gram, saved)
    # One d x d work array, made row chunk by row chunk.
    scaled = np.empty_like(gram, dtype=np.float64)
    for rows, part in _row_chunks(gram):
        np.copyto(part, gram[rows])
        scale(rows, part, gram[rows.start:, rows].T)
        scaled[rows, rows.start:] = part[:, rows.start:]
    return _cholesky_succeeds(scaled.T)


def _cholesky_succeeds(matrix):
    """Whether LAPACK factors the lower triangle of the Fortran-ordered ``matrix`` (in place)."""
    try:
        # cho_factor leaves the other triangle alone (cholesky would zero it).
        linalg.cho_factor(matrix, lower=True, overwrite_a=True, check_finite=False)
    except linalg.LinAlgError:
        return False
    return True


def check_aggregate(aggregate, messages, *, in_place=False):
    """Check merged statistics once before solving; blame the message that broke them.

    The server validates each message in O(d^2) (:meth:`ClientStatistics.validate`
    with ``psd=False``) and the merge once here: finite and positive
    semi-definite. When the merge is not PSD, the messages are tested one by
    one so the error names the client responsible.

    Parameters
    ----------
    aggregate : ClientStatistics
    messages : dict
        Client label -> ClientStatistics that were merged.
    in_place : bool, default=False
        Whether the aggregate's Gram is the caller's own (no one else reads
        it meanwhile): the PSD test then borrows its upper triangle as work
        space and restores it, instead of allocating a d x d array.

    Raises
    ------
    InvalidClientMessage
    """
    names = _ARRAYS if aggregate.factor is None else _FACTOR_ARRAYS
    # _max_abs is NaN or inf exactly when an entry is: no d x d boolean temporary.
    finite = all(np.isfinite(_max_abs(getattr(aggregate, name))) for name in names) and (
        math.isfinite(aggregate.weight_sum))
    if finite and (aggregate.factor is not None  # R^T R is PSD by construction
                   or _is_psd(aggregate.gram, in_place=in_place)):
        return
    for label, stats in messages.items():
        if stats.factor is None and not _is_psd(stats.gram):
            raise InvalidClientMessage(
                f"{_who(label)}: gram is not positive semi-definite.", label
            )
    label = most_extreme_client(messages)
    raise InvalidClientMessage(
        f"{_who(label)}: the merged statistics are not finite and positive semi-definite "
        "(this client's message has the largest entries).",
        label,
    )


def parts_within_caps(stats, fewest_weight):
    """Whether the statistics of any part of these rows, of weight at least ``fewest_weight``,
    pass the magnitude caps of :meth:`ClientStatistics.validate` (Gram form, already valid).

    The caps are the only per-message checks real, finite rows can fail
    while their union passes: a part's centered second moments are at most
    the whole's (the whole adds positive semi-definite mean-shift terms, and
    ``|moment_jt| <= sqrt(gram_jj target_ss_t)`` for the part), and a part's
    mean is within ``sqrt(gram_jj / weight)`` of the whole's (its shift term
    ``weight (mean - whole mean)^2`` is one of those terms; uncentered: of
    zero). Half of each cap is kept as room for round-off. A server that
    pools the rows of a round in simulation (:mod:`sklearn_fed.linear_model`)
    asks this of the pooled statistics, so that pooling never accepts what
    the sites' own messages would have been refused for.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_fed.statistics import ClientStatistics
    >>> def stats(*column):
    ...     return ClientStatistics.from_data(np.array(column)[:, None], np.zeros(len(column)))
    >>> parts_within_caps(stats(1.0, 3.0), 1)
    True

    The two rows below average to 0, but a site holding one of them sends
    a mean beyond the cap of 1e75:

    >>> parts_within_caps(stats(2e75, -2e75), 1)
    False
    """
    if stats.factor is not None:
        return False
    second = (stats.gram, stats.moment, stats.target_ss)
    if any(_max_abs(value) > MAX_SECOND / 2 for value in second):
        return False
    x_room = np.sqrt(np.maximum(np.diag(stats.gram), 0.0) / fewest_weight)
    y_room = np.sqrt(np.maximum(stats.target_ss, 0.0) / fewest_weight)
    if stats.centered:
        x_room += np.abs(stats.x_mean)
        y_room += np.abs(stats.y_mean)
    return bool(np.all(x_room <= MAX_MEAN / 2) and np.all(y_room <= MAX_MEAN / 2))


def most_extreme_client(messages):
    """The label whose statistics hold the largest magnitude (whom to blame for overflow)."""

    def magnitude(stats):
        return max(float(_max_abs(getattr(stats, name))) for name in _ARRAYS)

    return max(messages, key=lambda label: magnitude(messages[label]))
