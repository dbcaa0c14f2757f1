"""Write a packed dataset, fields and all, as WebDataset shards: ``packer export DST OUT --as-webdataset``.

Every sample becomes one group of members of one key (its path up to the first ``.`` of its base
name, ``~2``, ``~3`` added to a key taken already), in dataset order, ``samples_per_shard`` samples
per ``shard-000000.tar``. Each field is one member: the image as its codec exports it (the
source's bytes under codec ``original``), a mask as PNG, text as UTF-8, numbers as text, boxes,
box labels, labels and JSON as JSON, arrays as ``.npy``, bytes as they are; the class label is
``cls`` (its index), with the class names in ``classes.txt`` beside the shards (``classes_file=``
of the conversion that reads the export back; a folder of shards and that file is still detected
as WebDataset). A dataset
converted from WebDataset members (``fields=``) gives each field back under the extension it
came from, so converting the export with the same ``--field`` options gives the same samples;
other fields are named ``<field>.<suffix>`` (``caption.txt``, ``boxes.json``).
:attr:`WebDatasetExport.fields` are the ``--field`` options that read them back.

Shards are plain, deterministic tars (no times, owners or modes from this machine), each written
under a temporary name and renamed when whole. OUT must be absent or empty (``overwrite``: files
of the same names are replaced). Keys come from data, so each is checked as a key
(:mod:`packer.keys`) before the first shard is written.
"""

from __future__ import annotations

import io
import json
import os
import posixpath
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from packer.errors import OutputExistsError
from packer.format.codecs import get_codec
from packer.format.fields.schema import Field, Schema
from packer.format.fields.stored import stored_decoder
from packer.format.manifest import Manifest
from packer.format.shardset import ShardSet
from packer.keys import check_key
from packer.source.webdataset.samples import IMAGE_EXTENSIONS
from packer.tools.export.files import check_out, make_dirs, write_file
from packer.tools.export.samples import each_record, mask_png

__all__ = ["WebDatasetExport", "export_webdataset"]

#: Field types written as JSON, and those written as UTF-8 text.
_AS_JSON = ("json", "boxes", "box_labels", "labels", "polygons")
_AS_TEXT = {"text": "txt", "int": "txt", "float": "txt"}


@dataclass(frozen=True)
class WebDatasetExport:
    """What :func:`export_webdataset` wrote, and the ``--field`` options that read it back."""

    out: str
    written: int
    shards: tuple[str, ...]
    bytes_written: int
    members: dict[str, str]  # field name -> member extension
    fields: tuple[str, ...]  # --field options of a conversion of the export
    seconds: float
    classes_file: str | None = None  # the class names, for classes_file= of that conversion


def _recorded_members(manifest: Manifest) -> dict[str, str]:
    """Field name -> the member extension it was converted from (a WebDataset with fields=)."""
    source = (manifest.extra.get("options") or {}).get("source") or {}
    if source.get("format") != "webdataset":
        return {}
    from packer.source.webdataset.fields import parse_member_fields
    return {spec.name: spec.key for spec in parse_member_fields(source.get("fields") or (), where="")}


def _extensions(schema: Schema, recorded: dict[str, str]) -> dict[str, str]:
    """Each in-record field's member extension: its recorded one, else ``<field>.<suffix>``; the
    sample's image (its first field) has ``""``: each sample's own suffix (:func:`_image_extension`)."""
    found: dict[str, str] = {}
    for number, field in enumerate(schema.in_record()):
        if field.name in recorded:
            found[field.name] = recorded[field.name]
        elif field.type == "image":
            fmt = get_codec(field.params["codec"], field.params["codec_params"]).export_format()
            found[field.name] = "" if number == 0 else f"{field.name}.{(fmt.suffix or '.png').lstrip('.')}"
        else:
            suffix = ("json" if field.type in _AS_JSON else _AS_TEXT.get(field.type)
                      or {"mask": "png", "ndarray": "npy"}.get(field.type, "bin"))
            found[field.name] = f"{field.name}.{suffix}"
    return found


def _as_stored(field: Field) -> bool:
    """Whether a field's member is its payload as the record holds it (no decoding): an image
    (its codec exports it), a mask stored as PNG, bytes, and a plugin's type."""
    return (field.type == "image" or (field.type == "mask" and field.params["encoding"] == "png")
            or field.type not in ("mask", "ndarray", *_AS_JSON, *_AS_TEXT))


def _member_bytes(field: Field, value: Any) -> bytes:
    """The member of one field's ``value``: its stored payload where :func:`_as_stored`, else
    the decoded value."""
    if field.type == "image":
        return get_codec(field.params["codec"], field.params["codec_params"]).exported_bytes(value)
    if _as_stored(field):
        return bytes(value)
    if field.type == "mask":
        return mask_png(np.asarray(value))
    if field.type in _AS_JSON:
        plain = value.tolist() if isinstance(value, np.ndarray) else value
        return json.dumps(plain, ensure_ascii=False, sort_keys=True).encode("utf-8")
    if field.type in _AS_TEXT:
        return (value if isinstance(value, str) else repr(value)).encode("utf-8")
    out = io.BytesIO()  # an ndarray
    np.save(out, np.asarray(value), allow_pickle=False)
    return out.getvalue()


def _image_extension(path: str, suffix: str | None, data: bytes) -> str:
    """The image member's extension: the codec's export suffix, else the sample path's own, else
    the one its bytes say (``png`` for a PNG)."""
    own = posixpath.splitext(path)[1].lstrip(".").lower()
    return (suffix or "").lstrip(".") or (own if own in IMAGE_EXTENSIONS else "") or _sniffed(data)


def _sniffed(data: bytes) -> str:
    """The usual extension of encoded image ``data`` (``jpg``, ``png``, ...), or ``img``."""
    from PIL import Image, UnidentifiedImageError
    try:
        with Image.open(io.BytesIO(data)) as image:
            kind = (image.format or "").lower()
    except (UnidentifiedImageError, OSError, ValueError):
        return "img"
    kind = {"jpeg": "jpg", "tiff": "tif"}.get(kind, kind)
    return kind if kind in IMAGE_EXTENSIONS else "img"


def _keys(paths: list[str], where: str) -> list[str]:
    """Each sample's key, unique and checked."""
    keys, used = [], set()
    for path in paths:
        folder, base = posixpath.split(path)
        key = posixpath.join(folder, base.split(".", 1)[0] or base)
        if key in used:
            key = next(f"{key}~{n}" for n in range(2, len(paths) + 2) if f"{key}~{n}" not in used)
        check_key(key, source=where, what="sample key")
        used.add(key)
        keys.append(key)
    return keys


def _tar(members: Iterator[tuple[str, bytes]]) -> bytes:
    """A deterministic tar of ``members`` (name, bytes)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def export_webdataset(dst: str | os.PathLike[str], out: str | os.PathLike[str], *,
                      samples_per_shard: int = 1000, overwrite: bool = False,
                      progress: bool = False) -> WebDatasetExport:
    """Write the packed dataset ``dst`` as WebDataset shards under ``out`` (see the module docstring).

    Raises:
        NotADatasetError, IncompleteDatasetError, ManifestError, ShardError: ``dst`` is not
            a complete, intact packer dataset.
        UnsafeKeyError: a sample path that makes no safe key; nothing was written.
        OutputExistsError, OutputError: ``out`` is not empty (without ``overwrite``), not allowed
            or cannot be written.
        ValueError: ``samples_per_shard`` below 1.
    """
    if samples_per_shard < 1:
        raise ValueError(f"samples_per_shard must be at least 1, not {samples_per_shard}")
    started = time.perf_counter()
    top = os.path.abspath(os.fspath(out))
    shards = ShardSet(dst)
    try:
        manifest = shards.manifest
        check_out(top, shards.root, manifest.source, overwrite=overwrite)
        if os.path.exists(os.path.join(top, "shard-000000.tar")) and not overwrite:
            raise OutputExistsError(f"{top!r} holds shards already: pass overwrite=True to replace them.")
        members = _extensions(manifest.schema, _recorded_members(manifest))
        names, written = _write_shards(shards, top, members, samples_per_shard, progress)
        classes = os.path.join(top, "classes.txt") if manifest.schema.label_field() is not None else None
        if classes is not None:
            text = "".join(f"{c}\n" for c in manifest.classes).encode("utf-8", "surrogateescape")
            write_file(classes, text)
    finally:
        shards.close()
    stored = manifest.schema.in_record()
    specs = tuple(f"{f.name}={members[f.name]}:{_read_back(f)}" for f in stored if members[f.name])
    return WebDatasetExport(top, manifest.num_samples, tuple(names), written, members, specs,
                            time.perf_counter() - started, classes)


def _write_shards(shards: ShardSet, top: str, members: dict[str, str], per_shard: int,
                  progress: bool) -> tuple[list[str], int]:
    """Write every sample, ``per_shard`` to a shard; the shards' names and the bytes written."""
    manifest, index = shards.manifest, shards.index
    count, stored = manifest.num_samples, manifest.schema.in_record()
    suffix = get_codec(manifest.codec, manifest.codec_params).export_format().suffix
    keys = _keys([index.path(i) for i in range(count)], shards.store.describe("paths"))
    labelled = manifest.schema.label_field() is not None
    decoder = stored_decoder(manifest.schema)
    raw = frozenset(f.name for f in stored if _as_stored(f))
    make_dirs(top)
    written, names, group = 0, [], []
    for i, record in each_record(shards, progress=progress, unit="sample"):
        values = decoder.decode(record, raw=raw)
        for field in stored:
            data = _member_bytes(field, values[field.name])
            ext = members[field.name] or _image_extension(index.path(i), suffix, data)
            group.append((f"{keys[i]}.{ext}", data))
        if labelled:
            group.append((f"{keys[i]}.cls", str(int(index.targets[i])).encode()))
        if (i + 1) % per_shard == 0 or i + 1 == count:
            name = f"shard-{len(names):06d}.tar"
            data = _tar(iter(group))
            write_file(os.path.join(top, name), data)
            written, names, group = written + len(data), [*names, name], []
    return names, written


def _read_back(field: Field) -> str:
    """The WebDataset member type that reads ``field`` back: its own, boxes in their format."""
    if field.type == "boxes":
        return f"boxes.{field.params['format']}" + (".normalized" if field.params["normalized"] else "")
    if field.type in ("image", "mask", "text", "int", "float", "json", "bytes", "box_labels", "labels"):
        return field.type
    return "json" if field.type in _AS_JSON else "bytes"
