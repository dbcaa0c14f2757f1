"""The README and the documentation site: size, links, the Quickstart, and a strict build."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"

#: The two commands a newcomer runs on a fresh machine: the demo, and the test suite.
QUICKSTART = [
    "pip install torch==2.13.0 && pip install -e '.[fast]' && packer demo",
    "pip install torch==2.13.0 && pip install -e '.[test,dask,docs,remote]' && python -m pytest -q",
]

_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _section(text: str, title: str) -> str:
    """The body of the level-2 section ``## title``, up to the next level-2 heading."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.MULTILINE | re.DOTALL)
    assert match, f"README.md has no '## {title}' section"
    return match.group(1)


def test_readme_is_at_most_8_kib() -> None:
    size = README.stat().st_size
    assert size <= 8192, f"README.md is {size} bytes; keep it to 8192 and move detail into docs/"


def test_readme_relative_links_point_to_files() -> None:
    targets = _LINK.findall(README.read_text(encoding="utf-8"))
    relative = [t for t in targets if not re.match(r"^[a-z][a-z0-9+.-]*:", t) and not t.startswith("#")]
    assert relative, "README.md links to no documentation page"
    missing = [t for t in relative if not (ROOT / t.split("#", 1)[0]).exists()]
    assert not missing, f"README.md links to files that do not exist: {missing}"


def test_readme_quickstart_is_the_two_commands() -> None:
    quickstart = _section(README.read_text(encoding="utf-8"), "Quickstart")
    blocks = [block.strip() for block in _FENCE.findall(quickstart)]
    assert blocks == QUICKSTART


def test_every_page_installs_the_tests_as_the_quickstart_does() -> None:
    """One way to install for the tests: a page naming the `test` extra names the Quickstart's set."""
    wanted = re.search(r"'(\.\[[^\]]*\])'", QUICKSTART[1])[1]  # type: ignore[index]
    pages = [README, *sorted((ROOT / "docs").rglob("*.md"))]
    others = [(page.name, found) for page in pages
              for found in re.findall(r"-e '(\.\[[^\]]*\btest\b[^\]]*\])'", page.read_text(encoding="utf-8"))
              if found != wanted]
    assert not others, f"pages that install the tests otherwise than the Quickstart ({wanted}): {others}"


@pytest.mark.slow
def test_docs_build_strict(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    pytest.importorskip("mkdocstrings")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    assert "WARNING" not in output, output
    assert (tmp_path / "site" / "reference" / "api" / "index.html").is_file()
