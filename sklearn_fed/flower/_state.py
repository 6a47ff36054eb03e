"""What a SuperNode keeps between the messages of one run, written without pickle.

Flower starts a new ClientApp process for every message, so a client role's
attributes (rows held back by a streaming protocol, a round's X25519 key)
are saved in the node's ``context.state`` and read back by the next
message's process. That state never leaves the node.

The format is a small ``.npz`` archive read with ``allow_pickle=False``: one
JSON tree in which every container is tagged (``{"dict": [[key, value],
...]}``, ``{"tuple": [...]}``, ``{"array": i}``, ...) plus the numeric arrays
it points to. Objects are sklearn-fed's own classes only, rebuilt from their
``__getstate__``. It is not skops (the model files are): importing skops
imports every scikit-learn estimator (seconds on a busy machine), and a
ClientApp process would pay that on every message.
"""

import io
import json

import numpy as np

from ._persist import our_class

__all__ = ["read_state", "write_state"]

_TREE = "tree"  # the archive member holding the JSON tree; arrays are "0", "1", ...


def _tagged(value, arrays):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (np.ndarray, np.generic)):
        array = np.asarray(value)
        if array.dtype.hasobject:
            raise TypeError("an array of Python objects cannot be kept.")
        arrays.append(array)
        return {"array" if isinstance(value, np.ndarray) else "scalar": len(arrays) - 1}
    if isinstance(value, bytes):
        return {"bytes": value.hex()}
    if isinstance(value, (list, tuple)):
        return {type(value).__name__: [_tagged(item, arrays) for item in value]}
    if isinstance(value, dict):
        return {"dict": [[_tagged(k, arrays), _tagged(v, arrays)] for k, v in value.items()]}
    name = f"{type(value).__module__}.{type(value).__qualname__}"
    if our_class(name) is type(value):
        return {"object": name, "state": _tagged(value.__getstate__(), arrays)}
    raise TypeError(f"a {name} cannot be kept (not one of sklearn-fed's classes).")


def _untagged(node, arrays):
    if not isinstance(node, dict):
        return node
    if set(node) == {"object", "state"}:
        cls = our_class(node["object"])
        if cls is None:
            raise ValueError(f"node state names {node['object']!r}, not a sklearn-fed class.")
        obj = cls.__new__(cls)
        state = _untagged(node["state"], arrays)
        if hasattr(obj, "__setstate__"):
            obj.__setstate__(state)
        else:  # what pickle does with object.__getstate__()'s dict
            obj.__dict__.update(state)
        return obj
    (tag, content), = node.items()
    if tag == "array":
        return arrays[str(content)]
    if tag == "scalar":
        return arrays[str(content)][()]
    if tag == "bytes":
        return bytes.fromhex(content)
    if tag in ("list", "tuple"):
        items = [_untagged(item, arrays) for item in content]
        return items if tag == "list" else tuple(items)
    if tag == "dict":
        return {_untagged(k, arrays): _untagged(v, arrays) for k, v in content}
    raise ValueError(f"node state holds an unknown tag {tag!r}.")


def write_state(value):
    """``value`` as bytes (see :func:`read_state`); TypeError if it holds what cannot be kept.

    Examples
    --------
    >>> import numpy as np
    >>> value = {("f", "a"): (np.arange(3.0), b"k"), "n": np.int64(2)}
    >>> back = read_state(write_state(value))
    >>> back[("f", "a")][0].tolist(), back[("f", "a")][1], back["n"]
    ([0.0, 1.0, 2.0], b'k', np.int64(2))
    """
    arrays = []
    tree = json.dumps(_tagged(value, arrays))
    buffer = io.BytesIO()
    np.savez(buffer, **{str(i): array for i, array in enumerate(arrays)},
             **{_TREE: np.frombuffer(tree.encode("utf-8"), dtype=np.uint8)})
    return buffer.getvalue()


def read_state(data):
    """The value :func:`write_state` wrote (no pickle; only sklearn-fed's classes)."""
    with np.load(io.BytesIO(data), allow_pickle=False) as archive:
        arrays = {name: archive[name] for name in archive.files}
    return _untagged(json.loads(arrays.pop(_TREE).tobytes().decode("utf-8")), arrays)
