"""Model selection as one protocol run: every candidate and fold fitted by its own protocol.

The search's server holds one server of the base estimator's protocol per
``(candidate, fold)``; each round of the search carries, to every site, the
current task of every pair still fitting (nested, as a pipeline nests its
steps), so all candidates and folds advance together and the search takes as
many rounds as its slowest fit, not their sum. A site answers each part with
the base estimator's own client role on its training rows of that fold. When
every pair is fitted, one round scores them all: the fitted models go to the
sites, which send the sums of the federated metrics on their test rows
(:mod:`sklearn_fed.metrics`). Then, with ``refit``, the best candidate is
fitted on every row, in the same run. Cross-validation is such a search, of
one candidate.
"""

import numbers
import time
from typing import ClassVar

import numpy as np
from scipy.stats import rankdata
from sklearn.base import BaseEstimator, MetaEstimatorMixin, clone, is_classifier
from sklearn.model_selection import ParameterGrid, ParameterSampler
from sklearn.utils import _safe_indexing
from sklearn.utils._available_if import available_if
from sklearn.utils._param_validation import HasMethods, Interval, StrOptions
from sklearn.utils.validation import _num_samples

from ..base import set_federation_attributes
from ..metrics._evaluate import (
    EvaluatorClient,
    FederatedEvaluator,
    InProcessFitMixin,
    default_metric,
    evaluation_task,
    screened_evaluation,
)
from ..metrics._stats import SiteStats, merge_stats, parse_metric, scores_from
from ..privacy import PrivacyBudget, PrivacyLedger
from ..privacy._budget import (
    PrivacySpentMixin,
    as_budget,
    planned_ledger,
    release_parts,
    spent,
    spent_ledgers,
)
from ..protocol import (
    FeatureSchema,
    FederatedMixin,
    InvalidClientMessage,
    Server,
    label_key,
    nest,
    sorted_labels,
    unnest,
)
from ..protocol._errors import failing
from ..protocol._fields import server_error
from ._split import LeaveSitesOut, SiteKFold, check_site_cv

__all__ = ["FederatedGridSearchCV", "FederatedRandomizedSearchCV", "federated_cross_validate"]

_METRIC_PARAMS = FederatedEvaluator()._metric_params()  # the metrics' own defaults


def _int_field(fields, name, upper):
    value = fields.get(name)
    if not (type(value) is int and 0 <= value < upper):
        server_error(f"malformed search task ({name}).")
    return value


def _split_parts(arrays, n_parts):
    """``[{name: array}]`` of each part ``j`` (arrays named ``"p<j>.<name>"``), in one pass."""
    by_part = [{} for _ in range(n_parts)]
    for name, value in arrays.items():
        head, dot, rest = name.partition(".")
        j = head[1:]
        if not (dot and head[:1] == "p" and j.isdigit() and int(j) < n_parts
                and str(int(j)) == j):
            server_error(f"array {name!r} belongs to no part of the message.")
        by_part[int(j)][rest] = value
    return by_part



def _composed(releases):
    """``(ledger, delta)`` of ``(ledger, delta)`` releases on the same rows, composed."""
    ledger, delta = PrivacyLedger(), 0.0
    for part, part_delta in releases:
        ledger, delta = ledger.compose(part), delta + part_delta
    return ledger, min(delta, 0.5)


def _best_has(method):
    """``available_if`` check, as scikit-learn's searches: the best (or the base) estimator has it."""
    def check(self):
        if "best_estimator_" in self.__dict__:  # fitted: what _check_refit gives, if it allows
            getattr(self._check_refit(method), method)
        elif not self.refit:
            raise AttributeError(f"{method} needs refit=True.")
        else:
            getattr(self._base_estimator(), method)
        return True

    return check

class SearchClient(EvaluatorClient):
    """A site of a search: answers each ``(candidate, fold)`` part from that fold's rows (read
    as an evaluator's site reads them; each part's own role applies the disclosure rules)."""

    protocol = "model_selection.search"
    disclosure = ()

    def __init__(self, estimator, **kwargs):
        super().__init__(estimator, **kwargs)
        # candidate -> the client role of its unfitted estimator (roles keep no state)
        self._clients = {}
        self._checked = {}  # (site, fold, rows, role class, schema) -> (rows, validated)

    def compute(self, task, X, y, sample_weight, rows):
        search = self.estimator
        # every part is screened by the policy this site's reply is
        policy = self.policy_in_force()
        if rows is not None:
            X, y = _safe_indexing(X, rows), y[rows]
            sample_weight = None if sample_weight is None else sample_weight[rows]
        candidates, cv = search._candidates(), check_site_cv(search.cv)
        parts = task.fields.get("parts")
        if not (isinstance(parts, list) and 0 < len(parts) <= 2**16):
            server_error("malformed search task (parts).")
        folds = None if isinstance(cv, LeaveSitesOut) else cv.site_folds(_num_samples(X))
        by_part = _split_parts(task.arrays, len(parts))
        fold_rows = {}  # (fold, which) -> that fold's rows, taken once for every candidate
        out, arrays = [], {}
        for j, part in enumerate(parts):
            if not isinstance(part, dict):
                server_error("malformed search task (a part).")
            i = _int_field(part, "candidate", len(candidates) + 1)  # len: the refit
            k = _int_field(part, "fold", 2**31)
            which = part.get("rows")
            refit = i == len(candidates)
            if which not in ("train", "test", "all") or (
                    (folds is None or refit) != (which == "all")):
                server_error("the task's rows do not follow this site's folds.")
            if (k, which) not in fold_rows:
                keep = folds != k if which == "train" else folds == k
                fold_rows[(k, which)] = (X, y, sample_weight) if which == "all" else (
                    _safe_indexing(X, keep), y[keep],
                    None if sample_weight is None else sample_weight[keep])
            Xk, yk, wk = fold_rows[(k, which)]
            # the refit's candidate is named by its index in this site's own list
            index = _int_field(part, "best", len(candidates)) if refit else i
            client = self._clients.get(index)
            if client is None:
                estimator = clone(search._base_estimator()).set_params(**candidates[index])
                client = self._clients[index] = estimator.make_client()
            if part.get("evaluate") is True:
                fields, part_arrays = screened_evaluation(
                    client.estimator, part.get("task", {}), by_part[j], Xk, yk, wk, task.site, policy)
                arrays.update({f"p{j}.{name}": value for name, value in part_arrays.items()})
                out.append({"candidate": i, "fold": k, "reply": fields})
                continue
            inner = unnest(part.get("task"), by_part[j], "", site=task.site, fail=server_error)
            # the part's role, and the parts it nests (a pipeline's steps), apply the policy
            # this site's reply is screened with (SitePolicy() when deployed without one)
            client.policy = policy
            client.check_task(inner)
            try:
                schema = FeatureSchema.from_json(inner.schema)
            except ValueError as exc:
                raise InvalidClientMessage(f"server: {exc}", "server") from exc
            # A fold's rows validated by a role of this class against this schema are kept
            # for every candidate and round: validation reads the role's class and the
            # task's schema, not hyperparameters (the rows are held, so they are these rows)
            key = (label_key(task.site), k, which, type(client), repr(inner.schema))
            held, checked = self._checked.get(key, (None, None))
            if held is not Xk:
                checked = client.check_rows(Xk, yk, wk, schema, task.site)
                self._checked[key] = (Xk, checked)
            Xc, yc, wc, names = checked
            if policy is not None:
                policy.check_task(client.protocol, inner, schema, Xc.shape[0], task.site)
            reply = client.screened_reply(policy, inner, Xc, yc, wc, None, names)
            out.append({"candidate": i, "fold": k, "reply": nest(reply, f"p{j}.", arrays)})
        return {"parts": out}, arrays


class SearchServer(Server):
    """The search's server: one base-protocol server per ``(candidate, fold)``, then scores."""

    protocol = "model_selection.search"

    def __init__(self, estimator, **kwargs):
        super().__init__(estimator, **kwargs)
        base = estimator._base_estimator()
        if getattr(base, "_protocol_rounds_in_fit", None):
            raise ValueError(
                f"{type(base).__name__} is a streaming protocol (its sites keep rows between "
                "rounds): a search refits each candidate from each fold's rows, which it "
                "cannot do; search a one-shot estimator such as FederatedRidge.")
        self.candidates = estimator._candidates()
        self.cv = check_site_cv(estimator.cv)
        self.metrics = estimator._metrics()
        self.scoring = self.metrics[0]  # ranks the candidates
        for name in self.metrics:
            parse_metric(name)
        self.phase = "fit"
        self.pairs = None  # (candidate, fold) -> server of the base protocol, while fitting
        self.fitted = {}  # (candidate, fold) -> fitted model
        self.test_scores = {}
        self.refit_server = None
        self._sites, self._site_fold, self._planned, self._sent = None, None, None, {}
        # checked when the folds are known, before any task is sent; charged at the end
        # (FederatedLogisticRegressionCV, a search that releases nothing private, has none)
        self._budget = as_budget(getattr(estimator, "privacy_budget", None))

    # ----------------------------------------------------------- planning
    def _inner_server(self, params):
        base = clone(self.estimator._base_estimator()).set_params(**params)
        return base.make_server(on_invalid=self.on_invalid,
                                max_message_bytes=self.max_message_bytes,
                                feature_names=self.schema.feature_names,
                                n_features=self.schema.n_features)

    def _fold_sites(self, k, test):
        """The sites that hold fold ``k``'s training (or test) rows: every site, unless whole
        sites are held out."""
        if self._site_fold is None:
            return self._sites
        return [s for s in self._sites if (self._site_fold[s] == k) == test]

    def _rows(self, which):
        return "all" if self._site_fold is not None else which

    def plan(self, sites):
        if self._sites is None:
            sites, site_fold = list(sites), None
            if isinstance(self.cv, LeaveSitesOut):
                site_fold = self.cv.fold_of_sites(sites)
                n_splits = self.cv.get_n_splits(sites)
            else:
                n_splits = self.cv.get_n_splits()
            self._check_budget(n_splits)  # a refusal leaves the search as it was
            self._sites, self._site_fold, self.n_splits = sites, site_fold, n_splits
            self.pairs = {(i, k): self._inner_server(params)
                          for i, params in enumerate(self.candidates)
                          for k in range(self.n_splits)}
        if self.phase == "fit":
            tasks = {}
            for (i, k), server in list(self.pairs.items()):
                frames = server.open_round(self._fold_sites(k, test=False))
                if not frames:
                    self.fitted[(i, k)] = server.estimator
                    del self.pairs[(i, k)]
                    continue
                for site, frame in frames.items():
                    tasks.setdefault(site, []).append(
                        self._fit_part(i, k, self._rows("train"), frame))
            if tasks:
                return self._wrap("fit", tasks)
            self.phase = "score"
        if self.phase == "score":
            return self._score_tasks()
        if self.phase == "refit":
            frames = self.refit_server.open_round(self._sites)
            if frames:
                return self._wrap("fit", {site: [self._fit_part(len(self.candidates), 0, "all",
                                                                frame)]
                                          for site, frame in frames.items()})
            self._commit()
        return {}

    # ----------------------------------------------------------- privacy
    def _fits_named(self):
        """``[(name, fitted model)]`` of every fit of the search, the refit last."""
        fits = [(f"candidate{i}__fold{k}", model) for (i, k), model in sorted(self.fitted.items())]
        if self.refit_server is not None:
            fits.append(("refit", self.refit_server.estimator))
        return fits

    def _check_budget(self, n_splits):
        """Refuse, before any release, a search whose fits could exceed the budget: every
        candidate on every fold, and the refit of whichever candidate wins."""
        if self._budget is None:
            return
        base, folds = self.estimator._base_estimator(), PrivacyLedger()
        plans = [planned_ledger(clone(base).set_params(**params)) for params in self.candidates]
        for planned in plans:
            for _ in range(n_splits):
                folds = folds.compose(planned)
        refit = self.estimator.refit
        what = (f"this search's fits ({len(self.candidates)} candidates x {n_splits} "
                f"folds{' and the refit of the best' if refit else ''})")
        for planned in plans if refit else [PrivacyLedger()]:
            self._budget.check(folds.compose(planned), what)

    def _privacy(self):
        """``(total ledger, delta, {fit__step: (ledger, delta)})`` of the search's fits, or
        None when no fit is private and no budget is given."""
        fits = self._fits_named()
        private = self._budget is not None or any(
            "_privacy" in part.__dict__ for _, model in fits for _, part in release_parts("", model))
        if not private:
            return None
        by_step = {}
        for name, model in fits:
            by_step.update({f"{name}__{part}" if part else name: value
                            for part, value in spent_ledgers(model)[0].items()})
        total, delta = _composed(by_step.values())
        return total, self._budget.delta if self._budget is not None else delta, by_step

    def _wrap(self, planned, tasks):
        """The round's plan: ``tasks`` is ``{site: [((candidate, fold), part, arrays)]}``,
        part ``j``'s arrays travel named ``p<j>.<name>``."""
        self._planned = planned
        # the (candidate, fold) of each part sent to each site, which its reply answers in order
        self._sent = {site: [key for key, _, _ in parts] for site, parts in tasks.items()}
        return {site: ({"parts": [part for _, part, _ in parts]},
                       {f"p{j}.{name}": value for j, (_, _, arrays) in enumerate(parts)
                        for name, value in arrays.items()})
                for site, parts in tasks.items()}

    def _fit_part(self, i, k, rows, frame):
        """A part that fits candidate ``i`` on fold ``k`` (the refit: ``i = len(candidates)``)."""
        part = {"candidate": i, "fold": k, "rows": rows, "task": nest(frame, "", {})}
        if i == len(self.candidates):
            part["best"] = self._results["best_index_"]
        return (i, k), part, frame.arrays

    def _score_tasks(self):
        self._eval, tasks = {}, {}
        for (i, k), model in sorted(self.fitted.items()):
            fields, arrays, self._eval[(i, k)] = evaluation_task(model, self.metrics, None, None)
            for site in self._fold_sites(k, test=True):
                tasks.setdefault(site, []).append(((i, k), {
                    "candidate": i, "fold": k, "evaluate": True, "rows": self._rows("test"),
                    "task": fields}, arrays))
        return self._wrap("score", tasks)

    # ----------------------------------------------------------- replies
    def read_reply(self, site, frame):
        fail = failing(site)
        sent = self._sent.get(site, [])
        parts = frame.fields.get("parts")
        if set(frame.fields) != {"parts"} or not isinstance(parts, list) or len(parts) != len(
                sent):
            fail("the reply does not answer every part of its task.")
        try:
            by_part = _split_parts(frame.arrays, len(sent))
        except InvalidClientMessage:
            fail("the reply has arrays that belong to no part.")
        parsed = {}
        for j, (part, key) in enumerate(zip(parts, sent)):
            if not (isinstance(part, dict) and set(part) == {"candidate", "fold", "reply"}
                    and (part["candidate"], part["fold"]) == key):
                fail(f"part {j} of the reply does not answer part {j} of the task.")
            arrays = by_part[j]
            if self._planned == "score":
                if not isinstance(part["reply"], dict):
                    fail("malformed scores.")
                parsed[key] = SiteStats.read(part["reply"], arrays, self._eval[key], fail)
            else:
                parsed[key] = unnest(part["reply"], arrays, "", site=site, fail=fail)
        return parsed

    def apply(self, replies, ledger):
        by_part = {}
        for site in sorted_labels(replies):
            for key, value in replies[site].items():
                by_part.setdefault(key, {})[site] = value
        if self._planned == "score":
            self._apply_scores(by_part)
        else:
            servers = ({(len(self.candidates), 0): self.refit_server} if self.phase == "refit"
                       else self.pairs)
            self._apply_parts(servers, by_part)
        self._ledger_now = ledger

    def _apply_parts(self, servers, by_part):
        parsed = {}
        for key, frames in by_part.items():
            ok, failures = servers[key].check_round(frames, {})
            if failures:  # one bad part is a bad reply: the whole round is refused
                raise next(iter(failures.values()))
            parsed[key] = ok
        restores = [servers[key].savepoint() for key in parsed]
        try:
            for key, ok in parsed.items():
                servers[key].commit_round(by_part[key], ok, {}, {})
        except BaseException:
            for restore in restores:
                restore()
            raise

    def _apply_scores(self, by_part):
        scores = {}
        for (i, k), stats in by_part.items():
            merged = merge_stats(stats[s] for s in sorted_labels(stats))
            scores[(i, k)] = scores_from(merged, self.metrics, self._eval[(i, k)],
                                         _METRIC_PARAMS)
        self.test_scores = scores
        self._results = self.estimator._results(
            self.candidates, self.n_splits, {key: s[self.scoring] for key, s in scores.items()})
        if self.estimator.refit:
            self.phase = "refit"
            best = self._results["best_index_"]
            self.refit_server = self._inner_server(self.candidates[best])
        else:
            self.phase = "done"
            self._commit()

    def _commit(self):
        estimator = self.estimator
        privacy = self._privacy()
        if privacy is not None and self._budget is not None:  # raises: nothing is committed
            self._budget.charge(privacy[0], "this search's fits")
        for name in ("_privacy", "_privacy_delta", "privacy_spent_by_step_",
                     "privacy_spent_by_candidate_"):
            estimator.__dict__.pop(name, None)
        if privacy is not None:
            total, delta, by_step = privacy
            estimator._privacy, estimator._privacy_delta = total, delta
            estimator.privacy_spent_by_step_ = {
                name: spent(ledger, d) for name, (ledger, d) in by_step.items()}
            estimator.privacy_spent_by_candidate_ = [
                spent(*_composed(value for name, value in by_step.items()
                                 if name.startswith(f"candidate{i}__")))
                for i in range(len(self.candidates))]
        for name, value in self._results.items():
            setattr(estimator, name, value)
        if self.refit_server is not None:
            estimator.best_estimator_ = self.refit_server.estimator
        estimator.n_splits_ = self.n_splits
        # [candidate][fold] -> {metric: score}: lists, so a saved model has no tuple keys
        estimator._test_scores = [[self.test_scores[(i, k)] for k in range(self.n_splits)]
                                  for i in range(len(self.candidates))]
        estimator.scorer_ = self.scoring
        set_federation_attributes(estimator, self.schema, self._ledger_now,
                                  sorted_labels(self._sites))
        estimator._finish(self.fitted)
        self.phase = "done"


class _FederatedSearchCV(InProcessFitMixin, PrivacySpentMixin, FederatedMixin, MetaEstimatorMixin,
                         BaseEstimator):
    """What the grid and randomized searches share: the protocol and the results."""

    _server_role = SearchServer
    _client_role = SearchClient
    _parameter_constraints: ClassVar[dict] = {
        "estimator": [HasMethods(["make_server", "make_client"])],
        "scoring": [str, list, tuple, None],
        "refit": ["boolean"],
        "cv": [Interval(numbers.Integral, 2, None, closed="left"), StrOptions({"sites"}),
               SiteKFold, LeaveSitesOut],
        "privacy_budget": [None, tuple, PrivacyBudget],
    }

    def __init__(self, estimator, *, scoring=None, refit=True, cv=5, privacy_budget=None):
        self.estimator = estimator
        self.scoring = scoring
        self.refit = refit
        self.cv = cv
        self.privacy_budget = privacy_budget

    def _metrics(self):
        """The metrics each fold is scored with; the first ranks the candidates."""
        return [self.scoring or default_metric(self._base_estimator())]

    def _base_estimator(self):
        """The estimator whose protocol fits each candidate (``estimator`` here)."""
        return self.estimator

    def _finish(self, fitted):
        """After the search: ``fitted`` is ``{(candidate, fold): model}``; nothing by default."""

    def _results(self, candidates, n_splits, scores):
        """``cv_results_`` and the best candidate, as scikit-learn's searches compute them."""
        test = np.array([[scores[(i, k)] for k in range(n_splits)]
                         for i in range(len(candidates))], dtype=np.float64)
        results = {}
        names = sorted({name for params in candidates for name in params})
        for name in names:
            column = np.ma.MaskedArray(np.empty(len(candidates), dtype=object),
                                       mask=True)
            for i, params in enumerate(candidates):
                if name in params:
                    column[i] = params[name]
            results[f"param_{name}"] = column
        results["params"] = list(candidates)
        for k in range(n_splits):
            results[f"split{k}_test_score"] = test[:, k]
        means = np.average(test, axis=1)
        results["mean_test_score"] = means
        results["std_test_score"] = np.sqrt(np.average((test - means[:, None]) ** 2, axis=1))
        if np.isnan(means).all():
            ranks = np.ones(len(means), dtype=np.int32)
        else:
            worst = np.nanmin(means) - 1
            ranks = np.asarray(rankdata(-np.where(np.isnan(means), worst, means),
                                        method="min"), dtype=np.int32)
        results["rank_test_score"] = ranks
        best = int(ranks.argmin())
        return {"cv_results_": results, "best_index_": best,
                "best_params_": candidates[best], "best_score_": float(means[best])}

    def _in_process_server_kwargs(self, names):
        return {"feature_names": names}

    def _check_refit(self, name):
        if not self.refit:
            raise AttributeError(f"{name} needs refit=True.")
        return self.best_estimator_

    @available_if(_best_has("predict"))
    def predict(self, X):
        """Predict with the best candidate refitted on every site's rows."""
        return self._check_refit("predict").predict(X)

    @available_if(_best_has("predict_proba"))
    def predict_proba(self, X):
        """Class probabilities from the best candidate."""
        return self._check_refit("predict_proba").predict_proba(X)

    @available_if(_best_has("decision_function"))
    def decision_function(self, X):
        """Decision function of the best candidate."""
        return self._check_refit("decision_function").decision_function(X)

    def score(self, X, y, sample_weight=None):
        """The best candidate's ``score`` on rows in one place."""
        return self._check_refit("score").score(X, y, sample_weight=sample_weight)

    @property
    def classes_(self):
        return self._check_refit("classes_").classes_

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        base = self._base_estimator()
        tags.estimator_type = "classifier" if is_classifier(base) else (
            "regressor" if getattr(base, "_estimator_type", None) == "regressor"
            else tags.estimator_type)
        return tags


_DOC_COMMON = """
    Parameters
    ----------
    estimator : estimator
        A protocol estimator (one with ``make_server``) whose client role keeps
        no state between rounds.
    {grid}
    scoring : str, default=None
        A metric of :class:`~sklearn_fed.metrics.FederatedEvaluator` or a
        scorer name (``"neg_log_loss"``...), greater is better; None: the
        estimator's ``score`` (accuracy or R²).
    refit : bool, default=True
        Fit the best candidate on every site's rows, in the same run.
    cv : int, "sites", SiteKFold or LeaveSitesOut, default=5
        An int: each site splits its own rows with ``KFold(cv)``; ``"sites"``:
        leave one site out.
    privacy_budget : PrivacyBudget or tuple (epsilon, delta), default=None
        Refuse, before any task is sent, a search whose differentially private
        releases (every candidate on every fold, and the refit of any
        candidate) could exceed it; charged with what the fits spent. A
        :class:`~sklearn_fed.privacy.PrivacyBudget` object is shared, not
        copied. The scores the sites send are exact sums under their
        disclosure rules, not private releases (see :doc:`/disclosure`).
"""


class FederatedGridSearchCV(_FederatedSearchCV):
    """Exhaustive search over a grid, as one federated protocol run.

    Each ``(candidate, fold)`` is fitted by the base estimator's own
    protocol on that fold's training rows (the sites split their own rows,
    or whole sites are held out), all pairs advancing together, one task
    per site per round; every fitted pair is then scored with the federated
    metrics on its test rows; with ``refit`` the best candidate is fitted on
    every row. The results equal scikit-learn's
    :class:`~sklearn.model_selection.GridSearchCV` on the pooled rows with
    the equivalent :class:`~sklearn.model_selection.PredefinedSplit` (see
    :meth:`SiteKFold.pooled_test_fold`).
""" + _DOC_COMMON.format(grid="""param_grid : dict or list of dicts
        As in GridSearchCV; the sites read the same grid (the run config's).""") + """
    Attributes
    ----------
    cv_results_ : dict
        ``params``, ``param_<name>``, ``split<k>_test_score``,
        ``mean_test_score``, ``std_test_score``, ``rank_test_score``.
    best_index_, best_params_, best_score_
        As in GridSearchCV.
    best_estimator_ : estimator
        The best candidate fitted on every site's rows (``refit=True``).
    n_splits_ : int
    clients_ : ndarray
    n_clients_ : int
    communication_ : CommunicationLedger
        Bytes of the whole search.
    privacy_spent_ : tuple of (float, float)
        Set when a fit is differentially private or a budget is given: the
        ``(epsilon, delta)`` of every private release of every candidate,
        fold and the refit, composed exactly (as a pipeline's); infinite
        epsilon when a fit releases exact statistics.
    privacy_spent_by_candidate_ : list of tuple
        ``(epsilon, delta)`` of each candidate's fits on every fold.
    privacy_spent_by_step_ : dict
        ``"candidate<i>__fold<k>[__<step>]"`` and ``"refit[__<step>]"`` ->
        ``(epsilon, delta)``: which fit and which step spent what.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.model_selection import GridSearchCV, PredefinedSplit
    >>> from sklearn_fed import FederatedRidge
    >>> from sklearn_fed.model_selection import FederatedGridSearchCV, SiteKFold
    >>> rng = np.random.default_rng(0)
    >>> X, sites = rng.normal(size=(200, 3)), np.arange(200) % 4
    >>> y = X @ [1.0, 0.0, -1.0] + rng.normal(size=200)
    >>> search = FederatedGridSearchCV(FederatedRidge(), {"alpha": [0.1, 10.0, 100.0]}, cv=3)
    >>> search.fit(X, y, clients=sites).best_params_
    {'alpha': 0.1}
    >>> pooled = GridSearchCV(FederatedRidge(), {"alpha": [0.1, 10.0, 100.0]},
    ...                       cv=PredefinedSplit(SiteKFold(3).pooled_test_fold(sites)))
    >>> bool(np.allclose(search.cv_results_["mean_test_score"],
    ...                  pooled.fit(X, y).cv_results_["mean_test_score"], rtol=1e-10))
    True
    """

    _parameter_constraints: ClassVar[dict] = {**_FederatedSearchCV._parameter_constraints,
                              "param_grid": [dict, list]}

    def __init__(self, estimator, param_grid, *, scoring=None, refit=True, cv=5,
                 privacy_budget=None):
        super().__init__(estimator, scoring=scoring, refit=refit, cv=cv,
                         privacy_budget=privacy_budget)
        self.param_grid = param_grid

    def _candidates(self):
        return list(ParameterGrid(self.param_grid))


class FederatedRandomizedSearchCV(_FederatedSearchCV):
    """Randomized search over parameter settings, as one federated protocol run.

    As :class:`FederatedGridSearchCV`, over ``n_iter`` settings drawn by
    scikit-learn's :class:`~sklearn.model_selection.ParameterSampler`; the
    server and every site draw the same settings from ``random_state`` (an
    int, required), so a site fits only settings it drew itself.
""" + _DOC_COMMON.format(grid="""param_distributions : dict or list of dicts
        As in RandomizedSearchCV.
    n_iter : int, default=10
    random_state : int""") + """
    Attributes
    ----------
    cv_results_, best_index_, best_params_, best_score_, best_estimator_
        As in :class:`FederatedGridSearchCV`.

    Examples
    --------
    >>> import numpy as np
    >>> from scipy.stats import loguniform
    >>> from sklearn_fed import FederatedRidge
    >>> from sklearn_fed.model_selection import FederatedRandomizedSearchCV
    >>> rng = np.random.default_rng(0)
    >>> X, sites = rng.normal(size=(200, 3)), np.arange(200) % 4
    >>> y = X @ [1.0, 0.0, -1.0] + rng.normal(size=200)
    >>> search = FederatedRandomizedSearchCV(
    ...     FederatedRidge(), {"alpha": loguniform(1e-2, 1e2)}, n_iter=4, random_state=0, cv=3)
    >>> len(search.fit(X, y, clients=sites).cv_results_["params"])
    4
    """

    _parameter_constraints: ClassVar[dict] = {
        **_FederatedSearchCV._parameter_constraints,
        "param_distributions": [dict, list],
        "n_iter": [Interval(numbers.Integral, 1, None, closed="left")],
        "random_state": [Interval(numbers.Integral, 0, None, closed="left"), None],
    }

    def __init__(self, estimator, param_distributions, *, n_iter=10, scoring=None, refit=True,
                 cv=5, random_state=None, privacy_budget=None):
        super().__init__(estimator, scoring=scoring, refit=refit, cv=cv,
                         privacy_budget=privacy_budget)
        self.param_distributions = param_distributions
        self.n_iter = n_iter
        self.random_state = random_state

    def _candidates(self):
        if not isinstance(self.random_state, numbers.Integral):
            raise TypeError("FederatedRandomizedSearchCV needs an int random_state: the server "
                             "and every site draw the same candidates from it.")
        return list(ParameterSampler(self.param_distributions, self.n_iter,
                                     random_state=int(self.random_state)))


class _CrossValidation(FederatedGridSearchCV):
    """A search of one candidate (the estimator as it is), scored with several metrics."""

    def __init__(self, estimator, *, scoring=None, cv=5, privacy_budget=None):
        super().__init__(estimator, {}, scoring=scoring, refit=False, cv=cv,
                         privacy_budget=privacy_budget)

    def _metrics(self):
        scoring = self.scoring or default_metric(self._base_estimator())
        return [scoring] if isinstance(scoring, str) else list(scoring)


def federated_cross_validate(estimator, X, y, *, clients=None, scoring=None, cv=5,
                             sample_weight=None, privacy_budget=None):
    """Cross-validation of a protocol estimator with folds defined at the sites, one protocol run.

    Fold ``k``'s model is fitted by the estimator's own protocol on every
    site's training rows of that fold and scored with the federated metrics
    on their test rows, pooled. Equal to scikit-learn's
    :func:`~sklearn.model_selection.cross_validate` on the pooled rows with
    ``PredefinedSplit(cv.pooled_test_fold(clients))``.

    Parameters
    ----------
    estimator : estimator
        A protocol estimator.
    X, y : array-like
        Every site's rows; ``clients`` names each row's site.
    clients : array-like of shape (n_samples,), default=None
    scoring : str or list of str, default=None
        Metric or scorer names (see :class:`~sklearn_fed.metrics.FederatedEvaluator`);
        None: the estimator's ``score``.
    cv : int, "sites", SiteKFold or LeaveSitesOut, default=5
    sample_weight : array-like of shape (n_samples,), default=None
        Used to fit and to score.
    privacy_budget : PrivacyBudget or tuple (epsilon, delta), default=None
        Refuse, before any release, folds whose private releases could exceed
        it (see :class:`FederatedGridSearchCV`).

    Returns
    -------
    scores : dict
        ``test_score`` (one metric) or ``test_<name>`` per metric: arrays of
        one score per fold; ``run_time``: seconds of the whole run;
        ``communication``: its ledger; ``privacy_spent``, when a fold's fit is
        differentially private or a budget is given: the ``(epsilon, delta)``
        of every fold's releases, composed, and ``privacy_spent_by_step``.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_fed import FederatedRidge
    >>> from sklearn_fed.model_selection import federated_cross_validate
    >>> rng = np.random.default_rng(0)
    >>> X, sites = rng.normal(size=(200, 3)), np.arange(200) % 4
    >>> y = X @ [1.0, 0.0, -1.0] + rng.normal(size=200)
    >>> out = federated_cross_validate(FederatedRidge(), X, y, clients=sites, cv=3)
    >>> out["test_score"].shape
    (3,)
    """
    validation = _CrossValidation(estimator, scoring=scoring, cv=cv,
                                  privacy_budget=privacy_budget)
    start = time.perf_counter()
    validation.fit(X, y, sample_weight=sample_weight, clients=clients)
    metrics = validation._metrics()
    scores = validation._test_scores
    out = {}
    for name in metrics:
        key = "test_score" if isinstance(scoring, str) or scoring is None else f"test_{name}"
        out[key] = np.array([scores[0][k][name] for k in range(validation.n_splits_)])
    out["run_time"] = time.perf_counter() - start
    out["communication"] = validation.communication_
    if "_privacy" in validation.__dict__:
        out["privacy_spent"] = validation.privacy_spent_
        out["privacy_spent_by_step"] = validation.privacy_spent_by_step_
    return out
