"""What a SuperNode keeps between the messages of one run, written without pickle.

A client role's attributes (rows held back by a streaming protocol, a round's
X25519 key) are saved in the node's ``context.state`` for the run's next
message; they never leave the node. The format is a small ``.npz`` archive
read with ``allow_pickle=False``: one JSON tree in which every container is
tagged (``{"dict": [[key, value], ...]}``, ``{"tuple": [...]}``, ``{"array":
i}``, ...) plus the numeric arrays it points to; objects are the classes of
:data:`~sklearn_fed.flower._trust.STATE_TYPES` only, rebuilt from their
``__getstate__``. Anything else is a ValueError naming the state entry, which
the ClientApp answers as an error reply. It is not skops (the model files
are): importing skops imports every scikit-learn estimator, seconds that a
ClientApp process would pay on every message.
"""

import io
import json
import zipfile

import numpy as np

from ._trust import STATE_TYPES, check_archive, read_json, trusted_class

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
    if trusted_class(name, STATE_TYPES) is type(value):
        return {"object": name, "state": _tagged(value.__getstate__(), arrays)}
    raise TypeError(f"a {name} cannot be kept (not one of the sklearn-fed classes a node "
                    "keeps).")


def _untagged(node, arrays):
    # the tree's depth is capped by read_json, so this recursion stays shallow
    if node is None or isinstance(node, (bool, int, float, str)):
        return node
    if not (isinstance(node, dict) and len(node) in (1, 2)):
        raise ValueError(f"a node {type(node).__name__} where a tagged value belongs.")
    if len(node) == 2:
        if set(node) != {"object", "state"}:
            raise ValueError(f"an entry with keys {sorted(node)[:4]}, not a tagged value.")
        cls = trusted_class(node["object"], STATE_TYPES)
        if cls is None:
            raise ValueError(f"it names {str(node['object'])[:80]!r}, not a sklearn-fed class "
                             "a node keeps.")
        obj = cls.__new__(cls)
        state = _untagged(node["state"], arrays)
        if hasattr(obj, "__setstate__"):
            obj.__setstate__(state)
        elif isinstance(state, dict):  # what pickle does with object.__getstate__()'s dict
            obj.__dict__.update(state)
        else:
            raise ValueError(f"the state of a {cls.__name__} is not a dict.")
        return obj
    (tag, content), = node.items()
    if tag in ("array", "scalar"):
        if not (type(content) is int and str(content) in arrays):
            raise ValueError(f"it points to array {str(content)[:40]!r}, which it does not hold.")
        array = arrays[str(content)]
        if tag == "array":
            return array
        if array.ndim != 0:
            raise ValueError(f"scalar {content} is an array of shape {array.shape}.")
        return array[()]
    if tag == "bytes":
        if not isinstance(content, str):
            raise ValueError("a bytes entry that is not hex text.")
        return bytes.fromhex(content)
    if tag in ("list", "tuple", "dict") and not isinstance(content, list):
        raise ValueError(f"a {tag} entry that holds no list.")
    if tag in ("list", "tuple"):
        items = [_untagged(item, arrays) for item in content]
        return items if tag == "list" else tuple(items)
    if tag == "dict":
        if not all(isinstance(pair, list) and len(pair) == 2 for pair in content):
            raise ValueError("a dict entry whose items are not [key, value] pairs.")
        pairs = [(_untagged(k, arrays), _untagged(v, arrays)) for k, v in content]
        try:
            return dict(pairs)
        except TypeError:  # a list or dict as a key
            raise ValueError("a dict entry with an unhashable key.") from None
    raise ValueError(f"it holds an unknown tag {str(tag)[:40]!r}.")


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


def read_state(data, where="node state", *, max_bytes=None):
    """The value :func:`write_state` wrote (no pickle; only sklearn-fed's classes).

    Parameters
    ----------
    data : bytes
    where : str, default="node state"
        What ``data`` is (the ClientApp passes the state entry's name), for errors.
    max_bytes : int, default=None
        Cap on the decompressed size; None means
        :data:`~sklearn_fed.flower._trust.DEFAULT_MAX_BYTES`.

    Raises
    ------
    ValueError
        Naming ``where``: too large, not an archive this module wrote, or a
        tree that is malformed or names a class a node does not keep.
    """
    if not isinstance(data, bytes):
        # ValueError, not TypeError: the ClientApp answers ValueErrors as error replies
        raise ValueError(f"{where}: holds a {type(data).__name__}, not bytes.")  # noqa: TRY004
    check_archive(data, where, max_bytes=max_bytes)
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as archive:
            if not isinstance(archive, np.lib.npyio.NpzFile) or _TREE not in archive.files:
                raise ValueError("not an archive write_state wrote.")
            arrays = {name: archive[name] for name in archive.files}
        tree = arrays.pop(_TREE)
        if tree.dtype != np.uint8 or tree.ndim != 1:
            raise ValueError(f"its tree is an array of {tree.dtype} {tree.shape}, not text.")
        text = tree.tobytes().decode("utf-8")
    except (ValueError, OSError, EOFError, UnicodeDecodeError, zipfile.BadZipFile) as exc:
        raise ValueError(f"{where}: {exc}") from None
    tree = read_json(text, where)
    try:
        return _untagged(tree, arrays)
    except (ValueError, TypeError, KeyError) as exc:  # TypeError/KeyError: a __setstate__
        raise ValueError(f"{where}: malformed: {exc}") from None
