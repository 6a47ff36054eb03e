"""``cross_validate`` across sites: each site splits its own rows, every fold one federated fit."""

import time

import numpy as np

from ..metrics._evaluate import default_metric
from ._search import FederatedGridSearchCV

__all__ = ["federated_cross_validate"]


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
