"""sklearn-fed's thin Flower ClientApp: it forwards each task to the site's worker.

Flower 1.41 starts a new ``flwr-clientapp`` process for every message, and
that process imports the ClientApp's module. sklearn-fed's own ClientApp
(:mod:`sklearn_fed.flower.app`) imports scikit-learn: about 2 CPU-seconds
per message, which was most of a round's cost. This module imports only
Flower and the standard library. When the SuperNode's node config names a
``worker-socket``, each message is handed over that Unix socket to the
site's long-running worker (``python -m sklearn_fed.flower.worker``), which
has scikit-learn loaded and keeps the run's client role in memory between
rounds; the role's state still comes back and is written to the node's
``context.state`` (sklearn-fed's no-pickle format), so a worker that
restarts picks the run up where it was. Without ``worker-socket``, or when
the worker cannot be reached, the message is answered in this process, as
:mod:`sklearn_fed.flower.app` would.

Use it in the app's ``pyproject.toml``::

    [tool.flwr.app.components]
    serverapp = "sklearn_fed.flower.app:serverapp"
    clientapp = "sklearn_fed_site:clientapp"

The socket is the node's own: the worker makes it readable and writable by
its user only, in a directory only that user can enter.
"""

import json
import logging
import socket
import struct

from flwr.app import ConfigRecord, Error, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.common.constant import ErrorCode

__all__ = ["clientapp", "receive", "send"]

#: Name of the RecordDict entry (a ConfigRecord) that carries sklearn-fed's bytes.
RECORD = "sklearn_fed"
#: Flower message types: "<category>.<action>"; the ClientApp routes on them.
ROLL_CALL_ACTION = "sklearn_fed_site"
TASK_ACTION = "sklearn_fed"
#: Where a node keeps its client role's state between the messages of one run.
STATE_RECORD = "sklearn_fed_client"
#: The node-config key naming the worker's socket.
WORKER_SOCKET = "worker-socket"

_HEADER_LIMIT = 1 << 20  # a request's JSON header: configs and names, never data
_BLOB_LIMIT = 1 << 32  # one task, reply or state entry (Flower's own message limit is lower)
_CONNECT_TIMEOUT = 5.0

_log = logging.getLogger("sklearn_fed.flower")


# ---------------------------------------------------------------- the wire
def _exactly(sock, n_bytes):
    chunks, left = [], n_bytes
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise ConnectionError("the other end closed the connection mid-message.")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def send(sock, header, blobs=None):
    """Send a JSON ``header`` and named ``blobs`` (bytes) over ``sock``.

    The frame is the header's length (8 bytes, big-endian), the header (which
    lists the blobs' names and lengths), then the blobs' bytes.
    """
    blobs = blobs or {}
    head = json.dumps(dict(header, blobs=[[name, len(data)] for name, data in blobs.items()]))
    head = head.encode()
    sock.sendall(struct.pack("!Q", len(head)) + head)
    for data in blobs.values():
        sock.sendall(data)


def receive(sock):
    """``(header, blobs)`` as :func:`send` wrote them; ValueError if the frame is malformed."""
    (size,) = struct.unpack("!Q", _exactly(sock, 8))
    if size > _HEADER_LIMIT:
        raise ValueError(f"a header of {size} bytes (at most {_HEADER_LIMIT}).")
    header = json.loads(_exactly(sock, size))
    listed = header.pop("blobs", None) if isinstance(header, dict) else None
    if not isinstance(listed, list):
        raise ValueError("the header lists no blobs.")  # noqa: TRY004 - a malformed frame
    blobs = {}
    for entry in listed:
        if (not isinstance(entry, list) or len(entry) != 2 or not isinstance(entry[0], str)
                or not isinstance(entry[1], int) or not 0 <= entry[1] <= _BLOB_LIMIT):
            raise ValueError(f"a malformed blob entry {entry!r}.")
        blobs[entry[0]] = _exactly(sock, entry[1])
    return header, blobs


# ---------------------------------------------------------------- the ClientApp
def _ask_worker(path, header, blobs):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(_CONNECT_TIMEOUT)
        sock.connect(path)
        sock.settimeout(None)  # a round's computation may take long; Flower bounds the task
        send(sock, header, blobs)
        return receive(sock)


def _in_process():
    from sklearn_fed.flower import (
        _apps,  # scikit-learn: seconds, the cost the worker saves
    )

    return _apps


def _forward(op, message, context):
    """Ask the node's worker; None when there is none or it cannot be reached."""
    path = context.node_config.get(WORKER_SOCKET)
    if not path:
        return None
    record = message.content.config_records.get(RECORD)
    task = None if record is None else record.get("task")
    blobs = {"task": task} if isinstance(task, bytes) else {}
    if op == "task":
        saved = context.state.config_records.get(STATE_RECORD, {})
        blobs.update({f"state:{name}": data for name, data in saved.items()})
    header = {"op": op, "run_id": int(message.metadata.run_id),
              "node_config": dict(context.node_config), "run_config": dict(context.run_config)}
    try:
        return _ask_worker(str(path), header, blobs)
    except (OSError, ValueError) as exc:
        _log.warning("sklearn-fed: the site worker at %s did not answer (%s); answering in "
                     "this process.", path, exc)
        return None


def _error(message, reason):
    return Message(Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=reason),
                   reply_to=message)


def roll_call(message, context):
    """The node's site label, from the worker (which checks the node config)."""
    answer = _forward("site", message, context)
    if answer is None:
        return _in_process().roll_call(message, context)
    header, _ = answer
    if not header.get("ok"):
        return _error(message, str(header.get("error")))
    record = ConfigRecord({"site": str(header["site"])})
    return Message(RecordDict({RECORD: record}), reply_to=message)


def answer_task(message, context):
    """The node's answer to one task, computed by the worker (see the module docstring)."""
    answer = _forward("task", message, context)
    if answer is None:
        return _in_process().answer_task(message, context)
    header, blobs = answer
    if not header.get("ok"):
        _log.warning("sklearn-fed: not answering: %s", header.get("error"))
        return _error(message, str(header.get("error")))
    context.state[STATE_RECORD] = ConfigRecord({
        name.removeprefix("state:"): data for name, data in blobs.items()
        if name.startswith("state:")})
    return Message(RecordDict({RECORD: ConfigRecord({"reply": blobs["reply"]})}),
                   reply_to=message)


clientapp = ClientApp()
clientapp.query(ROLL_CALL_ACTION)(roll_call)
clientapp.train(TASK_ACTION)(answer_task)
