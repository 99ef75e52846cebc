"""The README stays short and every relative link in README.md and docs/ leads somewhere."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README_LIMIT = 26 * 1024
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text())
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6} +(.+)$", text, re.M)}


def relative_links(path: Path) -> list[str]:
    text = FENCE.sub("", path.read_text())
    found = [a or b for a, b in LINK.findall(text)]
    return [link for link in found if not re.match(r"[a-z]+:", link)]


def broken_links(path: Path) -> list[str]:
    """Each relative link of `path` whose file, or heading anchor in a Markdown file, is missing."""
    broken = []
    for link in relative_links(path):
        target, _, anchor = link.partition("#")
        file = (path.parent / target).resolve() if target else path
        if not file.exists() or (anchor and file.suffix == ".md" and anchor not in anchors(file)):
            broken.append(link)
    return broken


def test_readme_stays_under_its_size_limit() -> None:
    size = len((ROOT / "README.md").read_bytes())
    assert size < README_LIMIT, f"README.md is {size} bytes; move detail into docs/"


@pytest.mark.parametrize("path", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(path: Path) -> None:
    assert broken_links(path) == []


def test_the_link_check_finds_a_missing_file_and_a_missing_anchor(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# A heading\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md#a-heading) [gone](missing.md) [no anchor](other.md#nowhere) "
        "[web](https://example.com/x.md)\n```\n[in code](ignored.md)\n```\n"
    )
    assert broken_links(page) == ["missing.md", "other.md#nowhere"]


def test_the_readme_test_command_is_the_one_ci_runs() -> None:
    readme = (ROOT / "README.md").read_text()
    command = (
        "python -m venv .venv && . .venv/bin/activate"
        ' && pip install -e ".[test]" -c .ci/constraints.txt && python -m pytest -n auto'
    )
    assert f"```sh\n{command}\n```" in readme
    assert f"\n{command}\n" in (ROOT / ".ci" / "run").read_text()
