"""What a site agrees to compute: :class:`SitePolicy`, checked at the site before it answers."""

from numbers import Real

from ._errors import TaskRefused

__all__ = ["SitePolicy"]


class SitePolicy:
    """What a site agrees to compute; a task outside it is refused at the site.

    Parameters
    ----------
    min_rows : int, default=None
        Refuse to answer from fewer rows than this (small sites leak more).
    max_epsilon : float, default=None
        Answer only differentially private tasks with ``epsilon <= max_epsilon``
        (a task that adds no noise is refused).
    allowed_features : sequence of str, default=None
        Answer only tasks whose features are all in this list.
    allowed_kinds : sequence of str, default=None
        Answer only these protocols (e.g. ``["ridge.statistics"]``).
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
    """

    def __init__(
        self, *, min_rows=None, max_epsilon=None, allowed_features=None, allowed_kinds=None,
        check=None, columns_in_order=False,
    ):
        self.min_rows = min_rows
        self.columns_in_order = bool(columns_in_order)
        self.max_epsilon = max_epsilon
        self.allowed_features = None if allowed_features is None else set(allowed_features)
        self.allowed_kinds = None if allowed_kinds is None else set(allowed_kinds)
        self.check = check

    def check_task(self, protocol, task, schema, n_rows, site):
        """Raise :class:`TaskRefused` when the task is outside this policy."""
        def refuse(reason):
            raise TaskRefused(f"site {site!r} refuses the {protocol!r} task: {reason}", site)

        if self.allowed_kinds is not None and protocol not in self.allowed_kinds:
            refuse(f"only {sorted(self.allowed_kinds)} are allowed.")
        if self.min_rows is not None and n_rows < self.min_rows:
            refuse(f"it has {n_rows} rows, fewer than the policy's minimum {self.min_rows}.")
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
