"""Disclosure control, applied by the framework to every reply before it leaves a site.

A role does not code its disclosure control; it **declares** what its reply
is made of, in its ``disclosure`` class attribute, with the declarations of
this module:

- :class:`CountedValues`: a list of value sets (categories, distinct values)
  with one count per value: values counted fewer than the policy's
  ``min_count`` times are suppressed, and a set of more than ``max_levels``
  levels is refused;
- :class:`CountedColumns`: per-column statistics with a per-column count
  (:class:`~sklearn_fed.statistics.ColumnMoments`): a column backed by
  fewer than ``min_count`` rows is sent as if all its values were missing;
- :class:`ColumnExtremes`: per-column minima and maxima (single rows'
  values): unless the policy has ``exact_extremes``, replaced by the
  ``min_count``-th smallest and largest values rounded outward;
- :class:`CountedTable`: a table of row counts (a confusion matrix): a
  nonzero cell below ``min_count`` is refused, as DataSHIELD's ``ds.table``;
- :class:`ScoreBins`: distinct values (a model's scores) with per-class
  counts at each (what ROC AUC reads): unless the policy has
  ``exact_scores``, consecutive values are merged into bins whose counts
  are 0 or at least ``min_count``, each released as its mean value.

And, for every reply, whatever it declares: no reply from fewer than
``min_rows`` rows, no model fit (:meth:`Client.released_parameters`)
with more parameters than ``max_parameters_per_row`` times the rows, and,
with a site ``privacy_budget``, no private release beyond it.
:func:`screen_reply` applies them to the frame a role built, at the site.
"""

import math

import numpy as np

from ._values import decode_values, encode_values

__all__ = ["ColumnExtremes", "CountedColumns", "CountedTable", "CountedValues", "ScoreBins",
           "screen_reply"]


class CountedValues:
    """Declares ``fields[field][i]`` (value sets, :func:`encode_values`) counted by ``counts``.

    Parameters
    ----------
    field : str
        The reply field holding one value descriptor per column.
    counts : str
        Name pattern of the count arrays, ``counts.format(i)`` for column ``i``.
    send_counts : callable, default=None
        ``send_counts(role) -> bool``: whether the protocol sends the counts
        (the role always computes them, so the policy can read them); None:
        always sent.
    """

    def __init__(self, field, counts, send_counts=None):
        self.field, self.counts, self.send_counts = field, counts, send_counts

    def screen(self, role, policy, task, frame, X, rows, refuse):
        fields, arrays = frame.fields, frame.arrays
        descriptors = fields.get(self.field)
        if descriptors is None:  # this reply has no such sets (another strategy)
            return
        sent = self.send_counts is None or self.send_counts(role)
        if policy is None or policy.min_count is None and policy.max_levels is None:
            if not sent:  # the counts were for the policy only
                frame.arrays = {name: value for name, value in arrays.items()
                                if not _is_count(self.counts, name, len(descriptors))}
            return
        new_arrays, new_descriptors = {}, []
        names = {}
        for i, descriptor in enumerate(descriptors):
            values = decode_values(descriptor, arrays, _unreadable)
            counts = arrays[self.counts.format(i=i)]
            keep = np.ones(counts.shape, dtype=bool) if policy.min_count is None else (
                counts >= policy.min_count)
            if policy.max_levels is not None and keep.sum() > policy.max_levels:
                refuse(f"max_levels={policy.max_levels}",
                       f"column {i} has {int(keep.sum())} levels, more than "
                       f"{policy.max_levels}.",
                       "group the column's levels before fitting (e.g. max_categories=), "
                       "or ask the site to raise max_levels.")
            if isinstance(descriptor, dict) and "array" in descriptor:
                names[descriptor["array"]] = (i, values[keep])
            new_descriptors.append((descriptor, values[keep]))
            names[self.counts.format(i=i)] = (i, counts[keep] if sent else None)
        # Rebuild the arrays in their order, the kept values in place of the sent ones.
        descriptors_out = [None] * len(descriptors)
        for name, value in arrays.items():
            if name not in names:
                new_arrays[name] = value
                continue
            i, kept = names[name]
            if name == self.counts.format(i=i):
                if kept is not None:
                    new_arrays[name] = kept
            else:
                descriptors_out[i] = encode_values(kept, name, new_arrays)
        for i, (descriptor, kept) in enumerate(new_descriptors):
            if descriptors_out[i] is None:  # sent as text in the fields
                descriptors_out[i] = encode_values(kept, f"_{i}", new_arrays)
        frame.fields = {**fields, self.field: descriptors_out}
        frame.arrays = new_arrays


def _is_count(pattern, name, n):
    return any(name == pattern.format(i=i) for i in range(n))


def _unreadable(reason):  # a reply this site's own role built: never expected
    raise ValueError(f"disclosure control cannot read the reply: {reason}")


class CountedColumns:
    """Declares per-column statistics ``values`` backed by the per-column row ``counts``.

    A column whose count is positive but below ``min_count`` is sent as a
    column without values (count, weight and statistics zero).

    Parameters
    ----------
    counts : str
        The array of per-column counts.
    values : tuple of str
        The per-column arrays computed from those rows (those absent from a
        reply are skipped).
    """

    def __init__(self, counts, values):
        self.counts, self.values = counts, tuple(values)

    def screen(self, role, policy, task, frame, X, rows, refuse):
        if policy is None or policy.min_count is None:
            return
        counts = frame.arrays.get(self.counts)
        if counts is None:
            return
        few = (counts > 0) & (counts < policy.min_count)
        if not few.any():
            return
        arrays = dict(frame.arrays)
        for name in (self.counts, *self.values):
            if name in arrays:
                value = arrays[name].copy()
                value[few] = 0
                arrays[name] = value
        frame.arrays = arrays


class ColumnExtremes:
    """Declares ``low`` and ``high``: each column's minimum and maximum of the site's rows.

    Unless the policy has ``exact_extremes``, they are replaced by the
    ``min_count``-th smallest and largest values (so each is backed by that
    many rows; the median when they cross; NaN when a column has fewer values), rounded outward to two
    significant digits of the column's range, so that neither is a row's value.
    """

    def __init__(self, low, high):
        self.low, self.high = low, high

    def screen(self, role, policy, task, frame, X, rows, refuse):
        if policy is None or policy.exact_extremes:
            return
        k = policy.min_count or 1
        X = np.asarray(X if rows is None else X[rows], dtype=np.float64)
        low = np.full(X.shape[1], np.nan)
        high = np.full(X.shape[1], np.nan)
        for j in range(X.shape[1]):
            column = X[:, j][~np.isnan(X[:, j])]
            if column.size >= k:
                low[j], high[j] = bounds_outward(*_kth_extremes(column, k))
        dtype = frame.arrays[self.low].dtype
        frame.arrays = {**frame.arrays, self.low: low.astype(dtype),
                        self.high: high.astype(dtype)}


def _kth_extremes(column, k):
    if k == 1:
        return column.min(), column.max()
    low = np.partition(column, k - 1)[k - 1]
    high = np.partition(column, column.size - k)[column.size - k]
    if low > high:  # fewer than 2k - 1 values: both sides meet at the median
        low = high = np.median(column)
    return low, high


def bounds_outward(low, high):
    """``low`` and ``high`` rounded outward to two significant digits of ``high - low``.

    Examples
    --------
    >>> bounds_outward(123.456, 987.6)
    (120.0, 990.0)
    >>> bounds_outward(5.0, 5.0)
    (4.9, 5.1)
    """
    span = high - low
    scale = span if span > 0 else abs(low) if low != 0 else 1.0
    step = 10.0 ** (math.floor(math.log10(scale)) - 1)
    down, up = math.floor(low / step) * step, math.ceil(high / step) * step
    if down == low:  # a bound on the grid is a row's value: move it one step out
        down -= step
    if up == high:
        up += step
    return float(np.round(down, 12)), float(np.round(up, 12))


class CountedTable:
    """Declares ``counts``: a table of row counts (a confusion matrix), with ``values`` per cell.

    A cell of fewer than ``min_count`` rows but not zero is refused, as
    DataSHIELD's ``ds.table`` refuses a table with a cell below
    ``nfilter.tab`` (zero cells are released, as there). Suppressing the cell
    instead would make the table's total disagree with the rows the reply
    counts, and every metric read from it wrong.

    Parameters
    ----------
    counts : str
        The array of row counts.
    what : str
        What the table is, for the refusal.
    remedy : str
        What the user can do, for the refusal.

    Examples
    --------
    A role declares it in its ``disclosure`` class attribute, as the evaluator's does:

    >>> from sklearn_fed.metrics._evaluate import EvaluatorClient
    >>> [type(rule).__name__ for rule in EvaluatorClient.disclosure]
    ['CountedTable', 'ScoreBins']
    >>> EvaluatorClient.disclosure[0].counts
    'cm_counts'
    """

    def __init__(self, counts, what, remedy):
        self.counts, self.what, self.remedy = counts, what, remedy

    def screen(self, role, policy, task, frame, X, rows, refuse):
        counts = frame.arrays.get(self.counts)
        if policy is None or policy.min_count is None or counts is None:
            return
        small = (counts > 0) & (counts < policy.min_count)
        if small.any():
            refuse(f"min_count={policy.min_count}",
                   f"its {self.what} has {int(small.sum())} cell(s) of 1 to "
                   f"{policy.min_count - 1} rows (the smallest: {int(counts[small].min())}), "
                   f"fewer than {policy.min_count}.",
                   self.remedy + " Or ask the site to lower min_count.")


class ScoreBins:
    """Declares ``values`` (increasing distinct scores) with per-class row ``counts`` at each.

    Unless the policy has ``exact_scores`` (or no ``min_count``), consecutive
    values are merged into bins in which every count is 0 or at least
    ``min_count`` (so no bin is backed by fewer rows, and no class within a
    bin either: the ``nfilter.tab`` rule of a table of bin x class), tying as
    few rows of different classes as possible (:func:`merged_bins`);
    a bin is released as the mean of its rows' values, its counts and
    ``sums`` (per-class weight sums) added up. A site whose rows cannot make
    one such bin (1 or 2 rows of a class) is refused.

    Parameters
    ----------
    values : str
    counts : tuple of str
    sums : tuple of str
        Per-value arrays that are summed when values are merged.
    remedy : str
        What the user can do, for the refusal.

    Examples
    --------
    >>> import types
    >>> from sklearn_fed.protocol import SitePolicy
    >>> frame = types.SimpleNamespace(fields={}, arrays={
    ...     "scores": np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6]),
    ...     "pos": np.array([0, 0, 0, 1, 1, 1]), "neg": np.array([1, 1, 1, 0, 0, 0])})
    >>> ScoreBins("scores", ("pos", "neg"), (), "").screen(
    ...     None, SitePolicy(), None, frame, None, None, None)
    >>> frame.arrays["scores"].round(2).tolist(), frame.arrays["pos"].tolist()
    ([0.2, 0.5], [0, 3])
    """

    def __init__(self, values, counts, sums, remedy):
        self.values, self.counts, self.sums = values, tuple(counts), tuple(sums)
        self.remedy = remedy

    def screen(self, role, policy, task, frame, X, rows, refuse):
        arrays = frame.arrays
        if (self.values not in arrays or policy is None or policy.exact_scores
                or policy.min_count is None):
            return
        k = policy.min_count
        counts = np.stack([np.asarray(arrays[name], dtype=np.int64) for name in self.counts])
        ends = merged_bins(counts, k)
        if ends is None:
            totals = counts.sum(axis=1)
            refuse(f"min_count={k}",
                   f"its rows' scores cannot be binned with at least {k} rows of each class "
                   f"per bin: the classes have {totals.tolist()} rows.",
                   self.remedy + " Or ask the site to lower min_count or set exact_scores.")
        starts = np.r_[0, ends[:-1]]
        values = np.asarray(arrays[self.values], dtype=np.float64)
        rows_at = counts.sum(axis=0)
        means = np.add.reduceat(values * rows_at, starts) / np.add.reduceat(rows_at, starts)
        # the means of disjoint sorted bins increase; keep them strictly so under round-off
        for i in range(1, len(means)):
            if means[i] <= means[i - 1]:
                means[i] = np.nextafter(means[i - 1], np.inf)
        out = dict(arrays)
        out[self.values] = means.astype(arrays[self.values].dtype)
        for name in (*self.counts, *self.sums):
            out[name] = np.add.reduceat(arrays[name], starts).astype(arrays[name].dtype)
        frame.arrays = out


#: How many distinct values back a bin may reach (bounds the search's cost to values x this).
_MAX_BIN_VALUES = 512


def merged_bins(counts, k):
    """End indices of consecutive bins of ``counts`` (classes x values) whose every class count
    is 0 or at least ``k``, tying as few pairs of rows of different classes as possible;
    None when even one bin of everything does not qualify.

    The rows of two classes in one bin become ties for ROC AUC and average
    precision (the metrics lose what orders them), so the partition minimises
    the sum over bins of the products of their class counts (dynamic
    programming over the end of the last bin; among partitions that tie the
    fewest pairs, the finest). A bin spans at most 512 distinct values
    (the cost is then linear in the values); where that allows no partition,
    the bins are grown greedily from the lowest value instead.

    Examples
    --------
    >>> merged_bins(np.array([[3, 1, 0, 2, 0], [0, 0, 3, 0, 3]]), 3)   # the lone 1 joins the 2
    [1, 4, 5]
    >>> merged_bins(np.array([[1, 1], [3, 0]]), 3) is None
    True
    """
    def ok(c):
        return ((c == 0) | (c >= k)).all(axis=0)

    n_values = counts.shape[1]
    if not ok(counts.sum(axis=1)):
        return None
    cumulative = np.concatenate([np.zeros((counts.shape[0], 1), dtype=np.int64),
                                 np.cumsum(counts, axis=1)], axis=1)
    cost = np.full(n_values + 1, np.inf)
    cost[0], back = 0.0, np.zeros(n_values + 1, dtype=np.intp)
    for end in range(1, n_values + 1):
        first = max(0, end - _MAX_BIN_VALUES)
        inside = cumulative[:, end:end + 1] - cumulative[:, first:end]
        tied = np.prod(inside, axis=0, dtype=np.float64) if counts.shape[0] == 2 else (
            (inside.sum(axis=0, dtype=np.float64) ** 2 - (inside.astype(np.float64) ** 2).sum(
                axis=0)) / 2)
        total = np.where(ok(inside), cost[first:end] + tied, np.inf)
        best = len(total) - 1 - int(np.argmin(total[::-1]))  # the last start: the finest
        cost[end], back[end] = total[best], first + best
    if not np.isfinite(cost[n_values]):
        return _greedy_bins(counts, ok)
    ends, end = [], n_values
    while end > 0:
        ends.append(end)
        end = int(back[end])
    return ends[::-1]


def _greedy_bins(counts, ok):
    """Bins closed as soon as they qualify, lowest value first; the tail joins the bins before
    it until the merge qualifies (the whole qualifies: checked by the caller)."""
    ends, running = [], np.zeros(counts.shape[0], dtype=np.int64)
    for j in range(counts.shape[1]):
        running = running + counts[:, j]
        if ok(running):
            ends.append(j + 1)
            running[:] = 0
    while running.any() and ends:
        start = ends[-2] if len(ends) > 1 else 0
        running = running + counts[:, start:ends.pop()].sum(axis=1)
        if ok(running):
            break
    if running.any():
        ends.append(counts.shape[1])
    return ends


def screen_reply(role, policy, task, frame, X, rows, n_rows):
    """Apply ``policy``'s disclosure rules to the reply ``frame`` that ``role`` built.

    Runs at the site, after the role computed its reply and before it is
    encoded; changes ``frame`` in place (suppressing what the policy holds
    back) or raises :class:`~sklearn_fed.protocol.TaskRefused` naming the
    rule, its threshold and what the user can do. ``policy=None`` only
    drops what the role computed for the policy alone.
    """
    site = task.site

    def refuse(rule, reason, remedy):
        policy.refuse(role.protocol, site, rule, reason, remedy)

    if policy is not None and role.reads_rows(task):
        no_rows = n_rows == 0 and role.accepts_no_rows
        if policy.min_rows is not None and n_rows < policy.min_rows and not no_rows:
            refuse(f"min_rows={policy.min_rows}",
                   f"it has {n_rows} rows, fewer than the policy's minimum {policy.min_rows}.",
                   "fit with more rows at this site, or leave the site out.")
        parameters = role.released_parameters(task, frame)
        limit = policy.max_parameters_per_row
        if parameters is not None and limit is not None and parameters > limit * n_rows:
            refuse(f"max_parameters_per_row={limit}",
                   f"a model of {parameters} parameters from {n_rows} rows exceeds "
                   f"{limit} parameters per row.",
                   f"use fewer features, or at least {math.ceil(parameters / limit)} rows "
                   "at this site.")
    for declaration in role.disclosure:
        declaration.screen(role, policy, task, frame, X, rows, refuse)
    budget = None if policy is None else policy.privacy_budget
    if budget is not None and role.reads_rows(task) and "epsilon" in task.fields:
        # charged last, when nothing else refuses: a refused reply releases nothing
        try:
            budget.charge_site_release(task.fields, f"the {role.protocol!r} release")
        except ValueError as exc:
            refuse(f"privacy_budget=(epsilon={budget.epsilon:g}, delta={budget.delta:g})",
                   str(exc), "ask the server for a smaller epsilon, or raise the site's "
                   "budget (its releases so far stay spent).")
    return frame
