"""What a site agrees to compute and release: :class:`SitePolicy`, checked at the site.

Two kinds of rules. **Task rules** (:meth:`SitePolicy.check_task`) decide
whether a site answers at all: the protocols, features and epsilons it
accepts. **Disclosure rules** decide what an answer may contain, and are
applied by the framework to the reply every role builds, before its bytes
leave the site (:func:`~sklearn_fed.protocol._disclosure.screen_reply`): no
reply from fewer than ``min_rows`` rows, no released category, distinct value
or column statistic backed by fewer than ``min_count`` rows, no model with
more parameters than ``max_parameters_per_row`` times the site's rows, at
most ``max_levels`` levels per released category set, and extremes (single
rows' values) only with ``exact_extremes=True``, a model's scores of single rows
(ROC AUC's thresholds) only with ``exact_scores=True``, and no table cell
(a confusion matrix's) of fewer than ``min_count`` rows but zero. They are on by default, with
the thresholds of DataSHIELD's defaults (``nfilter.subset``, ``nfilter.tab``,
``nfilter.glm``, ``nfilter.levels.max``); a site changes them, and
:meth:`SitePolicy.permissive` turns them off.
"""

import contextlib
from numbers import Real

from ._errors import TaskRefused

__all__ = ["SitePolicy", "simulated_policy"]

#: DataSHIELD's defaults: nfilter.subset, nfilter.tab, nfilter.glm, nfilter.levels.max.
DEFAULT_MIN_ROWS = 3
DEFAULT_MIN_COUNT = 3
DEFAULT_MAX_PARAMETERS_PER_ROW = 0.33
DEFAULT_MAX_LEVELS = 40


class SitePolicy:
    """What a site agrees to compute and release; a task outside it is refused at the site.

    Every site has one: a client role made without a policy applies
    ``SitePolicy()``, whose disclosure rules follow DataSHIELD's defaults.
    The rules are applied by the framework to every reply of every protocol,
    from what each role declares its reply to be made of (see
    :doc:`/disclosure`). A refusal raises
    :class:`~sklearn_fed.protocol.TaskRefused` naming the rule, its threshold
    and what the user can do.

    Parameters
    ----------
    min_rows : int or None, default=3
        Refuse to answer from fewer rows than this (DataSHIELD's
        ``nfilter.subset``). ``None``: no minimum.
    min_count : int or None, default=3
        Release no category, distinct value or column statistic backed by
        fewer rows than this (DataSHIELD's ``nfilter.tab``): smaller ones are
        suppressed from the reply, as each estimator documents.
    max_parameters_per_row : float or None, default=0.33
        Refuse a model fit with more parameters than this times the site's
        rows (DataSHIELD's ``nfilter.glm``).
    max_levels : int or None, default=40
        Refuse to release more than this many levels of one categorical
        column (DataSHIELD's ``nfilter.levels.max``).
    exact_extremes : bool, default=False
        Release the exact minimum and maximum of a column (single rows'
        values). ``False``: the ``min_count``-th smallest and largest values,
        rounded outward to two significant digits of the column's range.
    exact_scores : bool, default=False
        Release each distinct score of the site's rows with its counts (what
        an evaluation's ROC AUC and average precision read; a score is a
        function of one row). ``False``: consecutive scores are merged into
        bins of at least ``min_count`` rows, each with 0 or at least
        ``min_count`` rows of either class, released as the bin's mean score.
    max_epsilon : float, default=None
        Answer only differentially private tasks with ``epsilon <= max_epsilon``
        (a task that adds no noise is refused).
    allowed_features : sequence of str, default=None
        Answer only tasks whose features are all in this list.
    allowed_kinds : sequence of str, default=None
        Answer only these protocols (e.g. ``["ridge.statistics"]``).
    privacy_budget : PrivacyBudget, default=None
        The site's own budget across tasks
        (:class:`~sklearn_fed.privacy.PrivacyBudget`): every differentially
        private release the site answers is charged to it, and a release that
        would exceed it is refused (rule ``privacy_budget``) before it leaves.
        Tasks without noise are not charged: add ``max_epsilon`` to refuse them.
    check : callable, default=None
        ``check(task_fields) -> None``; raise to refuse (the message is kept).
    columns_in_order : bool, default=False
        Answer a task that names its features from rows without column names
        (an array), taking the columns to be in the task's order. By default
        such rows are refused: their order cannot be checked, and a wrong
        order gives a wrong model without any error.

    Examples
    --------
    >>> policy = SitePolicy(max_epsilon=1.0, min_rows=50)
    >>> SitePolicy().min_count, SitePolicy.permissive().min_count
    (3, None)
    """

    def __init__(
        self, *, min_rows=DEFAULT_MIN_ROWS, min_count=DEFAULT_MIN_COUNT,
        max_parameters_per_row=DEFAULT_MAX_PARAMETERS_PER_ROW, max_levels=DEFAULT_MAX_LEVELS,
        exact_extremes=False, exact_scores=False, max_epsilon=None, privacy_budget=None,
        allowed_features=None, allowed_kinds=None, check=None, columns_in_order=False,
    ):
        for name, value, kind in (("min_rows", min_rows, int), ("min_count", min_count, int),
                                  ("max_levels", max_levels, int),
                                  ("max_parameters_per_row", max_parameters_per_row, Real)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, kind)
                                      or not value > 0):
                raise ValueError(f"SitePolicy: {name} must be a positive number or None; "
                                 f"got {value!r}.")
        for name, value in (("exact_extremes", exact_extremes),
                            ("exact_scores", exact_scores)):
            if not isinstance(value, bool):
                raise TypeError(f"SitePolicy: {name} must be a boolean; got {value!r}.")
        # duck-typed (the protocol imports nothing of the privacy package):
        # sklearn_fed.privacy.PrivacyBudget has this method
        if privacy_budget is not None and not callable(
                getattr(privacy_budget, "charge_site_release", None)):
            raise TypeError(f"SitePolicy: privacy_budget must be a "
                            f"sklearn_fed.privacy.PrivacyBudget; got {privacy_budget!r}.")
        self.min_rows = min_rows
        self.min_count = min_count
        self.max_parameters_per_row = max_parameters_per_row
        self.max_levels = max_levels
        self.exact_extremes = exact_extremes
        self.exact_scores = exact_scores
        self.privacy_budget = privacy_budget
        self.columns_in_order = bool(columns_in_order)
        self.max_epsilon = max_epsilon
        self.allowed_features = None if allowed_features is None else set(allowed_features)
        self.allowed_kinds = None if allowed_kinds is None else set(allowed_kinds)
        self.check = check

    @classmethod
    def permissive(cls, **kwargs):
        """A policy without disclosure rules: every count, value and extreme is released.

        For a site that accepts what the protocols release as they are (the
        model then equals scikit-learn's on the pooled rows); task rules may
        still be given.

        Examples
        --------
        >>> SitePolicy.permissive(max_epsilon=2.0).exact_extremes
        True
        """
        rules = {"min_rows": None, "min_count": None, "max_parameters_per_row": None,
                 "max_levels": None, "exact_extremes": True, "exact_scores": True}
        rules.update(kwargs)
        return cls(**rules)

    @property
    def controls_disclosure(self):
        """Whether any disclosure rule is on (a permissive policy changes no reply)."""
        return not (self.min_rows is None and self.min_count is None
                    and self.max_parameters_per_row is None and self.max_levels is None
                    and self.exact_extremes and self.exact_scores)

    def refuse(self, protocol, site, rule, reason, remedy):
        """Raise :class:`TaskRefused` for a broken disclosure ``rule``, saying what to do."""
        raise TaskRefused(
            f"site {site!r} refuses the {protocol!r} task: rule {rule}: {reason} "
            f"What you can do: {remedy}", site,
        )

    def check_task(self, protocol, task, schema, n_rows, site):
        """Raise :class:`TaskRefused` when the task is outside this policy."""
        def refuse(reason):
            raise TaskRefused(f"site {site!r} refuses the {protocol!r} task: {reason}", site)

        if self.allowed_kinds is not None and protocol not in self.allowed_kinds:
            refuse(f"only {sorted(self.allowed_kinds)} are allowed.")
        if self.min_rows is not None and 0 < n_rows < self.min_rows:
            self.refuse(protocol, site, f"min_rows={self.min_rows}",
                        f"it has {n_rows} rows, fewer than the policy's minimum "
                        f"{self.min_rows}.",
                        "fit with more rows at this site, or leave the site out.")
        if self.max_epsilon is not None:
            epsilon = task.fields.get("epsilon")
            if not isinstance(epsilon, Real):
                refuse("the policy allows only differentially private tasks.")
            if not epsilon <= self.max_epsilon:
                refuse(f"epsilon={epsilon} exceeds the policy's maximum {self.max_epsilon}.")
        if self.allowed_features is not None:
            if schema.feature_names is None:
                refuse("the task names no features, and the policy has an allow-list.")
            extra = [n for n in schema.feature_names if n not in self.allowed_features]
            if extra:
                refuse(f"features {extra} are not on the policy's allow-list.")
        if self.check is not None:
            try:
                self.check(dict(task.fields))
            except Exception as exc:  # the site's own rule, reported as a refusal
                refuse(str(exc))

    def __repr__(self):
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in (
            "min_rows", "min_count", "max_parameters_per_row", "max_levels", "exact_extremes",
            "exact_scores", "max_epsilon", "privacy_budget"))
        return f"SitePolicy({shown})"


# The policy that the sites simulated by ``fit(..., clients=...)`` apply. The
# caller of fit holds every row already, so by default they release as a
# permissive site would (the model equals scikit-learn's on the pooled rows);
# simulated_policy shows what sites with a given policy would release.
_SIMULATED = [None]


@contextlib.contextmanager
def simulated_policy(policy):
    """Make the sites that ``fit(..., clients=...)`` simulates apply ``policy``.

    A deployed site (a client role made with ``make_client()``, a Flower
    node) applies its own policy, :class:`SitePolicy` by default. The sites
    ``fit`` simulates in process answer for a caller who holds every row
    already, so by default they release as :meth:`SitePolicy.permissive`
    would: the fitted model equals scikit-learn's on the pooled rows. Inside
    this context they apply ``policy`` instead (``SitePolicy()``: what
    deployed sites with the defaults would release).

    Parameters
    ----------
    policy : SitePolicy or None

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn_fed.preprocessing import FederatedMinMaxScaler
    >>> X, sites = np.arange(16.0).reshape(-1, 1), [0] * 8 + [1] * 8
    >>> FederatedMinMaxScaler().fit(X, clients=sites).data_min_   # single rows' values
    array([0.])
    >>> with simulated_policy(SitePolicy()):   # the 3rd smallest per site, rounded outward
    ...     scaler = FederatedMinMaxScaler().fit(X, clients=sites)
    >>> scaler.data_min_, scaler.data_max_
    (array([1.9]), array([13.1]))
    """
    if policy is not None and not isinstance(policy, SitePolicy):
        raise TypeError(f"policy must be a SitePolicy or None; got {policy!r}.")
    previous = _SIMULATED[0]
    _SIMULATED[0] = policy
    try:
        yield policy
    finally:
        _SIMULATED[0] = previous


def current_simulated_policy():
    """The policy simulated sites apply now (None: they release as permissive sites)."""
    return _SIMULATED[0]
