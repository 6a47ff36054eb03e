"""FedMPDD round cost: vectorized vs per-client gradients, encode+decode share, codec memory.

Run: python benchmarks/bench_fedmpdd.py [--participants 50] [--m 600] [--repeats 3]

Setting: the paper's LeNet (d = 13,426) on 28x28 inputs, batch 1 per client,
``participants`` clients per round (100 clients, beta = 0.5 gives 50).
Timings are medians over ``repeats`` interleaved runs in one process.
"""

import argparse
import statistics
import time
import tracemalloc

import numpy as np
import torch

from sklearn_fed.neural_network import FedMPDDClassifier, LeNet
from sklearn_fed.neural_network._codecs import MPDDCodec


def _timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--participants", type=int, default=50)
    p.add_argument("--m", type=int, default=600)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)

    rng = np.random.default_rng(0)
    n_clients = 2 * args.participants
    X = rng.random((20 * n_clients, 784), dtype=np.float32)
    y = rng.integers(0, 10, len(X))
    net = FedMPDDClassifier(LeNet, n_clients=n_clients, client_fraction=0.5,
                            n_directions=args.m, batch_size=1, lr=0.0, max_epochs=0,
                            random_state=0).fit(X, y)
    net.history.new_epoch()
    batch = next(iter(net.get_iterator(net.get_dataset(X, y), training=True)))
    Xb, yb, wb, nb, part = batch
    d = sum(q.numel() for q in net.module_.parameters())
    codec = MPDDCodec(args.m)
    grads, _ = net._gradients_vmap(Xb, yb, wb, nb)
    grads = grads.detach()

    def codec_all():
        for i, g in enumerate(grads):
            codec.decode(codec.encode(g, seed=i), d)

    times = {"grad_vmap": [], "grad_loop": [], "codec": [], "round_vmap": [], "round_loop": []}
    for _ in range(args.repeats):  # interleaved
        times["grad_vmap"].append(_timed(lambda: net._gradients_vmap(Xb, yb, wb, nb)))
        times["grad_loop"].append(_timed(lambda: net._gradients_loop(Xb, yb, wb, nb)))
        times["codec"].append(_timed(codec_all))
        net.set_params(vectorize=True)
        times["round_vmap"].append(_timed(lambda: net.train_step(batch)))
        net.set_params(vectorize=False)
        times["round_loop"].append(_timed(lambda: net.train_step(batch)))
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"LeNet d={d}, {args.participants} participants x batch 1, m={args.m}, "
          f"torch threads={args.threads}, median of {args.repeats}")
    print(f"{'quantity':<44} {'value':>10}")
    print(f"{'gradients, vmap(grad) [ms]':<44} {1e3 * med['grad_vmap']:>10.1f}")
    print(f"{'gradients, per-client loop [ms]':<44} {1e3 * med['grad_loop']:>10.1f}")
    print(f"{'  speed-up vmap vs loop (target >= 3x)':<44} "
          f"{med['grad_loop'] / med['grad_vmap']:>9.1f}x")
    print(f"{'round, vectorized [ms]':<44} {1e3 * med['round_vmap']:>10.1f}")
    print(f"{'round, per-client loop [ms]':<44} {1e3 * med['round_loop']:>10.1f}")
    print(f"{'  round speed-up':<44} {med['round_loop'] / med['round_vmap']:>9.2f}x")
    print(f"{'encode+decode, all participants [ms]':<44} {1e3 * med['codec']:>10.1f}")
    print(f"{'  per client [ms]':<44} {1e3 * med['codec'] / args.participants:>10.2f}")
    print(f"{'  share of vectorized round (target <= 50%)':<44} "
          f"{100 * med['codec'] / med['round_vmap']:>9.1f}%")

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
