"""Where search-space files are found and how one is read: ``$FEDSWEEP_SEARCH_SPACES``, ``./search_spaces``, the
repository's own; a file's sections with a preset laid over them (:mod:`platform.config.presets`). Values are
validated by :func:`platform.config.search_space.load_search_space`."""
from __future__ import annotations

import glob
import math
import os
import re
from typing import Any, Optional

from platform.config.presets import Preset, apply_preset, check_citations, parse_presets, select_preset
from platform import errors
from platform.errors import ConfigError, UserError

# This module imports no torch (nor the config schema, which does): a command finds and reads its space, checks its
# sections and preset, and refuses a bad one, before it starts Ray (platform.sweep.command).


MAX_YAML_BYTES = 1_000_000  # a config or search-space file: far above any real one
MAX_YAML_NODES = 1_000_000  # values once aliases (*name) are expanded: an alias bomb expands without bound


def check_expanded_size(data: Any, where: str) -> None:
    """Refuse ``data`` whose aliases would expand to more than :data:`MAX_YAML_NODES` values (a YAML alias bomb: a few
    lines whose nested ``*alias`` references stand for billions of values), counted without expanding them."""
    sizes: dict[int, int] = {}

    def size(node: Any) -> int:
        if isinstance(node, (list, dict)):
            key = id(node)
            if key not in sizes:
                sizes[key] = 0  # a self-reference counts once
                children = list(node.values()) + list(node.keys()) if isinstance(node, dict) else node
                sizes[key] = 1 + sum(size(child) for child in children)
                if sizes[key] > MAX_YAML_NODES:
                    raise ConfigError(where, f"its YAML expands to more than {MAX_YAML_NODES:,} values once its "
                                             f"aliases (*name) are expanded; allowed: at most {MAX_YAML_NODES:,}")
            return sizes[key]
        if isinstance(node, str) and len(node) > MAX_YAML_BYTES:
            raise ConfigError(where, f"a value of {len(node):,} characters; allowed: at most {MAX_YAML_BYTES:,}")
        return 1

    try:
        size(data)
    except RecursionError:
        raise ConfigError(where, "its YAML is nested too deeply") from None


def load_yaml(path: str) -> Any:
    """A YAML file's data; one line (ConfigError) when the file is missing, over 1 MB, not YAML, or an alias bomb."""
    import yaml

    if not os.path.isfile(path):
        raise ConfigError("", f"config file not found: {path}")
    if os.path.getsize(path) > MAX_YAML_BYTES:
        raise ConfigError("", f"{path} is {os.path.getsize(path):,} bytes; a config or search space is at most "
                              f"{MAX_YAML_BYTES:,}")
    with open(path) as fh:
        try:
            data = yaml.safe_load(fh)
        except yaml.YAMLError as err:
            raise ConfigError("", f"{path} is not valid YAML: {err}".replace("\n", " ")) from None
    check_expanded_size(data, path)
    return data


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
    raise UserError(f"unknown search space {name!r}{did_you_mean(name)}; available: "
                    f"{', '.join(available_search_spaces()) or 'none'}")


def did_you_mean(name: str) -> str:
    """``" (did you mean 'fedkp_bandwidth'?)"`` for the closest search-space name to a mistyped ``name`` ("" when
    none is close)."""
    return errors.did_you_mean(name, available_search_spaces())


SECTIONS = ("description", "caveat", "base", "parameters", "search", "resources", "scenarios", "reference", "presets",
            "default_minutes")


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
        raise ConfigError(unknown[0], f"unknown section in {path}{errors.did_you_mean(unknown[0], SECTIONS)}; allowed: "
                                      f"{', '.join(SECTIONS)}")
    minutes = raw.get("default_minutes")
    if minutes is not None and (isinstance(minutes, bool) or not isinstance(minutes, (int, float))
                                or not math.isfinite(minutes) or minutes <= 0):
        raise ConfigError("default_minutes", f"must be a positive number (the minutes the space's default setting "
                                             f"takes on 2 CPUs), got {minutes!r}")
    caveat = raw.get("caveat")
    if caveat is not None and (not isinstance(caveat, str) or not caveat.strip() or "\n" in caveat.strip()):
        raise ConfigError("caveat", f"must be one line saying what the default setting cannot show (printed by "
                                    f"--list), got {caveat!r}")
    presets = parse_presets(raw.get("presets"))
    chosen = select_preset(presets, preset, os.path.splitext(os.path.basename(path))[0])
    if chosen is not None:
        check_citations(chosen)
    return path, apply_preset(raw, chosen), presets


def question(description: str, width: int = 100) -> str:
    """The first sentence of a space's description (without a leading "One question:"), on one line, cut to about
    ``width`` characters."""
    text = re.sub(r"^one question:\s*", "", " ".join(str(description or "").split()), flags=re.IGNORECASE)
    first = re.split(r"(?<=[.?!])\s+(?=[A-Z(])", text, maxsplit=1)[0]
    first = first[:1].upper() + first[1:]
    return first if len(first) <= width else first[:width - 1].rstrip() + "…"


def space_listing() -> list[str]:
    """``--list``: per space, its question (the first sentence of its description, cut to the terminal's width, at
    least 100 characters), its presets, the minutes its
    default setting takes on 2 CPUs (``default_minutes:``) and, where it has one, its ``caveat:`` (what the default
    setting cannot show). Reads the files only (no torch, no validation of values); a
    file that does not read says why on its line."""
    import shutil

    lines = []
    names = available_search_spaces()
    pad = max((len(n) for n in names), default=0) + 2
    width = max(100, shutil.get_terminal_size((pad + 100, 24)).columns - pad)  # a wide terminal shows more
    for name in names:
        try:
            _, raw, presets = read_search_space(name)
        except (ConfigError, UserError) as err:
            lines.append(f"{name:<{pad}}(does not load: {err})")
            continue
        minutes = raw.get("default_minutes")
        took = f"about {minutes:g} min on 2 CPUs" if minutes is not None else "time not measured"
        lines.append(f"{name:<{pad}}{question(raw.get('description'), width)}")
        lines.append(f"{'':<{pad}}presets: {', '.join(presets) or 'none'}; default setting: {took}")
        if raw.get("caveat"):
            lines.append(f"{'':<{pad}}caveat: {raw['caveat'].strip()}")
    return lines
