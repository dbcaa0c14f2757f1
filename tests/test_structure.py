"""The house rules that keep packer navigable (issue 26): small folders, modules and functions, and
a module map in docs/contributing.md that names every module where it lives."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "packer"
CONTRIBUTING = ROOT / "docs" / "contributing.md"

MAX_MODULES_PER_FOLDER = 15
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 80

MODULES = sorted(PACKAGE.rglob("*.py"))


def _relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_no_folder_holds_more_than_15_modules() -> None:
    crowded = {_relative(folder): n for folder in [PACKAGE, *PACKAGE.rglob("*/")]
               if folder.is_dir() and "__pycache__" not in folder.parts
               and (n := len([p for p in folder.glob("*.py") if p.name != "__init__.py"]))
               > MAX_MODULES_PER_FOLDER}
    assert not crowded, f"folders over {MAX_MODULES_PER_FOLDER} modules (group them in packages): {crowded}"


def test_no_module_is_over_400_lines() -> None:
    long = {_relative(p): n for p in MODULES
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines (split them by job): {long}"


def test_no_function_is_over_80_lines() -> None:
    long = []
    for path in MODULES:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{_relative(path)}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"


def _module_map() -> dict[str, str]:
    """The ``text`` block under "Every module, by layer", cut into {top-level folder: its lines}
    ("" for the modules directly in packer/)."""
    text = CONTRIBUTING.read_text(encoding="utf-8")
    match = re.search(r"### Every module, by layer\n.*?```text\n(.*?)```", text, re.DOTALL)
    assert match, "docs/contributing.md has no module map (### Every module, by layer)"
    sections: dict[str, list[str]] = {"": []}
    current = ""
    for line in match.group(1).splitlines():
        folder = re.match(r"^  ([a-z_]+)/", line)
        if folder:
            current = folder.group(1)
            sections.setdefault(current, [])
        sections[current].append(line)
    return {name: "\n".join(lines) for name, lines in sections.items()}


@pytest.mark.parametrize("module", [_relative(p) for p in MODULES if p.name != "__init__.py"])
def test_the_module_map_names_every_module(module: str) -> None:
    parts = Path(module).parts[1:]  # without "packer"
    section = "" if len(parts) == 1 else parts[0]
    sections = _module_map()
    assert section in sections, f"docs/contributing.md's module map has no {section}/ section"
    where = sections[section]
    for folder in parts[1:-1]:  # a package inside the section: named as folder/
        assert re.search(rf"(?<![\w/]){re.escape(folder)}/", where), \
            f"{module}: its folder {folder}/ is not in the module map's {section or 'packer'}/ section"
    name = re.escape(parts[-1])
    assert re.search(rf"(?<![\w.]){name}", where), \
        f"{module} is not named in docs/contributing.md's module map ({section or 'packer'}/ section)"


def test_the_module_map_names_no_module_that_is_gone() -> None:
    sections = _module_map()
    existing = {p.name for p in MODULES}
    named = {name for text in sections.values() for name in re.findall(r"(?<![\w.])(\w+\.py)\b", text)}
    gone = sorted(named - existing)
    assert not gone, f"docs/contributing.md's module map names modules that do not exist: {gone}"


def test_contributing_says_where_each_kind_of_plugin_goes() -> None:
    text = CONTRIBUTING.read_text(encoding="utf-8")
    match = re.search(r"^### Where a new .*?\n(.*?)(?=^#)", text, re.DOTALL | re.MULTILINE)
    assert match, "docs/contributing.md has no '### Where a new ...' section"
    for kind in ("source", "store", "backend", "codec", "engine"):
        assert re.search(rf"\b{kind}\b", match.group(1)), f"where a new {kind} goes is not said"
