"""Two CPU kernel choices of the models, measured: max-pooling's layout and the inference batch size.

    python -m benchmarks.cpu_kernels [--repeats 5] [--threads 1]

(a) **Pooling.** For each model with max-pooling: one training step (forward, backward, SGD with momentum) and one
    no-grad forward of 360 samples, with the models' :class:`algorithms.models.pooling.MaxPool2d` against plain
    ``nn.MaxPool2d`` (the same model with its pools swapped), and whether the weights after the timed steps are
    bit-identical (they must be).
(b) **Inference batch.** :func:`algorithms.common.evaluation.evaluate` of each model on N random samples at fixed
    batch sizes and at the default, :func:`~algorithms.common.evaluation.inference_batch_size`, with the largest
    |Δ loss| against batch 1,024 (float rounding only).

Medians of ``--repeats`` after a warm-up, ``--threads`` torch threads (a client actor and the parameter server
use 1). ``other load``: cores other processes used meanwhile (the machine is shared).
"""
from __future__ import annotations

import argparse
import copy
import time

from benchmarks._common import ForeignLoad, machine_line, median, table

POOLING_CASES = [("cnn", (1, 8, 8), 32), ("leaf_cnn", (3, 32, 32), 10), ("fedkp_mnist_cnn", (1, 28, 28), 32),
                 ("lenet", (3, 32, 32), 32)]
INFERENCE_CASES = [("cnn", (1, 8, 8), 360), ("lenet", (3, 32, 32), 1000), ("leaf_cnn", (3, 32, 32), 1000),
                   ("resnet8", (3, 32, 32), 360)]
FIXED_BATCHES = (1024, 256, 64, 32, 16)


def with_plain_pools(model):
    """A copy of ``model`` with each of its ``MaxPool2d`` replaced by a plain ``nn.MaxPool2d`` (the comparison)."""
    from torch import nn

    from algorithms.models.pooling import MaxPool2d

    twin = copy.deepcopy(model)
    for module in list(twin.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, MaxPool2d):
                setattr(module, name, nn.MaxPool2d(child.kernel_size, child.stride, child.padding, child.dilation,
                                                   child.return_indices, child.ceil_mode))
    return twin


def _seconds(fn, repeats):
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return median(times)


def pooling(repeats: int) -> list[list]:
    import torch
    import torch.nn.functional as F

    from algorithms.models import build_model

    rows = []
    for name, shape, batch in POOLING_CASES:
        torch.manual_seed(0)
        fast = build_model(name, shape, 10)
        plain = with_plain_pools(fast)
        x, y = torch.randn(batch, *shape), torch.randint(0, 10, (batch,))
        x_eval = torch.randn(360, *shape)
        result = {}
        for label, model in (("plain", plain), ("fast", fast)):
            opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

            def steps(model=model, opt=opt):
                for _ in range(10):
                    opt.zero_grad()
                    torch.manual_seed(1)
                    F.cross_entropy(model(x), y).backward()
                    opt.step()

            def forward(model=model):
                with torch.no_grad():
                    model.eval()
                    model(x_eval)
                    model.train()

            result[label] = (_seconds(steps, repeats) / 10, _seconds(forward, repeats))
        same = all(torch.equal(a, b) for a, b in zip(fast.parameters(), plain.parameters()))
        (step_plain, fwd_plain), (step_fast, fwd_fast) = result["plain"], result["fast"]
        rows.append([f"{name} {'x'.join(map(str, shape))} B={batch}", f"{step_plain * 1e3:.2f}", f"{step_fast * 1e3:.2f}",
                     f"{fwd_plain * 1e3:.2f}", f"{fwd_fast * 1e3:.2f}", "yes" if same else "NO"])
    return rows


def inference(repeats: int) -> list[list]:
    import torch

    from algorithms.common.evaluation import evaluate, inference_batch_size
    from algorithms.models import build_model

    rows = []
    for name, shape, n in INFERENCE_CASES:
        torch.manual_seed(0)
        model = build_model(name, shape, 10)
        x, y = torch.randn(n, *shape), torch.randint(0, 10, (n,))
        reference = evaluate(model, x, y, batch_size=1024)["test_loss"]
        cells, worst = [], 0.0
        for batch in (*FIXED_BATCHES, None):
            seconds = _seconds(lambda batch=batch: evaluate(model, x, y, batch_size=batch), repeats)
            worst = max(worst, abs(evaluate(model, x, y, batch_size=batch)["test_loss"] - reference))
            cells.append(f"{seconds * 1e3:.0f}")
        rows.append([f"{name} {'x'.join(map(str, shape))}, N={n}", *cells, inference_batch_size(model, x),
                     f"{worst:.0e}"])
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.cpu_kernels", description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats after a warm-up (default 5)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1, as a client actor)")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    print(machine_line(), flush=True)
    with ForeignLoad() as load_a:
        pool_rows = pooling(args.repeats)
    print(table(["model", "train step ms, nn.MaxPool2d", "MaxPool2d", "forward of 360 ms, nn.MaxPool2d", "MaxPool2d",
                 "bit-identical"], pool_rows))
    print(f"(other load {load_a.cores:.2f} cores)\n", flush=True)
    with ForeignLoad() as load_b:
        inference_rows = inference(args.repeats)
    print(table(["evaluate, ms at batch", *map(str, FIXED_BATCHES), "default", "default batch", "max |Δ loss|"],
                inference_rows))
    print(f"(other load {load_b.cores:.2f} cores; {args.threads} torch thread(s))")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
