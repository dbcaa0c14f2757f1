"""Layering: the core converts and reads without torch or click; imports point down only."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import packer

PACKAGE = Path(packer.__file__).parent

#: Core modules (DESIGN.md "Layers"): torch-free and click-free.
CORE = ["demo_tree", "errors", "durable", "sizes", "sourcefile", "imagefolder", "codecs", "planning",
        "manifest", "sample_index", "destination", "shardset", "shardwork", "resume", "workers",
        "conversion", "scheduling", "dryrun", "verify", "verify_report", "imagecheck",
        "reencode", "engines", "merging", "jobplan", "arrayjob", "dask_engine", "selection", "sheet_draw",
        "preview", "sheet_html", "export", "show", "cpus", "backends/__init__",
        "backends/base", "backends/lmdb", "backends/hdf5"]
#: What may import what, by layer: a module may import its own layer or lower ones.
LAYER = {
    "errors": 0, "durable": 1, "sizes": 1, "sourcefile": 1, "imagecheck": 1, "reencode": 1,
    "imagefolder": 2, "codecs": 2, "planning": 2, "manifest": 2, "sample_index": 2,
    "backends": 2, "backends.base": 2, "backends.lmdb": 2, "backends.hdf5": 2,
    "destination": 3, "shardset": 3, "shardwork": 3, "resume": 3, "workers": 3,
    "conversion": 4, "scheduling": 4, "engines": 4, "merging": 4, "jobplan": 3, "arrayjob": 1,
    "dask_engine": 5, "samplers": 5, "selection": 1, "sheet_draw": 3, "preview": 4, "sheet_html": 4,
    "export": 4, "show": 4, "loader": 5, "cpus": 1, "dryrun": 6, "verify": 4, "verify_report": 1,
    "datasets": 4, "folder": 4, "transforms": 2, "bench": 5,
    "cli": 7, "cli_samples": 7, "crop_resize": 2, "report": 5, "demo": 5, "__main__": 8,
    "speedups": 1, "crop_params": 1, "normalize": 1, "demo_tree": 1, "decoding": 2, "resampling": 2,
    "batching": 2, "profiling": 5,
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize("module", CORE)
def test_core_modules_do_not_import_torch_or_click(module: str) -> None:
    imported = _imports(PACKAGE / f"{module}.py")
    top = {name.split(".")[0] for name in imported}
    assert not top & {"torch", "click", "torchvision"}, imported


@pytest.mark.parametrize("module", CORE + ["datasets", "folder", "bench", "samplers", "loader", "speedups",
                                            "crop_params", "normalize", "decoding", "resampling",
                                            "crop_resize", "transforms", "batching", "profiling", "demo",
                                            "demo_tree"])
def test_imports_point_down(module: str) -> None:
    own = LAYER[module.replace("/__init__", "").replace("/", ".")]
    for name in _imports(PACKAGE / f"{module}.py"):
        if name == "packer" or not name.startswith("packer."):
            continue
        target = name.removeprefix("packer.")
        assert target in LAYER, f"{module} imports {name}, which has no layer here"
        assert LAYER[target] <= own, f"{module} (layer {own}) imports {name} (layer {LAYER[target]})"


_WITHOUT_TORCH = textwrap.dedent("""
    import sys
    sys.modules["torch"] = None       # "import torch" now raises ImportError
    sys.modules["click"] = None
    sys.modules["torchvision"] = None
    import packer, packer.conversion, packer.imagefolder, packer.backends.lmdb
    import packer.backends.hdf5, packer.manifest, packer.shardset, packer.codecs
    from PIL import Image
    import io, os
    src, dst = sys.argv[1], sys.argv[2]
    for i, cls in enumerate(["a", "b"]):
        os.makedirs(os.path.join(src, cls))
        buffer = io.BytesIO()
        Image.new("RGB", (8, 8), (i * 100, 20, 30)).save(buffer, "PNG")
        with open(os.path.join(src, cls, "x.png"), "wb") as handle:
            handle.write(buffer.getvalue())
    for backend in ("lmdb", "hdf5"):
        out = os.path.join(dst, backend)
        result = packer.convert(src, out, to=backend)
        assert result.manifest.num_samples == 2, result.manifest
        shards = packer.shardset.ShardSet(out)   # the torch-free read side
        codec = packer.codecs.get_codec(shards.manifest.codec, shards.manifest.codec_params)
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
