"""Flower's own floor: an empty ServerApp and ClientApp exchanging one small message per round.

Nothing but Flower is imported on either side (no scikit-learn, no sklearn-fed),
and the ServerApp pushes and pulls exactly as sklearn-fed's does (the same
poll interval), so a round here is what any Flower app pays for one round
trip to every SuperNode: the SuperLink relaying, each SuperNode pulling, and a
new ``flwr-clientapp`` process per message. ``benchmarks/bench_flower.py``
runs it over the same SuperLink and SuperNodes as the sklearn-fed runs.

The ServerApp writes ``{"rounds": [seconds per round, ...]}`` to ``result-path``
(atomically) as its last step.
"""

import json
import os
import time

from flwr.app import ConfigRecord, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import ServerApp

clientapp = ClientApp()
serverapp = ServerApp()


@clientapp.train("floor")
def echo(message, context):
    payload = message.content.config_records["floor"]["payload"]
    return Message(RecordDict({"floor": ConfigRecord({"payload": payload})}), reply_to=message)


@serverapp.main()
def main(grid, context):
    config = context.run_config
    deadline = time.monotonic() + float(config["node-timeout"])
    while len(nodes := sorted(grid.get_node_ids())) < int(config["min-nodes"]):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(nodes)} SuperNodes connected; min-nodes not reached.")
        time.sleep(0.2)
    times = []
    for round_ in range(int(config["rounds"])):
        start = time.perf_counter()
        ids = set(grid.push_messages([
            Message(RecordDict({"floor": ConfigRecord({"payload": b"x" * 64})}),
                    dst_node_id=node, message_type="train.floor", group_id=str(round_))
            for node in nodes]))
        while ids:
            for reply in grid.pull_messages(list(ids)):
                ids.discard(reply.metadata.reply_to_message_id)
            if ids:
                time.sleep(float(config["poll-interval"]))
        times.append(time.perf_counter() - start)
        print(f"floor round {round_ + 1}: {len(nodes)} nodes, {times[-1]:.3f} s", flush=True)
    path = config["result-path"]
    with open(path + ".tmp", "w") as handle:
        json.dump({"rounds": times}, handle)
    os.replace(path + ".tmp", path)
