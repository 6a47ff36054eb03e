"""The Flower ClientApp and ServerApp, built from any estimator's protocol roles.

The server app runs ``estimator.make_server()`` and the client app runs
``estimator.make_client(...).respond`` on the node's own rows; between them
Flower carries each task and each reply as our bytes, unchanged, in one
:class:`flwr.app.ConfigRecord` entry. Flower adds the transport (the SuperLink
relays messages; SuperNodes pull them), our frames keep their own checks
(schema, federation id, round id, HMAC under the site's key).

One run (see :doc:`/deploying_flower`): a roll call for the sites' labels
(:func:`_roll_call`), the one round loop (:func:`~sklearn_fed.protocol.run_rounds`)
with a :class:`GridTransport`, then ``server.estimator`` saved to ``model-path``.
"""

import json
import logging
import sys
import time

from flwr.app import ConfigRecord, Error, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.common.constant import ErrorCode
from flwr.serverapp import ServerApp

from sklearn_fed_site import RECORD, ROLL_CALL_ACTION, STATE_RECORD, TASK_ACTION

from ..protocol import (
    InvalidClientMessage,
    TaskRefused,
    Transport,
    decode,
    encode,
    plain_label,
    run_rounds,
    sorted_labels,
)
from ._config import (
    NodeSettings,
    ServerSettings,
    estimator_from_config,
    estimator_to_config,
    site_text,
)
from ._persist import import_skops_in_background, load_model, save_model
from ._state import read_state, write_state

__all__ = ["make_client_app", "make_server_app", "run_server"]

_log = logging.getLogger("sklearn_fed.flower")

_CONFIGURED = frozenset({"estimator", "key", "policy", "site"})  # rebuilt for every message


# ---------------------------------------------------------------- client side
def roll_call(message, context):
    """A node's answer to the roll call: its site label (JSON), from its node config."""
    node = NodeSettings.from_node_config(context.node_config)
    record = ConfigRecord({"site": json.dumps(plain_label(node.site))})
    return Message(RecordDict({RECORD: record}), reply_to=message)


def kept_state(client):
    """The client role's attributes for the next message, as ``{name: bytes}`` (see :mod:`._state`).

    What cannot be kept (a torch module a role caches, say) is not: the role
    rebuilds it. State a role needs (rows held back, a round's X25519 key)
    is plain values, arrays and sklearn-fed classes (with
    ``__getstate__``/``__setstate__`` where an attribute is not).
    """
    kept, skipped = {}, []
    for name, value in vars(client).items():
        if name in _CONFIGURED:
            continue
        try:
            kept[name] = write_state(value)
        except TypeError:
            skipped.append(name)
    if skipped:
        _log.info("sklearn-fed: %s attributes rebuilt on the next message, not kept: %s",
                  type(client).__name__, skipped)
    return kept


def make_site_client(node_config, run_config, saved):
    """``(node, estimator, client)``: the run's client role at this node, ``saved`` state restored.

    ``saved`` is ``{name: bytes}`` as :func:`kept_state` wrote it.
    """
    node = NodeSettings.from_node_config(node_config)
    estimator = estimator_from_config(run_config)
    client = estimator.make_client(key=node.read_key(), policy=node.policy, site=node.site)
    for name, data in saved.items():
        where = f"node state {STATE_RECORD}[{name!r}]"
        # only attributes kept_state writes: never a dunder nor what is rebuilt
        if not (name.isidentifier() and not name.startswith("__") and name not in _CONFIGURED):
            raise ValueError(f"{where}: not an attribute a client role keeps.")
        setattr(client, name, read_state(data, where))
    return node, estimator, client


def respond(task, node, estimator, client):
    """The client role's reply (bytes) to ``task`` from the node's rows.

    With ``round-column``, a streaming protocol (one whose ``fit`` is one of
    many rounds) gets the rows of the task's round; every other protocol gets
    all rows.
    """
    if not isinstance(task, bytes):
        raise InvalidClientMessage("server: the message carries no sklearn-fed task.", "server")
    in_round = None
    if node.round_column and getattr(estimator, "_protocol_rounds_in_fit", None):
        # a streaming protocol answers each round from that round's new rows; the
        # round is read from the authenticated task, not from Flower's metadata
        in_round = decode(task, key=client.key, client="server").round
    X, y, sample_weight = node.read_data(in_round)
    try:
        return client.respond(task, X, y, sample_weight)
    except InvalidClientMessage as exc:
        if "cannot read the server's task" not in str(exc) or not node.key_file:
            raise
        raise InvalidClientMessage(f"{exc} (this node's key-file: {node.key_file})",
                                   "server") from exc


def answer_task(message, context):
    """A node's answer to one task: ``make_client(...).respond`` on its own rows.

    What the client role keeps between rounds is restored from, and saved to,
    the node's ``context.state`` (see :mod:`._state`; a site worker keeps the
    role in memory instead). A task the site refuses (its policy), one that is
    not authentic, or rows it cannot use are answered with an error reply that
    says why; the server treats the site as dropout.
    """
    try:
        record = message.content.config_records.get(RECORD)
        task = None if record is None else record.get("task")
        saved = context.state.config_records.get(STATE_RECORD, {})
        node, estimator, client = make_site_client(context.node_config, context.run_config,
                                                   dict(saved))
        reply = respond(task, node, estimator, client)
    except (TaskRefused, InvalidClientMessage, ValueError) as exc:
        _log.warning("sklearn-fed: not answering: %s", exc)
        return Message(Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION,
                             reason=f"{type(exc).__name__}: {exc}"), reply_to=message)
    context.state[STATE_RECORD] = ConfigRecord(kept_state(client))
    return Message(RecordDict({RECORD: ConfigRecord({"reply": reply})}), reply_to=message)


def make_client_app():
    """A Flower ClientApp that answers any sklearn-fed estimator's tasks.

    The node's rows, label, key and policy come from its node config (see
    :class:`~sklearn_fed.flower.NodeSettings`); the estimator from the run
    config.

    Returns
    -------
    app : flwr.clientapp.ClientApp
    """
    app = ClientApp()
    app.query(ROLL_CALL_ACTION)(roll_call)
    app.train(TASK_ACTION)(answer_task)
    return app


# ---------------------------------------------------------------- server side
def _exchange(grid, settings, outgoing, message_type, group, timeout):
    """Push ``{site: (node id, content)}``, pull replies until all are in or ``timeout`` passes.

    Returns ``(replies, failed)``: site -> reply Message (without error), and
    site -> why it gave no usable reply. Grid.send_and_receive would do this
    too, but it sleeps 3 s between pulls (Flower 1.41), which would dominate a
    one-shot protocol's round.
    """
    sites = list(outgoing)
    ids = list(grid.push_messages([
        Message(content, dst_node_id=node, message_type=message_type, group_id=group,
                ttl=settings.reply_timeout + settings.node_timeout + 60.0)
        for node, content in outgoing.values()
    ]))
    if len(ids) != len(sites):  # e.g. the SuperLink refused an oversized request
        ids = [None] * len(sites)
    failed = {site: "the SuperLink did not accept the message."
              for site, message_id in zip(sites, ids) if message_id is None}
    site_of = {message_id: site for site, message_id in zip(sites, ids) if message_id is not None}
    pending, replies = set(site_of), {}
    deadline = time.monotonic() + timeout
    while pending:
        for reply in grid.pull_messages(list(pending)):
            message_id = reply.metadata.reply_to_message_id
            if message_id not in pending:
                continue
            pending.discard(message_id)
            site = site_of[message_id]
            if reply.has_error():
                failed[site] = f"error reply ({reply.error.code}): {reply.error.reason}"
            else:
                replies[site] = reply
        left = deadline - time.monotonic()
        if not pending or left <= 0:
            break
        time.sleep(min(settings.poll_interval, left))
    for message_id in pending:
        failed[site_of[message_id]] = f"no reply within {timeout:g} s."
    return replies, failed


def _roll_call(grid, settings):
    """``{site: node id}`` from ``node-sites`` or the nodes' answers; waits for ``min-nodes``.

    A node listed in ``node-sites`` is not asked (that saves one ClientApp
    process per node and run); if the mapping is wrong, the node refuses the
    task addressed to another site, or fails its key, and is dropout.
    """
    deadline = time.monotonic() + settings.node_timeout
    while True:
        node_ids = sorted(grid.get_node_ids())
        if len(node_ids) >= settings.min_nodes or time.monotonic() >= deadline:
            break
        time.sleep(min(1.0, settings.node_timeout))
    if len(node_ids) < settings.min_nodes:
        raise RuntimeError(
            f"{len(node_ids)} SuperNode(s) connected within node-timeout="
            f"{settings.node_timeout:g} s; min-nodes={settings.min_nodes}."
        )
    outgoing = {node: (node, RecordDict()) for node in node_ids if node not in settings.node_sites}
    replies, failed = {}, {}
    if outgoing:
        replies, failed = _exchange(grid, settings, outgoing, f"query.{ROLL_CALL_ACTION}",
                                    "roll-call", settings.node_timeout)
    for node, reason in sorted(failed.items()):
        _log.warning("sklearn-fed: SuperNode %s left out: %s", node, reason)
    labels = {node: settings.node_sites[node] for node in node_ids if node in settings.node_sites}
    for node, reply in sorted(replies.items()):
        record = reply.content.config_records.get(RECORD)
        try:
            labels[node] = json.loads(record["site"])
        except (TypeError, KeyError, ValueError):
            _log.warning("sklearn-fed: SuperNode %s left out: malformed roll-call reply.", node)
    nodes, by_text = {}, {}
    for node, label in sorted(labels.items()):
        if not isinstance(label, (str, int)) or isinstance(label, bool):
            _log.warning("sklearn-fed: SuperNode %s left out: bad site label %r.", node, label)
            continue
        if site_text(label) in by_text:
            raise RuntimeError(
                f"two SuperNodes (ids {by_text[site_text(label)]} and {node}) say they are "
                f"site {label!r}; every site needs its own label."
            )
        by_text[site_text(label)] = node
        nodes[label] = node
    if len(nodes) < settings.min_nodes:
        raise RuntimeError(
            f"{len(nodes)} site(s) known after the roll call ({sorted_labels(nodes)}); "
            f"min-nodes={settings.min_nodes}."
        )
    return nodes


def with_model(estimator, model, path):
    """The run config's evaluator with the fitted ``model`` (read from ``path``) to evaluate.

    The sites build the model's class and parameters from the run config and
    receive its fitted state in the task, so the run config must describe the
    model that was loaded: write it with ``estimator_to_config(FederatedEvaluator(model))``.
    """
    template = estimator.get_params(deep=False).get("estimator")
    if template is None or estimator_to_config(template) != estimator_to_config(model):
        raise ValueError(
            f"evaluate-model={path!r} holds {type(model).__name__} with parameters "
            f"{estimator_to_config(model)['estimator-params']}, but the run config's "
            f"{type(estimator).__name__} names {template!r}; write the run config with "
            "estimator_to_config(FederatedEvaluator(load_model(path), ...)).")
    return estimator.set_params(estimator=model)


def run_server(grid, run_config):
    """Fit the run config's estimator over the grid's SuperNodes; returns it fitted.

    Parameters
    ----------
    grid : flwr.serverapp.Grid
    run_config : mapping
        See :data:`~sklearn_fed.flower.RUN_CONFIG_DEFAULTS`.

    Returns
    -------
    estimator : estimator
        Also saved to ``model-path`` when that is set.
    """
    settings = ServerSettings.from_run_config(run_config)
    if settings.model_path:
        import_skops_in_background()  # while the sites compute
    estimator = estimator_from_config(run_config)
    if settings.evaluate_model:
        estimator = with_model(estimator, load_model(settings.evaluate_model),
                               settings.evaluate_model)
    server = estimator.make_server(**settings.server_kwargs())
    nodes = _roll_call(grid, settings)
    sites = sorted_labels(nodes)
    _log.info("sklearn-fed: %s over sites %s", type(estimator).__name__, sites)
    transport = GridTransport(grid, nodes, settings)
    run_rounds(server, transport, sites)
    fitted = server.estimator
    answered = [plain_label(site) for site in getattr(fitted, "clients_", sites)]
    _log.info("sklearn-fed: fitted %s in %d round(s) over %d site(s) %s: %d bytes sent, %d "
              "received, %.2f s", type(fitted).__name__, server.round,
              len(answered), answered,
              transport.sent, transport.received, time.monotonic() - transport.start)
    if settings.model_path:
        save_model(fitted, settings.model_path)
        _log.info("sklearn-fed: model saved to %s", settings.model_path)
    return fitted


class GridTransport(Transport):
    """A round's tasks as Flower messages to the nodes, their replies back (bytes both ways).

    A node that does not answer in time, or answers with an error, is dropout
    from that round on; fewer than ``min-nodes`` answers stop the run.
    """

    def __init__(self, grid, nodes, settings):
        self.grid, self.nodes, self.settings = grid, nodes, settings
        self.sent = self.received = 0  # bytes of tasks and replies, for the progress log
        self.start = time.monotonic()

    def exchange(self, server, tasks):
        started = time.monotonic()
        group = f"{server.federation}:{server.round}"
        encoded = {site: encode(frame, key=server.key_of(site)) for site, frame in tasks.items()}
        outgoing = {site: (self.nodes[site], RecordDict({RECORD: ConfigRecord({"task": task})}))
                    for site, task in encoded.items()}
        replies, failed = _exchange(self.grid, self.settings, outgoing, f"train.{TASK_ACTION}",
                                    group, self.settings.reply_timeout)
        for site, reason in failed.items():
            _log.warning("sklearn-fed: site %r is dropout from round %d on: %s",
                         site, server.round + 1, reason)
        if len(replies) < self.settings.min_nodes:
            raise RuntimeError(
                f"round {server.round + 1}: {len(replies)} site(s) replied, min-nodes="
                f"{self.settings.min_nodes}; dropped: {failed}."
            )
        data = {}
        for site in sorted_labels(replies):  # as in-process: the order of fitted labels
            record = replies[site].content.config_records.get(RECORD)
            data[site] = None if record is None else record.get("reply")
        sent = sum(map(len, encoded.values()))
        received = sum(len(reply) for reply in data.values() if isinstance(reply, bytes))
        self.sent += sent
        self.received += received
        now = time.monotonic()
        # one line per round: what an operator watches while a long run goes on
        _log.info("sklearn-fed: round %d: %d of %d site(s) answered, %d bytes sent, %d "
                  "received, %.2f s (%.1f s in all)", server.round + 1, len(replies), len(tasks),
                  sent, received, now - started, now - self.start)
        return (*server.decode_replies(data), set(failed))


def make_server_app():
    """A Flower ServerApp that fits the estimator its run config names.

    Returns
    -------
    app : flwr.serverapp.ServerApp
    """
    app = ServerApp()

    @app.main()
    def main(grid, context):
        if not _log.handlers:  # the ServerApp's output is the run's log stream
            handler = logging.StreamHandler(sys.stdout)
            handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
            _log.addHandler(handler)
            _log.setLevel(logging.INFO)
        run_server(grid, context.run_config)

    return app
