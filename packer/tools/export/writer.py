"""Write a packed dataset back as an ImageFolder tree, so a conversion is never a one-way door.

What lands where, by codec:

* ``original``: each sample's stored bytes, which are its source file's, at its recorded
  relative path. The export equals the source tree minus the files that were never packed
  (skipped files, and files without an image extension), byte for byte. Converting it again
  with the same options gives the same samples and sample index, and byte-identical shards
  when nothing was skipped (an LMDB shard's header records a map size planned from every
  source file, skipped ones included).
* ``jpeg``: the stored JPEG bytes as they are, under the relative path with its suffix
  replaced by ``.jpg`` (a name already ending in ``.jpg`` or ``.jpeg``, in any case, is kept).
* ``pixels``: the pixels encoded as lossless PNG, suffix ``.png`` (``.png`` names kept).

Where a replaced suffix would give two exported files one name (``a.png`` and ``a.jpg``), the
renamed one keeps its whole name and gains the suffix (``a.png.jpg``). Renaming can change the
order of samples within a folder; labels never change.

Where a sample lands depends on its source (:mod:`packer.tools.layout`): a tree's (a folder
or an archive of one) at its relative path, which starts with its class folder; a list file's
or a keyed source's (WebDataset shards, Parquet tables) at ``<class>/<path>``, its path being
the listed path or the sample's key. ``as_list`` writes a list's or a keyed dataset's files at
their paths and a list beside them instead (:mod:`packer.tools.export.listing`).

Every selected class gets its folder, even one with no exported sample (all its files were
skipped), so the exported tree has the dataset's classes and class indices; convert such a tree
with ``--allow-empty``; hidden files, packed only with ``--include-hidden``, need that flag
again. OUT must be absent or empty; with ``overwrite`` a non-empty OUT is written into,
replacing only files of the same names and deleting nothing. OUT may not be DST, lie inside it
or hold it, nor be the source tree DST was converted from.

Class names and paths come from data, so each one is checked before anything is written
(:mod:`packer.tools.export.plan`): a class folder must be one safe folder name and a path a
safe relative key (:mod:`packer.keys`: no ``..``, no absolute path, no NUL or control
character), and a tree's path must lie in its class folder. One bad name refuses the whole
export with :class:`~packer.errors.UnsafeKeyError` (or :class:`~packer.errors.ManifestError`)
naming it and the dataset file that holds it, and OUT is left as it was.

Each file is written under a hidden temporary name in its folder, then renamed, so an
interrupted export never leaves part of a file under a final name (a killed one may leave a
hidden ``.packer-export-PID.tmp``, which scanning ignores). Files are not fsynced: an export is
a copy that can simply be run again (``--overwrite``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from packer.errors import DatasetError, ShardError
from packer.format.codecs import Codec, get_codec
from packer.format.manifest import MANIFEST_NAME
from packer.format.sample_index import SampleIndex
from packer.format.shardset import ShardSet
from packer.progressbar import ProgressBar
from packer.source.imagecheck import decoder_failures
from packer.tools.consistency import require_consistent
from packer.tools.export.files import check_out, make_dirs, write_file
from packer.tools.export.plan import DatasetFiles, ExportPlan, plan_export
from packer.tools.layout import path_layout, recorded_listing
from packer.tools.selection import class_members, pick_samples, select_classes

__all__ = ["ExportResult", "export_dataset"]

_BATCH = 256


@dataclass(frozen=True)
class ExportResult:
    """What :func:`export_dataset` wrote."""

    out: str
    written: int  # image files written
    bytes_written: int
    classes: tuple[str, ...]  # class folders of the exported tree
    renamed: int  # files whose name differs from the recorded relative path
    not_selected: int  # samples left out by ``classes`` / ``limit``
    skipped_in_dataset: int  # files the conversion skipped: never packed, so not exported
    codec: str
    seconds: float
    exported_as: str = "the original bytes at their original paths"  # the codec's export format
    lists: tuple[str, ...] = ()  # ``as_list``: the list files written beside the samples, under ``out``


def _selected(shards: ShardSet, index: SampleIndex, class_ids: list[int],
              limit: int | None) -> Sequence[int]:
    if limit is None and len(class_ids) == len(shards.manifest.classes):
        return range(len(shards))
    members = class_members(index.targets, len(shards.manifest.classes))
    picked = pick_samples(members, class_ids, per_class=limit)
    return sorted(i for chosen in picked.values() for i in chosen)


def _converted(codec: Codec, payload: bytes, name: str) -> bytes:
    def damaged(err: Exception) -> ShardError:
        return ShardError(f"The sample exported as {name!r} cannot be decoded ({type(err).__name__}: "
                          f"{err}); the dataset is damaged: run verify_dataset(deep=True).")

    with decoder_failures(damaged):
        return codec.exported_bytes(payload)


def _write_all(shards: ShardSet, top: str, plan: ExportPlan, chosen: Sequence[int], codec: Codec, *,
               progress: bool) -> int:
    """Make every class folder, write each chosen sample, then the lists; return the bytes written."""
    for name in plan.folders:
        make_dirs(os.path.join(top, name))
    written = 0
    names = plan.names
    with ProgressBar(total=len(chosen), unit="img", desc="exporting", disable=None if progress else True,
              dynamic_ncols=True) as bar:
        for start in range(0, len(chosen), _BATCH):
            batch = chosen[start:start + _BATCH]
            for name, payload in zip(names[start:start + _BATCH], shards.read_many(batch), strict=True):
                data = _converted(codec, payload, name)
                write_file(os.path.join(top, *name.split("/")), data)
                written += len(data)
            bar.update(len(batch))
    for name, text in plan.lists:
        data = text.encode("utf-8", "surrogateescape")
        write_file(os.path.join(top, name), data)
        written += len(data)
    return written


def _planned(shards: ShardSet, top: str, classes: Iterable[str] | None, limit: int | None, *,
             overwrite: bool, as_list: bool) -> tuple[Sequence[int], list[int], ExportPlan]:
    """Check the dataset and OUT, choose the samples and plan every name; write nothing."""
    manifest = shards.manifest
    manifest_file = shards.store.describe(MANIFEST_NAME)
    require_consistent(manifest, manifest_file)  # names every sample-index file, among others
    files = DatasetFiles(manifest=manifest_file, paths=_described(shards, "paths"),
                         targets=_described(shards, "targets"))
    layout = path_layout(manifest, files.manifest)
    listing = recorded_listing(manifest, files.manifest)
    if as_list and layout == "tree":
        raise ValueError(f"{shards.root!r} was converted from a folder tree, not a list file, WebDataset "
                         "shards or Parquet tables: export it as a tree (without as_list=True)")
    check_out(top, shards.root, listing["root"] if listing else manifest.source, overwrite=overwrite)
    class_ids = select_classes(manifest.classes, classes)
    chosen = _selected(shards, shards.index, class_ids, limit)
    fmt = get_codec(manifest.codec, manifest.codec_params).export_format()
    return chosen, class_ids, plan_export(manifest, shards.index, chosen, class_ids, layout, listing, fmt,
                                          files, as_list=as_list)


def _described(shards: ShardSet, key: str) -> str:
    """The sample-index file ``key`` (``paths``, ``targets``) as errors name it."""
    return shards.store.describe(shards.manifest.sample_index[key].path)


def export_dataset(
    dst: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    classes: Iterable[str] | None = None,
    limit: int | None = None,
    overwrite: bool = False,
    as_list: bool = False,
    progress: bool = False,
) -> ExportResult:
    """Write the packed dataset ``dst`` as an ImageFolder tree at ``out`` (see the module docstring).

    Args:
        dst: The DST of a finished ``packer convert``.
        out: Where the tree goes: absent or empty (or any directory with ``overwrite``).
        classes: Class names to export (items may be comma-separated lists); ``None``: all.
        limit: At most this many samples per class, the first ones in dataset order.
        overwrite: Write into a non-empty ``out``, replacing files of the same names only.
        as_list: For a dataset converted from a list file, WebDataset shards or Parquet tables:
            write its files at their paths and a list beside them
            (:mod:`packer.tools.export.listing`), instead of a tree of class folders (where a
            sample lands at ``<class>/<path>``).
        progress: Draw a progress bar.

    Raises:
        NotADatasetError, IncompleteDatasetError, ManifestError, ShardError: ``dst`` is not
            a complete, intact packer dataset.
        UnsafeKeyError: a class name or sample path that could lead outside ``out``; nothing
            was written.
        OutputExistsError: ``out`` is not empty and ``overwrite`` is off.
        OutputError: ``out`` is not allowed (see above) or cannot be written.
        UnknownNameError: a class the dataset lacks, or a codec packer cannot export.
        ValueError: ``limit`` below 1, no class named, or ``as_list`` for a folder tree's dataset.
    """
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be at least 1, not {limit}")
    started = time.perf_counter()
    top = os.path.abspath(os.fspath(out))
    shards = ShardSet(dst)
    try:
        manifest = shards.manifest
        if not manifest.schema.is_imagefolder():
            raise DatasetError(f"{shards.root!r} holds samples with fields "
                               f"({', '.join(manifest.schema.names())}), which a tree of class folders "
                               "cannot hold: export it as WebDataset shards with export_webdataset(), "
                               "every field a member (or boxes as a YOLO set with export_yolo() or a COCO "
                               "file with export_coco(), masks beside their images with export_masks()).")
        chosen, class_ids, plan = _planned(shards, top, classes, limit, overwrite=overwrite, as_list=as_list)
        codec = get_codec(manifest.codec, manifest.codec_params)
        written = _write_all(shards, top, plan, chosen, codec, progress=progress)
    finally:
        shards.close()
    return ExportResult(
        out=top, written=len(chosen), bytes_written=written,
        classes=tuple(manifest.classes[c] for c in class_ids), renamed=plan.renamed,
        not_selected=manifest.num_samples - len(chosen), skipped_in_dataset=len(manifest.skipped),
        codec=manifest.codec, seconds=time.perf_counter() - started,
        exported_as=codec.export_format().description,
        lists=tuple(name for name, _ in plan.lists))
