"""Layering (DESIGN.md "Layers"): imports point down only, no cycles, torch and click where they belong.

Every module under ``packer/`` is parsed (not imported), and every import in it counts: at the top,
inside functions, under ``TYPE_CHECKING``, ``import packer.x`` as well as ``from packer import x``.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import packer

PACKAGE = Path(packer.__file__).parent

#: Layer of each top-level package or module; a module may import its own layer or lower ones.
LAYERS = {
    "errors": 0, "keys": 0, "sizes": 0, "cpus": 0, "lazy": 0, "registry": 0, "_moved": 0, "progressbar": 0,
    "per_process": 0, "digests": 0, "digest_blake3": 0,
    "store": 1,
    "source": 2,
    "format": 3,
    "conversion": 4, "read": 4,
    "tools": 5,
    "cli": 6, "testing": 6,
    "__main__": 7,
}
#: Packages of one layer that must not import each other.
APART = [("conversion", "read"), ("cli", "testing")]
#: The only modules that may import torch (the read side, and the tools that measure or show it).
TORCH_HOMES = ("packer.read", "packer.tools.bench", "packer.tools.profiling", "packer.tools.demo.run")
#: The only modules that may import click.
CLICK_HOMES = ("packer.cli",)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}
PACKAGES = {name for name, path in MODULES.items() if path.name == "__init__.py"}


def _resolve(importer: str, node: ast.ImportFrom) -> str:
    """The absolute module an ``ImportFrom`` names (relative imports resolved)."""
    if node.level == 0:
        return node.module or ""
    base = importer.split(".")
    if importer not in PACKAGES:
        base = base[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports_of(module: str) -> set[str]:
    """Every module ``module`` imports: ``from a import b`` counts as ``a.b`` when that is a module."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            source = _resolve(module, node)
            for alias in node.names:
                child = f"{source}.{alias.name}"
                found.add(child if child in MODULES else source)
    return found


def _layer(module: str) -> int:
    top = module.split(".")[1] if "." in module else ""
    return LAYERS[top]


def _inside(module: str, homes: tuple[str, ...]) -> bool:
    return any(module == home or module.startswith(home + ".") for home in homes)


LAYERED = sorted(name for name in MODULES if name != "packer")


def test_every_module_has_a_layer() -> None:
    missing = sorted({name.split(".")[1] for name in LAYERED} - set(LAYERS))
    assert not missing, f"no layer for {missing}: add them to LAYERS (and DESIGN.md)"


@pytest.mark.parametrize("module", LAYERED)
def test_imports_point_down(module: str) -> None:
    own = _layer(module)
    for name in sorted(imports_of(module)):
        if name == "packer":
            pytest.fail(f"{module} imports from the top-level package (`from packer import ...`): "
                        "import the module that defines the name")
        if not name.startswith("packer."):
            continue
        assert name in MODULES, f"{module} imports {name}, which does not exist"
        assert _layer(name) <= own, f"{module} (layer {own}) imports {name} (layer {_layer(name)})"
        for left, right in APART:
            for a, b in ((left, right), (right, left)):
                assert not (_inside(module, (f"packer.{a}",)) and _inside(name, (f"packer.{b}",))), \
                    f"{module} imports {name}: packer.{a} and packer.{b} never import each other"


@pytest.mark.parametrize("module", LAYERED)
def test_torch_and_click_only_where_they_belong(module: str) -> None:
    top = {name.split(".")[0] for name in imports_of(module)}
    if not _inside(module, TORCH_HOMES):
        assert not top & {"torch", "torchvision"}, f"{module} imports torch; only {TORCH_HOMES} may"
    if not _inside(module, CLICK_HOMES):
        assert "click" not in top, f"{module} imports click; only {CLICK_HOMES} may"


def _cycles() -> list[list[str]]:
    """Every group of modules that import each other, directly or round a loop (Tarjan's SCCs)."""
    graph = {name: sorted(n for n in imports_of(name) if n in MODULES and n != "packer")
             for name in LAYERED}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1 or node in graph[node]:
                groups.append(sorted(group))

    for name in LAYERED:
        if name not in index:
            visit(name)
    return groups


def test_no_import_cycles() -> None:
    assert _cycles() == [], "modules that import each other: " + "; ".join(
        " <-> ".join(group) for group in _cycles())


def test_the_checker_sees_every_import_form() -> None:
    """The checks above would catch the forms that slipped through in 0.1."""
    assert "packer.conversion.engines.dask_cluster" in imports_of("packer.conversion.engines.select")
    assert "packer.format.codecs.reencode" in imports_of("packer.format.codecs.jpeg")
    assert "packer.conversion.engines.base" in imports_of("packer.conversion.engines.executor")
    assert _layer("packer.cli.formatting") > _layer("packer.tools.verify") > _layer("packer.conversion.run")


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_packages_export_what_they_say_and_shadow_no_module(package: str) -> None:
    """Each package's ``__all__`` resolves, and no exported name hides a submodule of that name
    (``from packer.tools import bench`` must be one thing)."""
    module = importlib.import_module(package) if package != "packer" else packer
    if _inside(package, ("packer.cli",)):
        return
    exported = getattr(module, "__all__", [])
    submodules = {name.rsplit(".", 1)[1] for name in MODULES
                  if "." in name and name.rsplit(".", 1)[0] == package}
    assert not set(exported) & submodules, f"{package} exports names of its submodules"
    for name in exported:
        getattr(module, name)


_WITHOUT_TORCH = textwrap.dedent("""
    import sys
    sys.modules["torch"] = None       # "import torch" now raises ImportError
    sys.modules["click"] = None
    sys.modules["torchvision"] = None
    import packer, packer.conversion, packer.source, packer.format, packer.tools
    from packer.format import ShardSet, get_codec
    from PIL import Image
    import io, os
    src, dst = sys.argv[1], sys.argv[2]
    for i, cls in enumerate(["a", "b"]):
        os.makedirs(os.path.join(src, cls))
        buffer = io.BytesIO()
        Image.new("RGB", (8, 8), (i * 100, 20, 30)).save(buffer, "PNG")
        with open(os.path.join(src, cls, "x.png"), "wb") as handle:
            handle.write(buffer.getvalue())
    from packer.format.backends import backend_names
    for backend in backend_names():  # every registered backend works without torch
        out = os.path.join(dst, backend)
        result = packer.convert(src, out, to=backend)
        assert result.manifest.num_samples == 2, result.manifest
        assert packer.verify_dataset(out, deep=True).ok
        shards = ShardSet(out)   # the torch-free read side
        codec = get_codec(shards.manifest.codec, shards.manifest.codec_params)
        assert codec.decode(shards.read(1)).getpixel((0, 0)) == (100, 20, 30)
    try:
        packer.open_dataset
    except ImportError:
        pass
    else:
        raise SystemExit("open_dataset imported although torch is blocked")
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "click")
                    and sys.modules[m] is not None)
    assert not loaded, loaded
    print("OK")
""")


@pytest.mark.timeout(120)
def test_core_works_with_torch_and_click_blocked(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-c", _WITHOUT_TORCH, str(tmp_path / "src"),
                           str(tmp_path / "dst")], capture_output=True, text=True, timeout=100,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "OK"


def test_import_packer_never_imports_the_contract_suites() -> None:
    """``packer.testing`` needs pytest: only a test suite imports it, never the library or CLI."""
    code = ("import sys, packer, packer.cli, packer.conversion.run, packer.tools.verify; "
            "print(sorted(m for m in sys.modules if m == 'pytest' or m.startswith('packer.testing')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=100,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_the_command_line_starts_without_torch() -> None:
    """``packer --help`` and ``packer info`` must not pay for importing torch."""
    code = ("import sys; from packer.cli import main; import packer.cli.formatting, packer.tools.verify; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=100,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"
