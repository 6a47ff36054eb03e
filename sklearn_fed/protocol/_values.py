"""Values that are not plain float arrays, on the wire: label sets and fitted attributes.

Categories and class labels may be numbers (sent as an array, dtype kept) or
text (sent as a JSON list); fitted attributes of a transformer (what a server
broadcasts so that sites can transform their rows) mix arrays, scalars,
dtypes and lists of arrays. Both are encoded here into a message's
``fields`` (JSON) and ``arrays``, and decoded with checks: messages are
untrusted, and nothing but numbers, text and ``None`` is ever rebuilt.
"""

import math
import numbers

import numpy as np

from ._wire import WIRE_DTYPES

__all__ = ["decode_state", "decode_values", "encode_state", "encode_values"]

_NUMERIC = "iuf"
_MAX_ITEMS = 2**24


def encode_values(values, name, arrays):
    """Put a 1-D array of values (categories, class labels) into a message.

    Numbers travel as an array named ``name`` (their dtype kept), booleans as
    ``uint8``, anything else (strings, bytes, objects, ``None``, NaN) as a JSON
    list, with the array's kind: ``"U"`` (str), ``"S"`` (bytes) or ``"O"``.
    A bytes value travels as ``{"bytes": hex}``.

    Parameters
    ----------
    values : ndarray of shape (n_values,)
    name : str
        Name of the array, when one is used.
    arrays : dict
        The message's arrays; the array is added to it.

    Returns
    -------
    descriptor : dict
        JSON value to store in the message's fields.

    Examples
    --------
    >>> arrays = {}
    >>> encode_values(np.array(["b", "a"]), "cats", arrays), arrays
    ({'text': ['b', 'a'], 'dtype': 'U'}, {})
    >>> encode_values(np.array([2, 5]), "cats", arrays)
    {'array': 'cats'}
    >>> encode_values(np.array([b"no", b"yes"]), "cats", arrays)
    {'text': [{'bytes': '6e6f'}, {'bytes': '796573'}], 'dtype': 'S'}
    """
    values = np.asarray(values)
    if values.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D array of values, got shape {values.shape}.")
    kind = values.dtype.kind
    if kind in _NUMERIC + "b":
        return _put_array(values, name, arrays)
    if kind not in "OUS":
        raise TypeError(f"{name}: values of dtype {values.dtype} cannot be sent.")
    return {"text": [_plain(value, name) for value in values.tolist()], "dtype": kind}


# Numeric dtypes the wire does not carry travel widened.
_WIDER = {"f": np.float64, "i": np.int64, "u": np.uint64}


def _put_array(values, name, arrays):
    """A numeric or boolean array into ``arrays``; its JSON descriptor."""
    if values.dtype.kind == "b":
        arrays[name] = values.astype(np.uint8)
        return {"array": name, "bool": True}
    if not {values.dtype.newbyteorder("<").str, values.dtype.str} & WIRE_DTYPES:
        values = values.astype(_WIDER[values.dtype.kind])
    arrays[name] = values
    return {"array": name}


def _plain(value, name):
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bytes):
        return {"bytes": value.hex()}
    if value is None or isinstance(value, (str, bool, numbers.Integral)):
        return value if not isinstance(value, numbers.Integral) or isinstance(value, bool) \
            else int(value)
    if isinstance(value, numbers.Real):
        value = float(value)
        return value if math.isfinite(value) else {"float": repr(value)}
    raise TypeError(f"{name}: a value of type {type(value).__name__} cannot be sent.")


def decode_values(descriptor, arrays, fail):
    """The values :func:`encode_values` described; ``fail(reason)`` raises on bad input."""
    if not isinstance(descriptor, dict):
        fail("malformed values descriptor.")
    if "array" in descriptor:
        if set(descriptor) - {"array", "bool"}:
            fail("malformed values descriptor.")
        values = arrays.get(descriptor["array"]) if isinstance(descriptor["array"], str) else None
        if not (isinstance(values, np.ndarray) and values.ndim == 1
                and values.dtype.kind in _NUMERIC):
            fail(f"values array {descriptor['array']!r} is missing or not a numeric vector.")
        if descriptor.get("bool"):
            if descriptor["bool"] is not True or not np.isin(values, (0, 1)).all():
                fail("boolean values must be 0 or 1.")
            return values.astype(bool)
        return np.array(values)
    if set(descriptor) != {"text", "dtype"} or descriptor["dtype"] not in ("O", "U", "S"):
        fail("malformed values descriptor.")
    items = descriptor["text"]
    if not isinstance(items, list) or len(items) > _MAX_ITEMS:
        fail("values must be a list.")
    plain = []
    for item in items:
        if isinstance(item, dict) and set(item) == {"bytes"}:
            item = _bytes(item["bytes"], fail)
        elif isinstance(item, dict):
            if set(item) != {"float"} or item["float"] not in ("nan", "inf", "-inf"):
                fail(f"malformed value {item!r}.")
            item = float(item["float"])
        elif not (item is None or isinstance(item, (str, bool, int, float))):
            fail(f"malformed value {item!r}.")
        plain.append(item)
    if descriptor["dtype"] == "U":
        if not all(isinstance(item, str) for item in plain):
            fail("text values must all be strings.")
        return np.array(plain, dtype=str) if plain else np.array([], dtype="<U1")
    if descriptor["dtype"] == "S":
        if not all(isinstance(item, bytes) for item in plain):
            fail("bytes values must all be bytes.")
        return np.array(plain, dtype=bytes) if plain else np.array([], dtype="S1")
    values = np.empty(len(plain), dtype=object)
    values[:] = plain
    return values


def _bytes(text, fail):
    """A bytes value from its hex text (as :func:`_plain` sends it)."""
    if not isinstance(text, str):
        fail("a bytes value must be hex text.")
    try:
        return bytes.fromhex(text)
    except ValueError:
        fail("a bytes value must be hex text.")


def encode_state(estimator, attributes, prefix=""):
    """The fitted attributes ``attributes`` of ``estimator``, as ``(fields, arrays)``.

    What a server broadcasts so that a site can rebuild the fitted
    transformer from its own (unfitted) copy: arrays, numbers, strings,
    ``None``, dtypes and lists of arrays. Attributes that are absent are
    sent as absent.

    Examples
    --------
    >>> from sklearn.preprocessing import StandardScaler
    >>> scaler = StandardScaler().fit([[0.0], [2.0]])
    >>> fields, arrays = encode_state(scaler, ["mean_", "n_features_in_", "with_mean"])
    >>> fields
    {'mean_': {'array': 'mean_'}, 'n_features_in_': {'json': 1}, 'with_mean': {'json': True}}
    """
    fields, arrays = {}, {}
    for name in attributes:
        if hasattr(estimator, name):
            fields[name] = _encode_value(getattr(estimator, name), prefix + name, arrays)
    return fields, arrays


def _encode_value(value, name, arrays):
    if isinstance(value, np.generic) and value.dtype.kind in _NUMERIC + "b":
        return {**_put_array(np.asarray(value), name, arrays), "scalar": True}
    if value is None or isinstance(value, (str, bool)):
        return {"json": value}
    if isinstance(value, numbers.Integral):
        return {"json": int(value)}
    if isinstance(value, float):
        if math.isfinite(value):
            return {"json": value}
        return {"json": None, "float": repr(value)}
    if isinstance(value, np.dtype):
        return {"dtype": value.str}
    if isinstance(value, np.ndarray):
        if value.dtype.kind in _NUMERIC + "b":
            return _put_array(value, name, arrays)
        return {"values": encode_values(value, name, arrays)}
    if isinstance(value, list):
        return {"list": [_encode_value(item, f"{name}.{i}", arrays)
                         for i, item in enumerate(value)]}
    raise TypeError(f"attribute {name!r} of type {type(value).__name__} cannot be broadcast.")


def decode_state(fields, arrays, attributes, fail):
    """``{name: value}`` from :func:`encode_state`'s output; only the named attributes.

    ``fail(reason)`` raises; anything but the encoded kinds is refused.
    """
    if not isinstance(fields, dict) or set(fields) - set(attributes):
        fail("the fitted state names unexpected attributes.")
    return {name: _decode_value(descriptor, arrays, fail, depth=0)
            for name, descriptor in fields.items()}


def _decode_value(descriptor, arrays, fail, depth):
    if not isinstance(descriptor, dict) or len(descriptor) == 0 or depth > 4:
        fail("malformed fitted state.")
    if set(descriptor) == {"json", "float"}:
        if descriptor["json"] is not None or descriptor["float"] not in ("nan", "inf", "-inf"):
            fail("malformed fitted state.")
        return float(descriptor["float"])
    if set(descriptor) == {"json"}:
        value = descriptor["json"]
        if not (value is None or isinstance(value, (str, bool, int, float))):
            fail("malformed fitted state.")
        return value
    if set(descriptor) == {"dtype"}:
        try:
            dtype = np.dtype(descriptor["dtype"])
        except (TypeError, ValueError):
            fail(f"malformed dtype {descriptor['dtype']!r}.")
        if dtype.kind not in _NUMERIC + "bOUS":
            fail(f"dtype {dtype} is not allowed.")
        return dtype
    if set(descriptor) == {"values"}:
        return decode_values(descriptor["values"], arrays, fail)
    if set(descriptor) == {"list"}:
        if not isinstance(descriptor["list"], list):
            fail("malformed fitted state.")
        return [_decode_value(item, arrays, fail, depth + 1) for item in descriptor["list"]]
    if "array" in descriptor and set(descriptor) <= {"array", "scalar", "bool"}:
        value = arrays.get(descriptor["array"]) if isinstance(descriptor["array"], str) else None
        if not (isinstance(value, np.ndarray) and value.dtype.kind in _NUMERIC):
            fail(f"fitted array {descriptor['array']!r} is missing or not numeric.")
        if descriptor.get("bool") not in (None, True) or descriptor.get("scalar") not in (
            None, True
        ):
            fail("malformed fitted state.")
        value = np.array(value, dtype=bool if descriptor.get("bool") else value.dtype)
        if descriptor.get("scalar"):
            if value.ndim != 0:
                fail("a fitted scalar must be a 0-d array.")
            return value[()]
        return value
    fail("malformed fitted state.")
