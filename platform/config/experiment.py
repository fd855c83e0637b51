"""The experiment config: typed, validated at load time, loaded from YAML with ``--set a.b=v`` overrides.

Every section is a frozen dataclass. Values are checked when the config is built, so a bad value fails
before any Ray actor, MLflow run or Tune directory exists. Algorithm hyperparameters are validated
against the chosen algorithm's own ``Hyperparams`` dataclass (see ``algorithms/``).
"""
from __future__ import annotations

import copy
import dataclasses
import os
import typing
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Union

import numpy as np

from platform.config.public_data import PretrainConfig, PublicDataConfig, pool_size
from platform.config.schema import build, flatten, spec, to_dict
from platform.config.space_files import load_yaml, parse_override, parse_overrides  # noqa: F401 - re-exported
from platform.errors import ConfigError, did_you_mean


@dataclass(frozen=True)
class DatasetConfig:
    """Which data, read how. Dataset-specific knobs are null unless that dataset is chosen (then validated)."""

    name: str = spec("digits", doc="Dataset name; see platform.data.DATASETS.")
    root: Optional[str] = spec(None, doc="Data root for torchvision datasets (MNIST, CIFAR-10, ...).")
    download: bool = spec(False, doc="Let torchvision download missing files (needs a network).")
    normalization: Optional[str] = spec(None, doc="Input normalisation, see platform.data.NORMALIZATIONS "
                                                  "(none, mnist, imagenet, cifar10, ...); null = the dataset's "
                                                  "default (the one its method page uses, e.g. "
                                                  "docs/methods/feded.md §4.1).")
    split: Optional[str] = spec(None, doc="EMNIST split: letters (default; docs/methods/feded.md §4.1), balanced, "
                                          "byclass, bymerge, digits, mnist.")
    emnist_upright: bool = spec(False, doc="EMNIST only: transpose images to MNIST's orientation (torchvision "
                                           "keeps the files' transposed one), e.g. with MNIST as public data.")
    image_size: Optional[int] = spec(None, doc="Resize images to this side (bilinear, antialiased), e.g. 32 "
                                               "for STL-10 with a CIFAR model; null = native size.", ge=1)
    synthetic_alpha: Optional[float] = spec(None, doc="Synthetic(α, β): α, spread of the per-client model "
                                                      "(std of u_k); null = 1.", ge=0)
    synthetic_beta: Optional[float] = spec(None, doc="Synthetic(α, β): β, spread of the per-client input "
                                                     "means (std of B_k); null = 1.", ge=0)
    synthetic_clients: Optional[int] = spec(None, doc="Synthetic: number of generating clients (the groups); "
                                                      "null = 30 as FedProx.", ge=1)
    synthetic_samples: Optional[int] = spec(None, doc="Synthetic: samples per generating client (train + "
                                                      "test); null = lognormal(4, 2) + 50 as FedProx/LEAF.",
                                            ge=2)
    synthetic_seed: Optional[int] = spec(None, doc="Synthetic: seed of the generator and of its fixed "
                                                   "per-client 80/20 train/test split; null = 0.", ge=0)
    synthetic_class_means: Optional[bool] = spec(None, doc="Synthetic, extension: one model mean u_kc per class "
                                                           "instead of one per client. With the paper's single u_k "
                                                           "every logit shifts equally and α cannot change the "
                                                           "labels; null = false (as the paper).")
    stand_in: bool = spec(False, doc="Set from the top-level stand_in when the config is built, so the data layer and "
                                     "every cache key built from dataset.* see it; set stand_in, not this.")
    stand_in_fraction: float = spec(1.0, doc="Set from the top-level stand_in_fraction; set that, not this.", gt=0,
                                    le=1)

    def validate(self, path: str) -> None:
        for key, default in (("stand_in", False), ("stand_in_fraction", 1.0)):
            if getattr(self, key) != default:
                raise ConfigError(f"{path}.{key}", f"is set from the top-level {key}; set {key} there (the "
                                                   f"--stand-in flag sets stand_in=true), not in {path}")


# The partition kinds, one per partitioner of platform.data.partition.PARTITIONS (tests/unit/test_partition.py checks
# that both name the same kinds in the same order)
PARTITION_KINDS = ("dirichlet", "iid", "lda", "hierarchical_lda", "classes_per_client", "unequal_classes", "natural")


@dataclass(frozen=True)
class PartitionConfig:
    kind: str = spec("dirichlet", doc="How training data is split over clients; see platform.data.PARTITIONS: "
                                      "iid | dirichlet | lda | hierarchical_lda | classes_per_client | "
                                      "unequal_classes | natural.")
    alpha: float = spec(0.5, doc="Dirichlet concentration α (smaller = more skew): dirichlet (docs/methods/feded.md "
                                 "§4.2, "
                                 "docs/methods/fedaux.md §6.1), lda (docs/methods/fedkp_fedpa.md §7.1), the "
                                 "coarse-level α of "
                                 "hierarchical_lda (§7.4), unequal_classes (docs/methods/mnfl.md §10 #19).", gt=0)
    min_share: float = spec(0.01, doc="Redraw until every client's summed class share exceeds this (§4.2).", ge=0,
                            lt=1)
    equal_sizes: bool = spec(False, doc="dirichlet only: FedAUX's Sinkhorn-balanced variant with equal client "
                                        "sizes (docs/methods/fedaux.md §6.1); ignores min_share.")
    samples_per_client: Optional[int] = spec(None, doc="N, samples per client for lda / hierarchical_lda "
                                                       "(docs/methods/fedkp_fedpa.md §7.1); null = §7.2's "
                                                       "class-balanced "
                                                       "pool, N = C·⌊min_c N^c / K⌋.", ge=1)
    beta: float = spec(10.0, doc="β, the fine-label concentration of hierarchical_lda (docs/methods/fedkp_fedpa.md "
                                 "§7.4; "
                                 "β = 10 there).", gt=0)
    lda_quirk_compat: bool = spec(False, doc="lda / hierarchical_lda: keep the authors' no-op renormalisation "
                                             "(missing mass to the last label; docs/methods/fedkp_fedpa.md §7.1, "
                                             "§12 A15).")
    classes_per_client: Optional[int] = spec(None, doc="k, the classes each client holds for classes_per_client "
                                                       "(MNFL Non-IID_1: k = 2; docs/methods/mnfl.md §4, "
                                                       "§10 #20).", ge=1)
    min_per_class: int = spec(5, doc="unequal_classes: samples of every class each client gets before the "
                                     "Dirichlet split (MNFL Non-IID_2; docs/methods/mnfl.md §10 #19).", ge=0)
    sampling_alpha: Optional[float] = spec(None, doc="Client-sampling skew 𝒬: per-round selection probabilities "
                                                     "π ~ Dir(α·1) drawn once (docs/methods/fedkp_fedpa.md §7.3, "
                                                     "§12 A9); "
                                                     "null = uniform sampling (α → ∞).", gt=0)
    val_fraction: float = spec(0.0, doc="Per-client validation share of each client's data (split_clients).",
                               ge=0, lt=1)
    test_fraction: float = spec(0.0, doc="Per-client test share of each client's data (MNFL: 0.25, "
                                         "docs/methods/mnfl.md §4).", ge=0, lt=1)

    def validate(self, path: str) -> None:
        if self.kind not in PARTITION_KINDS:
            raise ConfigError(f"{path}.kind", f"unknown partition {self.kind!r}"
                                              f"{did_you_mean(self.kind, PARTITION_KINDS)}; allowed: "
                                              f"{', '.join(PARTITION_KINDS)}")
        if self.kind == "classes_per_client" and self.classes_per_client is None:
            raise ConfigError(f"{path}.classes_per_client", f"required when {path}.kind=classes_per_client: an "
                                                            f"integer k >= 1, at most the number of classes")
        if self.classes_per_client is not None and self.kind != "classes_per_client":
            raise ConfigError(f"{path}.classes_per_client", f"only used by {path}.kind=classes_per_client "
                                                            f"(kind is {self.kind!r}); leave it null")
        if self.equal_sizes and self.kind != "dirichlet":
            raise ConfigError(f"{path}.equal_sizes", f"only allowed with {path}.kind=dirichlet "
                                                     f"(kind is {self.kind!r})")
        lda_kinds = ("lda", "hierarchical_lda")
        if self.samples_per_client is not None and self.kind not in lda_kinds:
            raise ConfigError(f"{path}.samples_per_client", f"only used by {path}.kind=lda or hierarchical_lda "
                                                            f"(kind is {self.kind!r}); leave it null")
        if self.lda_quirk_compat and self.kind not in lda_kinds:
            raise ConfigError(f"{path}.lda_quirk_compat", f"only allowed with {path}.kind=lda or hierarchical_lda "
                                                          f"(kind is {self.kind!r})")
        if self.val_fraction + self.test_fraction >= 1:
            raise ConfigError(f"{path}.test_fraction", f"val_fraction + test_fraction must be < 1 so clients keep "
                                                       f"training data, got {self.val_fraction} + "
                                                       f"{self.test_fraction}")


@dataclass(frozen=True)
class ModelConfig:
    name: str = spec("cnn", doc="Model name (the global/server model); see platform.config.models.MODELS.")
    architectures: Optional[list[Any]] = spec(
        None, doc="Heterogeneous clients: a list of model names (equal shares, e.g. [lenet, alexnet, resnet18, "
                  "shufflenet_v2] gives 5 clients each of 20, as in MNFL) or of {name, share} mappings (shares "
                  "are normalised; client counts by largest remainder). Only for methods that declare "
                  "heterogeneous_models: weight-averaging ones average within each architecture.")
    assignment: str = spec("random", doc="Which clients get which architecture: random (a permutation seeded by "
                                         "the partition seed, so architecture and data stay uncorrelated; "
                                         "docs/methods/mnfl.md §10 item 25) or blocks (contiguous client ids, the "
                                         "MNFL "
                                         "reference code; the shares must split clients.num_clients into "
                                         "whole blocks).", choices=("random", "blocks"))

    def validate(self, path: str) -> None:
        from platform.config.models import MODELS  # deferred: start-up time (the model zoo imports torch)

        if self.name not in MODELS:
            raise ConfigError(f"{path}.name", f"unknown model {self.name!r}{did_you_mean(self.name, MODELS)}; "
                                              f"allowed: {', '.join(MODELS)}")
        if self.architectures is not None:
            from platform.config.models import architecture_shares

            architecture_shares(self.architectures, f"{path}.architectures" if path else "model.architectures")


@dataclass(frozen=True)
class ClientsConfig:
    num_clients: int = spec(10, doc="K, the number of (virtual) clients.", ge=1, le=10_000_000)
    clients_per_round: int = spec(10, doc="Clients sampled per round (γ·K).", ge=1)
    local_epochs: int = spec(1, doc="E, local epochs per round.", ge=1, le=100_000)
    batch_size: int = spec(32, doc="B, local batch size.", ge=1, le=10_000_000)
    optimizer: str = spec("sgd", doc="Local optimiser.", choices=("sgd", "adam"))
    lr: float = spec(0.05, doc="η, local learning rate.", gt=0)
    momentum: float = spec(0.0, doc="Local SGD momentum (a fresh optimiser every round).", ge=0, lt=1)
    weight_decay: float = spec(0.0, doc="Local weight decay.", ge=0)
    state_memory_mb: float = spec(1024.0, doc="Memory bound of the client-state store (personalised models, "
                                              "optimiser states) on each parameter server; past it, the least "
                                              "recently used states spill to the server's local disk.", ge=0)
    batched: Union[str, bool] = spec(
        "auto", doc="Train the sampled clients of one architecture on an actor as one batched computation "
                    "(torch.func.vmap over stacked models; the same results as one after another up to float "
                    "rounding) where the method supports it (FedAvg, FedProx): on, off, or auto (batched where "
                    "it is measured to be faster: 2+ clients on the actor and, on a CPU, parameters x batch size "
                    "<= 2,000,000; see algorithms/common/batched_training.py). platform.run --profile says which "
                    "path ran and why. YAML's bare on/off (true/false) mean on/off.",
        choices=("auto", "on", "off", True, False))
    augment: str = spec(
        "none", doc="Augmentation of every local-training batch: none, or crop_flip (zero-pad augment_padding pixels, "
                    "random crop back to the image size, random horizontal flip with p = 0.5; torchvision's "
                    "RandomCrop + RandomHorizontalFlip). Images only (a ConfigError for vector data). The padding is "
                    "0 of the normalised inputs, i.e. the dataset's mean colour (black only with normalization: "
                    "none). Draws from its own stream per (round, client) under the training seed, so turning it on "
                    "keeps the batch order; the batched loop augments alike. Applies to the local training of every "
                    "method (train_local), not to distillation (server or client) nor FedED's autoencoder; see "
                    "algorithms/common/training.py.", choices=("none", "crop_flip"))
    augment_padding: int = spec(4, doc="crop_flip: pixels of zero padding on each side before the random crop "
                                       "(torchvision's RandomCrop padding; 4 for 32x32 CIFAR in FedDF/FedAUX).", ge=0)
    precision: str = spec(
        "fp32", doc="Local training's arithmetic: fp32, or bf16 (forward and loss under torch.autocast to "
                    "bfloat16 on the client's device; weights, gradients and optimiser state stay float32). Needs a "
                    "device with bfloat16 (any CPU; CUDA from Ampere on). Server-side work stays fp32.",
        choices=("fp32", "bf16"))

    def validate(self, path: str) -> None:
        if isinstance(self.batched, bool):  # YAML 1.1 reads a bare on/off as true/false
            object.__setattr__(self, "batched", "on" if self.batched else "off")
        if self.clients_per_round > self.num_clients:
            raise ConfigError(f"{path}.clients_per_round",
                              f"must be <= clients.num_clients ({self.num_clients}), got {self.clients_per_round}")


@dataclass(frozen=True)
class ServerConfig:
    lr: float = spec(1.0, doc="Server learning rate η_s applied to the averaged update (1 = plain FedAvg).", gt=0)
    momentum: float = spec(0.0, doc="Server momentum (FedAvgM, Hsu et al. 2019); 0 = none.", ge=0, lt=1)
    val_fraction: float = spec(0.1, doc="Share of the training pool held out as the server's validation split "
                                        "(stratified, seeded by the partition seed; never from the test set). "
                                        "val_accuracy/val_loss are measured on it, and sweeps select on them. "
                                        "0 = no split (then val_* metrics are not reported).", ge=0, lt=1)
    val_source: str = spec("train", doc="Where the server's validation split comes from: 'train' (the training "
                                        "pool, before the partition) or 'test' (the test split, whose rest stays "
                                        "held out for test_*): for papers that validate on the test split and give "
                                        "the clients the whole training set, so the clients keep the cited sizes.",
                           choices=("train", "test"))


@dataclass(frozen=True)
class SeedsConfig:
    """Separate seeds per random stream. ``null`` derives the stream's seed from the top-level ``seed``."""

    partition: Optional[int] = spec(None, doc="Partition of data over clients.", ge=0)
    init: Optional[int] = spec(None, doc="Model initialisation.", ge=0)
    sampling: Optional[int] = spec(None, doc="Client sampling per round.", ge=0)
    training: Optional[int] = spec(None, doc="Local training: batch order, augmentation.", ge=0)
    noise: Optional[int] = spec(None, doc="Noise a method adds (DP, Langevin dynamics).", ge=0)
    split: Optional[int] = spec(None, doc="The shared splits of the training pool: the server's validation split "
                                          "and a public split taken from it. Like the test set they do not move "
                                          "with the replicate seed, so a sweep's replicate S and platform.run "
                                          "--set seed=S see the same data; null = the partition stream of seed 0 "
                                          "(seeds.partition when that is set).", ge=0)
    partition_from_seed: bool = spec(False, doc="The partition seed is the top-level seed itself, not a seed "
                                                "derived from it: a sweep's replicate seed s partitions with "
                                                "seed s, as reference code that seeds everything with the run "
                                                "seed does (FedED: np.random.seed(s), docs/methods/feded.md §4.3), so "
                                                "the Dirichlet draws match it. Excludes an explicit "
                                                "seeds.partition (one partition for every replicate).")

    def validate(self, path: str) -> None:
        if self.partition_from_seed and self.partition is not None:
            where = f"{path}.partition_from_seed" if path else "partition_from_seed"
            raise ConfigError(where, f"the partition seed is either the top-level seed (partition_from_seed: true) "
                                     f"or fixed (partition: {self.partition}), not both; leave partition null")


SEED_STREAMS = ("partition", "init", "sampling", "training", "noise")


@dataclass(frozen=True)
class ResourcesConfig:
    cpu: float = spec(1.0, doc="CPUs per trial (fractional allowed).", gt=0)
    gpu: float = spec(0.0, doc="GPUs per trial (fractional allowed, e.g. 0.25).", ge=0)
    actors: Optional[int] = spec(None, doc="Client actors per trial; default: the trial's whole CPUs (or GPUs).",
                                 ge=1)


@dataclass(frozen=True)
class TrackingConfig:
    arrays_every: int = spec(5, doc="Log the arrays a method reports (Algorithm.report_arrays, e.g. MNFL's "
                                    "coefficient matrix c) as artifacts arrays/<name>/round_<r>.png (heat-map) "
                                    "and .csv every this many rounds and after the last round; 0 = after the "
                                    "last round only. Arrays over 1e6 elements are skipped with a warning.", ge=0)


@dataclass(frozen=True)
class AlgorithmConfig:
    name: str
    params: Any  # the algorithm's frozen Hyperparams dataclass

    def to_flat_dict(self) -> dict:
        return {"name": self.name, **to_dict(self.params)}


@dataclass(frozen=True)
class ExperimentConfig:
    dataset: DatasetConfig = spec(factory=DatasetConfig)
    partition: PartitionConfig = spec(factory=PartitionConfig)
    model: ModelConfig = spec(factory=ModelConfig)
    algorithm: Any = spec(None, doc="Algorithm name and hyperparameters (an AlgorithmConfig once built).")
    clients: ClientsConfig = spec(factory=ClientsConfig)
    server: ServerConfig = spec(factory=ServerConfig)
    rounds: int = spec(10, doc="Communication rounds R.", ge=1, le=1_000_000)
    mode: str = spec("rounds", doc="rounds: train for `rounds` rounds. one_round: the one-round analysis of "
                                   "docs/methods/fedkp_fedpa.md §10.3 (Appendix C): the round-0 client models are "
                                   "trained once per upstream config and cached, and each run only "
                                   "re-aggregates them (rounds must be 1).", choices=("rounds", "one_round"))
    seed: int = spec(0, doc="Base seed; each stream in `seeds` derives from it unless set.", ge=0)
    seeds: SeedsConfig = spec(factory=SeedsConfig)
    resources: ResourcesConfig = spec(factory=ResourcesConfig)
    public: PublicDataConfig = spec(factory=PublicDataConfig)
    pretrain: PretrainConfig = spec(factory=PretrainConfig)
    tracking: TrackingConfig = spec(factory=TrackingConfig)
    stand_in: bool = spec(False, doc="Replace every dataset read from files (the dataset, public data, a single-image "
                                     "source photo given as a file path) with generated data of the real one's shapes, "
                                     "classes and split sizes (platform.data.stand_in): for dry runs, tests and cost "
                                     "estimates where the files are absent; dataset.root may be null. Results are not "
                                     "the paper's. Embedded data (digits, digits32, synthetic, bundled photos) is "
                                     "unchanged.")
    stand_in_fraction: float = spec(1.0, doc="With stand_in: the share of each split's real size generated (the first "
                                             "round(f·N) samples of the full stand-in), only so tests can scale down; "
                                             "1 = the real sizes. Sizes set in the config (public.size, "
                                             "partition.samples_per_client) are not scaled.", gt=0, le=1)

    def __post_init__(self):
        # The data layer reads the flag from the dataset section (DatasetConfig.stand_in): copied on every build and
        # dataclasses.replace, so the dataset section, SharedData.serves and every cache key built from dataset.*
        # keep a stand-in run apart from a real-data one.
        dataset = self.dataset
        if isinstance(dataset, DatasetConfig) and (dataset.stand_in, dataset.stand_in_fraction) != (
                self.stand_in, self.stand_in_fraction):
            object.__setattr__(self, "dataset", dataclasses.replace(dataset, stand_in=self.stand_in,
                                                                    stand_in_fraction=self.stand_in_fraction))

    def validate(self, path: str) -> None:
        if self.stand_in_fraction != 1.0 and not self.stand_in:
            raise ConfigError("stand_in_fraction", f"only applies with stand_in: true (got {self.stand_in_fraction:g} "
                                                   f"with stand_in false); leave it at 1 or set stand_in: true")

    def stream_seed(self, stream: str) -> int:
        """The seed of one random stream: explicit in ``seeds``, else ``seed`` itself for the partition with
        ``seeds.partition_from_seed``, else derived from ``seed`` and the stream."""
        explicit = getattr(self.seeds, stream)
        if explicit is not None:
            return explicit
        if stream == "partition" and self.seeds.partition_from_seed:
            return self.seed
        return int(np.random.SeedSequence([self.seed, SEED_STREAMS.index(stream)]).generate_state(1)[0])

    def split_seed(self) -> int:
        """The seed of the shared data splits (``seeds.split``): independent of the replicate seed ``seed``; by default
        the partition stream's seed for seed 0, so seed 0 keeps the splits it always had."""
        if self.seeds.split is not None:
            return self.seeds.split
        if self.seeds.partition is not None:
            return self.seeds.partition
        return dataclasses.replace(self, seed=0).stream_seed("partition")

    def to_dict(self) -> dict:
        data = to_dict(self)
        data["algorithm"] = self.algorithm.to_flat_dict()
        return data

    def flat(self) -> dict[str, Any]:
        return flatten(self.to_dict())


def _build_algorithm(data: Any) -> AlgorithmConfig:
    from algorithms import resolve_algorithm

    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError("algorithm", f"must be a mapping with a name, got {data!r}")
    name = data.get("name", "fedavg")
    if not isinstance(name, str):
        raise ConfigError("algorithm.name", f"must be a string, got {name!r}")
    params = {k: v for k, v in data.items() if k != "name"}
    hp_cls = resolve_algorithm(name).Hyperparams
    try:
        hparams = build(hp_cls, params, "algorithm")
    except ConfigError as err:
        if "unknown key" in str(err):
            allowed = [f.name for f in dataclasses.fields(hp_cls)]
            key = err.field.rsplit(".", 1)[-1]
            allowed = ["name", *allowed]
            raise ConfigError(err.field, f"unknown key for algorithm {name!r}{did_you_mean(key, allowed)}; allowed: "
                                         f"{', '.join(allowed)}") from None
        raise
    return AlgorithmConfig(name=name, params=hparams)


def build_experiment(data: dict) -> ExperimentConfig:
    """Validate a plain dict into an :class:`ExperimentConfig` (raises :class:`ConfigError`)."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError("", f"an experiment config must be a mapping, got {type(data).__name__}")
    data = dict(data)
    algorithm = _build_algorithm(data.pop("algorithm", None))
    data, filled = apply_method_defaults(data, algorithm.name)
    try:
        config = build(ExperimentConfig, data)
    except ConfigError as err:
        if err.field in filled:
            raise ConfigError(err.field, f"{error_message(err)} (a default of algorithm {algorithm.name!r}, its "
                                         f"config_defaults; set {err.field} to override it)") from None
        raise
    config = dataclasses.replace(config, algorithm=algorithm)
    _check_cross_section(config)
    return config


def error_message(err: ConfigError) -> str:
    """A ConfigError's message without its leading ``field: `` (to re-raise it with more context): the message as
    given, since the rendered text shows the field escaped and cut (``algorithms.errors.one_line``)."""
    return err.message


def method_defaults(name: str) -> dict[str, dict[str, Any]]:
    """The config defaults algorithm ``name`` declares (``Algorithm.config_defaults``: section -> {key: value}),
    checked against the experiment config's fields: a section that is not a config section, or a key that is
    not a field of its section, is a :class:`ConfigError` naming that field."""
    from algorithms import resolve_algorithm

    cls = resolve_algorithm(name)
    declared = getattr(cls, "config_defaults", None) or {}
    if not declared:
        return {}  # most methods: no type hints to resolve on every config build
    owner = f"{cls.__module__}.{cls.__qualname__}.config_defaults"
    if not isinstance(declared, Mapping):
        raise ConfigError("algorithm.name", f"algorithm {name!r}: {owner} must map config sections to "
                                            f"{{key: value}} mappings, got {declared!r}")
    hints = typing.get_type_hints(ExperimentConfig)
    sections = [f.name for f in dataclasses.fields(ExperimentConfig) if dataclasses.is_dataclass(hints[f.name])]
    out: dict[str, dict[str, Any]] = {}
    for section, values in declared.items():
        if section == "algorithm":
            raise ConfigError("algorithm", f"algorithm {name!r}: {owner} may not name the algorithm section; "
                                           f"the method's own defaults belong in its Hyperparams")
        if section not in sections:
            raise ConfigError(str(section), f"algorithm {name!r}: {owner} names {section!r}, which is not a config "
                                            f"section; allowed: {', '.join(sections)}")
        if not isinstance(values, Mapping):
            raise ConfigError(section, f"algorithm {name!r}: {owner}[{section!r}] must be a {{key: value}} "
                                       f"mapping, got {values!r}")
        keys = [f.name for f in dataclasses.fields(hints[section]) if f.init]
        for key in values:
            if key not in keys:
                raise ConfigError(f"{section}.{key}", f"algorithm {name!r}: {owner} names an unknown field; "
                                                      f"allowed in {section}: {', '.join(keys)}")
        out[section] = dict(values)
    return out


def apply_method_defaults(data: dict, name: str) -> tuple[dict, set[str]]:
    """``data`` (an experiment config without its algorithm section) with algorithm ``name``'s
    :func:`method_defaults` filled in *under* it: only keys ``data`` does not set take the method's value. Returns
    the new dict and the dotted keys that were filled. A section that is not a mapping is left for validation."""
    defaults = method_defaults(name)
    if not defaults:
        return data, set()
    data = dict(data)
    filled: set[str] = set()
    for section, values in defaults.items():
        given = data.get(section)
        if given is None:
            given = {}
        if not isinstance(given, dict):
            continue  # build() reports "must be a mapping" on the user's value
        merged = dict(given)
        for key, value in values.items():
            if key not in merged:
                merged[key] = copy.deepcopy(value)
                filled.add(f"{section}.{key}")
        data[section] = merged
    return data, filled


def _check_cross_section(config: ExperimentConfig) -> None:
    """The rules between sections. Those that need the data catalog or the file system are
    :func:`platform.preflight.check_experiment`'s."""
    if config.mode == "one_round" and config.rounds != 1:
        raise ConfigError("rounds", f"must be 1 when mode is one_round, got {config.rounds}")
    from algorithms import ALGORITHMS, resolve_algorithm

    algorithm = resolve_algorithm(config.algorithm.name)
    algorithm(config.algorithm.params).check_setting(experiment_setting(config))
    if config.model.architectures is not None:
        from platform.config.models import assign_architectures

        if not algorithm.heterogeneous_models:
            capable = [n for n, a in ALGORITHMS.items() if a.heterogeneous_models]
            raise ConfigError("model.architectures", f"algorithm {config.algorithm.name!r} keeps one weight vector "
                                                     f"for all clients, so all clients need one architecture; "
                                                     f"heterogeneous clients work with: {', '.join(capable)}")
        assign_architectures(config.model.architectures, config.clients.num_clients)
        if config.model.assignment == "blocks":
            from platform.config.models import check_whole_blocks

            check_whole_blocks(config.model.architectures, config.clients.num_clients)
    if algorithm.evaluates_clients and config.partition.val_fraction == 0 and config.partition.test_fraction == 0:
        raise ConfigError("partition.val_fraction", f"algorithm {config.algorithm.name!r} judges each client on its "
                                                    f"own validation and test splits: set partition.val_fraction "
                                                    f"and/or partition.test_fraction > 0")


def experiment_setting(config: ExperimentConfig, public_size: Optional[int] = None):
    """What an algorithm's ``check_setting`` may know at load time (:class:`algorithms.base.Setting`); ``public_size``:
    the public pool's size where it is known from the data (the dry run's data plan, the built data), else the
    config's own (``public.size``; None: unknown)."""
    from algorithms.base import Setting

    public = config.public
    if public_size is None:
        public_size = 0 if public.source == "none" else pool_size(public) if public.source == "image" else public.size
    return Setting(num_clients=config.clients.num_clients, rounds=config.rounds, public_size=public_size,
                   public_source=public.source, server_validation=config.server.val_fraction > 0)


def check_setting_with_data(config: ExperimentConfig, public_size: int) -> None:
    """The algorithm's ``check_setting`` again, now that the public pool's size is known: the dry run (from its data
    plan) and the driver (from the built data, before any trial trains) both call it."""
    from algorithms import resolve_algorithm

    algorithm = resolve_algorithm(config.algorithm.name)
    algorithm(config.algorithm.params).check_setting(experiment_setting(config, public_size))


def apply_overrides(data: dict, overrides: dict[str, Any]) -> dict:
    """Return a copy of ``data`` with dotted-key overrides applied (unknown keys are caught by validation)."""
    data = copy.deepcopy(data) if data else {}
    for key, value in overrides.items():
        node = data
        parts = key.split(".")
        for i, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            elif not isinstance(child, dict):
                raise ConfigError(".".join(parts[: i + 1]), f"is a value, not a section; cannot set {key}")
            node = child
        node[parts[-1]] = value
    return data

