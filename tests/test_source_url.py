"""A source read from object storage (issue 28 item 2): a tar, .tar.gz, zip or tar of class tars
behind an ``s3://`` URL, indexed and read by byte ranges through the store, never downloaded
whole; converted into a local path or into another URL (killed midway and resumed), giving the
shards and sample index a conversion of the local archive gives. On a real S3-API server (moto)
on 127.0.0.1; the fault proxy counts what was fetched."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any

import pytest
from imagetools import dataset_snapshot
from remote_fixtures import convert_killed_after_an_upload
from servers import remote_env
from sourcekinds import write_tar, write_tar_of_tars, write_zip

import packer
from packer.errors import SourceError, SourceNotFoundError, UnsafeKeyError
from packer.store import open_store
from packer.testing.trees import image_tree

OPTIONS: dict[str, Any] = {"to": "lmdb", "shard_size": "1500"}
#: What differs between two conversions of one archive lying in two places.
WHERE = ("source", "plan_fingerprint")


ARCHIVES = {"tar": lambda tree, folder: write_tar(tree, folder / "train.tar", top="train"),
            "tar.gz": lambda tree, folder: write_tar(tree, folder / "train.tar.gz", top="train",
                                                     compress=True),
            "zip": lambda tree, folder: write_zip(tree, folder / "train.zip", top="train"),
            "class tars": lambda tree, folder: write_tar_of_tars(tree, folder / "train.tar")}


def _comparable(root: Path) -> dict[str, object]:
    """:func:`dataset_snapshot` less where the source lay (its location, and the plan's
    fingerprint, which names it)."""
    snapshot = dataset_snapshot(root)
    manifest: dict[str, Any] = snapshot["manifest"]  # type: ignore[assignment]
    manifest.pop("source")
    for name in WHERE:
        manifest["extra"].pop(name, None)
    return snapshot


def _upload(s3_bucket: str, archive: Path) -> str:
    open_store(f"{s3_bucket}/in").put_file(archive.name, str(archive))
    return f"{s3_bucket}/in/{archive.name}"


@pytest.mark.parametrize("kind", sorted(ARCHIVES))
def test_an_archive_behind_a_url_converts_as_the_local_archive_does(
        kind: str, tmp_path: Path, s3_bucket: str, s3_env: dict[str, str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PACKER_SPOOL_DIR", str(tmp_path / "spools"))
    image_tree(tmp_path / "tree", 24)
    archive = ARCHIVES[kind](tmp_path / "tree", tmp_path)
    url = _upload(s3_bucket, archive)
    plan = packer.plan_conversion(url, to="lmdb")
    assert plan.src == url and list(plan.classes) == ["ant", "bee", "cow"]
    remote = packer.convert(url, tmp_path / "from-url", **OPTIONS, workers=2)
    local = packer.convert(archive, tmp_path / "from-file", **OPTIONS)
    assert remote.manifest.num_samples == local.manifest.num_samples == 24
    assert remote.manifest.source == url
    assert _comparable(tmp_path / "from-url") == _comparable(tmp_path / "from-file")


def test_an_archive_is_read_by_ranges_not_downloaded_whole(tmp_path: Path, s3_bucket: str,
                                                           fault_proxy: Any,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in remote_env(fault_proxy.url).items():
        monkeypatch.setenv(name, value)
    folder = tmp_path / "big"
    for number in range(12):  # large members: the index needs only the central directory
        (folder / f"c{number % 2}").mkdir(parents=True, exist_ok=True)
        (folder / f"c{number % 2}" / f"{number}.jpg").write_bytes(_noise_jpeg(number))
    archive = write_zip(folder, tmp_path / "big.zip", store=tuple(f"c{n % 2}/{n}.jpg" for n in range(12)))
    url = _upload(s3_bucket, archive)
    fault_proxy.bytes_out = 0
    packer.plan_conversion(url, to="lmdb", check="none")
    assert fault_proxy.bytes_out < archive.stat().st_size / 4  # the directory, not the members
    fault_proxy.bytes_out = 0
    packer.convert(url, tmp_path / "out", to="lmdb", check="none", workers=1)
    assert fault_proxy.bytes_out < 1.3 * archive.stat().st_size  # each member about once


def _noise_jpeg(seed: int) -> bytes:
    import numpy as np
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (600, 800, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "JPEG", quality=95)
    return buffer.getvalue()


@pytest.mark.slow
def test_a_bucket_to_bucket_conversion_killed_midway_resumes_into_the_local_ones_dataset(
        tmp_path: Path, s3_bucket: str, s3_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in remote_env(s3_server.endpoint).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PACKER_STAGING", str(tmp_path / "staging"))
    image_tree(tmp_path / "tree", 90)
    archive = write_tar(tmp_path / "tree", tmp_path / "train.tar", top="train")
    src, dst = _upload(s3_bucket, archive), f"{s3_bucket}/out"
    assert convert_killed_after_an_upload(src, dst, s3_server.endpoint)
    packer.convert(src, dst, **OPTIONS, resume=True)
    pulled, direct = tmp_path / "pulled", open_store(dst)
    for key in direct.list():
        (pulled / key).parent.mkdir(parents=True, exist_ok=True)
        (pulled / key).write_bytes(direct.read(key))
    packer.convert(archive, tmp_path / "local", **OPTIONS)
    assert _comparable(pulled) == _comparable(tmp_path / "local")
    assert json.loads(direct.read("index.json"))["source"] == src


def test_a_url_that_is_no_archive_or_is_missing_is_refused(tmp_path: Path, s3_bucket: str,
                                                           s3_env: dict[str, str]) -> None:
    with pytest.raises(SourceError, match="must be a tar, .tar.gz"):
        packer.convert(f"{s3_bucket}/images/", tmp_path / "out", **OPTIONS)
    with pytest.raises(SourceError, match="must be a tar, .tar.gz"):
        packer.convert(f"{s3_bucket}/train.tar", tmp_path / "out", **OPTIONS, source_format="webdataset")
    with pytest.raises(SourceNotFoundError, match="does not exist"):
        packer.convert(f"{s3_bucket}/missing.tar", tmp_path / "out", **OPTIONS)
    assert not (tmp_path / "out").exists()


def test_hostile_member_names_behind_a_url_touch_nothing_outside(tmp_path: Path, s3_bucket: str,
                                                                 s3_env: dict[str, str]) -> None:
    image_tree(tmp_path / "tree", 6, broken=False)
    data = next((tmp_path / "tree" / "ant").glob("*.jpg")).read_bytes()
    urls = {}
    for label, names in {"escaping": ("../../escape.jpg", "/etc/evil.jpg"),
                         "control": ("train/ant/\x1b[2Jbell.jpg",)}.items():
        archive = write_tar(tmp_path / "tree", tmp_path / f"{label}.tar", top="train")
        with tarfile.open(archive, "a") as tar:
            for name in names:
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        urls[label] = _upload(s3_bucket, archive)
    before = sorted(p.name for p in tmp_path.parent.iterdir())
    result = packer.convert(urls["escaping"], tmp_path / "out", **OPTIONS)
    assert "named outside the archive" in json.dumps(result.manifest.to_json())  # noted, not packed
    local = packer.convert(tmp_path / "escaping.tar", tmp_path / "local", **OPTIONS)
    assert _comparable(tmp_path / "out") == _comparable(tmp_path / "local")
    assert result.manifest.num_samples == local.manifest.num_samples
    with pytest.raises(UnsafeKeyError, match="control character"):
        packer.convert(urls["control"], tmp_path / "refused", **OPTIONS)
    assert not (tmp_path / "refused").exists()
    assert sorted(p.name for p in tmp_path.parent.iterdir()) == before
    assert not (tmp_path / "escape.jpg").exists()
