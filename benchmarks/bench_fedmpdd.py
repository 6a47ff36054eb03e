"""FedMPDD round cost: vectorized vs per-client gradients, encode+decode share, codec memory.

Run: python benchmarks/bench_fedmpdd.py [--participants 50] [--m 600] [--repeats 5]

Setting: the paper's LeNet (d = 13,426) on 28x28 inputs, ``participants``
clients per round (100 clients, beta = 0.5 gives 50), per-client minibatch 1
as in the paper, and larger minibatches to show where the codec's share of a
round falls. Timings are medians over ``repeats`` interleaved runs in one
process. "codec" is every participant's encode plus the server's decode.
"""

import argparse
import statistics
import time
import tracemalloc

import numpy as np
import torch

from sklearn_fed.neural_network import FedMPDDClassifier, LeNet
from sklearn_fed.neural_network._codecs import MPDDCodec
from sklearn_fed.neural_network._sign_kernels import HAVE_NUMBA


def _timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--participants", type=int, default=50)
    p.add_argument("--m", type=int, default=600)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--batches", type=int, nargs="+", default=[1, 16, 64],
                   help="per-client minibatch sizes (the paper's LeNet runs use 1)")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)

    rng = np.random.default_rng(0)
    n_clients = 2 * args.participants
    X = rng.random((max(64, args.batches[-1]) * n_clients, 784), dtype=np.float32)
    y = rng.integers(0, 10, len(X))
    codec = MPDDCodec(args.m)
    rows = []
    for batch_size in args.batches:
        net = FedMPDDClassifier(LeNet, n_clients=n_clients, client_fraction=0.5,
                                n_directions=args.m, batch_size=batch_size, lr=0.0,
                                max_epochs=0, random_state=0).fit(X, y)
        net.history.new_epoch()
        batch = next(iter(net.get_iterator(net.get_dataset(X, y), training=True)))
        Xb, yb, wb, nb, part = batch
        d = sum(q.numel() for q in net.module_.parameters())
        grads = net._gradients_vmap(Xb, yb, wb, nb)[0].detach()

        def codec_all():
            codec.decode_mean([codec.encode(g, seed=i) for i, g in enumerate(grads)], d)

        times = {"grad_vmap": [], "grad_loop": [], "codec": [], "round_vmap": [],
                 "round_loop": []}
        for _ in range(args.repeats):  # interleaved
            times["grad_vmap"].append(_timed(lambda: net._gradients_vmap(Xb, yb, wb, nb)))
            times["grad_loop"].append(_timed(lambda: net._gradients_loop(Xb, yb, wb, nb)))
            times["codec"].append(_timed(codec_all))
            net.set_params(vectorize=True)
            times["round_vmap"].append(_timed(lambda: net.train_step(batch)))
            net.set_params(vectorize=False)
            times["round_loop"].append(_timed(lambda: net.train_step(batch)))
        rows.append((batch_size, {k: statistics.median(v) for k, v in times.items()}))

    print(f"LeNet d={d}, {args.participants} participants, m={args.m}, "
          f"torch threads={args.threads}, numba codec loops={HAVE_NUMBA}, "
          f"median of {args.repeats} interleaved runs; times in ms per round")
    print(f"{'batch':>5} {'grad vmap':>9} {'grad loop':>9} {'vmap/loop':>9} "
          f"{'round vmap':>10} {'round loop':>10} {'codec':>7} {'codec/client':>12} "
          f"{'codec share':>11}")
    for batch_size, med in rows:
        print(f"{batch_size:>5} {1e3 * med['grad_vmap']:>9.1f} {1e3 * med['grad_loop']:>9.1f} "
              f"{med['grad_loop'] / med['grad_vmap']:>8.1f}x "
              f"{1e3 * med['round_vmap']:>10.1f} {1e3 * med['round_loop']:>10.1f} "
              f"{1e3 * med['codec']:>7.1f} {1e3 * med['codec'] / args.participants:>12.2f} "
              f"{100 * med['codec'] / med['round_vmap']:>10.1f}%")
    print("targets (batch 1, the paper's setting): vmap/loop >= 3x; codec share <= 50%")

    print("\nCodec peak memory (tracemalloc, one encode+decode) as m*d grows, d=13426")
    print(f"{'m':>7} {'m*d*4 (dense U) MB':>19} {'peak MB':>9}")
    g = torch.randn(d)
    for m in (100, 1000, 10000):
        c = MPDDCodec(m)
        tracemalloc.start()
        c.decode(c.encode(g, seed=1), d)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        print(f"{m:>7} {m * d * 4 / 2**20:>19.1f} {peak / 2**20:>9.1f}")


if __name__ == "__main__":
    main()
