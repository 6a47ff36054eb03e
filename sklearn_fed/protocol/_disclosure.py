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
  ``min_count``-th smallest and largest values rounded outward.

And, for every reply, whatever it declares: no reply from fewer than
``min_rows`` rows, and no model fit (:meth:`Client.released_parameters`)
with more parameters than ``max_parameters_per_row`` times the rows.
:func:`screen_reply` applies them to the frame a role built, at the site.
"""

import math

import numpy as np

from ._values import decode_values, encode_values

__all__ = ["ColumnExtremes", "CountedColumns", "CountedValues", "screen_reply"]


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
    return frame
