"""FederatedRidgeCV's site: its messages and :class:`CVClient`."""

import copy

import numpy as np
from sklearn.utils.extmath import safe_sparse_dot

from ..protocol import BlockwiseClient, InvalidClientMessage
from ..protocol._fields import reply_error, server_error
from ..protocol._schema import count_rows
from ..statistics import ClientStatistics
from ._base import requested_form, task_field, task_step
from ._ridge_cv_algebra import _through_spectrum


# ------------------------------------------------------------- messages
def _pack(named):
    """Several statistics in one message: fields and arrays prefixed by name."""
    fields, arrays = {}, {}
    for name, stats in named.items():
        f, a = stats.to_payload()
        fields.update({f"{name}.{k}": v for k, v in f.items()})
        arrays.update({f"{name}.{k}": v for k, v in a.items()})
    return fields, arrays


def _unpack(fields, arrays, site):
    """The statistics of a reply made by :func:`_pack`, validated, by name."""
    unprefixed = sorted(key for key in [*fields, *arrays] if "." not in key)
    if unprefixed:
        reply_error(site, f"unexpected entries {unprefixed} (every entry is "
                          "'<statistics>.<name>').")
    named = {}  # name -> (fields, arrays)
    for i, entries in enumerate((fields, arrays)):
        for key, value in entries.items():
            name, _, part = key.partition(".")
            named.setdefault(name, ({}, {}))[i][part] = value
    return {name: ClientStatistics.from_payload(*named[name], client=site, psd=False)
            for name in sorted(named)}


def fold_codes(folds, n_folds):
    """Fold membership as codes of shape (n_rows, n_folds), or None if malformed.

    Codes: 0 the row is in neither set of the fold, 1 in its training set,
    2 held out. ``folds`` is either those codes or, one entry per row, the
    fold in which the row is held out, ``-1`` for none (as
    :class:`~sklearn.model_selection.PredefinedSplit`'s ``test_fold``: a row
    is in the training set of every fold that does not hold it out).

    Examples
    --------
    >>> fold_codes(np.array([0, 1, -1]), 2)
    array([[2, 1],
           [1, 2],
           [1, 1]], dtype=int8)
    """
    folds = np.asarray(folds)
    if folds.dtype.kind not in "iu" or n_folds < 1:
        return None
    if folds.ndim == 1 and np.all((-1 <= folds) & (folds < n_folds)):
        return np.where(folds[:, None] == np.arange(n_folds), 2, 1).astype(np.int8)
    if folds.ndim == 2 and folds.shape[1] == n_folds and np.isin(folds, (0, 1, 2)).all():
        return folds
    return None


def fold_parts(codes):
    """``(name, rows)`` of each non-empty part of each fold of ``codes`` (see
    :func:`fold_codes`): ``"train{j}"`` its training rows, ``"test{j}"`` its held-out rows."""
    for j in range(codes.shape[1]):
        for code, part in ((1, "train"), (2, "test")):
            rows = np.flatnonzero(codes[:, j] == code)
            if rows.size:
                yield f"{part}{j}", rows


def _task_array(task, name, *shape):
    """A task's array of this shape (``None``: any length), checked: tasks are untrusted."""
    value = task.arrays.get(name)
    if not (isinstance(value, np.ndarray) and value.ndim == len(shape)
            and all(n in (None, m) for n, m in zip(shape, value.shape))):
        got = value.shape if isinstance(value, np.ndarray) else "none"
        server_error(f"task array {name!r} must have shape {shape} (None: any length), "
                     f"got {got}.")
    return value


class _Block:
    """A :class:`CVClient` answer over one block of a site's rows, before packing: the
    ``named`` statistics of a statistics step, or its ``fields`` and ``arrays`` (those in
    ``_SUMMED`` add, the others follow in row order); ``whole``: it used the fold membership."""

    def __init__(self, fields=None, arrays=None, *, named=None, whole=False):
        self.fields, self.arrays, self.named, self.whole = fields, arrays, named, whole


#: Arrays of a leave-one-out answer that are sums over rows.
_SUMMED = ("e1", "e2", "sst")


class CVClient(BlockwiseClient):
    """A site of :class:`FederatedRidgeCV`: statistics, leave-one-out sums, predictions.

    Task steps: ``"statistics"`` (the site's statistics; with an
    ``n_folds`` field, also those of its rows in each fold's training set
    and held-out set); ``"leave_one_out"`` (given the pooled spectrum: per
    alpha, sums of the leave-one-out residuals, and on request every row's
    value); ``"predict"`` (given models: predictions and targets of the rows
    each model holds out, all of them for key ``""``, its held-out rows of
    fold ``j`` for key ``"j"``).

    The fold membership is the site's own (``folds``) unless the task
    carries a ``folds`` array of codes the server assigned it.

    Every answer is a reduction over the site's rows (statistics merge,
    sums add, per-row values follow in row order), so the rows may come in
    blocks (Dask partitions), except for answers that use the fold
    membership, which indexes the site's rows: they need one block.

    Parameters
    ----------
    estimator, key, policy, site
        As :class:`~sklearn_fed.protocol.Client`.
    folds : array-like of shape (n_rows,) or (n_rows, n_folds), default=None
        With ``cv`` a splitter: this site's rows' fold membership, one entry
        per row of the ``X`` it answers from (see :func:`fold_codes`). In
        ``fit``'s simulation one role answers for every site from the pooled
        ``X``: it holds the column of the pooled rows, and each site reads
        its own rows' entries of it, as it reads its rows of ``X``.
    """

    protocol = "ridge.cv"

    def __init__(self, estimator, *, key=None, policy=None, site=None, folds=None):
        super().__init__(estimator, key=key, policy=policy, site=site)
        self.folds = None if folds is None else np.asarray(folds)

    def replies_are_independent(self, tasks):
        # Every step reads only the task, the site's rows and its folds (no state kept).
        return type(self) is CVClient

    def for_rows(self, task, n_rows, rows):
        """This role for the rows ``rows`` of an ``X`` of ``n_rows`` rows, for a role that
        selects the rows before it computes (a classifier's site encodes its labels first):
        a copy whose fold column holds only those rows' entries, or ``self``."""
        if self.folds is None or rows is None:
            return self
        role = copy.copy(self)
        role.folds = self._own_folds(task, n_rows, rows)
        return role

    def _own_folds(self, task, n_rows, rows):
        """The site's own fold column for its rows ``X[rows]`` (``X`` has ``n_rows`` rows)."""
        if self.folds.shape[:1] != (n_rows,):
            raise ValueError(
                f"site {task.site!r}: its fold membership has {self.folds.shape[:1]} entries "
                f"for {n_rows} rows; give one per row.")
        return self.folds if rows is None else self.folds[rows]

    def membership(self, task, X, rows):
        """The codes (n_site_rows, n_folds) of the site's rows ``X[rows]``, None without folds:
        the task's ``folds`` when the server assigned them, else the site's own."""
        if "n_folds" not in task.fields:
            return None
        n_folds = task_field(task, "n_folds", int)
        given = task.arrays.get("folds")
        if given is not None:  # assigned by the server, for this site's rows
            if self.folds is not None:
                raise ValueError(
                    f"site {task.site!r}: the task assigns this site's folds, but it holds its "
                    "own (make_client(folds=...)); give only one of them.")
            codes = fold_codes(given, n_folds)
            if codes is None or codes.shape[0] != count_rows(X.shape[0], rows):
                raise InvalidClientMessage("server: malformed fold membership.", "server")
            return codes
        if self.folds is None:
            raise ValueError(
                f"site {task.site!r}: cv is a splitter, but this site holds no fold "
                "membership of its rows; give it to its client role "
                "(make_client(folds=...)).")
        codes = fold_codes(self._own_folds(task, X.shape[0], rows), n_folds)
        if codes is None:
            raise ValueError(
                f"site {task.site!r}: its fold membership must be, for {n_folds} folds, each "
                f"row's held-out fold in [-1, {n_folds}) or codes of shape (n_rows, "
                f"{n_folds}) in {{0, 1, 2}}.")
        return codes

    def summarize(self, task, X, y, sample_weight, rows):
        step = task_step(task, ("statistics", "leave_one_out", "predict"))
        folds = self.membership(task, X, rows)
        if rows is not None:
            X, y = X[rows], y[rows]
            sample_weight = None if sample_weight is None else sample_weight[rows]
        y = np.asarray(y, dtype=np.float64)
        y2 = y.reshape(y.shape[0], -1)
        if step == "statistics":
            named = self._statistics(task, X, y, sample_weight, folds)
            return _Block(named=named, whole=folds is not None)
        if step == "leave_one_out":
            return _Block(*self._leave_one_out(task, X, y2, sample_weight))
        arrays = self._predict(task, X, y2, sample_weight, folds)
        return _Block({}, arrays, whole=folds is not None)

    def merge(self, first, second):
        if first.whole or second.whole:
            raise ValueError(
                "the task uses the site's fold membership, which indexes its rows, so they "
                "must come in one block; put each site's rows in one partition.")
        if first.named is not None:
            return _Block(named={name: stats.merge(second.named[name])
                                 for name, stats in first.named.items()})
        fields = {name: value + second.fields[name] for name, value in first.fields.items()}
        arrays = {
            name: value + second.arrays[name] if name in _SUMMED
            else np.concatenate([value, second.arrays[name]])
            for name, value in first.arrays.items()
        }
        return _Block(fields, arrays)

    def finish(self, task, summary):
        if summary.named is not None:
            return _pack(summary.named)
        return summary.fields, summary.arrays

    def _statistics(self, task, X, y, sample_weight, folds):
        centered = task_field(task, "centered", bool)
        factor = requested_form(task) == "factor"

        def stats(index=None):
            return ClientStatistics.from_data(
                X, y, sample_weight, centered=centered, rows=index, factor=factor,
                check_input=False,
            )

        named = {"all": stats()}
        if folds is not None:
            named.update((name, stats(index)) for name, index in fold_parts(folds))
        return named

    def _leave_one_out(self, task, X, y, sample_weight):
        """Sums of the site's leave-one-out residuals (every row's value on request).

        The leave-one-out predictions (n_rows, n_targets, n_alphas) are in
        closed form. With ``z = Q^T (x - x_mean)``: the full-data prediction is
        ``y_mean + z . (Q^T h / (l + alpha))``, the leverage ``h = w sum z^2 /
        (l + alpha) (+ w / W with an intercept)``, and the leave-one-out
        residual is the residual divided by ``1 - h`` (exact for ridge, no refit).

        When the pooled rows are linearly independent (``interpolating``: as
        many nonzero eigenvalues as rows, less one with an intercept, e.g. wide
        data), every row has leverage 1 at ``alpha = 0`` and fits exactly, so
        residual and ``1 - h`` are both ``O(alpha)``: computed as differences
        they would lose ``log10(l / alpha)`` digits. Their exact expansions
        ``alpha sum z p / (l (l + alpha))`` and ``alpha w sum z^2 / (l (l +
        alpha))`` are used instead, and ``alpha`` cancels in the ratio.
        """
        d, t = X.shape[1], y.shape[1]
        alphas = _task_array(task, "alphas", None)
        basis = _task_array(task, "basis", d, None)
        eigenvalues = _task_array(task, "eigenvalues", basis.shape[1])
        projected = _task_array(task, "projected", basis.shape[1], t)
        x_mean, y_mean = _task_array(task, "x_mean", d), _task_array(task, "y_mean", t)
        centered = task_field(task, "centered", bool)
        Z = safe_sparse_dot(X, basis, dense_output=True)
        if centered:
            Z = Z - x_mean @ basis
        w = np.ones(X.shape[0]) if sample_weight is None else sample_weight
        inverse = 1.0 / (eigenvalues[:, None] + alphas)  # (k, n_alphas)
        fitted = _through_spectrum(Z, projected, inverse)
        if centered:
            fitted += y_mean[None, :, None]
        leverage = w[:, None] * ((Z * Z) @ inverse)
        if centered:
            leverage += (w / task_field(task, "weight_sum", float))[:, None]
        with np.errstate(divide="ignore", invalid="ignore"):  # leverage 1: as RidgeCV, inf/NaN
            held_out = (y[:, :, None] - fitted) / (1.0 - leverage[:, None, :])
        small = alphas <= (eigenvalues.min() if eigenvalues.size else 0.0)
        if task.fields.get("interpolating") is True and np.any(small):
            # For alpha below the spectrum the differences lose the most digits.
            inverse = 1.0 / (eigenvalues[:, None] * (eigenvalues[:, None] + alphas[small]))
            held_out[:, :, small] = _through_spectrum(Z, projected, inverse) / (
                w[:, None, None] * ((Z * Z) @ inverse)[:, None, :])
        predictions = y[:, :, None] - held_out
        residual = y[:, :, None] - predictions
        sums = {
            "e1": np.tensordot(w, residual, axes=1),
            "e2": np.tensordot(w, residual**2, axes=1),
            "sst": w @ (y - y_mean) ** 2,
        }
        fields = {"count": int(X.shape[0]), "weight": float(w.sum())}
        kept = task.fields.get("keep_rows")
        if kept == "squared_errors":
            sums["rows"] = w[:, None, None] * residual**2
        elif kept in ("predictions", "scoring"):
            sums["rows"] = predictions
        if kept == "scoring":
            sums["targets"] = y
            sums["weights"] = w
        return fields, sums

    def _predict(self, task, X, y, sample_weight, folds):
        d = X.shape[1]
        arrays = {}
        for name in [name for name in task.arrays if name.startswith("coef")]:
            key = name[len("coef"):]
            coef = _task_array(task, name, d, None, None)
            intercept = _task_array(task, f"intercept{key}", *coef.shape[1:])
            if key == "":  # the model that holds out all of the site's rows
                index = np.arange(X.shape[0])
            elif (folds is not None and key.isascii() and key.isdigit()
                  and int(key) < folds.shape[1]):
                index = np.flatnonzero(folds[:, int(key)] == 2)  # its held-out rows of fold j
            else:
                raise InvalidClientMessage("server: malformed predict task.", "server")
            flat = safe_sparse_dot(X[index], coef.reshape(d, -1), dense_output=True)
            arrays[f"predictions{key}"] = flat.reshape(index.size, *coef.shape[1:]) + intercept
            arrays[f"targets{key}"] = y[index]
            arrays[f"weights{key}"] = (
                np.ones(index.size) if sample_weight is None else sample_weight[index]
            )
        return arrays

