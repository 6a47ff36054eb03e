"""Reading the values of untrusted messages, checked: a reply's number or array, a task's field."""

import math

import numpy as np

from .._compat import _unique
from ._errors import InvalidClientMessage, failing, server_error
from ._values import decode_values

__all__ = [
    "reply_array", "reply_dtype", "reply_error", "reply_keys", "reply_number",
    "reply_value_counts", "reply_values", "reply_within_dtype", "server_error", "task_field",
]


def reply_error(site, reason):
    """Refuse a site's reply: the site is named."""
    raise InvalidClientMessage(f"client {site!r}: {reason}", site)


def reply_number(frame, name, site, *, low=0.0, high=math.inf, integer=False):
    """A numeric field of a reply, checked to be finite and in ``[low, high]``.

    Examples
    --------
    >>> from sklearn_fed.protocol import Frame
    >>> reply_number(Frame("x/reply", fields={"size": 3}), "size", "a", low=1)
    3.0
    """
    value = frame.fields.get(name)
    ok = type(value) is int if integer else type(value) in (int, float)
    if not (ok and math.isfinite(value) and low <= value <= high):
        kind = "an integer" if integer else "a finite number"
        reply_error(site, f"field {name!r} must be {kind} in [{low}, {high}], got {value!r}.")
    return int(value) if integer else float(value)


def reply_array(frame, name, shape, site):
    """A float64 array of a reply with exactly this shape and only finite values.

    Examples
    --------
    >>> from sklearn_fed.protocol import Frame
    >>> reply_array(Frame("x/reply", arrays={"w": np.ones(2)}), "w", (2,), "a")
    array([1., 1.])
    """
    return _checked_array(frame, name, shape, site, np.dtype(np.float64), "float64")


def reply_dtype(frame):
    """The dtype of the rows a reply describes, from its schema: float32 or float64.

    The framework checked the schema before any reader runs, so this is one of the two.
    A reply's own claims about dtypes (a field, an array's dtype) are checked against it:
    the server's schema is the reference, never a value the site chose elsewhere.
    """
    return np.dtype(np.float32 if frame.schema["dtype"] == "float32" else np.float64)


def reply_values(frame, name, shape, site, *, allow_nan=False):
    """An array of values taken from the site's rows (a column's minimum, a category).

    Its dtype must be the reply's :func:`reply_dtype` (a float32 site's values are
    float32: nothing that overflows the server's float32 model), its shape
    ``shape``, and every value finite (or NaN, with ``allow_nan``).

    Examples
    --------
    >>> from sklearn_fed.protocol import Frame
    >>> frame = Frame("x/reply", schema={"dtype": "float32"},
    ...               arrays={"low": np.zeros(2, np.float32)})
    >>> reply_values(frame, "low", (2,), "a").dtype
    dtype('float32')
    """
    dtype = reply_dtype(frame)
    return _checked_array(frame, name, shape, site, dtype, f"{dtype} (the dtype of its rows)",
                          allow_nan=allow_nan)


def _checked_array(frame, name, shape, site, dtype, dtype_text, *, allow_nan=False):
    value = frame.arrays.get(name)
    if not isinstance(value, np.ndarray) or value.dtype != dtype:
        reply_error(site, f"array {name!r} must be {dtype_text}.")
    if value.shape != tuple(shape):
        reply_error(site, f"array {name!r} has shape {value.shape}, expected {tuple(shape)}.")
    if not (~np.isinf(value) if allow_nan else np.isfinite(value)).all():
        reply_error(site, f"array {name!r} is not finite.")
    return value


def reply_within_dtype(frame, name, value, site):
    """Refuse values that overflow the dtype of the reply's rows (a mean of a float32
    site beyond float32's range would become infinite in the server's float32 model)."""
    limit = np.finfo(reply_dtype(frame)).max
    if np.max(np.abs(value), initial=0.0) > limit:
        reply_error(site, f"array {name!r} overflows its rows' dtype {reply_dtype(frame)} "
                          f"(beyond {limit:g}).")
    return value


def reply_value_counts(frame, descriptor, counts, site, column, *, at_most=None):
    """A column's distinct values and the array ``counts`` of their counts (None: not sent):
    positive int64, one per value, adding up to ``at_most`` rows at most (else each < 2^40)."""
    fail = failing(site, f"column {column}: ")
    values = decode_values(descriptor, frame.arrays, fail)
    if counts is not None:
        counts = frame.arrays.get(counts)
        if not (isinstance(counts, np.ndarray) and counts.dtype == np.int64
                and counts.shape == values.shape and np.all(counts >= 1) and (
                    np.all(counts < 2**40) if at_most is None else counts.sum() <= at_most)):
            fail("counts must be positive int64, one per value, at most one per row.")
    try:
        distinct = _unique(values).size == values.size
    except TypeError:  # strings and numbers mixed
        distinct = False
    if not distinct or (at_most is not None and values.size > at_most):
        fail("its values are not distinct (or mix strings and numbers), or outnumber its rows.")
    return values, counts


def reply_keys(frame, site, fields=(), arrays=()):
    """Check that a reply carries exactly these fields and arrays."""
    if set(frame.fields) != set(fields) or set(frame.arrays) != set(arrays):
        reply_error(site, f"expected fields {sorted(fields)} and arrays {sorted(arrays)}, "
                          f"got {sorted(frame.fields)} and {sorted(frame.arrays)}.")


def task_field(task, name, kind):
    """A field of a task, checked for type at the site (tasks are untrusted too)."""
    value = task.fields.get(name)
    if kind is float and type(value) is int:
        value = float(value)
    if type(value) is not kind:
        server_error(f"task field {name!r} must be {kind.__name__}, got {value!r}.")
    return value
