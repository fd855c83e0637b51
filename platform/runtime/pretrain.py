"""Self-supervised pre-training of each architecture's feature extractor h_0 (docs/methods/fedaux.md §3.2 P1, §5,
§10, §11 item 15, §12): SimCLR on the public (auxiliary) pool, as a Ray Train ``TorchTrainer``, once per
(architecture, auxiliary data, seed), kept in the stage cache and loaded into the ``features`` of every model a
run builds (server and clients). The head stays randomly initialised. With it on, ``fedavg`` is FedAvg+P,
``feddf`` FedDF+P and ``fedaux`` FedAUX.

Config (``pretrain:``, :class:`PretrainConfig`)::

    pretrain: {method: none, epochs: 50, batch_size: 512, lr: 1.0e-3, weight_decay: 1.0e-6, temperature: 0.5,
               projection_dim: 128, workers: 2, use_gpu: auto, cpus_per_worker: null}

The recipe (implemented from §3.2 P1's description of leftthomas/SimCLR, no code copied):

- NT-Xent over the 2B views of a global batch of B public images, temperature τ (0.5); cosine similarities
  (outputs L2-normalised), each view's positive is its other view and the other 2B − 2 views are negatives.
- Projection head Linear(H→H, no bias) → BatchNorm1d → ReLU → Linear(H→projection_dim) on the flat
  ``features`` output (H = ``feature_dim``); dropped afterwards.
- Adam, lr 1e-3, weight decay 1e-6, batch 512 with drop_last (capped at the pool size, and rounded down to a
  multiple of the worker count).
- Augmentations (torchvision transforms v2, per image, on tensors): RandomResizedCrop to the input size,
  horizontal flip 0.5, and for 3-channel inputs ColorJitter(0.4, 0.4, 0.4, 0.1) with p 0.8 and RandomGrayscale
  0.2 (no blur). The pool is stored normalised with the private dataset's normalisation, so each batch is
  de-normalised to [0, 1], augmented and normalised again (the recipe augments [0, 1] images, then normalises).

Choices:

- **epochs: 50 by default**, not the code's 100 (§5): the embedded default (below) then takes about half a minute
  on 2 idle CPUs and about a minute on 2 busy ones (one 512-image global step per epoch on the 719-image pool,
  ~0.5 s, plus ~8 s of Ray Train start; ``benchmarks/pretrain.py``). For the paper's setup (CIFAR-10 with STL-10 /
  CIFAR-100 as auxiliary data) set ``pretrain.epochs: 100``.
- **The embedded default** for FedAUX is ``dataset: digits32`` with ``public: {source: train_split, split:
  first_half}`` (719 public images): digits32 is CIFAR-shaped (3×32×32), so the full recipe applies, colour
  jitter and grayscale included, at the paper's 32×32 resolution; plain ``digits`` (1×8×8) works too (crop and
  flip only) but is a poor stand-in for the paper's images.
- **workers: 2 by default** (data-parallel over ``workers`` Ray Train workers; one GPU each when ``use_gpu``
  allows): even on 2 CPUs the second worker pays for its process and the collectives (an epoch ~1.4× faster,
  ``benchmarks/pretrain.py``), and it exercises DDP everywhere. ``cpus_per_worker: null`` reserves the cluster's
  CPUs / workers (at most 1) each, so 2 workers also fit a 1-CPU Ray. ``workers`` is part of the cache key
  (BatchNorm statistics are per worker, so the result depends on it); ``use_gpu`` and ``cpus_per_worker`` are
  not (the same computation on other hardware).
- **Data parallelism**: each epoch a permutation of the pool (seeded by (init seed, epoch), the same on every
  worker) cut into global batches of B; worker r takes the r-th slice of each global batch, so all workers run
  the same number of steps. Projections are gathered across workers with a differentiable all-gather, so the
  loss is NT-Xent over the *global* batch (the same negatives as one worker with batch B) and DDP's gradient
  averaging gives exactly its gradient. BatchNorm statistics stay per worker (no SyncBatchNorm). The two views
  go through the network in separate forward passes (BatchNorm statistics per view, as the recipe's code).
- **Seeds**: the model is built as the runtime builds it (seeded by the init stream), so pre-training starts
  from the random initialisation a run would otherwise use; the projection head, the per-epoch permutation and
  each worker's augmentation stream (torch's global generator, reseeded per (init seed, epoch, rank)) derive
  from the init seed. Same seed and worker count, same result (on one kind of hardware); one pre-training per
  seed replicate of a sweep ("once per (architecture, auxiliary data, seed)").
- **Stage key** (:func:`pretrain_stage`): the pre-training fields that change the result (method, epochs,
  batch_size, lr, weight_decay, temperature, projection_dim, workers), ``dataset.*`` and ``public.*`` (for
  reading), the architecture, the init seed, and a SHA-256 of the public pool itself: the pool is what the
  workers read, so the key is right whatever produced it (a ``random`` split seeded by the base config's
  partition seed, ``server.val_fraction`` which is taken *after* the public split and does not change it).
- **Ray Train V1 and V2** both work (``RAY_TRAIN_V2_ENABLED``; ``platform.cli.quiet_libraries`` pins V1 for the
  command lines, Ray 2.60's default is V2): only the API common to both is used, plus V1's
  ``trainer_resources={"CPU": 0}`` / ``verbose=0`` and ``resume_from_checkpoint``. Every epoch rank 0 reports a
  checkpoint (network, optimiser, epoch, losses) through ``ray.train.report`` into
  ``<cache root>/simclr_pretrain/ray_train/<stage key>``; a pre-training interrupted (the driver killed) resumes
  from the newest checkpoint there when the same stage is asked for again (V1: ``resume_from_checkpoint``; V2:
  its own restore of the same run name, else the same directory handed to the workers). A worker failure is
  retried from the latest checkpoint (``FailureConfig(max_failures=2)``).
- **Where it runs**: never inside a Tune trial (a trial's placement group cannot host the trainer's workers).
  ``platform.sweep.command`` prepares every (architecture, seed, pre-training config) the sweep can need after
  connecting to Ray and before Tune starts (:func:`prepare_pretrained`, :func:`sweep_pretrain_configs`);
  ``platform.run`` does the same for its one seed. Each features state_dict goes into the object store once
  (:attr:`platform.runtime.federation.SharedData.pretrained`), and every parameter server and client actor loads
  it into ``model.features`` (strict) right after building the model (:func:`load_pretrained_features`). A trial
  whose (architecture, seed, pre-training config) was not prepared fails with :class:`PretrainNotPrepared`;
  there is no fallback to random features.
"""
from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import os
import sys
import tempfile
import time
import warnings
from typing import Any, Optional

import numpy as np
import torch
from torch import nn

import algorithms.models.base as _models_base
import algorithms.models.cnn as _models_cnn
import algorithms.models.mobile as _models_mobile
import algorithms.models.resnet as _models_resnet
import platform.runtime.seeding as _seeding
from platform.stages.cache import Stage, code_version, stage_key
from platform.data.datasets import DATASETS, NORMALIZATIONS, normalization_name
from platform.errors import ConfigError, UserError
from platform.config.models import build_model, client_architectures
from platform.config.public_data import PretrainConfig
from platform.runtime.seeding import derived_seed, replicate_over_seeds

STAGE_NAME = "simclr_pretrain"
# Fields of PretrainConfig that change the result (the rest say where it runs).
KEY_FIELDS = ("method", "epochs", "batch_size", "lr", "weight_decay", "temperature", "projection_dim", "workers")
STATE_FILE = "simclr_state.pt"
META_FILE = "simclr_meta.json"
PROJECTION_KEY, EPOCH_KEY, AUGMENT_KEY = 0x51C1, 0x51C2, 0x51C3  # streams derived from the init seed


class PretrainNotPrepared(RuntimeError):
    """A run asks for pre-trained features that nobody prepared (no silent fallback to random features)."""


def check_pretrain(config) -> None:
    """Cross-section rules (a pre-flight check, :mod:`platform.preflight`): SimCLR needs a public image pool of images."""
    p = config.pretrain
    if p.method == "none":
        return
    if config.public.source == "none":
        raise ConfigError("pretrain.method", f"{p.method} pre-trains on the public (auxiliary) data, but "
                                             f"public.source is none; set public.source to train_split or dataset")
    if config.public.source == "image":
        raise ConfigError("pretrain.method", f"{p.method} needs a pool of public images, not public.source image "
                                             f"(one source photo); use train_split or dataset")
    if DATASETS[config.dataset.name].channels is None:
        raise ConfigError("pretrain.method", f"{p.method}'s augmentations need image inputs (C, H, W); dataset "
                                             f"{config.dataset.name!r} is not image data")


# --- the stage --------------------------------------------------------------------------------------------------

def architectures_of(config) -> list[str]:
    """Every architecture a run of ``config`` builds: the server model and each client architecture."""
    names = [config.model.name, *(client_architectures(config) or [])]
    return sorted(set(names))


def pool_digest(public_x: np.ndarray) -> str:
    digest = hashlib.sha256(f"{public_x.dtype}{tuple(public_x.shape)}".encode())
    flat = np.ascontiguousarray(public_x).reshape(-1).view(np.uint8)
    for i in range(0, len(flat), 1 << 26):
        digest.update(flat[i:i + (1 << 26)])
    return digest.hexdigest()[:32]


def pretrain_fields(config, architecture: str, public_digest: str = "") -> dict[str, Any]:
    flat = config.flat()
    fields = {k: v for k, v in flat.items() if k.startswith(("dataset.", "public."))}
    fields.update({f"pretrain.{k}": getattr(config.pretrain, k) for k in KEY_FIELDS})
    fields.update({"architecture": architecture, "init_seed": config.stream_seed("init"),
                   "public_digest": public_digest})
    return fields


def pretrain_stage(config, architecture: str, public_digest: str = "") -> Stage:
    """The stage-cache entry of one pre-training: see the module doc for its fields."""
    version = code_version(sys.modules[__name__], _seeding, _models_base, _models_cnn, _models_resnet,
                           _models_mobile)
    return Stage(STAGE_NAME, version, tuple(sorted(pretrain_fields(config, architecture, public_digest))))


def pretrained_key(config, architecture: str) -> tuple:
    """How :attr:`SharedData.pretrained` finds one entry: (architecture, init seed, pre-training config)."""
    return (architecture, config.stream_seed("init"), config.pretrain)


# --- the model and the loss -------------------------------------------------------------------------------------

class SimCLRNet(nn.Module):
    """Encoder h (a Classifier's ``features``) and projection head g; ``forward(v1, v2) -> (z1, z2)``: one DDP
    forward, two encoder passes (BatchNorm statistics per view)."""

    def __init__(self, encoder: nn.Module, feature_dim: int, projection_dim: int):
        super().__init__()
        self.encoder = encoder
        self.projection = nn.Sequential(nn.Linear(feature_dim, feature_dim, bias=False), nn.BatchNorm1d(feature_dim),
                                        nn.ReLU(inplace=True), nn.Linear(feature_dim, projection_dim))

    def forward(self, v1: torch.Tensor, v2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return (self.projection(self.encoder(v1).flatten(1)), self.projection(self.encoder(v2).flatten(1)))


def nt_xent(z1: torch.Tensor, z2: torch.Tensor, temperature: float) -> torch.Tensor:
    """NT-Xent over 2n views: row i's positive is its other view, the other 2n − 2 rows are negatives."""
    z = nn.functional.normalize(torch.cat([z1, z2]), dim=1)
    n = len(z1)
    logits = z @ z.t() / temperature
    logits.fill_diagonal_(float("-inf"))
    targets = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)]).to(z.device)
    return nn.functional.cross_entropy(logits, targets)


def _augmentation(channels: int, size: tuple[int, int]):
    from torchvision.transforms import v2  # deferred: start-up time

    steps = [v2.RandomResizedCrop(size, antialias=True), v2.RandomHorizontalFlip(0.5)]
    if channels == 3:
        steps += [v2.RandomApply([v2.ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8), v2.RandomGrayscale(0.2)]
    return v2.Compose(steps)


def _unwrap(model: nn.Module) -> nn.Module:
    return model.module if hasattr(model, "module") else model


def _build_net(cfg: dict) -> tuple[SimCLRNet, nn.Module]:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg["init_seed"])  # as platform.runtime.actors._model_for builds it
        model = build_model(cfg["architecture"], cfg["input_shape"], cfg["num_classes"])
        torch.manual_seed(derived_seed(cfg["init_seed"], PROJECTION_KEY))
        net = SimCLRNet(model.features, model.feature_dim, cfg["projection_dim"])
    return net, model


def _train_loop(cfg: dict) -> None:
    """Ray Train's ``train_loop_per_worker``: SimCLR on this worker's slice of every global batch."""
    import ray  # deferred: start-up time

    api = _train_api(cfg["v2"])
    torch.set_num_threads(max(1, int(cfg["cpus_per_worker"])))
    context = api["get_context"]()
    rank, world = context.get_world_rank(), context.get_world_size()
    device = api["get_device"]()
    pool = torch.as_tensor(np.asarray(ray.get(cfg["pool_ref"][0])))
    n, batch = len(pool), cfg["global_batch"]
    local = batch // world
    mean = torch.tensor(cfg["mean"] or [0.0], dtype=torch.float32).view(1, -1, 1, 1)  # float32, as the images
    std = torch.tensor(cfg["std"] or [1.0], dtype=torch.float32).view(1, -1, 1, 1)
    augment = _augmentation(cfg["input_shape"][0], tuple(cfg["input_shape"][1:]))

    net, _ = _build_net(cfg)
    net = api["prepare_model"](net)  # DDP when world > 1; on this worker's device
    optimizer = torch.optim.Adam(net.parameters(), lr=cfg["lr"], weight_decay=cfg["weight_decay"])
    start, losses = 0, []
    checkpoint = api["get_checkpoint"]()
    if checkpoint is None and cfg.get("resume_dir"):
        checkpoint = api["Checkpoint"].from_directory(cfg["resume_dir"])
    if checkpoint is not None:
        with checkpoint.as_directory() as directory:
            state = torch.load(os.path.join(directory, STATE_FILE), map_location="cpu", weights_only=False)
        _unwrap(net).load_state_dict(state["net"])
        optimizer.load_state_dict(state["optimizer"])
        start, losses = int(state["epoch"]), list(state["losses"])

    def views(x: torch.Tensor) -> torch.Tensor:
        x = x * std + mean  # to [0, 1]: the recipe augments images, then normalises
        x = torch.stack([augment(image) for image in x])
        return ((x - mean) / std).to(device)

    for epoch in range(start, cfg["epochs"]):
        started = time.perf_counter()
        order = torch.randperm(n, generator=torch.Generator().manual_seed(derived_seed(cfg["init_seed"], EPOCH_KEY,
                                                                                       epoch)))
        torch.manual_seed(derived_seed(cfg["init_seed"], AUGMENT_KEY, epoch, rank))  # this worker's augmentations
        net.train()
        total, steps = 0.0, 0
        for b in range(n // batch):
            idx = order[b * batch:(b + 1) * batch][rank * local:(rank + 1) * local]
            x = pool[idx]
            z1, z2 = net(views(x), views(x))
            if world > 1:  # the global batch's projections; the gather's backward sums the gradients back
                import torch.distributed.nn.functional as dist_fn  # deferred: start-up time

                z1, z2 = torch.cat(dist_fn.all_gather(z1)), torch.cat(dist_fn.all_gather(z2))
            loss = nt_xent(z1, z2, cfg["temperature"])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            total += float(loss.detach())
            steps += 1
        losses.append(total / max(steps, 1))
        metrics = {"epoch": epoch + 1, "loss": losses[-1], "epoch_seconds": time.perf_counter() - started}
        if rank == 0:
            with tempfile.TemporaryDirectory() as directory:
                inner = _unwrap(net)
                torch.save({"net": inner.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch + 1,
                            "losses": losses,
                            "features": {k: v.detach().cpu() for k, v in inner.encoder.state_dict().items()}},
                           os.path.join(directory, STATE_FILE))
                with open(os.path.join(directory, META_FILE), "w") as fh:
                    json.dump({"epoch": epoch + 1, "loss": losses[-1]}, fh)
                api["report"](metrics, checkpoint=api["Checkpoint"].from_directory(directory))
        else:
            api["report"](metrics)


# --- running it -------------------------------------------------------------------------------------------------

def _v2_enabled() -> bool:
    """Ray Train V2 when ``RAY_TRAIN_V2_ENABLED`` says so *now* (V2's trainer checks the variable when built).
    ``ray.train``'s re-exports are fixed when it is first imported, which in a command line may be before
    ``quiet_libraries`` sets the variable, so :func:`_train_api` imports each version's own modules."""
    from ray.train.v2._internal.constants import is_v2_enabled  # deferred: start-up time

    return is_v2_enabled()


def _train_api(v2: bool) -> dict:
    """The Ray Train API of one version, from its own modules (never a mix of the two)."""
    from ray.train._checkpoint import Checkpoint  # deferred: start-up time, and one version's modules only

    if v2:
        from ray.train.v2.api import train_fn_utils as fn
        from ray.train.v2.api.config import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
        from ray.train.v2.torch import train_loop_utils as torch_utils
        from ray.train.v2.torch.torch_trainer import TorchTrainer

        get_context = fn.get_context
    else:
        from ray.air.config import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
        from ray.train._internal import session as fn
        from ray.train.context import get_context
        from ray.train.torch import train_loop_utils as torch_utils
        from ray.train.torch.torch_trainer import TorchTrainer
    return {"Checkpoint": Checkpoint, "CheckpointConfig": CheckpointConfig, "FailureConfig": FailureConfig,
            "RunConfig": RunConfig, "ScalingConfig": ScalingConfig, "TorchTrainer": TorchTrainer,
            "report": fn.report, "get_checkpoint": fn.get_checkpoint, "get_context": get_context,
            "prepare_model": torch_utils.prepare_model, "get_device": torch_utils.get_device}


def latest_checkpoint(run_dir: str) -> Optional[tuple[int, str]]:
    """(epoch, directory) of the newest complete pre-training checkpoint under ``run_dir`` (V1 and V2 layouts)."""
    best = None
    if not os.path.isdir(run_dir):
        return None
    for root, _, files in os.walk(run_dir):
        if STATE_FILE in files and META_FILE in files:
            try:
                with open(os.path.join(root, META_FILE)) as fh:
                    epoch = int(json.load(fh)["epoch"])
            except (OSError, ValueError, KeyError):
                continue
            if best is None or epoch > best[0]:
                best = (epoch, root)
    return best


def _use_gpu(setting, workers: int) -> bool:
    import ray  # deferred: start-up time

    gpus = ray.cluster_resources().get("GPU", 0) if ray.is_initialized() else 0
    if setting == "auto":
        return gpus >= workers
    if setting and gpus < workers:
        raise UserError(f"pretrain.use_gpu: true asks for a GPU per worker ({workers}), the cluster has {gpus:g}")
    return bool(setting)


def run_simclr(config, architecture: str, public_x, input_shape, num_classes: int, storage_dir: str,
               run_name: str) -> dict:
    """Pre-train ``architecture``'s feature extractor on ``public_x`` (a NumPy pool or its ObjectRef) with a Ray
    Train ``TorchTrainer``; checkpoints go to ``storage_dir/run_name``, and a run interrupted there resumes.

    Returns ``{"features": state_dict (CPU), "record": {epochs, losses, final_loss, seconds, workers, ...}}``.
    """
    import ray  # deferred: start-up time

    p = config.pretrain
    pool_ref = public_x if isinstance(public_x, ray.ObjectRef) else ray.put(np.ascontiguousarray(public_x))
    pool_n = len(ray.get(pool_ref)) if isinstance(public_x, ray.ObjectRef) else len(public_x)
    global_batch = min(p.batch_size, pool_n) // p.workers * p.workers
    if global_batch < 2 * p.workers:
        raise ConfigError("pretrain.batch_size", f"the public pool ({pool_n} images) gives {p.workers} worker(s) "
                                                 f"fewer than 2 images each per batch; use a larger pool or fewer "
                                                 f"pretrain.workers")
    norm = NORMALIZATIONS[normalization_name(config.dataset)]
    channels = input_shape[0]
    cfg = {"architecture": architecture, "input_shape": tuple(int(s) for s in input_shape),
           "num_classes": int(num_classes), "init_seed": config.stream_seed("init"), "epochs": p.epochs,
           "global_batch": global_batch, "lr": p.lr, "weight_decay": p.weight_decay, "temperature": p.temperature,
           "projection_dim": p.projection_dim,
           "mean": [float(m) for m in np.broadcast_to(norm.mean, (channels,))] if norm.mean else [],
           "std": [float(s) for s in np.broadcast_to(norm.std, (channels,))] if norm.std else [],
           "pool_ref": [pool_ref]}  # in a list: Ray passes it as a reference, not the array
    started = time.perf_counter()
    run_dir = os.path.join(storage_dir, run_name)
    latest = latest_checkpoint(run_dir)
    resumed_from = latest[0] if latest else 0
    if latest is None or latest[0] < p.epochs:
        v2 = _v2_enabled()
        api = _train_api(v2)
        Checkpoint, TorchTrainer, ScalingConfig, RunConfig = (api["Checkpoint"], api["TorchTrainer"],
                                                              api["ScalingConfig"], api["RunConfig"])
        FailureConfig, CheckpointConfig = api["FailureConfig"], api["CheckpointConfig"]
        cfg["v2"] = v2
        use_gpu = _use_gpu(p.use_gpu, p.workers)
        cpus = p.cpus_per_worker
        if cpus is None:
            cpus = min(1.0, max(ray.cluster_resources().get("CPU", 1.0), 0.01) / p.workers)
        cfg["cpus_per_worker"] = cpus
        scaling = dict(num_workers=p.workers, use_gpu=use_gpu, resources_per_worker={"CPU": cpus})
        run = dict(storage_path=storage_dir, name=run_name, failure_config=FailureConfig(max_failures=2),
                   checkpoint_config=CheckpointConfig(num_to_keep=2))
        extra = {}
        if latest is not None:
            cfg["resume_dir"] = latest[1]
        if not v2:  # V1 runs the trainer as a Tune trial: no CPU for its coordinator, no Tune console output
            os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
            scaling["trainer_resources"] = {"CPU": 0}
            run["verbose"] = 0
            if latest is not None:
                extra["resume_from_checkpoint"] = Checkpoint.from_directory(latest[1])
        with warnings.catch_warnings():  # V1: trainer_resources / verbose are "deprecated" but still in effect
            warnings.simplefilter("ignore")
            trainer = TorchTrainer(_train_loop, train_loop_config=cfg, scaling_config=ScalingConfig(**scaling),
                                   run_config=RunConfig(**run), **extra)
        result = trainer.fit()
        if getattr(result, "error", None) is not None:
            raise result.error
        latest = latest_checkpoint(run_dir)
        if latest is None or latest[0] < p.epochs:
            raise RuntimeError(f"SimCLR pre-training of {architecture} ended without its final checkpoint in "
                               f"{run_dir}")
    state = torch.load(os.path.join(latest[1], STATE_FILE), map_location="cpu", weights_only=False)
    losses = [float(v) for v in state["losses"]]
    return {"features": state["features"],
            "record": {"architecture": architecture, "epochs": int(state["epoch"]), "losses": losses,
                       "final_loss": losses[-1], "seconds": time.perf_counter() - started, "workers": p.workers,
                       "public_images": pool_n, "global_batch": global_batch, "resumed_from_epoch": resumed_from}}


def pretrain_features(config, architecture: str, public_x, input_shape, num_classes: int, cache,
                      public_digest: Optional[str] = None, log=print) -> tuple[dict, bool]:
    """One (architecture, auxiliary data, seed) through the stage cache: ``(value, hit)`` with ``value`` as
    :func:`run_simclr` returns it. Prints one line (computed, or a cache hit)."""
    import ray  # deferred: start-up time

    array = ray.get(public_x) if isinstance(public_x, ray.ObjectRef) else public_x
    digest = public_digest or pool_digest(array)
    stage = pretrain_stage(config, architecture, digest)
    fields = pretrain_fields(config, architecture, digest)
    key = stage_key(stage.name, stage.version, stage.key_fields(fields))
    storage_dir = cache.scratch_dir(STAGE_NAME, "ray_train")
    run_name = key if cache.enabled else f"{key}-{os.getpid()}-{time.time_ns()}"
    seed = config.stream_seed("init")
    announced = []

    def compute() -> dict:
        log(f"pretraining {architecture} (init seed {seed}) on {len(array)} public images, {config.pretrain.workers} "
            f"worker(s), {config.pretrain.epochs} epochs ...", flush=True)
        announced.append(True)
        return run_simclr(config, architecture, public_x, tuple(array.shape[1:]), num_classes, storage_dir, run_name)

    value, hit = cache.get_or_compute(stage, fields, compute)
    record = value["record"]
    if hit:
        log(f"pretrained {architecture} (init seed {seed}): stage cache hit, {record['epochs']} epochs, loss "
            f"{record['final_loss']:.3f} ({key[:12]})", flush=True)
    else:
        log(f"pretraining {architecture} on {record['public_images']} public images, {record['workers']} worker(s) "
            f"... {record['seconds']:.1f} s, loss {record['losses'][0]:.3f} -> {record['final_loss']:.3f}",
            flush=True)
    return value, hit


def prepare_pretrained(shared, configs, cache, log=print):
    """Pre-train (or find in the cache) every (architecture, init seed, pre-training config) that ``configs`` need
    and put each features state_dict in the object store once: a copy of ``shared`` (a
    :class:`~platform.runtime.federation.SharedData`) whose ``pretrained`` holds them. Run it on the driver after
    connecting to Ray, never in a Tune trial."""
    import ray  # deferred: start-up time

    pretrained = dict(shared.pretrained or {})
    wanted = [(c, arch) for c in configs if c.pretrain.method != "none" for arch in architectures_of(c)]
    wanted = [(c, a) for c, a in wanted if pretrained_key(c, a) not in pretrained]
    if not wanted:
        return shared
    if shared.public_ref is None:
        raise ConfigError("pretrain.method", "needs public data, and the shared data holds none")
    digest = pool_digest(ray.get(shared.public_ref))
    for config, arch in wanted:
        if pretrained_key(config, arch) in pretrained:
            continue
        if not shared.serves(dataclasses.replace(config, pretrain=PretrainConfig())):
            continue  # another dataset or public pool: its trials load their own data (and then fail clearly)
        value, _ = pretrain_features(config, arch, shared.public_ref, shared.input_shape, shared.num_classes, cache,
                                     digest, log=log)
        pretrained[pretrained_key(config, arch)] = ray.put(value["features"])
    return dataclasses.replace(shared, pretrained=pretrained)


def sweep_pretrain_configs(space, limit: int = 256) -> list:
    """The configs a sweep's trials can run with, as far as pre-training goes: the base config and every
    combination of the listed values (choice / grid) of ``model.*`` and ``pretrain.*`` parameters, each on every
    seed. Continuous ``pretrain.*`` parameters cannot be prepared (their trials fail with PretrainNotPrepared)."""
    keys = [k for k, d in space.parameters.items()
            if k.startswith(("model.", "pretrain.")) and d.kind in ("choice", "grid")]
    combos = [dict(zip(keys, values)) for values in itertools.product(*(space.parameters[k].args for k in keys))]
    configs = []
    for params in combos[:limit]:
        try:
            config = space.trial_config(params)
        except ConfigError:
            continue  # a combination the conditional space never samples
        if config.pretrain.method != "none":
            configs.extend(replicate_over_seeds(config, space.seeds))
    return configs


def load_pretrained_features(model: nn.Module, architecture: str, config, pretrained: Optional[dict]) -> None:
    """Load the prepared h_0 of ``architecture`` into ``model.features`` (strict); the head stays as built."""
    import ray  # deferred: start-up time

    state = (pretrained or {}).get(architecture)
    if isinstance(state, ray.ObjectRef):
        state = ray.get(state)
    if state is None:
        raise PretrainNotPrepared(
            f"pretrain.method is {config.pretrain.method} but no pre-trained features of {architecture} (init seed "
            f"{config.stream_seed('init')}) were prepared for this run; the driver prepares them before the trials "
            f"start (platform.runtime.pretrain.prepare_pretrained, done by platform.sweep.command and platform.run). A swept "
            f"continuous pretrain.* value, or a swept dataset/public section, cannot be prepared")
    model.features.load_state_dict(state, strict=True)


__all__ = ["PretrainNotPrepared", "STAGE_NAME", "SimCLRNet", "architectures_of", "check_pretrain",
           "load_pretrained_features", "nt_xent", "prepare_pretrained", "pretrain_features", "pretrain_stage",
           "pretrained_key", "run_simclr", "sweep_pretrain_configs"]
