"""The README is the map: it names every CLI verb and links every document."""
from __future__ import annotations

import re
from pathlib import Path

import typer

from cutover.cli.main import app

ROOT = Path(__file__).resolve().parents[2]


def _verbs() -> set[str]:
    click_app = typer.main.get_command(app)
    return set(click_app.commands)


def test_readme_lists_every_verb():
    readme = (ROOT / "README.md").read_text()
    missing = sorted(v for v in _verbs() if not re.search(rf"^\s+cutover {re.escape(v)}\b", readme, re.M))
    assert not missing, f"README.md's verb list lacks {missing}"


def test_readme_links_every_doc_and_the_benchmark():
    readme = (ROOT / "README.md").read_text()
    docs = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))
    missing = [d for d in docs + ["benchmarks/h200/"] if f"]({d}" not in readme]
    assert not missing, f"README.md links none of {missing}"
    for target in re.findall(r"\]\(([^)#]+)\)", readme):
        assert (ROOT / target).exists(), f"README.md links {target}, which does not exist"
