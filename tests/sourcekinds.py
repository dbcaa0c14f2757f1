"""A generated tree written as the other kinds of source: tar, tar.gz, zip, tar of per-class tars,
WebDataset shards. Everything is made from files on disk in ``tmp_path``; nothing is checked in.

The archives hold the tree's files with their own modification times, so extracting one gives
the tree back; helpers to damage an archive (truncate it, flip bytes in a member) sit here too.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from packer.source.imagefolder import scan_imagefolder


def tree_files(root: Path) -> Iterator[tuple[str, Path]]:
    """Every file and folder under ``root`` (relative POSIX path, path), folders first, sorted."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        here = Path(dirpath)
        for name in dirnames + sorted(filenames):
            path = here / name
            yield path.relative_to(root).as_posix(), path


def write_tar(root: Path, path: Path, *, top: str | None = None, compress: bool = False) -> Path:
    """The tree under ``root`` as a tar (gzip-compressed if ``compress``), its members under
    ``top/`` if given, with a folder member for each folder."""
    with tarfile.open(path, "w:gz" if compress else "w", format=tarfile.GNU_FORMAT) as tar:
        if top:
            tar.add(root, arcname=top, recursive=False)
        for rel, file in tree_files(root):
            tar.add(file, arcname=f"{top}/{rel}" if top else rel, recursive=False)
    return path


def write_zip(root: Path, path: Path, *, top: str | None = None, store: Sequence[str] = ()) -> Path:
    """The tree under ``root`` as a zip: deflated members, stored for the relative paths in
    ``store`` (and folders); member times are the files' (zip keeps whole even seconds)."""
    with zipfile.ZipFile(path, "w") as archive:
        for rel, file in tree_files(root):
            name = f"{top}/{rel}" if top else rel
            method = zipfile.ZIP_STORED if rel in store else zipfile.ZIP_DEFLATED
            archive.write(file, name, compress_type=method)
    return path


def write_tar_of_tars(root: Path, path: Path) -> Path:
    """ImageNet's layout: one uncompressed ``<class>.tar`` per class folder of ``root``, in a tar."""
    with tarfile.open(path, "w") as outer:
        for entry in sorted(p for p in root.iterdir() if p.is_dir()):
            buffer = io.BytesIO()
            with tarfile.open(fileobj=buffer, mode="w") as inner:
                for rel, file in tree_files(entry):
                    inner.add(file, arcname=rel, recursive=False)
            info = tarfile.TarInfo(f"{entry.name}.tar")
            info.size, info.mtime = buffer.tell(), 1_700_000_000
            buffer.seek(0)
            outer.addfile(info, buffer)
    return path


def write_webdataset(root: Path, folder: Path, *, per_shard: int = 5, json_label: bool = True,
                     cls: bool = True, extra_members: bool = True) -> list[Path]:
    """The tree's images as WebDataset shards ``shard-000000.tar``, ...: sample ``cat/001`` holds
    ``cat/001.jpg`` (the image, its own name), ``cat/001.cls`` (the class index, as text) and
    ``cat/001.json`` (``{"label": "cat", "index": i}``), in ImageFolder order."""
    index = scan_imagefolder(root)
    folder.mkdir(parents=True, exist_ok=True)
    shards: list[Path] = []
    tar: tarfile.TarFile | None = None
    for i, item in enumerate(index.items):
        if i % per_shard == 0:
            if tar is not None:
                tar.close()
            shards.append(folder / f"shard-{len(shards):06d}.tar")
            tar = tarfile.open(shards[-1], "w")
        assert tar is not None
        key = item.relpath.rsplit(".", 1)[0]
        tar.add(root / item.relpath, arcname=item.relpath, recursive=False)
        if cls:
            add_member(tar, f"{key}.cls", str(item.label).encode())
        if json_label:
            label = {"label": index.classes[item.label], "index": i}
            add_member(tar, f"{key}.json", json.dumps(label).encode())
        if extra_members:
            add_member(tar, f"{key}.txt", f"caption {i}".encode())
    if tar is not None:
        tar.close()
    return shards


def add_member(tar: tarfile.TarFile, name: str, data: bytes, mtime: int = 1_700_000_000) -> None:
    """Add a regular member ``name`` holding ``data``."""
    info = tarfile.TarInfo(name)
    info.size, info.mtime = len(data), mtime
    tar.addfile(info, io.BytesIO(data))


def member_offset(path: Path, name: str) -> tuple[int, int]:
    """Where member ``name``'s data lies in the uncompressed tar at ``path``: (offset, size)."""
    with tarfile.open(path) as tar:
        info = tar.getmember(name)
        return info.offset_data, info.size


def flip_bytes(path: Path, offset: int, count: int = 8) -> None:
    """Invert ``count`` bytes of the file at ``path`` from ``offset``."""
    with open(path, "r+b") as handle:
        handle.seek(offset)
        data = handle.read(count)
        handle.seek(offset)
        handle.write(bytes(b ^ 0xFF for b in data))


def truncate(path: Path, size: int) -> None:
    """Cut the file at ``path`` to ``size`` bytes (a download that stopped)."""
    with open(path, "r+b") as handle:
        handle.truncate(size)


def zip_data_offset(path: Path, name: str) -> tuple[int, int]:
    """Where member ``name``'s stored data lies in the zip at ``path``: (offset, stored size)."""
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo(name)
    with open(path, "rb") as handle:
        handle.seek(info.header_offset + 26)
        lengths = handle.read(4)
    names = int.from_bytes(lengths[:2], "little") + int.from_bytes(lengths[2:], "little")
    start = info.header_offset + 30 + names
    return start, info.compress_size
