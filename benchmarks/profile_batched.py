"""Where one batched local-training call spends its time: torch.profiler's table for K clients of one model.

    python -m benchmarks.profile_batched [--device cuda] [--clients 1000] [--model leaf_cnn] [--shape 3,32,32]
                                         [--samples 50] [--batch 10] [--convolutions grouped|products] [--rows 25]
                                         [--masks device|host] [--no-profile]

K clients of ``--samples`` random samples train one epoch batched (:func:`train_local_batched`, SGD lr 0.1), once to
warm up, then once timed and once under the profiler; then ``--sequential`` of them train in turn
(``train_local``) for the per-client cost of the plain loop. Prints the wall seconds and the profiler's top rows by
self CPU time and, on a GPU, by self device time (``--no-profile``: the timings alone). ``--masks host`` draws a GPU
step's dropout masks on the host and copies them over, as :data:`~algorithms.common.batched_training.
MASKS_ON_DEVICE` = False does, to measure the difference.
"""
from __future__ import annotations

import argparse
import sys
import time


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile_batched", description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--model", default="leaf_cnn")
    parser.add_argument("--shape", default="3,32,32", help="input shape, comma-separated")
    parser.add_argument("--samples", type=int, default=50)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--convolutions", choices=("default", "grouped", "products"), default="default")
    parser.add_argument("--sequential", type=int, default=20, help="clients trained in turn for comparison")
    parser.add_argument("--rows", type=int, default=25)
    parser.add_argument("--masks", choices=("device", "host"), default="device",
                        help="where a GPU step's dropout masks are drawn (default: device, the loop's default)")
    parser.add_argument("--no-profile", action="store_true", help="time only, no profiler tables")
    args = parser.parse_args(argv)
    import torch
    from torch.profiler import ProfilerActivity, profile

    from algorithms.common import batched_training
    from algorithms.common.training import LocalTraining, train_local
    from platform.config.models import build_model

    if args.convolutions != "default":
        batched_training.CONVOLUTIONS_AS_PRODUCTS_ON = (frozenset({"cpu", "cuda"}) if args.convolutions == "products"
                                                        else frozenset())
    batched_training.MASKS_ON_DEVICE = args.masks == "device"
    device = torch.device(args.device)
    shape = tuple(int(s) for s in args.shape.split(","))
    torch.manual_seed(0)
    model = build_model(args.model, shape, 10).to(device)
    k = args.clients
    xs = [torch.randn(args.samples, *shape, device=device) for _ in range(k)]
    ys = [torch.randint(0, 10, (args.samples,), device=device) for _ in range(k)]
    cfg = LocalTraining(1, args.batch, lr=0.1)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    def batched():
        out = batched_training.train_local_batched(
            model, xs, ys, cfg, [torch.Generator().manual_seed(i) for i in range(k)],
            [torch.Generator().manual_seed(10_000 + i) for i in range(k)])
        sync()
        return out

    batched()
    start = time.perf_counter()
    batched()
    seconds = time.perf_counter() - start
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    prof = None
    if not args.no_profile:
        with profile(activities=activities) as prof:
            batched()
    n = min(args.sequential, k)
    state = {name: v.clone() for name, v in model.state_dict().items()}
    train_local(model, xs[0], ys[0], cfg, torch.Generator().manual_seed(0))
    sync()
    start = time.perf_counter()
    for i in range(n):
        model.load_state_dict(state)
        train_local(model, xs[i], ys[i], cfg, torch.Generator().manual_seed(i))
    sync()
    per_client = (time.perf_counter() - start) / max(n, 1)
    print(f"{args.model} {args.shape} x{k} clients, {args.samples} samples, B={args.batch}, {device}, convolutions "
          f"{args.convolutions}, masks {args.masks}: batched {seconds:.3f} s ({seconds / k * 1e3:.2f} ms/client); in turn "
          f"{per_client * 1e3:.2f} ms/client ({per_client * k:.3f} s for {k})", flush=True)
    if prof is None:
        return 0
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.rows))
    if device.type == "cuda":
        print(prof.key_averages().table(sort_by="self_device_time_total", row_limit=args.rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
