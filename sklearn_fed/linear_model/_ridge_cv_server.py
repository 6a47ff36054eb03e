"""FederatedRidgeCV's server: :class:`FederatedRidgeCVServer`."""

import numpy as np
from sklearn.base import is_classifier
from sklearn.model_selection import check_cv

from .._compat import scorer_parts
from ..protocol import label_key, sorted_labels
from ..protocol._fields import reply_array, reply_error, reply_number
from ..statistics import merge_statistics
from ..statistics._validation import MAX_WEIGHT as _MAX_WEIGHT
from ._base import StatisticsServer
from ._ridge_cv_algebra import (
    POOLED,
    _complements,
    _first_best,
    _held_out_sums,
    _IdentityRegressor,
    _ridge_path,
    _scorer_kind,
    _spectrum,
    _Sums,
)
from ._ridge_cv_client import _unpack, fold_codes, fold_parts
from ._solver import _solve_gram, solve_statistics


class FederatedRidgeCVServer(StatisticsServer):
    """Server of :class:`FederatedRidgeCV` (its rounds are in the estimator's docstring).

    It merges the sites' statistics and sums and chooses alpha. It never
    learns where a site's rows stand among everyone's: per-row values come
    site by site in ``clients_`` order (``fit`` puts ``cv_results_`` in
    ``X``'s order itself), and with ``cv`` a splitter it knows only how many
    folds there are (the sites know which of their rows are in which).

    Attributes
    ----------
    n_folds : int or None
        For ``cv`` a splitter: the number of folds, sent in the statistics
        task (each site answers for its rows in each fold). None (default):
        ``folds``' count if set, else ``cv``'s ``get_n_splits()`` (an int,
        ``KFold``, ``GroupKFold``, a list of splits, ...); set it for a
        splitter that counts its folds from the rows (``LeaveOneGroupOut``).
        ``fit`` sets it to the number of splits it drew.
    folds : dict or None
        For ``cv`` a splitter, fold membership the server *assigns*:
        ``{site: ndarray (n_rows, n_folds)}`` of codes (0 neither, 1
        training, 2 held out) for each site's rows in the order the site
        holds them, sent in that site's tasks. None (default, and ``fit``):
        every site holds its own (``make_client(folds=...)``) and the tasks
        carry only ``n_folds``.
    """

    protocol = "ridge.cv"

    def __init__(self, estimator, **kwargs):
        super().__init__(estimator, **kwargs)
        self.step = "statistics"
        self.n_folds = None
        self.folds = None
        self._n_folds = self._assigned = None
        self._site_arrays = None

    # ---------------------------------------------------------------- plan
    def _request(self, step, fields=None, site_arrays=None):
        """Ask for one more round of ``step``; ``site_arrays(site)`` gives each task's arrays."""
        self.step = step
        self._site_arrays = site_arrays
        self.request_round(step=step, form=self.form, **(fields or {}))

    def plan(self, sites):
        if self._next_round != self.round:
            return {}
        splitter = self.estimator.cv is not None and not isinstance(self.estimator.cv, str)
        fields = {"step": self.step, "centered": bool(self.estimator.fit_intercept)}
        if self.step == "statistics" and splitter:
            fields["n_folds"] = self._plan_folds(sites)
            self._site_arrays = self._assigned_folds
        if self.step == "statistics" and self.robust is not None:
            fields.update(self.robust.task_fields())
        fields.update((k, v) for k, v in self._next.items()
                      if k != "step" and (k, v) != ("form", "gram"))
        plan = {}
        for site in sites:
            if self.step != "statistics" and label_key(site) not in self._statistics:
                continue  # only sites whose statistics were merged take part later
            arrays = {} if self._site_arrays is None else self._site_arrays(site)
            plan[site] = (dict(fields), arrays)
        return plan

    # ---------------------------------------------------------------- read
    def read_reply(self, site, frame):
        return getattr(self, f"_read_{self.step}")(site, frame)  # the step's reader

    def _read_statistics(self, site, frame):
        named = _unpack(frame.fields, frame.arrays, site)
        if "all" not in named:
            reply_error(site, "no statistics of its rows.")
        for stats in named.values():
            self._check_statistics(site, stats, frame)
            if stats.n_targets != self._expected_targets(frame):
                reply_error(site, f"statistics have {stats.n_targets} targets, its schema "
                                  "says otherwise.")
        self._check_fold_statistics(site, named)
        return named

    def _check_fold_statistics(self, site, named):
        """A site's fold statistics: within its rows, or exactly its assigned folds' rows."""
        rows = {name: stats.n_samples for name, stats in named.items() if name != "all"}
        if self._assigned is not None:
            assigned = {name: len(index) for name, index in fold_parts(
                self._assigned[label_key(site)])}
            for name in sorted(rows.keys() | assigned.keys()):
                if rows.get(name) != assigned.get(name):
                    reply_error(site, f"its statistics {name!r} do not cover the "
                                      f"{assigned.get(name, 0)} rows assigned to it for them.")
        for j in range(self._n_folds or 0):
            if rows.pop(f"train{j}", 0) + rows.pop(f"test{j}", 0) > named["all"].n_samples:
                reply_error(site, f"its training and held-out rows of fold {j} are more "
                                  f"than its {named['all'].n_samples} rows.")
        if rows:
            reply_error(site, f"unexpected statistics {sorted(rows)}.")

    def _expected_targets(self, frame):
        """Number of targets the statistics of a reply must have: its schema's."""
        return frame.schema.get("n_targets")

    def _read_leave_one_out(self, site, frame):
        t, A = self._aggregate.n_targets, len(self._alphas)
        count = reply_number(frame, "count", site, integer=True)
        weight = reply_number(frame, "weight", site, high=_MAX_WEIGHT)
        rows_of_site = self._statistics[label_key(site)]["all"].n_samples
        if count != rows_of_site:
            reply_error(site, f"sums over {count} rows, but its statistics had {rows_of_site}.")
        sums = _Sums(count, weight, reply_array(frame, "e1", (t, A), site),
                     reply_array(frame, "e2", (t, A), site),
                     reply_array(frame, "sst", (t,), site))
        if np.any(sums.e2 < 0) or np.any(sums.sst < 0):
            reply_error(site, "negative sums of squares.")
        kept = self._next.get("keep_rows")
        rows = targets = weights = None
        if kept is not None:
            rows = reply_array(frame, "rows", (count, t, A), site)
        if kept == "scoring":
            targets = reply_array(frame, "targets", (count, t), site)
            weights = reply_array(frame, "weights", (count,), site)
        return sums, rows, targets, weights

    def _read_predict(self, site, frame):
        t, A = self._aggregate.n_targets, len(self._alphas)
        parsed = {}
        for key, (count, _) in self._held_out[label_key(site)].items():
            parsed[key] = tuple(
                reply_array(frame, f"{name}{key}", shape, site)
                for name, shape in (("predictions", (count, t, A)), ("targets", (count, t)),
                                    ("weights", (count,)))
            )
        return parsed

    def cross_check(self, replies):
        """Robust aggregation's checks across sites, on each site's statistics of all its rows."""
        if self.step != "statistics":
            return {}
        return super().cross_check({site: named["all"] for site, named in replies.items()})

    # --------------------------------------------------------------- apply
    def apply(self, replies, ledger):
        getattr(self, f"_apply_{self.step}")(replies, ledger)  # the step's round

    def _apply_statistics(self, replies, ledger):
        estimator = self.estimator
        labels = sorted_labels(replies)
        statistics = {label_key(site): replies[site] for site in labels}
        messages = {site: replies[site]["all"] for site in labels}
        aggregate, owned = self._merged_and_owned(messages)  # finite and PSD, before any solve
        alphas = estimator._checked_alphas()
        if (aggregate.factor is None and self._may_ask_factors()
                and _solve_gram(aggregate.gram, aggregate.moment, alphas.min(),
                                cholesky_only=True, in_place=owned)[0] is None):
            self.form = "factor"  # the statistics round once more, as factors
            self._request("statistics")
            return
        self._labels, self._statistics, self._aggregate = labels, statistics, aggregate
        self._messages = messages
        self._alphas = alphas
        self._scorer = estimator._scorer()
        self._kind = _scorer_kind(self._scorer)
        if estimator.cv is None:
            self._start_leave_one_out()
        else:
            self._cross_validate(ledger)

    def _plan_folds(self, sites):
        """The number of folds (checked against the assigned folds, if any)."""
        n_folds, cv = self.n_folds, self.estimator.cv
        if self.folds is not None:
            self._assigned = {}
            for site, codes in self.folds.items():
                codes = np.asarray(codes)
                if codes.ndim != 2 or fold_codes(codes, codes.shape[1]) is None:
                    raise ValueError(
                        f"server.folds[{site!r}] must be codes of shape (n_rows, n_folds) "
                        "in {0, 1, 2}.")
                self._assigned[label_key(site)] = codes.astype(np.int8, copy=False)
            missing = [site for site in sites if label_key(site) not in self._assigned]
            if missing:
                raise ValueError(f"server.folds has no fold membership for sites {missing}.")
            counts = {np.shape(codes)[1:] for codes in self._assigned.values()}
            if len(counts) != 1 or (n_folds is not None and counts != {(n_folds,)}):
                raise ValueError(
                    "server.folds must give every site codes of shape (n_rows, n_folds), "
                    f"with one n_folds (server.n_folds={n_folds}); got {sorted(counts)}.")
            n_folds = counts.pop()[0]
        if n_folds is None:
            try:
                n_folds = check_cv(cv, classifier=is_classifier(self.estimator)).get_n_splits()
            except (TypeError, ValueError) as exc:
                raise ValueError(
                    f"cv={cv!r} counts its folds from the rows, which the server does not "
                    "have: set server.n_folds before the first round (and give every site "
                    f"its rows' fold membership, make_client(folds=...)). ({exc})") from exc
        if not (isinstance(n_folds, (int, np.integer)) and n_folds >= 1):
            raise ValueError(f"server.n_folds must be a positive int, got {n_folds!r}.")
        self._n_folds = int(n_folds)
        return self._n_folds

    def _assigned_folds(self, site):
        """A task's arrays: the site's folds when the server assigns them, else none."""
        return {} if self._assigned is None else {"folds": self._assigned[label_key(site)]}

    # leave one row out ------------------------------------------------------
    def _start_leave_one_out(self):
        aggregate = self._aggregate
        if aggregate.n_samples < 2:
            raise ValueError(
                "leave-one-out cross-validation needs at least 2 samples; got "
                f"{aggregate.n_samples} sample.")
        eigenvalues, basis, projected = _spectrum(aggregate)
        arrays = {
            "alphas": np.asarray(self._alphas, dtype=np.float64),
            "eigenvalues": eigenvalues,
            "basis": np.ascontiguousarray(basis),
            "projected": np.ascontiguousarray(projected),
            "x_mean": aggregate.x_mean,
            "y_mean": aggregate.y_mean,
        }
        fields = {
            "weight_sum": float(aggregate.weight_sum),
            "interpolating": len(eigenvalues) == aggregate.n_samples - aggregate.centered,
        }
        if self._kind is None:
            fields["keep_rows"] = "scoring"
        elif self.estimator.store_cv_results:
            fields["keep_rows"] = "squared_errors" if self._kind == "default" else "predictions"
        self._request("leave_one_out", fields, lambda site: arrays)

    def _apply_leave_one_out(self, replies, ledger):
        labels = sorted_labels(replies)
        total = sum((replies[site][0] for site in labels[1:]), replies[labels[0]][0])
        aggregate = self._aggregate  # the targets' sum of squares around their pooled mean:
        total.sst = aggregate.target_ss if aggregate.centered else np.maximum(
            aggregate.target_ss - aggregate.weight_sum * aggregate.y_mean**2, 0)
        rows = self._stacked(replies, 1) if self.estimator.store_cv_results else None
        if self._kind is not None:
            self._finish_folds([total], ledger, rows)  # one fold: every row held out once
            return
        predictions, targets, weights = (self._stacked(replies, i) for i in (1, 2, 3))
        scores = self._score_rows(predictions, targets, weights, self.estimator.alpha_per_target)
        self._finish_scores(scores[None], ledger, rows)

    def _stacked(self, replies, index):
        """Per-row arrays of all sites, site by site in label order (``clients_``'s)."""
        return np.concatenate([replies[site][index] for site in sorted_labels(replies)])

    def _score_rows(self, predictions, targets, weights, per_target):
        """A scorer on held-out predictions, as RidgeCV scores them.

        ``sample_weight`` is passed only when some row's weight is not 1.
        """
        kwargs = {} if np.all(weights == 1) else {"sample_weight": weights}
        single = self._aggregate.single_target
        scores = []
        for a in range(len(self._alphas)):
            P = predictions[:, :, a]
            if per_target:
                scores.append([self._scorer(_IdentityRegressor(), P[:, j], targets[:, j], **kwargs)
                               for j in range(P.shape[1])])
            else:  # one-dimensional y is scored as such
                scores.append(self._scorer(_IdentityRegressor(), P[:, 0] if single else P,
                                           targets[:, 0] if single else targets, **kwargs))
        scores = np.asarray(scores, dtype=np.float64)
        return scores.T if per_target else scores

    # held-out folds -------------------------------------------------------
    def _folds(self):
        """``(train, held_out, holders)`` of each fold: the merged statistics of its training
        and held-out rows, and ``(site, key, rows)`` of each site holding some of the latter
        (``key`` names them in a predict task). ``cv="clients"``: fold j holds out client j."""
        labels = self._labels
        parts = [self._statistics[label_key(s)] for s in labels]
        if isinstance(self.estimator.cv, str):
            held = [p["all"] for p in parts]
            for site, test, rest in zip(labels, held, _complements(held)):
                yield rest, test, [(site, "", test.n_samples)]
            return
        for j in range(self._n_folds):
            train = [p[f"train{j}"] for p in parts if f"train{j}" in p]
            test = [(s, p[f"test{j}"]) for s, p in zip(labels, parts) if f"test{j}" in p]
            if not train or not test:
                raise ValueError(f"fold {j} of cv has no training or no test rows.")
            yield (merge_statistics(train), merge_statistics([t for _, t in test]),
                   [(s, str(j), t.n_samples) for s, t in test])

    def _cross_validate(self, ledger):
        """Ridge on each fold's training rows, scored on its held-out rows: from their
        sums, or from the predictions a further round asks the sites for."""
        if isinstance(self.estimator.cv, str) and len(self._labels) < 2:
            raise ValueError(
                "leave-one-client-out cross-validation (cv='clients') needs at least 2 "
                f"clients; got {len(self._labels)}.")
        sums, self._holders = [], []
        self._held_out = {label_key(s): {} for s in self._labels}  # key -> (rows, model)
        for train, test, holders in self._folds():
            model = _ridge_path(train, self._alphas)
            if self._kind is not None:
                sums.append(_held_out_sums(test, *model))
            for site, key, rows in holders:
                self._held_out[label_key(site)][key] = rows, model
            self._holders.append([(label_key(site), key) for site, key, _ in holders])
        if self._kind is not None:
            self._finish_folds(sums, ledger)
            return

        def fold_models(site):  # each site predicts its own held-out rows of each fold
            arrays = self._assigned_folds(site)
            for key, (_, (coef, intercept)) in self._held_out[label_key(site)].items():
                arrays[f"coef{key}"], arrays[f"intercept{key}"] = coef, intercept
            return arrays

        fields = {} if isinstance(self.estimator.cv, str) else {"n_folds": self._n_folds}
        self._request("predict", fields, site_arrays=fold_models)

    def _apply_predict(self, replies, ledger):
        replies = {label_key(site): reply for site, reply in replies.items()}
        folds = []
        for holders in self._holders:  # held-out rows site by site, in label order
            parts = [replies[site][key] for site, key in holders if site in replies]
            if parts:  # (a fold whose sites all dropped out is left out)
                folds.append([np.concatenate([p[i] for p in parts]) for i in range(3)])
        scores = np.asarray([self._score_rows(P, Y, W, self.estimator.alpha_per_target)
                             for P, Y, W in folds])
        self._finish_scores(scores, ledger)

    def _finish_folds(self, sums, ledger, rows=None):
        """Choose alpha from per-fold sums: mean of fold scores, or the pooled error.

        Leave-one-out is one fold, whose results are its per-row values ``rows``.
        """
        estimator = self.estimator
        per_target, loo = estimator.alpha_per_target, estimator.cv is None
        if estimator.criterion == POOLED:  # the weighted squared error over the weight
            total = sum(sums[1:], sums[0])
            results = rows if loo else np.stack([part.e2 for part in sums])  # held-out SSE
            self.finish(total.scores("mse", -1.0, per_target), results, ledger)
            return
        if self._kind != "default":
            kind, sign = self._kind, scorer_parts(self._scorer)[1]
        else:  # RidgeCV's: -mean of w e^2 over rows; GridSearchCV's (per fold): R^2
            kind, sign = ("row_mse", -1.0) if loo else ("r2", 1.0)
        scores = np.asarray([part.scores(kind, sign, per_target) for part in sums])
        self._finish_scores(scores, ledger, rows)

    def _finish_scores(self, fold_scores, ledger, rows=None):
        """Mean of the per-fold scores, as GridSearchCV; the results: leave-one-out's
        per-row values, or with cv='clients' the per-client scores."""
        store = self.estimator.store_cv_results
        results = rows if self.estimator.cv is None else fold_scores if store else None
        self.finish(fold_scores.mean(axis=0), results, ledger)

    def finish(self, scores, results, ledger):
        """Pick alpha as RidgeCV does (first best, per target if asked), refit, commit."""
        estimator = self.estimator
        alphas, aggregate = self._alphas, self._aggregate
        scores = np.asarray(scores, dtype=np.float64)
        # Non-finite scores (a one-row fold's R^2, a hostile message) never win, as
        # in RidgeCV; a hostile message is caught by the model check below.
        if estimator.alpha_per_target and aggregate.n_targets > 1:
            best = np.array([_first_best(row) for row in scores])
            best_alpha = alphas[best]
            best_score = scores[np.arange(scores.shape[0]), best]
        else:
            scores = scores.reshape(-1)  # alpha_per_target with one target: (1, n_alphas)
            best = _first_best(scores)
            best_alpha, best_score = float(alphas[best]), np.float64(scores[best])
        coef, solver = solve_statistics(aggregate, best_alpha)
        self._check_model(coef, aggregate, self._messages)
        if results is not None:
            results = np.asarray(results, dtype=np.float64)
            if results.ndim == 3 and aggregate.single_target:
                results = results[:, 0, :]  # RidgeCV: (n, n_alphas) for one-dimensional y
        # commit: nothing above touched the estimator
        estimator.alpha_ = best_alpha
        estimator.best_score_ = best_score
        if results is not None:
            estimator.cv_results_ = results
        else:
            estimator.__dict__.pop("cv_results_", None)
        estimator._commit_solution(self, aggregate, coef, solver, ledger, self._labels)
