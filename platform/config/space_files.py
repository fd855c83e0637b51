"""Where search-space files are found and how one is read: ``$FEDSWEEP_SEARCH_SPACES``, ``./search_spaces``, the
repository's own; a file's sections with a preset laid over them (:mod:`platform.config.presets`). Values are
validated by :func:`platform.config.search_space.load_search_space`."""
from __future__ import annotations

import glob
import os
from typing import Optional

from platform.config.experiment import load_yaml
from platform.config.presets import Preset, apply_preset, check_citations, parse_presets, select_preset
from platform.errors import ConfigError, UserError

def search_space_dirs() -> list[str]:
    """Where named search spaces are looked up: $FEDSWEEP_SEARCH_SPACES, ./search_spaces, the repo's own."""
    dirs = []
    if os.environ.get("FEDSWEEP_SEARCH_SPACES"):
        dirs.append(os.environ["FEDSWEEP_SEARCH_SPACES"])
    dirs.append(os.path.join(os.getcwd(), "search_spaces"))
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # <repo>/platform/config/
    dirs.append(os.path.join(repo, "search_spaces"))
    return [d for i, d in enumerate(dirs) if os.path.isdir(d) and d not in dirs[:i]]


def available_search_spaces() -> list[str]:
    names = set()
    for d in search_space_dirs():
        names.update(os.path.splitext(os.path.basename(p))[0] for p in glob.glob(os.path.join(d, "*.yaml")))
    return sorted(names)


def find_search_space(name: str) -> str:
    if name.endswith((".yaml", ".yml")) and os.path.isfile(name):
        return name
    for d in search_space_dirs():
        path = os.path.join(d, f"{name}.yaml")
        if os.path.isfile(path):
            return path
    raise UserError(f"unknown search space {name!r}; available: {', '.join(available_search_spaces()) or 'none'}")


SECTIONS = ("description", "base", "parameters", "search", "resources", "scenarios", "reference", "presets")


def read_search_space(name: str, preset: Optional[str] = None) -> tuple[str, dict, dict[str, Preset]]:
    """(path, the file's sections with preset ``preset`` laid over them, every preset of the file): shapes checked,
    values not yet (:func:`load_search_space` validates them)."""
    path = find_search_space(name)
    raw = load_yaml(path)
    if raw is None or raw == {}:
        raise ConfigError("", f"{path} is empty; a search space needs at least base (an experiment config) and "
                              f"parameters; sections: {', '.join(SECTIONS)}")
    if not isinstance(raw, dict):
        raise ConfigError("", f"{path}: a search space must be a mapping with {', '.join(SECTIONS)}")
    unknown = [k for k in raw if k not in SECTIONS]
    if unknown:
        raise ConfigError(unknown[0], f"unknown section in {path}; allowed: {', '.join(SECTIONS)}")
    presets = parse_presets(raw.get("presets"))
    chosen = select_preset(presets, preset, os.path.splitext(os.path.basename(path))[0])
    if chosen is not None:
        check_citations(chosen)
    return path, apply_preset(raw, chosen), presets
