"""Golden check: the same tree and options give the same files and the same CLI text, release
after release (refactors must not change a byte).

One fixed generated tree is converted with every backend and every codec, through the
command line; every output file's sha256, each manifest (its ``created_at`` and the temporary
paths aside) and the text of every command (``--help`` included) are compared with
``tests/golden/outputs.json``. Timings in the text are masked. To accept an intended change,
rerun with ``PACKER_UPDATE_GOLDEN=1`` and review the diff of the JSON file.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from imagetools import standard_spec, write_tree

from packer.cli import cli

GOLDEN = Path(__file__).parent / "golden" / "outputs.json"
CODECS = {"original": [], "jpeg": ["--codec", "jpeg", "--resize", "6", "--quality", "80"],
          "pixels": ["--codec", "pixels", "--resize", "6"]}
BACKENDS = ["hdf5", "lmdb"]
COMMANDS = ["convert", "update", "merge", "gc", "info", "verify", "bench", "demo", "preview", "export",
            "show"]
#: Every source file's mtime: the sample index records sources' mtimes (for `packer update`).
_MTIME_NS = 1_700_000_000_123_456_789
_TIMINGS = re.compile(r"\d[\d,]*(\.\d+)?(?= ?(s|ms|images/s|img/s|MB/s)\b)")
_DATE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d")


def _files(root: Path, tmp: Path) -> dict[str, Any]:
    """Every file under ``root``: the manifest parsed (minus its date; the temporary directory
    and the plan fingerprint, which hashes the source's absolute path, masked), the rest by
    sha256."""
    out: dict[str, Any] = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        if rel == "index.json" or rel.startswith("versions/"):
            manifest = json.loads(path.read_text(encoding="utf-8").replace(str(tmp), "<TMP>"))
            manifest.pop("created_at", None)
            if "plan_fingerprint" in manifest.get("extra", {}):
                assert re.fullmatch(r"[0-9a-f]{64}", manifest["extra"]["plan_fingerprint"])
                manifest["extra"]["plan_fingerprint"] = "<SHA256>"
            out[rel] = manifest
        else:
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


class _Session:
    """Runs CLI commands and records their exit code and text, paths made relative."""

    def __init__(self, tmp: Path) -> None:
        self.tmp, self.runner, self.record = tmp, CliRunner(), {}

    def clean(self, text: str) -> str:
        text = text.replace(str(self.tmp), "<TMP>")
        text = _DATE.sub("<DATE>", text)
        return _TIMINGS.sub("<N>", text)

    def run(self, key: str, *args: str) -> str:
        result = self.runner.invoke(cli, [str(a) for a in args])
        self.record[key] = {"exit": result.exit_code, "stdout": self.clean(result.stdout),
                            "stderr": self.clean(result.stderr)}
        return result.stdout


def _snapshot(tmp: Path) -> dict[str, Any]:
    spec = dict(standard_spec())
    spec["dog/broken.jpg"] = b"not an image at all"
    src = write_tree(tmp / "src", spec)
    for path in src.rglob("*"):
        os.utime(path, ns=(_MTIME_NS, _MTIME_NS), follow_symlinks=False)
    session = _Session(tmp)
    session.run("help", "--help")
    for command in COMMANDS:
        session.run(f"help {command}", command, "--help")
    files: dict[str, Any] = {}
    for backend in BACKENDS:
        for codec, options in CODECS.items():
            name = f"{backend}-{codec}"
            dst = tmp / name
            common = [src, dst, "--to", backend, "--shard-size", "4KB", *options]
            session.run(f"dry-run {name}", "convert", *common, "--dry-run")
            session.run(f"dry-run json {name}", "convert", *common, "--dry-run", "--json")
            session.run(f"convert {name}", "convert", *common)
            session.run(f"again {name}", "convert", *common)  # refused: DST exists
            session.run(f"info {name}", "info", dst)
            session.run(f"info json {name}", "info", dst, "--json")
            session.run(f"verify {name}", "verify", dst, "--deep")
            session.run(f"verify json {name}", "verify", dst, "--json")
            session.run(f"show {name}", "show", dst, "3")
            session.run(f"show json {name}", "show", dst, "5", "--json")
            session.run(f"export {name}", "export", dst, tmp / f"export-{name}", "-q")
            session.run(f"preview {name}", "preview", dst, "-o", tmp / f"{name}.png", "--thumb", "16")
            files[name] = _files(dst, tmp)
            files[f"export-{name}"] = _files(tmp / f"export-{name}", tmp)
            files[f"preview-{name}"] = hashlib.sha256((tmp / f"{name}.png").read_bytes()).hexdigest()
    session.run("update unchanged", "update", src, tmp / "lmdb-original", "--dry-run")
    session.run("gc nothing to do", "gc", tmp / "lmdb-original")
    session.run("verify against", "verify", tmp / "lmdb-original", "--against", src)
    session.run("show out of range", "show", tmp / "lmdb-original", "99")
    session.run("info missing", "info", tmp / "nowhere")
    session.run("preview html", "preview", tmp / "hdf5-original", "-o", tmp / "sheet.html", "--html")
    html = _DATE.sub("<DATE>", (tmp / "sheet.html").read_text(encoding="utf-8").replace(str(tmp), "<TMP>"))
    files["preview-html"] = hashlib.sha256(html.encode("utf-8")).hexdigest()
    for task in (0, 1):
        session.run(f"array task {task}", "convert", src, tmp / "array", "--to", "lmdb", "--shard-size",
                    "4KB", "--num-tasks", "2", "--task-id", str(task), "-q")
    session.run("merge", "merge", tmp / "array")
    files["array"] = _files(tmp / "array", tmp)
    return {"commands": session.record, "files": files}


@pytest.fixture
def fixed_length_tmp() -> Iterator[Path]:
    """A scratch directory whose path always has the same length: ``--dry-run``'s size estimate
    counts the source path's bytes (the manifest records it), so pytest's numbered
    ``tmp_path`` (``pytest-9`` or ``pytest-10``) would move it by a byte from run to run."""
    path = Path(tempfile.mkdtemp(prefix="packer-golden-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_outputs_match_the_golden_record(fixed_length_tmp: Path) -> None:
    got = json.loads(json.dumps(_snapshot(fixed_length_tmp)))
    if os.environ.get("PACKER_UPDATE_GOLDEN"):
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(got, indent=1, sort_keys=True, ensure_ascii=False) + "\n",
                          encoding="utf-8")
        pytest.skip("golden record rewritten; review its diff")
    expected = json.loads(GOLDEN.read_text(encoding="utf-8"))
    # The array job's result equals the single run's (its plan records the task count).
    assert got["files"]["array"] == got["files"]["lmdb-original"]
    for section in ("files", "commands"):
        for key in sorted(set(expected[section]) | set(got[section])):
            assert got[section].get(key) == expected[section].get(key), f"{section}: {key} differs"
