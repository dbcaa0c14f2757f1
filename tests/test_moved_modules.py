"""packer 0.1's module paths keep importing, warn once, and give the very objects of 0.2."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import packer
from packer import _moved

MOVING_PAGE = Path(__file__).resolve().parent.parent / "docs" / "moving-from-0.1.md"


def _fresh_import(old: str) -> tuple[object, list[warnings.WarningMessage]]:
    for name in [m for m in sys.modules if m == old or m.startswith(old + ".")]:
        del sys.modules[name]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    return module, [w for w in caught if issubclass(w.category, DeprecationWarning)]


@pytest.mark.parametrize("old", sorted(_moved.MOVED_MODULES))
def test_a_0_1_path_imports_warns_and_gives_the_same_objects(old: str) -> None:
    if old == "packer.dask_engine":
        pytest.importorskip("dask.distributed")
    module, caught = _fresh_import(old)
    ours = [w for w in caught if f"'{old}'" in str(w.message)]
    assert len(ours) == 1, [str(w.message) for w in caught]
    message = str(ours[0].message)
    assert "removed in 0.4" in message and "Moving from 0.1" in message
    public, _internal = _moved.public_replacements(old)
    if public:
        assert f"import {', '.join(public)} from 'packer'" in message
    for name, home in _moved.moved_names(old).items():
        assert getattr(module, name) is getattr(importlib.import_module(home), name), name
    for name in public:
        assert getattr(packer, name) is getattr(module, _renamed_back(name))
    assert sorted(module.__all__) == sorted(_moved.moved_names(old))
    with pytest.raises(AttributeError, match="has no attribute 'not_there'"):
        module.not_there  # noqa: B018
    # Once: importing it again does not warn again.
    with warnings.catch_warnings(record=True) as again:
        warnings.simplefilter("always")
        importlib.import_module(old)
    assert not [w for w in again if f"'{old}'" in str(w.message)]


def _renamed_back(name: str) -> str:
    return {new: old for old, new in _moved.RENAMED.items()}.get(name, name)


def test_0_1_readme_imports_run_with_a_warning_naming_the_new_import(tmp_path: Path) -> None:
    script = tmp_path / "train01.py"
    script.write_text("from packer.transforms import CenterCropResize, Normalize, RandomResizedCropFlip\n"
                      "from packer.report import dataset_info\n"
                      "import packer\n"
                      "assert Normalize is packer.Normalize and dataset_info is packer.dataset_info\n"
                      "print('ran')\n")
    proc = subprocess.run([sys.executable, "-W", "default::DeprecationWarning", str(script)],
                          capture_output=True, text=True, check=False, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ran"
    # Each warning names the user's file and line, and what to import instead.
    assert f"{script}:1: DeprecationWarning: 'packer.transforms' is packer 0.1's module path" in proc.stderr
    assert "import CenterCropResize, RandomResizedCropFlip, Normalize from 'packer' instead" in proc.stderr
    assert f"{script}:2: DeprecationWarning: 'packer.report'" in proc.stderr
    strict = subprocess.run([sys.executable, "-W", "error::DeprecationWarning", str(script)],
                            capture_output=True, text=True, check=False, timeout=120)
    assert strict.returncode == 1 and "DeprecationWarning: 'packer.transforms'" in strict.stderr


def test_real_modules_win_over_aliases() -> None:
    import packer.conversion
    import packer.errors

    assert "packer.conversion" not in _moved.MOVED_MODULES and "packer.errors" not in _moved.MOVED_MODULES
    assert packer.conversion.__file__ and packer.errors.__file__


def test_the_moving_page_lists_every_old_path_with_its_names() -> None:
    page = MOVING_PAGE.read_text(encoding="utf-8")
    page = page[page.index("## Imports"):page.index("## Names 0.2.0 exported")]
    rows = dict(re.findall(r"^\| `(packer[\w.]*)` \| (.*) \|$", page, re.MULTILINE))
    assert sorted(rows) == sorted(_moved.MOVED_MODULES)
    for old, cells in rows.items():
        public, internal = _moved.public_replacements(old)
        listed_public, listed_internal = (re.findall(r"`(\w+)`", cell) for cell in cells.split(" | "))
        assert listed_public == public and listed_internal == internal, old
