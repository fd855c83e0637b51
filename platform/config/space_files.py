"""Where search-space files are found and how one is read: ``$FEDSWEEP_SEARCH_SPACES``, ``./search_spaces``, the
repository's own; a file's sections with a preset laid over them (:mod:`platform.config.presets`); the strict YAML
loader of a file (:func:`load_yaml`) and of a ``--set`` value (:func:`parse_override`). Values are validated by
:func:`platform.config.search_space.load_search_space`."""
from __future__ import annotations

import glob
import math
import os
import re
from typing import Any, Optional

import yaml

from platform.config.presets import Preset, apply_preset, check_citations, parse_presets, select_preset
from platform import errors
from platform.errors import ConfigError, UserError

# This module imports no torch (nor the config schema, which does): a command finds and reads its space, checks its
# sections and preset, and refuses a bad one, before it starts Ray (platform.sweep.command).


MAX_YAML_BYTES = 1_000_000  # a config or search-space file: far above any real one
MAX_YAML_NODES = 1_000_000  # values once aliases (*name) are expanded: an alias bomb expands without bound
MAX_NUM_SAMPLES = 100_000  # trials per cell (--num-samples, search.num_samples): far above any sweep that ends
MAX_REPEATS = 1_000  # --repeats, runs of every grid point


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


class YamlRefusal(Exception):
    """What :class:`StrictLoader` refuses: a ``key`` given twice in one mapping (``lines``: both), or a number written
    in a form YAML 1.1 reads otherwise than most readers would (``key`` None; ``lines``: its line). ``what``: the
    message without its place, which :func:`load_yaml` (a file) and ``--set`` (a value) each add."""

    def __init__(self, what: str, lines: tuple[int, ...], key: Any = None):
        super().__init__(what)
        self.what, self.lines, self.key = what, lines, key

    def config_error(self, path: str) -> ConfigError:
        if self.key is not None:
            return ConfigError(str(self.key), f"given twice in {path} (lines {self.lines[0]} and {self.lines[1]}); "
                                              f"a mapping takes each key once: keep one")
        return ConfigError(path, f"line {self.lines[0]}: {self.what}")


_PLAIN_INT = re.compile(r"[-+]?(0|[1-9][0-9]*)")
_MERGE_TAG = "tag:yaml.org,2002:merge"


class StrictLoader(yaml.SafeLoader):
    """yaml's SafeLoader, refusing (:class:`YamlRefusal`) what it would take silently: a key given twice in one
    mapping (the last value won), an integer not in plain decimal digits (YAML 1.1 reads ``0x3`` as 3, ``010`` as 8,
    ``0b11`` as 3, ``1_000`` as 1000, ``1:30`` as 90) and a float with underscores or in base 60. A ``<<`` merge
    may still be overridden by the mapping's own keys, as YAML defines."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == _MERGE_TAG or not isinstance(key_node, yaml.ScalarNode):
                    continue
                key, line = self.construct_object(key_node), key_node.start_mark.line + 1
                try:
                    first = seen.get(key)
                except TypeError:  # an unhashable key: yaml refuses it below
                    continue
                if first is not None:
                    raise YamlRefusal(f"{key} is given twice", (first, line), key)
                seen[key] = line
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node):
        value = super().construct_yaml_int(node)
        text = str(node.value).strip()
        if not _PLAIN_INT.fullmatch(text):
            raise YamlRefusal(f"{text} is not a plain decimal integer (YAML 1.1 reads it as {value}); write it in "
                              f"decimal digits", (node.start_mark.line + 1,))
        return value

    def construct_yaml_float(self, node):
        value = super().construct_yaml_float(node)
        text = str(node.value).strip()
        if "_" in text or ":" in text:
            raise YamlRefusal(f"{text} is not a plain decimal number (YAML 1.1 reads it as {value:g}); write it "
                              f"in decimal digits", (node.start_mark.line + 1,))
        return value


StrictLoader.add_constructor("tag:yaml.org,2002:int", StrictLoader.construct_yaml_int)
StrictLoader.add_constructor("tag:yaml.org,2002:float", StrictLoader.construct_yaml_float)


def load_yaml(path: str) -> Any:
    """A YAML file's data; one line (ConfigError) when the file is missing, over 1 MB, unreadable, binary or not
    UTF-8, not YAML, an alias bomb, or holds what :class:`StrictLoader` refuses (a key twice, a hex count)."""
    if not os.path.isfile(path):
        raise ConfigError("", f"config file not found: {path}")
    if os.path.getsize(path) > MAX_YAML_BYTES:
        raise ConfigError("", f"{path} is {os.path.getsize(path):,} bytes; a config or search space is at most "
                              f"{MAX_YAML_BYTES:,}")
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_YAML_BYTES + 1)
    except OSError as err:
        raise ConfigError(path, f"cannot read it ({err.strerror}); a config or search space is a readable "
                                f"UTF-8 YAML file") from None
    bad = raw.find(b"\0")
    if bad >= 0:
        raise ConfigError(path, f"a binary file (a NUL byte on line {_line_of(raw, bad)}), not YAML; a config or "
                                f"search space is a UTF-8 YAML text file")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise ConfigError(path, f"not UTF-8 text (byte 0x{raw[err.start]:02x} on line {_line_of(raw, err.start)}); "
                                f"a config or search space is a UTF-8 YAML text file") from None
    try:
        data = yaml.load(text, Loader=StrictLoader)  # noqa: S506 - a SafeLoader
    except YamlRefusal as refusal:
        raise refusal.config_error(path) from None
    except yaml.YAMLError as err:
        raise ConfigError("", f"{path} is not valid YAML: {err}".replace("\n", " ")) from None
    check_expanded_size(data, path)
    return data


def parse_override(text: str) -> tuple[str, Any]:
    """``"a.b=v"`` -> ``("a.b", v)``; ``v`` is parsed as a YAML scalar (never evaluated as code)."""
    if "=" not in text:
        raise ConfigError("--set", f"expected KEY=VALUE with a dotted key, got {text!r}")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise ConfigError("--set", f"expected KEY=VALUE with a dotted key, got {text!r}")
    try:  # a key twice in a mapping, 0x3 or 1_000 for a number: refused, as in a file
        value = yaml.load(raw, Loader=StrictLoader) if raw.strip() else ""  # noqa: S506 - a SafeLoader
    except YamlRefusal as refusal:
        raise ConfigError(f"--set {key}", f"{refusal.what}; give each key once" if refusal.key is not None
                          else refusal.what) from None
    except yaml.YAMLError:
        value = raw
    check_expanded_size(value, f"--set {key}")
    if value == {}:
        raise ConfigError(f"--set {key}", f"an empty mapping would reset the whole section to its defaults; set one "
                                          f"value of it with --set {key}.<key>=<value>")
    if isinstance(value, str) and "_" not in value:  # YAML 1.1 reads "1e-3" as a string; users mean a number
        try:
            value = float(value)
        except ValueError:
            pass
    return key, value


def parse_overrides(items) -> dict[str, Any]:
    """Every ``--set KEY=VALUE`` as ``{key: value}``; a key given twice is refused (which one was meant?)."""
    parsed: dict[str, Any] = {}
    for item in items or []:
        key, value = parse_override(item)
        if key in parsed:
            raise ConfigError("--set", f"{key} is given twice ({parsed[key]!r}, then {value!r}); give it once")
        parsed[key] = value
    return parsed


def _line_of(raw: bytes, offset: int) -> int:
    return raw.count(b"\n", 0, offset) + 1


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
