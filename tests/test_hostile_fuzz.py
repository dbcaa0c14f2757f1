"""A small fuzzer over what an attacker controls: list-file rows, archive member names and the
manifest's JSON. Whatever Hypothesis makes, each command keeps packer's promise:

* nothing outside its output folder changes (the whole temporary root is snapshot before and after);
* it ends with exit 0 or 1, never a traceback (``result.exception`` is only ``SystemExit``);
* its memory stays bounded (the process's peak grows by less than a bound over the whole run).
"""

from __future__ import annotations

import csv
import io
import json
import resource
import shutil
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from imagetools import jpeg_bytes, tree_files, write_tree

import packer
from packer.cli import cli

#: Names an attacker would try: traversal, absolute paths, control characters, odd Unicode.
_PIECES = st.sampled_from(["..", ".", "", "/", "a", "b.jpg", "\x00", "\x1b[2J", "\x1b]0;x\x07", "\r\n",
                           "\u2028", "\ufeff", "é", "C:\\x", "\\..\\", "~", "-", " "])
nasty = st.lists(_PIECES, min_size=1, max_size=6).map("".join) | st.text(max_size=12)

_FUZZ = settings(max_examples=30, deadline=None, derandomize=True,
                 suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
#: How much the process's peak memory may grow over one fuzz run (MiB); a single unbounded
#: item (a member or cell read whole) would cost far more.
PEAK_GROWTH_MIB = 400


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def kept_the_promise(result: Any, root: Path, before: dict[str, Any], *, out: Path) -> None:
    """Exit 0 or 1, no traceback, and nothing under ``root`` changed except under ``out``."""
    assert result.exit_code in (0, 1), (result.exit_code, result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output, result.output
    prefix = f"{out.relative_to(root).as_posix()}/"
    after = {k: v for k, v in tree_files(root).items() if not k.startswith(prefix)}
    assert after == before, sorted(set(after) ^ set(before))


@pytest.fixture(scope="module")
def peak_guard() -> Any:
    start = _peak_mib()
    yield
    assert _peak_mib() - start < PEAK_GROWTH_MIB, f"peak memory grew {_peak_mib() - start:.0f} MiB"


def _fresh(tmp_path: Path, name: str) -> Path:
    root = tmp_path / name
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    return root


@_FUZZ
@given(rows=st.lists(st.tuples(nasty, nasty), min_size=1, max_size=4),
       fmt=st.sampled_from(["csv", "jsonl", "txt"]))
def test_list_rows(tmp_path: Path, peak_guard: Any, rows: list[tuple[str, str]], fmt: str) -> None:
    root = _fresh(tmp_path, "list")
    write_tree(root / "src", {"a/0.jpg": jpeg_bytes(8, 8, 1), "b.jpg": jpeg_bytes(8, 8, 2)})
    rows = [*rows, ("a/0.jpg", "cat")]
    listing = root / "src" / f"list.{fmt}"
    if fmt == "csv":
        buffer = io.StringIO()
        csv.writer(buffer).writerows([("path", "label"), *rows])
        listing.write_text(buffer.getvalue(), encoding="utf-8", errors="surrogatepass")
    elif fmt == "jsonl":
        listing.write_text("".join(json.dumps({"path": p, "label": lab}) + "\n" for p, lab in rows))
    else:
        listing.write_text("".join(f"{p} {lab}\n" for p, lab in rows), encoding="utf-8",
                           errors="surrogatepass")
    before = tree_files(root)
    out = root / "out"
    result = CliRunner().invoke(cli, ["convert", str(listing), str(out / "dst"), "--to", "lmdb",
                                      "--workers", "1", "--quiet"])
    kept_the_promise(result, root, before, out=out)


@_FUZZ
@given(names=st.lists(nasty, min_size=1, max_size=4), kind=st.sampled_from(["tar", "zip"]))
def test_archive_member_names(tmp_path: Path, peak_guard: Any, names: list[str], kind: str) -> None:
    root = _fresh(tmp_path, "archive")
    archive = root / f"in.{kind}"
    members = [*names, "cat/ok.jpg"]
    if kind == "tar":
        with tarfile.open(archive, "w") as tar:
            for number, name in enumerate(members):
                data = jpeg_bytes(8, 8, number)
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    else:
        with zipfile.ZipFile(archive, "w") as zipped:
            for number, name in enumerate(members):
                try:
                    zipped.writestr(name or "_", jpeg_bytes(8, 8, number))
                except (ValueError, UnicodeEncodeError, IndexError):
                    continue  # zipfile itself refuses to write that name
    before = tree_files(root)
    out = root / "out"
    result = CliRunner().invoke(cli, ["convert", str(archive), str(out / "dst"), "--to", "hdf5",
                                      "--workers", "1", "--quiet", "--allow-empty"])
    kept_the_promise(result, root, before, out=out)


@pytest.fixture(scope="module")
def good_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    spec = {f"{c}/{i}.jpg": jpeg_bytes(10, 8, n * 5 + i)
            for n, c in enumerate(("ant", "bee")) for i in range(2)}
    src = write_tree(tmp_path_factory.mktemp("src"), spec)
    dst = tmp_path_factory.mktemp("good") / "dst"
    packer.convert(src, dst, to="lmdb", workers=1)
    return dst


_FIELDS = st.sampled_from(["shards.path", "sample_index.path", "classes", "source", "skipped",
                           "shards.num_bytes",
                           "shards.first"])


@_FUZZ
@given(field=_FIELDS, value=nasty | st.integers(-2**63, 2**63) | st.none(),
       command=st.sampled_from([["info"], ["show", "0"], ["verify"], ["verify", "--deep"], ["export"]]))
def test_manifest_fields(tmp_path: Path, good_dataset: Path, peak_guard: Any, field: str, value: Any,
                         command: list[str]) -> None:
    root = _fresh(tmp_path, "manifest")
    dst = root / "dst"
    shutil.copytree(good_dataset, dst)
    for path in [dst / "index.json", *sorted((dst / "versions").glob("*.json"))]:
        data = json.loads(path.read_text())
        if field == "shards.path":
            data["shards"][0]["path"] = value
        elif field == "sample_index.path":
            next(iter(data["sample_index"].values()))["path"] = value
        elif field == "classes":
            data["classes"][0] = value
        elif field == "skipped":
            data["skipped"] = [{"path": value, "reason": "truncated"}]
        elif field.startswith("shards."):
            data["shards"][0][field.split(".")[1]] = value
        else:
            data[field] = value
        path.write_text(json.dumps(data))
    before = tree_files(root)
    out = root / "out"
    args = [command[0], str(dst), *command[1:]] + ([str(out / "tree")] if command[0] == "export" else [])
    result = CliRunner().invoke(cli, args)
    kept_the_promise(result, root, before, out=out)
