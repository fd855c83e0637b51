"""The generated pages of the documentation site (docs/reference/cli.md, config.md, paper_settings.md) equal what
docs/generate.py renders from the code now: a flag, a config key, a bound, a default or a preset changed without
`python docs/generate.py` fails here, so the docs cannot drift from the code."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCS = os.path.join(REPO, "docs")


def _generator():
    spec = importlib.util.spec_from_file_location("docs_generate", os.path.join(DOCS, "generate.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GENERATOR = _generator()


def _check() -> subprocess.CompletedProcess:
    """``python docs/generate.py --check``, once, from a fresh interpreter: a test in this process may have registered
    an algorithm of its own (a plug-in), which the committed page rightly does not list."""
    global CHECK
    if CHECK is None:
        CHECK = subprocess.run([sys.executable, os.path.join(DOCS, "generate.py"), "--check"], capture_output=True,
                               text=True, cwd=REPO)
    return CHECK


CHECK = None


@pytest.mark.parametrize("page", sorted(GENERATOR.PAGES))
def test_the_generated_page_is_what_the_code_renders(page):
    assert os.path.isfile(os.path.join(DOCS, page)), f"docs/{page} is missing: run python docs/generate.py"
    assert f"docs/{page}" not in _check().stdout, f"docs/{page} is stale: run python docs/generate.py"


def test_every_flag_of_every_command_is_on_the_cli_page():
    text = GENERATOR.render_cli()
    for _, parser in GENERATOR._parsers():
        assert f"## `{parser.prog}`" in text
        for action in parser._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help"):
                    assert f"`{flag}`" in text, f"{parser.prog} {flag}"


def test_every_config_key_is_on_the_config_page():
    import dataclasses
    import typing

    import algorithms
    from platform.config.experiment import ExperimentConfig
    from platform.config.search_space import SearchConfig

    text = GENERATOR.render_config()

    def keys(cls, prefix):
        hints = typing.get_type_hints(cls)
        for field in dataclasses.fields(cls):
            if not field.init or (cls is ExperimentConfig and field.name == "algorithm"):
                continue
            if dataclasses.is_dataclass(hints[field.name]):
                yield from keys(hints[field.name], f"{prefix}{field.name}.")
            else:
                yield f"{prefix}{field.name}"

    for key in [*keys(ExperimentConfig, ""), *keys(SearchConfig, "search.")]:
        assert f"| `{key}` |" in text, key
    for name, cls in algorithms.ALGORITHMS.items():
        if not cls.__module__.startswith("algorithms."):
            continue  # a plug-in another test of this process registered
        assert f"### `{name}`" in text, name
        for field in dataclasses.fields(cls.Hyperparams):
            assert f"`algorithm.{field.name}`" in text, f"{name}: algorithm.{field.name}"


def test_check_mode_says_up_to_date():
    result = _check()
    assert result.returncode == 0 and "up to date" in result.stdout, result.stdout + result.stderr
