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

Every selected class gets its folder, even one with no exported sample (all its files were
skipped), so the exported tree has the dataset's classes and class indices; convert such a tree
with ``--allow-empty``; hidden files, packed only with ``--include-hidden``, need that flag
again. OUT must be absent or empty; with ``overwrite`` a non-empty OUT is written into,
replacing only files of the same names and deleting nothing. OUT may not be DST, lie inside it
or hold it, nor be the source tree DST was converted from.

Each file is written under a hidden temporary name in its folder, then renamed, so an
interrupted export never leaves part of a file under a final name (a killed one may leave a
hidden ``.packer-export-PID.tmp``, which scanning ignores). Files are not fsynced: an export is
a copy that can simply be run again (``--overwrite``).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

from packer.errors import ManifestError, OutputError, OutputExistsError, ShardError
from packer.format.codecs import Codec, ExportFormat, get_codec
from packer.format.sample_index import SampleIndex
from packer.format.shardset import ShardSet
from packer.progressbar import ProgressBar
from packer.source.imagecheck import decoder_failures
from packer.tools.export_list import list_text
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


def _file_names(relpaths: Sequence[str], fmt: ExportFormat) -> list[str]:
    """Exported relative paths (see the module docstring), unique."""
    if fmt.suffix is None:
        names = list(relpaths)
    else:
        suffix = fmt.suffix
        proposed = [p if PurePosixPath(p).suffix.lower() in fmt.keeps
                    else str(PurePosixPath(p).with_suffix(suffix)) for p in relpaths]
        taken = Counter(proposed)
        names = [q if q == p or taken[q] == 1 else p + suffix
                 for p, q in zip(relpaths, proposed, strict=True)]
    repeated = [name for name, n in Counter(names).items() if n > 1]
    if repeated:
        raise ManifestError(f"Samples would be exported twice as {repeated[0]!r}: the sample index "
                            "is damaged (verify_dataset(deep=True)).")
    return names


def _check_relpath(relpath: str, class_name: str | None) -> None:
    """A path inside its class folder (inside the root, for a list source: ``class_name`` None),
    so nothing is written outside OUT or under another label."""
    parts = PurePosixPath(relpath).parts
    inside = (len(parts) >= (1 if class_name is None else 2) and not relpath.startswith("/")
              and ".." not in parts and "\\" not in relpath)
    if not inside or (class_name is not None and parts[0] != class_name):
        where = "inside the list's root" if class_name is None else f"inside its class folder {class_name!r}"
        raise ManifestError(f"Sample path {relpath!r} is not a file {where}: the sample index is "
                            "damaged (verify_dataset(deep=True)).")


def _inside(inner: str, outer: str) -> bool:
    return inner == outer or inner.startswith(outer.rstrip(os.sep) + os.sep)


def _check_out(out: str, root: str, source: str, *, overwrite: bool) -> None:
    real_out, real_root = os.path.realpath(out), os.path.realpath(root)
    if _inside(real_out, real_root) or _inside(real_root, real_out):
        raise OutputError(f"Export target {out!r} and dataset {root!r} lie inside one another: choose "
                          "a directory outside the dataset.")
    if source and os.path.realpath(source) == real_out:
        raise OutputError(f"{out!r} is the source tree {root!r} was converted from: export elsewhere.")
    if os.path.lexists(out) and not os.path.isdir(out):
        raise OutputError(f"Export target {out!r} exists and is not a directory: choose another path.")
    if os.path.isdir(out) and os.listdir(out) and not overwrite:
        raise OutputExistsError(f"Export target {out!r} is not empty: choose a new directory, or pass "
                                "overwrite=True to write into it (files of the same names are replaced, "
                                "nothing is deleted).")


def _fail(err: OSError, where: str) -> OutputError:
    return OutputError(f"Cannot write the export at {err.filename or where!r}: {err.strerror or err}; "
                       "free space or fix permissions, then export again with overwrite=True.")


def _make_dirs(path: str) -> None:
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as err:
        raise _fail(err, path) from err


def _write_file(path: str, data: bytes) -> None:
    """Write ``data`` under a temporary name in the same folder, then rename it to ``path``."""
    folder = os.path.dirname(path)
    tmp = os.path.join(folder, f".packer-export-{os.getpid()}.tmp")
    try:
        if not os.path.isdir(folder):
            os.makedirs(folder, exist_ok=True)
        with open(tmp, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException as err:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(err, OSError):
            raise _fail(err, path) from err
        raise


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


def _write_all(shards: ShardSet, top: str, class_names: list[str], chosen: Sequence[int],
               names: list[str], codec: Codec, *, progress: bool) -> int:
    """Make every class folder, then write each chosen sample; return the bytes written."""
    for name in class_names:
        _make_dirs(os.path.join(top, name))
    written = 0
    with ProgressBar(total=len(chosen), unit="img", desc="exporting", disable=None if progress else True,
              dynamic_ncols=True) as bar:
        for start in range(0, len(chosen), _BATCH):
            batch = chosen[start:start + _BATCH]
            for name, payload in zip(names[start:start + _BATCH], shards.read_many(batch), strict=True):
                data = _converted(codec, payload, name)
                _write_file(os.path.join(top, *name.split("/")), data)
                written += len(data)
            bar.update(len(batch))
    return written


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
        as_list: For a dataset converted from a list file: write its files at their listed
            paths and the list beside them (:mod:`packer.tools.export_list`), instead of a tree
            of class folders (where a listed file lands at ``<class>/<listed path>``).
        progress: Draw a progress bar.

    Raises:
        NotADatasetError, IncompleteDatasetError, ManifestError, ShardError: ``dst`` is not
            a complete, intact packer dataset.
        OutputExistsError: ``out`` is not empty and ``overwrite`` is off.
        OutputError: ``out`` is not allowed (see above) or cannot be written.
        UnknownNameError: a class the dataset lacks, or a codec packer cannot export.
        ValueError: ``limit`` below 1, no class named, or ``as_list`` for a folder tree's dataset.
    """
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be at least 1, not {limit}")
    started = time.perf_counter()
    shards = ShardSet(dst)
    manifest = shards.manifest
    listing = manifest.extra.get("list")
    if as_list and listing is None:
        raise ValueError(f"{shards.root!r} was converted from a folder tree, not a list file: export "
                         "it as a tree (without as_list=True)")
    codec = get_codec(manifest.codec, manifest.codec_params)
    fmt = codec.export_format()
    top = os.path.abspath(os.fspath(out))
    _check_out(top, shards.root, listing["root"] if listing else manifest.source, overwrite=overwrite)
    class_ids = select_classes(manifest.classes, classes)
    index = shards.index
    chosen = _selected(shards, index, class_ids, limit)
    relpaths = [index.path(i) for i in chosen]
    for i, relpath in zip(chosen, relpaths, strict=True):
        _check_relpath(relpath, None if listing else manifest.classes[int(index.targets[i])])
    if listing and not as_list:
        relpaths = [f"{manifest.classes[int(index.targets[i])]}/{p}" for i, p in zip(chosen, relpaths,
                                                                                    strict=True)]
    names = _file_names(relpaths, fmt)
    folders = [] if as_list else [manifest.classes[c] for c in class_ids]
    try:
        written = _write_all(shards, top, folders, chosen, names, codec, progress=progress)
        if as_list and listing is not None:
            numbers = listing.get("labels") == "numbers"
            labels = [int(index.targets[i]) if numbers else manifest.classes[int(index.targets[i])]
                      for i in chosen]
            list_name, text = list_text(listing, names, labels, [index.metadata(i) for i in chosen])
            _write_file(os.path.join(top, list_name), text.encode("utf-8", "surrogateescape"))
            written += len(text.encode("utf-8", "surrogateescape"))
    finally:
        shards.close()
    return ExportResult(
        out=top, written=len(chosen), bytes_written=written,
        classes=tuple(manifest.classes[c] for c in class_ids),
        renamed=sum(a != b for a, b in zip(relpaths, names, strict=True)),
        not_selected=manifest.num_samples - len(chosen), skipped_in_dataset=len(manifest.skipped),
        codec=manifest.codec, seconds=time.perf_counter() - started,
        exported_as=fmt.description)


