"""Local training of K clients of one architecture as one batched computation (``clients.batched``).

The contract is :func:`algorithms.common.training.train_local` run on each client in turn: the same clients, batch
order, dropout masks and optimiser give the same models up to float rounding. How:

- **Stacked state.** Every parameter and buffer becomes one tensor ``[K, ...]`` (row k = client k), and one
  step runs the model on every active client at once with ``torch.func.functional_call`` under
  ``torch.func.vmap`` (convolutions become grouped convolutions, linear layers batched matrix products).
  ``vmap(randomness="error")``: a random operation this module does not reproduce raises
  :class:`BatchingUnsupported` before any state changes, and the caller trains sequentially.
- **Batch order.** Each client's batches come from its own generator through
  :func:`~algorithms.common.training.epoch_batches`, the function ``train_local`` uses, so both draw the same
  ``randperm`` per epoch.
- **Unequal clients** (different sizes, so different step counts and last-batch sizes): clients are sorted by
  step count (descending), so the clients still training at step t are a prefix of the stack and each step
  trains on *views* of the stacked tensors: a finished client costs nothing and nothing is copied to drop it
  (masking finished clients instead computes max-steps × K client-steps: 2-3× the real work with the digits
  workload's Dirichlet partition). A client's smaller last batch is padded to the step's batch size with
  loss weight 0 (the mean over its real samples; padding gets no gradient), so a step is one call, when the model
  has no BatchNorm and the loss is cross-entropy; with BatchNorm the padding would enter the batch statistics, so
  the prefix is split into runs of equal batch size, one call each (measured in docs/benchmarks/batched_clients.md).
- **Optimiser.** ``torch.optim``'s own functional SGD / Adam (:func:`torch.optim.sgd.sgd`,
  :func:`torch.optim.adam.adam`) step the stacked views with the hyperparameters
  :meth:`LocalTraining.optimizer_defaults` reads off the optimiser ``train_local`` builds. Both are elementwise,
  so row k steps exactly as client k's own optimiser; every client in a run has taken the same number of steps,
  so Adam's step count is shared.
- **Dropout** (``nn.Dropout``): sequential training draws the masks from torch's global generator, which the
  platform seeds per (round, client) before ``client_update``. Here each client's masks come from its own
  ``dropout_generator``, seeded with that same seed, drawn in the same order (each step, each dropout call in
  forward order) and the same way (``bernoulli_(1 - p)`` then ``/ (1 - p)``, as ATen's CPU dropout), so the
  masks are identical. Other dropout kinds (``Dropout2d``, ``AlphaDropout``...) are refused
  (:func:`batching_obstacle`). On a GPU each client's masks are drawn on the device, from a device generator
  seeded by one draw from its ``dropout_generator`` (:data:`MASKS_ON_DEVICE`); ATen's fused CUDA dropout kernel
  draws differently anyway, so there the batched masks have the right distribution, one stream per client,
  reproducible from its seed on the same GPU model and torch version, but are not the sequential masks.
- **BatchNorm**: running statistics are stacked buffers, updated per client in place.
- **Augmentation** (``clients.augment``): each client's crops and flips come from its own
  ``augment_generators[k]``, drawn per step for its real batch (:func:`~algorithms.common.training.augment_draws`,
  the call ``train_local`` makes per batch, in the same order), then applied to the stacked batch at once; a
  padded batch's padding rows are left as they are (weight 0). **Precision** (``clients.precision: bf16``): the
  vmapped forward and loss run under the same autocast as ``train_local``'s; the tolerance of "the same results"
  is then bf16's rounding, not float32's.
- **Extra loss** (FedProx's proximal term): ``extra_loss(model)`` is called inside the batched computation with
  the model's parameters replaced by the client's row, so the same closure serves both loops; it is built once
  for all K clients (it may depend on the start weights, which they share, not on the client).

Not supported here (callers keep ``train_local``): ``on_step`` / ``on_epoch_end`` hooks, a persistent
``optimizer_state``, and a ``loss_fn`` that is not a per-batch mean of (outputs, targets). Memory: the K clients'
parameters, gradients, optimiser state and data are held at once; K is not split into chunks yet.
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, vmap
from torch.optim.adam import adam as adam_step
from torch.optim.sgd import sgd as sgd_step

from algorithms.common.training import LocalTraining, augment, augment_draws, epoch_batches

#: ``clients.batched: auto`` trains batched on a CPU only where parameters × batch size is at most this: the
#: per-operation overhead of small models is what batching removes; larger work per step is compute-bound, and
#: there the grouped convolutions vmap produces run slower than K separate ones (docs/benchmarks/batched_clients.md).
AUTO_MAX_WORK_CPU = 2_000_000


#: The devices on which the batched loop computes convolutions as unfold + batched matrix products
#: (:class:`_ConvolutionsAsProducts`) instead of the grouped convolutions ``vmap`` makes of them: none by default.
#: Measured (docs/benchmarks/batched_clients.md, ``round_throughput --batched-convolutions``): on a CPU the products are
#: slower for all but the smallest models; on an H200, with the dropout masks drawn on the device, they were slower at
#: 100 and at 1,000 clients (0.86 against 0.63 s and 8.14 against 7.77 s per leaf_cnn epoch).
CONVOLUTIONS_AS_PRODUCTS_ON: frozenset = frozenset()

#: On a GPU, draw each client's dropout masks on the device (from a device generator seeded by the client's
#: own generator) rather than on the host from the client's generator, then copied over. Host masks were the
#: batched GPU step's largest cost: leaf_cnn's first dropout is 12,544 values a sample, so 1,000 clients × 10
#: samples draw 125 M host values a step (docs/benchmarks/batched_clients.md). Off only to measure the difference
#: (``benchmarks.profile_batched --masks host``).
MASKS_ON_DEVICE = True


class BatchingUnsupported(Exception):
    """The clients cannot be trained batched (the message says why); nothing was changed, train them in turn."""


def batching_obstacle(model: nn.Module, cfg: LocalTraining) -> Optional[str]:
    """Why ``model`` with ``cfg`` cannot be trained batched, or None when it can."""
    if cfg.optimizer not in ("sgd", "adam"):
        return f"optimizer {cfg.optimizer!r} has no batched step"
    for name, module in model.named_modules():
        if isinstance(module, nn.modules.dropout._DropoutNd) and type(module) is not nn.Dropout:
            return f"{type(module).__name__} at {name or 'model'} draws masks the batched loop does not reproduce"
    return None


def prefers_batched(model: nn.Module, batch_size: int, num_clients: int,
                    device: torch.device) -> tuple[bool, str]:
    """``clients.batched: auto``'s rule: whether batching ``num_clients`` clients is expected to be faster than
    training them in turn, and why (measured on this repository's benchmarks, docs/benchmarks/batched_clients.md)."""
    if num_clients < 2:
        return False, "one client in the group: nothing to batch"
    if device.type == "cuda":
        return True, "GPU: batching fills the device"
    work = sum(p.numel() for p in model.parameters()) * batch_size
    if work > AUTO_MAX_WORK_CPU:
        return False, (f"parameters x batch size = {work:,} > {AUTO_MAX_WORK_CPU:,}: compute-bound on CPU, "
                       f"batched is not faster")
    return True, f"parameters x batch size = {work:,} <= {AUTO_MAX_WORK_CPU:,}: overhead-bound on CPU"


class _GivenMasks:
    """Replaces the forward of a model's ``nn.Dropout`` modules while the batched loop runs: each call multiplies
    by the next of the masks drawn for this step (one per dropout call in forward order)."""

    def __init__(self, model: nn.Module):
        self.modules = [m for m in model.modules() if type(m) is nn.Dropout]
        self.masks: Sequence[torch.Tensor] = ()
        self.next = 0
        self.calls: Optional[list] = None  # while probing: (module, per-sample shape) of each masked call

    def __enter__(self):
        for module in self.modules:
            module.forward = self._forward_of(module)  # an instance attribute: nn.Module.__call__ uses it
        return self

    def __exit__(self, *exc):
        for module in self.modules:
            del module.forward

    def _forward_of(self, module: nn.Dropout):
        def forward(x: torch.Tensor) -> torch.Tensor:
            if self.calls is not None:  # probing
                if 0 < module.p < 1:
                    self.calls.append((module, tuple(x.shape[1:])))
                return x
            if not module.training or module.p == 0:
                return x
            if module.p == 1:
                return x * torch.zeros((), dtype=x.dtype, device=x.device)
            mask = self.masks[self.next]
            self.next += 1
            return x * mask
        return forward

    def probe(self, model: nn.Module, sample: torch.Tensor) -> list:
        """The (module, per-sample input shape) of each dropout call of one training step, in call order: one
        forward of one sample in eval mode (no running statistics change), every dropout module reporting."""
        if not self.modules:
            return []
        self.calls = []
        was_training = model.training
        try:
            model.eval()
            with torch.no_grad():
                model(sample)
            return list(self.calls)
        finally:
            self.calls = None
            model.train(was_training)


class _ConvolutionsAsProducts:
    """Replaces the forward of a model's ``nn.Conv2d`` modules (plain: zero padding given as numbers, one group)
    while the batched loop runs: ``unfold`` then a matrix product with the weight, the same convolution up to float
    rounding. Under ``vmap`` that product becomes one batched matrix product over the K clients, where ``vmap`` of
    ``conv2d`` becomes a grouped convolution (K groups). Off by default (:data:`CONVOLUTIONS_AS_PRODUCTS_ON`):
    measured, neither way is clearly faster (docs/benchmarks/batched_clients.md)."""

    def __init__(self, model: nn.Module, enabled: bool = True):
        self.modules = [m for m in model.modules() if type(m) is nn.Conv2d and m.groups == 1
                        and m.padding_mode == "zeros" and not isinstance(m.padding, str)] if enabled else []

    def __enter__(self):
        for module in self.modules:
            module.forward = self._forward_of(module)
        return self

    def __exit__(self, *exc):
        for module in self.modules:
            del module.forward

    @staticmethod
    def _forward_of(module: nn.Conv2d):
        (kh, kw), (sh, sw), (ph, pw), (dh, dw) = module.kernel_size, module.stride, module.padding, module.dilation

        def forward(x: torch.Tensor) -> torch.Tensor:
            batch, _, height, width = x.shape
            cols = F.unfold(x, (kh, kw), dilation=(dh, dw), padding=(ph, pw), stride=(sh, sw))  # [B, C*kh*kw, L]
            out = module.weight.reshape(module.out_channels, -1) @ cols  # [B, out, L]
            if module.bias is not None:
                out = out + module.bias.reshape(-1, 1)
            out_h = (height + 2 * ph - dh * (kh - 1) - 1) // sh + 1
            out_w = (width + 2 * pw - dw * (kw - 1) - 1) // sw + 1
            return out.reshape(batch, module.out_channels, out_h, out_w)
        return forward


def _pad(mask: torch.Tensor, size: int) -> torch.Tensor:
    """``mask`` with zero rows appended up to ``size`` rows (the padding of a padded batch)."""
    if len(mask) == size:
        return mask
    return torch.cat([mask, mask.new_zeros((size - len(mask), *mask.shape[1:]))])


def _mask_generators(dropout_generators: Sequence[torch.Generator], order: Sequence[int],
                     device: torch.device) -> list[torch.Generator]:
    """Each client's dropout-mask stream, in stack order. On a CPU (any device but CUDA, or with
    :data:`MASKS_ON_DEVICE` off) the client's own generator, so the masks are the sequential loop's. On a CUDA
    device a generator there, seeded by one draw from the client's generator: each client keeps a stream of its
    own, reproducible from its seed on the same GPU model and torch version (CUDA's Philox draws split their work
    by the card's processor count), and the masks are drawn where the data are."""
    if device.type != "cuda" or not MASKS_ON_DEVICE:
        return [dropout_generators[k] for k in order]
    return [torch.Generator(device=device).manual_seed(
        int(torch.randint(0, 2 ** 62, (), generator=dropout_generators[k]))) for k in order]


def _step_masks(module: nn.Dropout, shape: tuple, lengths: Sequence[int], size: int,
                generators: Sequence[torch.Generator], like: torch.Tensor) -> torch.Tensor:
    """One step's stacked dropout masks ``[rows, size, *shape]`` for one dropout call: row j holds
    ``lengths[j]`` samples of ATen's CPU dropout noise (``bernoulli_(1 - p)`` then ``/ (1 - p)``) from
    ``generators[j]``, drawn on that generator's device, then zero rows up to ``size`` (a padded batch's
    padding). Moved to ``like``'s device when drawn elsewhere."""
    noise = torch.zeros((len(lengths), size, *shape), dtype=like.dtype, device=generators[0].device)
    for row, (length, generator) in enumerate(zip(lengths, generators)):
        noise[row, :length].bernoulli_(1 - module.p, generator=generator)
    return noise.div_(1 - module.p).to(like.device, non_blocking=True)


class _ClientLoss(nn.Module):
    """One client's loss on one batch, as a module so that ``functional_call`` swaps the parameters that
    ``extra_loss(model)`` reads too."""

    def __init__(self, model: nn.Module, loss_fn: Callable, extra_loss: Optional[Callable]):
        super().__init__()
        self.model, self.loss_fn, self.extra_loss = model, loss_fn, extra_loss

    def forward(self, x: torch.Tensor, y: torch.Tensor, weight: Optional[torch.Tensor] = None) -> torch.Tensor:
        if weight is None:
            loss = self.loss_fn(self.model(x), y)
        else:  # a padded batch (cross-entropy only): the mean over the real samples, padding weighted 0
            loss = (F.cross_entropy(self.model(x), y, reduction="none") * weight).sum() / weight.sum()
        if self.extra_loss is not None:
            loss = loss + self.extra_loss(self.model)
        return loss


def _runs(sizes: Sequence[int]) -> list[tuple[int, int, int]]:
    """Maximal runs (start, end, size) of equal values in ``sizes``."""
    runs, start = [], 0
    for i in range(1, len(sizes) + 1):
        if i == len(sizes) or sizes[i] != sizes[start]:
            runs.append((start, i, sizes[start]))
            start = i
    return runs


def train_local_batched(model: nn.Module, xs: Sequence[torch.Tensor], ys: Sequence[torch.Tensor], cfg: LocalTraining,
                        generators: Sequence[torch.Generator],
                        dropout_generators: Optional[Sequence[torch.Generator]] = None,
                        extra_loss: Optional[Callable[[nn.Module], torch.Tensor]] = None,
                        loss_fn: Callable = F.cross_entropy,
                        augment_generators: Optional[Sequence[torch.Generator]] = None
                        ) -> tuple[torch.Tensor, list[float]]:
    """Train K clients (data ``xs[k]``, ``ys[k]``; batch order from ``generators[k]``, dropout masks from
    ``dropout_generators[k]``, augmentation (``cfg.augment``) from ``augment_generators[k]``) for ``cfg.epochs``
    epochs each, every one starting from the weights ``model`` holds.

    Returns the clients' final models as flat vectors ``[K, D]`` (the layout of
    :func:`~algorithms.common.weights.get_flat_weights`) and each client's mean training loss over its batches,
    what ``train_local`` returns. ``model`` itself is left as it was. Raises :class:`BatchingUnsupported`, with
    every generator restored, when the clients cannot be trained batched (see the module's docstring).
    """
    count = len(xs)
    obstacle = batching_obstacle(model, cfg)
    if obstacle:
        raise BatchingUnsupported(obstacle)
    if cfg.augment != "none" and (augment_generators is None or any(g is None for g in augment_generators)):
        augment_draws(cfg, 0, None)  # raises: augmentation needs each client's generator
    streams = [*generators, *(dropout_generators or ()), *(augment_generators if cfg.augment != "none" else ())]
    saved = [g.get_state() for g in streams]
    try:
        return _train(model, xs, ys, cfg, generators, dropout_generators, extra_loss, loss_fn, count,
                      augment_generators)
    except BatchingUnsupported:
        for g, state in zip(streams, saved):
            g.set_state(state)
        raise


def _train(model, xs, ys, cfg, generators, dropout_generators, extra_loss, loss_fn, count, augment_generators):
    device = xs[0].device if count else torch.device("cpu")
    batches = [[idx for _ in range(cfg.epochs) for idx in epoch_batches(len(y), cfg.batch_size, g)]
               for y, g in zip(ys, generators)]
    # longest first, so the clients still training at step t are a prefix; among equals, larger last batch first
    order = sorted(range(count), key=lambda k: (-len(batches[k]), -(len(batches[k][-1]) if batches[k] else 0)))
    steps = [len(batches[k]) for k in order]
    masks = _GivenMasks(model)
    with masks, _ConvolutionsAsProducts(model, device.type in CONVOLUTIONS_AS_PRODUCTS_ON):
        sample = next((x[:1] for x in xs if len(x)), None)
        calls = masks.probe(model, sample) if sample is not None else []
        if calls and dropout_generators is None:
            raise BatchingUnsupported("the model has dropout and no per-client dropout generators were given")
        was_training = model.training
        model.train()
        try:
            flat, losses = _steps(model, xs, ys, cfg, generators, dropout_generators, extra_loss, loss_fn,
                                  batches, order, steps, masks, calls, device, augment_generators)
        finally:
            model.train(was_training)
    # back to the callers' order where the models are (a gather on the device: on the host, the scatter this
    # replaced took 0.81 s of a 1,000-client leaf_cnn call on an H200), then one copy to the host
    inverse = torch.empty(count, dtype=torch.long)
    inverse[torch.tensor(order, dtype=torch.long)] = torch.arange(count)
    result = flat[inverse.to(flat.device)].to("cpu", torch.float32)
    mean_losses = [0.0] * count
    for i, k in enumerate(order):
        mean_losses[k] = losses[i] / max(steps[i], 1)
    return result, mean_losses


def _steps(model, xs, ys, cfg, generators, dropout_generators, extra_loss, loss_fn, batches, order, steps, masks,
           calls, device, augment_generators):
    count = len(order)
    named_params = dict(model.named_parameters())
    stacked = {n: p.detach().unsqueeze(0).repeat(count, *[1] * p.dim()) for n, p in named_params.items()}
    buffers = {n: b.detach().unsqueeze(0).repeat(count, *[1] * b.dim()) for n, b in model.named_buffers()}
    trainable = [n for n, p in named_params.items() if p.requires_grad]
    defaults = cfg.optimizer_defaults()
    adam = cfg.optimizer == "adam"
    if adam:
        moments = {n: (torch.zeros_like(stacked[n]), torch.zeros_like(stacked[n]),
                       torch.zeros_like(stacked[n]) if defaults["amsgrad"] else None) for n in trainable}
    momentum = {} if adam or defaults["momentum"] == 0 else {n: torch.zeros_like(stacked[n]) for n in trainable}
    x_all = torch.cat([xs[k] for k in order])
    y_all = torch.cat([ys[k] for k in order])
    offsets = [0]
    for k in order:
        offsets.append(offsets[-1] + len(ys[k]))
    totals = torch.zeros(count, dtype=torch.float64, device=device)
    client_loss = _ClientLoss(model, loss_fn, extra_loss)
    prefix = "model."

    def one_client(params, bufs, x, y, step_masks, weight=None):
        masks.masks, masks.next = step_masks, 0
        return functional_call(client_loss, ({prefix + n: v for n, v in params.items()},
                                             {prefix + n: v for n, v in bufs.items()}), (x, y, weight))

    plain, weighted = vmap(one_client, randomness="error"), vmap(one_client, randomness="error")
    mask_generators = _mask_generators(dropout_generators, order, device) if calls else []
    # Pad a smaller batch to the step's full size (padding weighted 0) instead of training it in a run of its own,
    # where no sample sees the others: BatchNorm's batch statistics would include the padding.
    pad = loss_fn is F.cross_entropy and not any(isinstance(m, nn.modules.batchnorm._BatchNorm)
                                                 for m in model.modules())
    for t in range(max(steps, default=0)):
        active = sum(1 for s in steps if s > t)
        sizes = [len(batches[order[i]][t]) for i in range(active)]
        for start, end, size in ([(0, active, max(sizes))] if pad else _runs(sizes)):
            rows = range(start, end)
            parts = [batches[order[i]][t] + offsets[i] for i in rows]
            weight = None
            if any(len(p) != size for p in parts):
                weight = torch.zeros(end - start, size, dtype=x_all.dtype)  # filled on the host: one copy
                for j, p in enumerate(parts):
                    weight[j, :len(p)] = 1
                weight = weight.to(x_all.device, non_blocking=True)
                parts = [torch.cat([p, p[:1].expand(size - len(p))]) for p in parts]
            idx = torch.cat(parts)
            xb = x_all[idx]
            if cfg.augment != "none":  # each client's draws for its real batch, as train_local draws them
                draws = [augment_draws(cfg, len(batches[order[i]][t]), augment_generators[order[i]]) for i in rows]
                xb = augment(cfg, xb, [torch.cat([_pad(d[j], size) for d in draws]) for j in range(2)])
            xb = xb.view(end - start, size, *x_all.shape[1:])
            yb = y_all[idx].view(end - start, size, *y_all.shape[1:])
            step_masks = [_step_masks(module, shape, [len(batches[order[i]][t]) for i in rows], size,
                                      mask_generators[start:end], xb) for module, shape in calls]
            params = {n: (v[start:end].detach().requires_grad_() if n in trainable else v[start:end])
                      for n, v in stacked.items()}
            bufs = {n: v[start:end] for n, v in buffers.items()}
            try:
                with cfg.autocast(xb.device):
                    losses = (plain(params, bufs, xb, yb, step_masks) if weight is None
                              else weighted(params, bufs, xb, yb, step_masks, weight))
            except RuntimeError as err:
                if t == 0 and "randomness" in str(err):
                    raise BatchingUnsupported(f"the model draws random numbers the batched loop does not "
                                              f"reproduce ({str(err).splitlines()[0]})") from None
                raise
            leaves = [params[n] for n in trainable]
            grads = torch.autograd.grad(losses.sum(), leaves)
            with torch.no_grad():
                _optimizer_step(adam, defaults, trainable, leaves, grads, momentum,
                                moments if adam else None, start, end, t)
            totals[start:end] += losses.detach().double()
    entries = [(k, v) for k, v in model.state_dict(keep_vars=True).items() if v.dtype.is_floating_point]
    by_id = {id(p): stacked[n] for n, p in named_params.items()}
    by_id.update({id(b): buffers[n] for n, b in model.named_buffers()})
    flat = torch.cat([by_id[id(v)].reshape(count, -1) for _, v in entries], dim=1)
    return flat, totals.tolist()


def _optimizer_step(adam, defaults, names, params, grads, momentum, moments, start, end, t):
    """One step of ``torch.optim``'s SGD or Adam on rows ``start:end`` of the stacked tensors (views)."""
    if adam:
        first = [moments[n][0][start:end] for n in names]
        second = [moments[n][1][start:end] for n in names]
        maximum = [moments[n][2][start:end] for n in names] if defaults["amsgrad"] else []
        beta1, beta2 = defaults["betas"]
        adam_step(params, list(grads), first, second, maximum,
                              [torch.tensor(float(t), dtype=torch.float32) for _ in names],
                              foreach=defaults.get("foreach"), capturable=False, differentiable=False,
                              fused=defaults.get("fused"), has_complex=False,
                              decoupled_weight_decay=defaults.get("decoupled_weight_decay", False),
                              amsgrad=defaults["amsgrad"], beta1=beta1, beta2=beta2, lr=defaults["lr"],
                              weight_decay=defaults["weight_decay"], eps=defaults["eps"],
                              maximize=defaults["maximize"])
        return
    buffers = [None if t == 0 else momentum[n][start:end] for n in names] if momentum else [None] * len(names)
    sgd_step(params, list(grads), buffers, foreach=defaults.get("foreach"), fused=defaults.get("fused"),
                        weight_decay=defaults["weight_decay"], momentum=defaults["momentum"], lr=defaults["lr"],
                        dampening=defaults["dampening"], nesterov=defaults["nesterov"],
                        maximize=defaults["maximize"])
    if momentum and t == 0:  # the first step created each buffer (a copy of the gradient): keep it in the stack
        for n, buf in zip(names, buffers):
            momentum[n][start:end].copy_(buf)
