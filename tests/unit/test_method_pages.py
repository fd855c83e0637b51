"""The method pages (``docs/methods/*.md``) are the project's own digest of each document, and the code, the search
spaces and the docs cite them by section: every ``docs/methods/<page>.md §N`` named anywhere in the project is a
numbered heading of that page, so no citation points at a section that is not there."""
from __future__ import annotations

import os
import re
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
METHODS = os.path.join(REPO, "docs", "methods")
PAGES = ("feded.md", "mnfl.md", "single_image.md", "fedaux.md", "fedkp_fedpa.md")

#: a page's path, then its sections: §4.1, §3.2 P1, §5, §2.4–§2.7 (a range names both ends)
REFERENCE = re.compile(r"docs/methods/\s*([a-z_]+\.md)((?:\s*(?:,|;|–|-|and)?\s*§\d+(?:\.\d+)*)+)")
SECTION = re.compile(r"§(\d+(?:\.\d+)*)")


def _tracked_texts():
    files = subprocess.run(["git", "ls-files", "*.py", "*.md", "*.yaml", "*.yml"], cwd=REPO, capture_output=True,
                           text=True, check=True).stdout.split()
    for name in files:
        path = os.path.join(REPO, name)
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as fh:
                yield name, fh.read()


def headings(page: str) -> set[str]:
    """The section numbers of a page's headings: ``## 4 Setup`` and ``### 4.2 Partition`` give 4 and 4.2."""
    with open(os.path.join(METHODS, page), encoding="utf-8") as fh:
        return set(re.findall(r"^#+\s+(\d+(?:\.\d+)*)[.\s]", fh.read(), re.M))


@pytest.mark.parametrize("page", PAGES)
def test_every_method_page_is_in_the_repository(page):
    assert len(headings(page)) >= 5, f"docs/methods/{page} has no numbered sections"


def test_every_cited_section_is_a_heading_of_its_page():
    known = {page: headings(page) for page in PAGES}
    missing = []
    for name, text in _tracked_texts():
        flat = re.sub(r"docs/methods/\s*\n\s*", "docs/methods/", text)  # a path broken across a docstring's lines
        for page, sections in REFERENCE.findall(flat):
            for section in SECTION.findall(sections):
                if page not in known or section not in known[page]:
                    missing.append(f"{name}: docs/methods/{page} §{section}")
    assert not missing, "cited sections that are not headings of their page:\n" + "\n".join(sorted(set(missing)))


def test_no_file_cites_a_digest_outside_the_repository():
    outside = [name for name, text in _tracked_texts() if re.search(r"(?<![\w/])(?:\.\./)?(?:shared/)?spec/[a-z_]+\.md",
                                                                    text)]
    assert not outside, f"cite docs/methods/ instead of a spec folder outside the repository: {outside}"
