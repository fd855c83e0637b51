"""Named settings of a search space: its ``presets:`` block, selected with ``--preset NAME``.

A preset is an overlay on the space's file: the papers' own settings (``paper``, ``paper_cifar10``, ...) beside the
embedded default, which stays the default. Every value it sets carries its source, so the settings are written down
once, here, and ``docs/reference/paper_settings.md`` is generated from them (``python docs/generate.py``)::

    presets:
      paper:
        title: MNIST, 100 clients, 20 per round (Appendix C)    # one line
        document: fedkp_fedpa.md                                # the method page (docs/methods/) the values come from
        base: {dataset.name: mnist, clients.num_clients: 100}   # dotted keys set on base; null removes a key
        scenarios: {partition.alpha: [10, 0.1]}                 # per key: replaces that dimension; null removes it
        parameters: {algorithm.bandwidth_scaling: {loguniform: [0.01, 10.0]}}  # per key; null removes
        search: {num_samples: 40, scheduler: {kind: none}}      # merged into search (nested)
        resources: {cpu: 4, gpu: 1}                             # merged into resources
        reference: {...}                                        # replaces the space's reference block
        cite:                                                   # one entry per value set above
          dataset.name: {paper: mnist, where: "Appendix C"}
          clients.lr: {paper: 0.01, where: "Appendix C", deviation: "..."}
          scenarios.partition.alpha: {paper: [10, 0.1], where: "§4.1 text (10) and code (0.1)"}

``cite`` keys name what the preset sets: a dotted base key (``clients.lr``) or a key under its section
(``scenarios.<key>``, ``parameters.<key>``, ``search.<key>``, ``resources.<key>``). Each gives the document's value
(``paper``, in the config's units: a parameter's range as its list of bounds or values), where the document gives it
(``where``: section, table or figure) and, where ours differs, the ``deviation`` and its reason. A value without a
citation, a citation of a value the preset does not set, and a value that differs from its citation without a
deviation are errors at load time (:func:`check_citations`), so the generated table cannot drift from the presets.
What a preset inherits is cited in the same block and checked against the resolved config
(:mod:`platform.preflight.citations`): every value that shapes the experiment carries a citation.
Platform choices the documents do not make (``resources``, ``search.max_concurrent_trials``, ...) cite ``paper:
null`` with ``where: platform`` and say why in ``note``.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any, Optional

from platform.errors import ConfigError, did_you_mean

PRESET_SECTIONS = ("title", "document", "base", "scenarios", "parameters", "search", "resources", "reference", "cite")
OVERLAY_SECTIONS = ("base", "scenarios", "parameters", "search", "resources", "reference")
CITE_KEYS = ("paper", "where", "deviation", "note")
PLATFORM = "platform"  # ``where`` of a setting the documents do not make (resources, concurrency)


@dataclass(frozen=True)
class Citation:
    key: str  # what the preset sets: a dotted base key or "<section>.<key>"
    paper: Any  # the document's value, in the config's units (None: the document gives none)
    where: str  # section, table or figure of the document; "platform" for our own choices
    deviation: Optional[str] = None  # why ours differs from ``paper``
    note: Optional[str] = None


@dataclass(frozen=True)
class Preset:
    name: str
    title: str
    document: str
    overlay: dict  # section -> its overlay (OVERLAY_SECTIONS)
    cite: dict[str, Citation] = field(default_factory=dict)

    def values(self) -> dict[str, Any]:
        """Every value the preset sets, by its ``cite`` key (dotted base keys flattened; a parameter's value is its
        distribution mapping; a search/resources value its leaf, ``search.scheduler.kind``)."""
        out: dict[str, Any] = {}
        for section in OVERLAY_SECTIONS:
            overlay = self.overlay.get(section)
            if overlay is None:
                continue
            if section == "base":
                out.update(_flatten(overlay))
            elif section in ("search", "resources"):
                out.update({f"{section}.{k}": v for k, v in _flatten(overlay).items()})
            elif section == "reference":
                out["reference"] = overlay
            else:
                out.update({f"{section}.{k}": v for k, v in overlay.items()})
        return out


def _flatten(mapping: dict, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in mapping.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(_flatten(value, dotted + "."))
        else:
            out[dotted] = value
    return out


def parse_presets(raw: Any) -> dict[str, Preset]:
    """The ``presets:`` block: name -> :class:`Preset` (shapes only; the resulting space is validated as any space
    is, when a preset is selected)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict) or not raw:
        raise ConfigError("presets", f"must map preset names to overlays, e.g. {{paper: {{base: {{...}}}}}}, "
                                     f"got {raw!r}")
    presets = {}
    for name, body in raw.items():
        where = f"presets.{name}"
        if not isinstance(name, str) or not name.replace("_", "").isalnum():
            raise ConfigError(where, "a preset name is letters, digits and underscores, e.g. paper_cifar10")
        if not isinstance(body, dict):
            raise ConfigError(where, f"must be a mapping with some of {', '.join(PRESET_SECTIONS)}, got {body!r}")
        unknown = [k for k in body if k not in PRESET_SECTIONS]
        if unknown:
            raise ConfigError(f"{where}.{unknown[0]}", f"unknown key; allowed: {', '.join(PRESET_SECTIONS)}")
        for section in OVERLAY_SECTIONS:
            if body.get(section) is not None and not isinstance(body[section], dict):
                raise ConfigError(f"{where}.{section}", f"must be a mapping, got {body[section]!r}")
        for section in ("scenarios",):
            for key, values in (body.get(section) or {}).items():
                if values is not None and (not isinstance(values, list) or not values):
                    raise ConfigError(f"{where}.{section}.{key}", f"must be a non-empty list of values (or null to "
                                                                  f"drop the dimension), got {values!r}")
        cite = {}
        cite_raw = body.get("cite") or {}
        if not isinstance(cite_raw, dict):
            raise ConfigError(f"{where}.cite", f"must map what the preset sets to {{paper, where}}, got {cite_raw!r}")
        for key, entry in cite_raw.items():
            at = f"{where}.cite.{key}"
            if not isinstance(entry, dict) or "where" not in entry or "paper" not in entry:
                raise ConfigError(at, f"must be a mapping with paper (the document's value, null if it gives none) "
                                      f"and where (its section or table), got {entry!r}")
            bad = [k for k in entry if k not in CITE_KEYS]
            if bad:
                raise ConfigError(f"{at}.{bad[0]}", f"unknown key; allowed: {', '.join(CITE_KEYS)}")
            if not isinstance(entry["where"], str) or not entry["where"].strip():
                raise ConfigError(f"{at}.where", "must name the section, table or figure (or 'platform')")
            cite[key] = Citation(key, entry["paper"], entry["where"].strip(), entry.get("deviation"), entry.get("note"))
        overlay = {s: copy.deepcopy(body[s]) for s in OVERLAY_SECTIONS if body.get(s) is not None}
        presets[name] = Preset(name, str(body.get("title") or name), str(body.get("document") or ""), overlay, cite)
    return presets


def select_preset(presets: dict[str, Preset], name: Optional[str], space: str) -> Optional[Preset]:
    """Preset ``name`` of ``space`` (None: none selected); one line naming the allowed ones otherwise."""
    if name is None:
        return None
    if name not in presets:
        allowed = ", ".join(presets) if presets else "none (the space has no presets: block)"
        raise ConfigError("--preset", f"unknown preset {name!r} for search space {space!r}"
                                      f"{did_you_mean(name, presets)}; allowed: {allowed}")
    return presets[name]


def apply_preset(raw: dict, preset: Optional[Preset]) -> dict:
    """The search-space file ``raw`` with ``preset`` laid over it (a copy; ``raw`` itself is unchanged)."""
    raw = copy.deepcopy(raw)
    raw.pop("presets", None)
    if preset is None:
        return raw
    overlay = preset.overlay
    if "base" in overlay:
        base = raw.get("base") or {}
        for key, value in _flatten(overlay["base"]).items():
            _set(base, key.split("."), value, f"presets.{preset.name}.base.{key}")
        raw["base"] = base
    for section in ("scenarios", "parameters"):
        if section in overlay:
            block = dict(raw.get(section) or {})
            for key, value in overlay[section].items():
                if value is None:
                    block.pop(key, None)
                else:
                    block[key] = copy.deepcopy(value)
            raw[section] = block or None
    for section in ("search", "resources"):
        if section in overlay:
            base = raw.get("base") or {}
            if section == "resources" and raw.get(section) is None and isinstance(base.get(section), dict):
                base[section] = _merge(base[section], overlay[section])  # the space keeps its resources in base
            else:
                raw[section] = _merge(raw.get(section) or {}, overlay[section])
    if "reference" in overlay:
        raw["reference"] = copy.deepcopy(overlay["reference"])
    return raw


def _set(node: dict, parts: list[str], value: Any, where: str) -> None:
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            if value is None:
                return
            child = node[part] = {}
        elif not isinstance(child, dict):
            raise ConfigError(where, f"{'.'.join(parts[:i + 1])} is a value, not a section")
        node = child
    if value is None:
        node.pop(parts[-1], None)
    else:
        node[parts[-1]] = copy.deepcopy(value)


def _merge(into: dict, overlay: dict) -> dict:
    out = copy.deepcopy(into)
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def check_citations(preset: Preset) -> None:
    """Every value the preset sets is cited, and a value that differs from the document's says why (``deviation``).
    A citation of a value the preset does not set cites what it inherits from the space's base or the platform's
    defaults: :func:`platform.preflight.citations.check_effective_citations` checks those against the resolved
    config, and requires one for every value that shapes the experiment."""
    values = preset.values()
    where = f"presets.{preset.name}.cite"
    for key in values:
        if key not in preset.cite:
            raise ConfigError(f"{where}.{key}", f"missing: the preset sets {key} = {values[key]!r}; cite the "
                                                f"document's value and where it gives it ({{paper: ..., where: ...}})")
    for key, citation in preset.cite.items():
        if key not in values:  # an inherited value: checked against the resolved config by
            continue  # platform.preflight.citations, which also refuses a key that is neither
        if citation.deviation is None and citation.where != PLATFORM and not same_value(values[key], citation.paper):
            raise ConfigError(f"{where}.{key}", f"the preset sets {values[key]!r} but the document's value is "
                                                f"{citation.paper!r} ({citation.where}); make them agree or give the "
                                                f"deviation and its reason")


def same_value(ours: Any, paper: Any) -> bool:
    """Whether a preset's value is the document's: numbers to 1e-9 relative, a parameter's distribution by its
    bounds or values (``{loguniform: [0.01, 10]}`` is ``[0.01, 10]``), lists element by element."""
    if isinstance(ours, dict) and not isinstance(paper, dict):
        args = [v for k, v in ours.items() if k != "when"]
        return len(args) == 1 and same_value(args[0], paper)
    if isinstance(ours, (list, tuple)) and isinstance(paper, (list, tuple)):
        return len(ours) == len(paper) and all(same_value(a, b) for a, b in zip(ours, paper))
    if isinstance(ours, dict) and isinstance(paper, dict):
        return ours.keys() == paper.keys() and all(same_value(ours[k], paper[k]) for k in ours)
    if isinstance(ours, bool) or isinstance(paper, bool):
        return isinstance(ours, bool) and isinstance(paper, bool) and ours == paper
    numbers = (int, float)
    if isinstance(ours, numbers) and isinstance(paper, numbers) and not isinstance(ours, bool) \
            and not isinstance(paper, bool):
        if math.isinf(ours) or math.isinf(paper):
            return ours == paper
        return math.isclose(float(ours), float(paper), rel_tol=1e-9, abs_tol=1e-12)
    return ours == paper
