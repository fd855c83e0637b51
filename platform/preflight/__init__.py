"""Pre-flight: the checks of an experiment that need the data catalog, the file system or the pre-training stage,
run by every command after its config loads and before anything starts (Ray, an MLflow run, a Tune directory).

:mod:`platform.config` checks what a config says on its own: types, ranges, the rules between its fields and
sections, the algorithm's own setting. What it cannot know without looking at the data is checked here, each check
where its knowledge lives: the dataset's name and knobs against the catalog, its files under the data root, the
public dataset and its split, the source photo and whether the crop pool fits it
(:mod:`platform.data.datasets`, :mod:`platform.data.public`), whether pre-training can run on the public data
(:mod:`platform.runtime.pretrain`), and whether ``clients.augment`` has images to augment (:func:`check_augmentation`).
Every failure is one :class:`~platform.errors.ConfigError` naming the field.

``platform.run`` checks its one config; ``platform.sweep`` hands :func:`check_experiment` to the search-space loader,
which runs it on the base config, every scenario cell and every candidate value, as it runs its own validation.
"""
from __future__ import annotations

from platform.config.experiment import ExperimentConfig, apply_overrides, build_experiment, load_yaml, parse_overrides
from platform.data.datasets import DATASETS, check_dataset_available, validate_dataset_config
from platform.data.public import check_public_available, check_public_dataset
from platform.errors import ConfigError
from platform.runtime.pretrain import check_pretrain


def check_experiment(config: ExperimentConfig) -> None:
    """Raise a :class:`~platform.errors.ConfigError` for the first thing about ``config`` the data, the files or the
    pre-training stage refuse; return None when it can start."""
    check_settings(config)
    check_dataset_available(config.dataset)
    check_public_available(config.public, config.dataset)


def check_settings(config: ExperimentConfig) -> None:
    """:func:`check_experiment` without looking for the data files: what ``--dry-run`` and ``--estimate`` check (they
    report missing files instead, and the estimate measures on stand-in data)."""
    validate_dataset_config(config.dataset, "dataset")
    check_public_dataset(config.public, "public")
    check_pretrain(config)
    check_augmentation(config)


def check_augmentation(config: ExperimentConfig) -> None:
    """``clients.augment`` crops and flips images: refused for vector data (the synthetic dataset)."""
    if config.clients.augment != "none" and DATASETS[config.dataset.name].channels is None:
        raise ConfigError("clients.augment", f"{config.clients.augment} crops and flips images, but dataset "
                                             f"{config.dataset.name} is vector data; allowed here: none")


def load_experiment(path_or_data: str | dict, overrides: list[str] | None = None) -> ExperimentConfig:
    """An experiment config ready to run: a YAML file (or its mapping) with ``--set``-style ``overrides``, built and
    validated (:func:`~platform.config.experiment.build_experiment`), then checked here."""
    data = load_yaml(path_or_data) if isinstance(path_or_data, str) else path_or_data
    parsed = parse_overrides(overrides or [])
    config = build_experiment(apply_overrides(data or {}, parsed))
    check_experiment(config)
    return config


__all__ = ["check_augmentation", "check_experiment", "check_settings", "load_experiment"]
