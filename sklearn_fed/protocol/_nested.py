"""A frame inside a frame: how a composite protocol (a pipeline) carries its steps' messages.

A pipeline's task holds the task of the step being fitted, and a site's
reply holds that step's reply, each exactly as the step's own roles made
it: its header and fields go into the outer frame's fields, its arrays into
the outer frame's arrays under a prefix. The outer frame is what is
authenticated and counted; the inner one is rebuilt and checked by the
step's own roles, so a step validates its messages the same way inside a
pipeline as alone.
"""

from ._wire import Frame

__all__ = ["nest", "unnest"]

_META = ("kind", "federation", "round", "schema", "fields")


def nest(frame, prefix, arrays):
    """The header and fields of ``frame``, its arrays added to ``arrays`` under ``prefix``.

    Parameters
    ----------
    frame : Frame
    prefix : str
        Distinct per nested frame of one message, e.g. ``"t."``.
    arrays : dict
        The outer frame's arrays.

    Returns
    -------
    meta : dict
        JSON value for the outer frame's fields.

    Examples
    --------
    >>> import numpy as np
    >>> arrays = {}
    >>> meta = nest(Frame(kind="a/task", arrays={"x": np.zeros(2)}), "t.", arrays)
    >>> sorted(meta), list(arrays)
    (['federation', 'fields', 'kind', 'round', 'schema'], ['t.x'])
    >>> unnest(meta, arrays, "t.", site=3, fail=print).arrays["x"]
    array([0., 0.])
    """
    for name, value in frame.arrays.items():
        arrays[prefix + name] = value
    return {
        "kind": frame.kind,
        "federation": frame.federation,
        "round": int(frame.round),
        "schema": frame.schema,
        "fields": frame.fields,
    }


def unnest(meta, arrays, prefix, *, site, fail):
    """Rebuild a frame nested by :func:`nest`; ``fail(reason)`` raises on a malformed one.

    Only the types are checked here; the inner protocol's own role checks
    the rest (kind, federation, round, schema, fields and arrays).
    """
    if not (isinstance(meta, dict) and set(meta) == set(_META)):
        fail("the nested message is malformed.")
    kind, federation, round_id = meta["kind"], meta["federation"], meta["round"]
    if not (isinstance(kind, str) and 0 < len(kind) <= 64):
        fail("the nested message kind is missing or too long.")
    if not (isinstance(federation, str) and len(federation) == 32):
        fail("the nested federation id must be 32 hex digits.")
    if not (type(round_id) is int and 0 <= round_id < 2**63):
        fail("the nested round id must be a non-negative integer.")
    if not (meta["schema"] is None or isinstance(meta["schema"], dict)):
        fail("the nested schema is malformed.")
    if not isinstance(meta["fields"], dict):
        fail("the nested fields must be a JSON object.")
    inner = {name[len(prefix):]: value for name, value in arrays.items()
             if name.startswith(prefix)}
    return Frame(kind=kind, federation=federation, round=round_id, site=site,
                 schema=meta["schema"], fields=meta["fields"], arrays=inner)
