"""The documentation site builds with `mkdocs build --strict` (mkdocs.yml at the repository root): a broken link, a
missing nav page or a bad anchor fails it. The build goes to a temporary directory, never into the checkout."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_site_builds_strict(tmp_path):
    pytest.importorskip("mkdocs", reason="mkdocs is not installed: pip install -e '.[docs]'")
    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert (site / "index.html").is_file()
    for page in ("tutorial", "reference/cli", "reference/config", "reference/paper_settings", "methods"):
        assert (site / page / "index.html").is_file(), page
