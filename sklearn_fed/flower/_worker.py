"""A site's long-running worker: it answers the tasks its SuperNode's ClientApps hand over.

The thin ClientApp (:mod:`sklearn_fed_site`) imports no scikit-learn and hands
each task over a Unix socket to this worker, which has sklearn-fed loaded once
and keeps each run's client role in memory between rounds. It still returns
the role's state with every reply, for the node's ``context.state``: a worker
that restarts, or a failed task, rebuilds the role from there. Tasks are
answered one at a time. The socket is as trusted as the SuperNode (a
directory only the worker's user can enter); the task bytes are still checked
by the role (HMAC under the site's key, the site's policy). See
:doc:`/deploying_flower`.
"""

import argparse
import json
import logging
import os
import socketserver
import sys
import threading
import time
import traceback
from collections import OrderedDict
from pathlib import Path

from sklearn_fed_site import receive, send

from ..protocol import InvalidClientMessage, TaskRefused, plain_label
from ._apps import kept_state, make_site_client, respond
from ._config import NodeSettings

__all__ = ["SiteWorker", "main"]

_log = logging.getLogger("sklearn_fed.flower.worker")


class SiteWorker:
    """The state of a site's worker: the client role of each of the last ``max_runs`` runs.

    Parameters
    ----------
    max_runs : int, default=8
        Runs whose roles are kept in memory (the least recently used beyond
        that are dropped; their next task rebuilds them from ``context.state``).

    Examples
    --------
    >>> from sklearn_fed.flower._worker import SiteWorker
    >>> header, _ = SiteWorker().handle({"op": "site", "node_config": {
    ...     "site": "north", "data-path": "north.csv"}}, {})
    >>> header
    {'ok': True, 'site': '"north"'}
    """

    def __init__(self, max_runs=8):
        self.max_runs = int(max_runs)
        self._runs = OrderedDict()  # (run id, configs) -> (node, estimator, client)
        self._lock = threading.Lock()

    def handle(self, header, blobs):
        """Answer one request; returns ``(header, blobs)``, never raises."""
        try:
            op = header.get("op")
            if op == "site":
                node = NodeSettings.from_node_config(header.get("node_config") or {})
                return {"ok": True, "site": json.dumps(plain_label(node.site))}, {}
            if op == "task":
                with self._lock:
                    return self._task(header, blobs)
            return {"ok": False, "error": f"ValueError: unknown request {op!r}."}, {}
        except (TaskRefused, InvalidClientMessage, ValueError) as exc:
            _log.warning("sklearn-fed: not answering: %s", exc)
            return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}, {}
        except Exception as exc:  # noqa: BLE001 - the worker outlives one bad task
            _log.error("sklearn-fed: the task failed:\n%s", traceback.format_exc())
            return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}, {}

    def _task(self, header, blobs):
        node_config, run_config = header.get("node_config"), header.get("run_config")
        if not isinstance(node_config, dict) or not isinstance(run_config, dict):
            raise ValueError(  # noqa: TRY004 - a malformed request, as any other
                "a task request needs node_config and run_config objects.")
        run = (header.get("run_id"), json.dumps([node_config, run_config], sort_keys=True))
        kept = self._runs.pop(run, None)
        if kept is None:
            saved = {name.removeprefix("state:"): data for name, data in blobs.items()
                     if name.startswith("state:")}
            kept = make_site_client(node_config, run_config, saved)
        # on error the role is not put back: its next task starts from context.state,
        # which the failed task did not change
        started = time.monotonic()
        reply = respond(blobs.get("task"), *kept)
        self._runs[run] = kept
        _log.info("sklearn-fed: run %s: answered a %d-byte task with %d bytes in %.3f s",
                  run[0], len(blobs["task"]), len(reply), time.monotonic() - started)
        while len(self._runs) > self.max_runs:
            self._runs.popitem(last=False)
        state = {f"state:{name}": data for name, data in kept_state(kept[2]).items()}
        return {"ok": True}, {"reply": reply, **state}


class _Handler(socketserver.StreamRequestHandler):
    def handle(self):
        try:
            header, blobs = receive(self.connection)
        except (OSError, ValueError) as exc:
            _log.warning("sklearn-fed: a malformed request: %s", exc)
            return
        answer = self.server.worker.handle(header, blobs)
        try:
            send(self.connection, *answer)
        except OSError as exc:  # the ClientApp was stopped meanwhile
            _log.warning("sklearn-fed: the reply could not be sent: %s", exc)


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


def serve(socket_path, worker=None, ready=None):
    """Serve ``worker`` (a new :class:`SiteWorker` by default) on the Unix socket ``socket_path``.

    The socket's directory is made if missing and must be the worker user's
    alone (mode 0700 is set when it is made; a directory others can enter is
    refused). Returns when the server is shut down.
    """
    path = Path(socket_path)
    directory = path.parent
    if not directory.exists():
        directory.mkdir(parents=True, mode=0o700)
    mode = directory.stat().st_mode & 0o777
    if mode & 0o077:
        raise ValueError(
            f"the worker's socket directory {directory} is open to other users (mode "
            f"{mode:o}); make it the worker user's alone: chmod 700 {directory}."
        )
    if path.is_socket():  # left by a worker that was killed
        path.unlink()
    with _Server(str(path), _Handler) as server:
        os.chmod(path, 0o600)
        server.worker = worker or SiteWorker()
        _log.info("sklearn-fed: site worker ready on %s (pid %d)", path, os.getpid())
        if ready is not None:
            ready(server)
        try:
            server.serve_forever(poll_interval=0.5)
        finally:
            path.unlink(missing_ok=True)


def main(argv=None):
    """``python -m sklearn_fed.flower.worker --socket PATH``: run a site's worker."""
    parser = argparse.ArgumentParser(
        prog="python -m sklearn_fed.flower.worker",
        description="A site's sklearn-fed worker: answers the tasks its SuperNode's "
                    "ClientApps (sklearn_fed_site:clientapp) hand over a Unix socket. The "
                    "SuperNode's node config names the same socket: worker-socket=\"PATH\".")
    parser.add_argument("--socket", required=True, help="path of the Unix socket to listen on")
    parser.add_argument("--max-runs", type=int, default=8,
                        help="runs whose client roles are kept in memory (default 8)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stdout,
                        format="%(asctime)s %(levelname)s %(message)s")
    serve(args.socket, SiteWorker(max_runs=args.max_runs))
