"""FedMPDD round cost, before and after, and where the time goes.

Run: python benchmarks/bench_fedmpdd.py [--threads 1 2] [--batches 1 16 64] [--repeats 5]
     [--before main] [--participants 50] [--m 600]

Setting: the paper's LeNet (d = 13,426) on 28x28 inputs, 100 clients of which
``participants`` take part in each round (beta = 0.5), m directions, the
per-client minibatch of the paper (1) and larger ones. In one process,
interleaved, median (min-max) of ``repeats`` runs, wall and process CPU time:

- **after**: one protocol round in process (the server's tasks, every site's
  gradient and encoding, the server's checks, decoding and step), computed
  exactly as each site computes alone (``vectorize=False``, the default) and
  with participants batched in one ``vmap`` call (``vectorize=True``);
  "codec" is ``encode_many`` of all participants plus ``decode_mean`` of
  their messages, timed on their own.
- **before** (``--before REF``, default ``main``): the same exact round and
  codec of the package at git ref REF, imported side by side from
  ``git archive`` (REF must have the protocol API: ``make_server``,
  ``open_round``, ``reply_many``, ``receive_frames``).

``--threads`` sets torch's threads and the codec's threads (the machine
has 2 cores).
"""

import argparse
import importlib
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sklearn_fed.neural_network import FedMPDDClassifier, LeNet
from sklearn_fed.neural_network import _sign_kernels as kernels
from sklearn_fed.neural_network._codecs import MPDDCodec
from sklearn_fed.protocol import Frame


def _timed(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def _import_ref(ref, where):
    """The FedMPDD package and protocol of ``sklearn_fed`` at git ``ref``, imported as
    ``sklearn_fed_before``."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", ref, "sklearn_fed"],
                             check=True, capture_output=True).stdout
    target = Path(where) / "sklearn_fed_before"
    with tempfile.TemporaryFile() as tmp:
        tmp.write(archive)
        tmp.seek(0)
        with tarfile.open(fileobj=tmp) as tar:
            tar.extractall(where, filter="data")
    os.rename(Path(where) / "sklearn_fed", target)
    sys.path.insert(0, str(where))
    return [importlib.import_module(f"sklearn_fed_before.{name}")
            for name in ("neural_network", "neural_network._codecs", "protocol",
                         "neural_network._sign_kernels")]


def _after_round(batch_size, args, X, y, vectorize, package=None):
    """A callable that runs one protocol round of the current code (or of ``package``'s)."""
    classifier = FedMPDDClassifier if package is None else package.FedMPDDClassifier
    net = classifier(LeNet, client_fraction=0.5, n_directions=args.m,
                            batch_size=batch_size, optimizer=torch.optim.SGD, lr=0.0,
                            max_epochs=10**6, vectorize=vectorize, random_state=0)
    clients = np.arange(len(y)) % (2 * args.participants)
    labels = list(range(2 * args.participants))
    rows = {c: np.flatnonzero(clients == c) for c in labels}
    server, site = net.make_server(), net.make_client()
    server.receive_frames(site.reply_many(server.open_round(labels), X, y, None, rows, None),
                           {})  # the first round: sites report their labels

    def one_round():
        tasks = server.open_round(labels)
        server.receive_frames(site.reply_many(tasks, X, y, None, rows, None), {})

    return net, one_round


def _codec_parts(d, participants, codec, frame=Frame):
    """Encode-all and decode-all of one round's participants, as callables.

    Gradient values do not change the codec's cost, so random ones stand in.
    """
    G = np.random.default_rng(0).standard_normal((participants, d)).astype(np.float32)
    seeds = [int(s) for s in np.random.default_rng(1).integers(0, 2**62, participants)]
    frames = [frame(kind=codec.kind, fields=f, arrays=a) for f, a in codec.encode_many(G, seeds)]
    return (lambda: codec.encode_many(G, seeds)), (lambda: codec.decode_mean(frames, d))


def _before_round(before, batch_size, args, X, y, d):
    """The exact round and the codec of the package at the ``--before`` ref."""
    package, codecs, protocol, _ = before
    codec = codecs.MPDDCodec(args.m)
    encode, decode = _codec_parts(d, args.participants, codec, protocol.Frame)
    return _after_round(batch_size, args, X, y, False, package)[-1], (
        lambda: (encode(), decode()))


def _summary(samples):
    walls = [w for w, _ in samples]
    cpus = [c for _, c in samples]
    return statistics.median(walls), min(walls), max(walls), statistics.median(cpus)


def _measure(args, threads, X, y, before):
    torch.set_num_threads(threads)
    for module in [kernels] + ([] if before is None else [before[-1]]):
        module._workers = lambda: threads
    codec = MPDDCodec(args.m)
    out = []
    for batch_size in args.batches:
        timers = {}
        net, exact = _after_round(batch_size, args, X, y, False)
        timers["after exact"] = exact
        timers["after vmap"] = _after_round(batch_size, args, X, y, True)[-1]
        timers["encode"], timers["decode"] = _codec_parts(net._n_trainable(), args.participants,
                                                          codec)
        if before is not None:
            timers["before round"], timers["before codec"] = _before_round(
                before, batch_size, args, X, y, net._n_trainable())
        for fn in timers.values():  # warm up (numba, vmap)
            fn()
        samples = {name: [] for name in timers}
        order = np.random.default_rng(0)
        for _ in range(args.repeats):  # interleaved, in a new order each time (no position bias)
            for name in order.permutation(list(timers)):
                samples[name].append(_timed(timers[name]))
        out.append((batch_size, {k: _summary(v) for k, v in samples.items()}))
    return net._n_trainable(), out


def _report(args, threads, d, rows_out):
    print(f"\nLeNet d={d}, {args.participants} participants, m={args.m}, {threads} torch and "
          f"codec thread(s), numba={kernels.HAVE_NUMBA}, load average "
          f"{os.getloadavg()[0]:.1f}; median (min-max) of {args.repeats} interleaved runs, "
          "ms per round; cpu = process CPU time")
    print(f"{'batch':>5} {'':>12} {'round wall':>22} {'round cpu':>10} {'codec wall':>11} "
          f"{'codec share':>11}")
    for batch_size, med in rows_out:
        codec_after = med["encode"][0] + med["decode"][0]
        lines = []
        if "before round" in med:
            lines.append(("before", med["before round"], med["before codec"][0]))
        lines.append(("after exact", med["after exact"], codec_after))
        lines.append(("after vmap", med["after vmap"], codec_after))
        for name, (wall, lo, hi, cpu), codec_wall in lines:
            print(f"{batch_size:>5} {name:>12} {1e3 * wall:>8.1f} ({1e3 * lo:.0f}-{1e3 * hi:.0f})"
                  f"{'':>3} {1e3 * cpu:>10.1f} {1e3 * codec_wall:>11.1f} "
                  f"{100 * codec_wall / wall:>10.1f}%")
        if "before round" in med:
            print(f"{'':>5} {'ratio':>12} round after exact / before "
                  f"{med['after exact'][0] / med['before round'][0]:.2f}, after vmap / before "
                  f"{med['after vmap'][0] / med['before round'][0]:.2f}; codec after / before "
                  f"{codec_after / med['before codec'][0]:.2f}")


def _vmap_vs_sites(args, X, y):
    """How many gradient entries a batched vmap call rounds differently from the sites."""
    print("\nvmap vs each site's own gradient (uplink='full', the same round's tasks)")
    for batch_size in (b for b in args.batches if b < 64):
        grads = []
        for vectorize in (False, True):
            net = FedMPDDClassifier(LeNet, client_fraction=0.5, uplink="full",
                                    batch_size=batch_size, max_epochs=2, vectorize=vectorize,
                                    optimizer=torch.optim.SGD, lr=0.0, random_state=0)
            labels = list(range(2 * args.participants))
            rows = {c: np.arange(c, len(y), len(labels)) for c in labels}
            server, site = net.make_server(), net.make_client()
            server.receive_frames(site.reply_many(server.open_round(labels), X, y, None,
                                                    rows, None), {})
            replies = site.reply_many(server.open_round(labels), X, y, None, rows, None)
            grads.append(np.stack([replies[s].arrays["g"] for s in sorted(replies)]))
        exact, batched = grads
        print(f"  minibatch {batch_size}: {np.mean(exact != batched):.0%} of the entries differ, "
              f"by up to {np.abs(exact - batched).max() / np.abs(exact).max():.1e} of the "
              "largest")


def _memory(args):
    """Peak traced memory of one round's encode and decode as m grows."""
    d = sum(p.numel() for p in LeNet().parameters())
    G = np.random.default_rng(0).standard_normal((args.participants, d)).astype(np.float32)
    seeds = list(range(1, args.participants + 1))
    print(f"\nCodec peak memory (tracemalloc), {args.participants} participants, d={d}: "
          "encode_many, then decode_mean of their messages")
    print(f"{'m':>7} {'dense U per site MB':>20} {'gradients MB':>13} {'peak MB':>8}")
    for m in (100, 1000, 10000):
        codec = MPDDCodec(m)
        codec.decode_mean([codec.encode(G[0], seed=1)], d)  # compiled before tracing
        tracemalloc.start()
        frames = [Frame(kind=codec.kind, fields=f, arrays=a)
                  for f, a in codec.encode_many(G, seeds)]
        codec.decode_mean(frames, d)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        print(f"{m:>7} {m * d * 4 / 2**20:>20.1f} {G.nbytes / 2**20:>13.1f} "
              f"{peak / 2**20:>8.1f}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--participants", type=int, default=50)
    p.add_argument("--m", type=int, default=600)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--batches", type=int, nargs="+", default=[1, 16, 64],
                   help="per-client minibatch sizes (the paper's LeNet runs use 1)")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2],
                   help="torch and codec threads (one table each)")
    p.add_argument("--before", default="main",
                   help="git ref of the code to compare with ('' to skip)")
    args = p.parse_args(argv)
    rng = np.random.default_rng(0)
    n_clients = 2 * args.participants
    X = rng.random((max(64, max(args.batches)) * n_clients, 784), dtype=np.float32)
    y = rng.integers(0, 10, len(X))
    with tempfile.TemporaryDirectory() as tmp:
        before = _import_ref(args.before, tmp) if args.before else None
        for threads in args.threads:
            _report(args, threads, *_measure(args, threads, X, y, before))
    _vmap_vs_sites(args, X, y)
    _memory(args)


if __name__ == "__main__":
    main()
