"""Integrity checks of a packed dataset: what ``packer verify DST [--deep] [--against SRC]`` does.

Three depths, each including the one before:

* always: the manifest loads and is consistent (shard ranges follow each other and add up to
  the sample index, ``class_counts`` matches ``classes``), and every shard and sample-index
  file exists with the byte size and checksum (SHA-256 or BLAKE3: its ``digest``) the manifest records;
* ``deep``: every shard is opened with its backend, holds the number of records the manifest
  says, and every sample decodes with the dataset's codec; targets are class indices whose
  per-class counts equal ``class_counts``, and each sample's path is a safe relative path
  (:mod:`packer.keys`) that, for a tree's dataset (a folder or an archive of one), starts with
  its class folder; a list file's, WebDataset's or Parquet table's paths are their sources'
  keys, with labels from data, so no folder rule applies (:mod:`packer.tools.layout`);
* ``against``: every stored sample equals its source file ``SRC/<relative path>`` byte for
  byte (``original`` codec only: other codecs re-encode, so there is nothing to compare).

Every problem is collected, so one damaged shard never hides another. A file whose size or
checksum is wrong is never handed to a storage library (LMDB trusts its file and may crash on
a damaged one): its samples are counted as skipped, and the report says so.

Problem kinds: ``missing``, ``size_mismatch``, ``checksum_mismatch``, ``unreadable``,
``inconsistent_manifest``, ``count_mismatch``, ``decode_error``, ``label_error``,
``source_missing``, ``source_unreadable``, ``source_differs``, ``not_applicable``.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from packer.digests import DigestAlgorithm
from packer.errors import ManifestError, PackerError, ShardError
from packer.format.backends import get_backend
from packer.format.codecs import get_codec
from packer.format.fields.stored import stored_decoder
from packer.format.manifest import MANIFEST_NAME, FileEntry, Manifest, ShardEntry
from packer.format.sample_index import INDEX_FILES, SampleIndex
from packer.keys import escaped, key_problem
from packer.progressbar import ProgressBar
from packer.source.imagecheck import UndecodableImage, decoder_failures
from packer.store.urls import is_url
from packer.tools.against import SourceComparison, keeps_source_bytes, safe_relpath
from packer.tools.consistency import manifest_problems, shard_ranges_hold
from packer.tools.findings import MAX_LISTED, Findings, Problem, VerifyReport
from packer.tools.layout import Layout, path_layout
from packer.tools.publish import pull_dataset

__all__ = ["MAX_LISTED", "Problem", "VerifyReport", "verify_dataset"]

_BATCH = 256
_FIX = "restore it from a copy, or convert again with overwrite=True"


def _check_manifest(manifest: Manifest, found: Findings) -> bool:
    """Report inconsistencies among the manifest's fields; return whether shard ranges hold."""
    for path, what in manifest_problems(manifest):
        found.add(path, "inconsistent_manifest", escaped(what))
    return shard_ranges_hold(manifest)


def _layout(manifest: Manifest, found: Findings) -> Layout | None:
    """How sample paths are laid out; ``None`` (and a finding) when the manifest's record of
    its source is damaged."""
    try:
        return path_layout(manifest, MANIFEST_NAME)
    except ManifestError as err:
        found.add(MANIFEST_NAME, "inconsistent_manifest", str(err))
        return None


def _check_file(root: str, entry: ShardEntry | FileEntry, found: Findings, bar: ProgressBar,
                digest: DigestAlgorithm) -> bool:
    """Size, then checksum, of one listed file; True when both match."""
    if not safe_relpath(entry.path):
        found.add(entry.path, "inconsistent_manifest", f"{entry.path!r} is not a path inside "
                  "the dataset; the manifest is damaged")
        return False
    path = os.path.join(root, entry.path)
    try:
        st = os.stat(path)
    except OSError as err:
        found.add(entry.path, "missing", f"{entry.path} is missing ({err.strerror}): {_FIX}")
        return False
    if not stat.S_ISREG(st.st_mode):
        found.add(entry.path, "missing", f"{entry.path} is not a regular file: {_FIX}")
        return False
    if st.st_size != entry.num_bytes:
        found.add(entry.path, "size_mismatch", f"{entry.path} has {st.st_size} bytes, the manifest "
                  f"says {entry.num_bytes}: {_FIX}")
        return False
    try:
        checksum = digest.file(path)
    except OSError as err:
        found.add(entry.path, "unreadable", f"{entry.path} cannot be read ({err}): {_FIX}")
        return False
    finally:
        bar.update(st.st_size)
    if checksum != entry.sha256:
        found.add(entry.path, "checksum_mismatch", f"{entry.path} has {digest.name} {checksum[:16]}..., the "
                  f"manifest says {entry.sha256[:16]}...: the file is damaged; {_FIX}")
        return False
    return True


def _open_index(root: str, manifest: Manifest, intact: set[str], found: Findings) -> SampleIndex | None:
    """The sample index when its files are intact and agree with the shards, else ``None``."""
    entries = manifest.sample_index
    if not all(name in entries and entries[name].path in intact for name in INDEX_FILES):
        return None
    index = SampleIndex.of(root, manifest)
    try:
        wrong = index.inconsistencies()
    except (OSError, ValueError) as err:
        found.add(entries["targets"].path, "decode_error", f"the sample index cannot be loaded: {err}")
        return None
    for key, message in wrong:
        path = entries[key].path
        found.add(path, "inconsistent_manifest", f"{path} {message}")
    return None if wrong else index


#: The most wrong targets of a dataset without classes listed one by one.
_MAX_UNLABELLED = 1000


def _check_labels(manifest: Manifest, index: SampleIndex, layout: Layout | None, found: Findings) -> None:
    """Targets in range, per-class counts as the manifest says, and paths inside the dataset's
    place: under their class folder for a tree's dataset, anywhere inside the root for a list's
    or a keyed source's (WebDataset, Parquet: their labels do not come from folders). With no
    ``layout`` (the manifest's record of its source is damaged) paths are not checked."""
    classes = manifest.classes
    targets = np.asarray(index.targets)
    if manifest.schema.label_field() is None:  # a dataset with fields and no class: -1 each
        for i in np.flatnonzero(targets != -1)[:_MAX_UNLABELLED]:
            found.add(index.path(int(i)), "label_error", f"sample {i} has target {int(targets[i])}, "
                      "but the dataset's samples have no class label (-1 each)")
        valid = np.zeros(len(targets), dtype=bool)
    else:
        valid = (targets >= 0) & (targets < len(classes))
        for i in np.flatnonzero(~valid):
            path = index.path(int(i))
            found.add(path, "label_error", f"sample {i} ({escaped(path)}) has target "
                      f"{int(targets[i])}, not one of the {len(classes)} classes")
    counts = np.bincount(targets[valid], minlength=len(classes)).tolist()
    if counts != list(manifest.class_counts):
        found.add(manifest.sample_index["targets"].path, "label_error",
                  f"samples per class are {counts}, the manifest says {list(manifest.class_counts)}")
    if layout is None:
        return
    labelled = manifest.schema.label_field() is not None
    for i in np.flatnonzero(valid) if labelled else range(len(targets)):
        path, cls = index.path(int(i)), classes[int(targets[i])] if labelled else None
        problem = key_problem(path)
        if problem is not None:
            found.add(path, "label_error", f"sample {i} is {path!r}, which {problem}: not a path "
                      "inside the dataset's source")
        elif layout == "tree" and cls is not None and not path.startswith(cls + "/"):
            found.add(path, "label_error", f"sample {i} is {path!r}, which is not in the folder "
                      f"of its class {cls!r}")


def verify_dataset(
    root: str | os.PathLike[str],
    *,
    deep: bool = False,
    against: str | os.PathLike[str] | None = None,
    progress: bool = False,
    storage_options: Mapping[str, Any] | None = None,
) -> VerifyReport:
    """Check the packed dataset at ``root``; see the module docstring for what each depth does.

    Args:
        root: The DST of a finished ``packer convert``, or a URL it was pushed to (every file
            is downloaded and checked: what the store holds, not what a cache has).
        deep: Also open every shard, count its records, decode every sample, check labels.
        against: The source (any kind: a tree, list file, archive, ...); compare every stored
            sample with its source item byte for byte.
        progress: Show tqdm bars on stderr when it is a terminal.
        storage_options: For a URL: credentials and client options (:mod:`packer.store`).

    Returns:
        A report of every problem found; damage is reported there, never raised.

    Raises:
        NotADatasetError, IncompleteDatasetError, ManifestError: ``root`` has no readable
            manifest (an interrupted conversion is one); see :meth:`Manifest.load`.
        SourceNotFoundError, SourceError: ``against`` cannot be opened as a source.
    """
    if is_url(root):  # the store's own bytes, not a cache's: download them all, check locally
        with tempfile.TemporaryDirectory(prefix="packer-verify-") as mirror:
            pull_dataset(os.fspath(root), mirror, storage_options=storage_options)
            report = verify_dataset(mirror, deep=deep, against=against, progress=progress)
            return replace(report, root=os.fspath(root).rstrip("/"))
    top = os.path.abspath(os.fspath(root))
    manifest = Manifest.load(top)
    src = None if against is None else SourceComparison(os.path.abspath(os.fspath(against)), manifest)
    against_source = src  # ``src`` is dropped below when it cannot be compared; it is closed anyway
    found = Findings()
    ranges_ok = _check_manifest(manifest, found)
    layout = _layout(manifest, found)
    files: list[ShardEntry | FileEntry] = [*manifest.shards, *manifest.sample_index.values()]
    intact = _intact_files(top, files, manifest.num_bytes, found, progress, manifest.digest_algorithm)
    shards_checked = sum(shard.path in intact for shard in manifest.shards)
    index = _open_index(top, manifest, intact, found) if ranges_ok else None
    if deep and index is not None:
        _check_labels(manifest, index, layout, found)
    elif deep:
        found.notes.append("labels and paths were not checked: the sample index is damaged or "
                           "disagrees with the shards")

    decode = _decoder(manifest, found) if deep else None
    src = _comparable(manifest, src, index, found)
    counts = Counter[str]()
    try:
        if decode is not None or src is not None:
            with ProgressBar(total=manifest.num_samples, unit="img", desc="reading samples",
                      disable=None if progress else True, dynamic_ncols=True) as bar:
                _read_samples(top, manifest, intact, index, decode, src, found, counts, bar)
    finally:
        if against_source is not None:
            against_source.close()
    return VerifyReport(
        root=top, deep=deep, against=None if against is None else os.path.abspath(against),
        num_shards=len(manifest.shards), num_samples=manifest.num_samples,
        shards_checked=shards_checked, files_checked=len(intact),
        bytes_hashed=sum(e.num_bytes for e in files if e.path in intact),
        samples_checked=counts["checked"], samples_compared=counts["compared"],
        samples_skipped=counts["skipped"], problems=tuple(found.listed),
        problem_counts=dict(found.counts), notes=tuple(found.notes))


def _intact_files(top: str, files: list[ShardEntry | FileEntry], num_bytes: int, found: Findings,
                  progress: bool, digest: DigestAlgorithm) -> set[str]:
    """The files (shards and index arrays) whose size and checksum (by ``digest``) match the manifest."""
    intact: set[str] = set()
    with ProgressBar(total=num_bytes, unit="B", unit_scale=True, desc="verifying checksums",
                     disable=None if progress else True, dynamic_ncols=True) as bar:
        for entry in files:
            if _check_file(top, entry, found, bar, digest):
                intact.add(entry.path)
    return intact


def _decoder(manifest: Manifest, found: Findings) -> Callable[[bytes], object] | None:
    """What decodes one record: the dataset's codec, or for a dataset with fields every field
    by its type (a mask, boxes, text...); None (and a problem) when it cannot be made."""
    try:
        if manifest.schema.is_imagefolder():
            return get_codec(manifest.codec, manifest.codec_params).decode
        return stored_decoder(manifest.schema).decode
    except PackerError as err:
        found.add(MANIFEST_NAME, "decode_error", f"samples cannot be decoded: {err}")
        return None


def _comparable(manifest: Manifest, src: SourceComparison | None, index: SampleIndex | None,
                found: Findings) -> SourceComparison | None:
    """``src`` when stored bytes can be compared with it; None (and why) when they cannot."""
    if src is not None and not keeps_source_bytes(manifest.codec):
        found.add(MANIFEST_NAME, "not_applicable", f"against= compares stored bytes with source "
                  f"files, but codec {manifest.codec!r} re-encoded them; use deep=True instead")
        return None
    if src is not None and index is None:
        found.notes.append("samples were not compared with the source: the sample index or the "
                           "shard ranges are damaged, so sample paths are unknown")
        return None
    return src


def _read_samples(root: str, manifest: Manifest, intact: set[str], index: SampleIndex | None,
                  decode: Callable[[bytes], object] | None, src: SourceComparison | None, found: Findings,
                  counts: Counter[str],
                  bar: ProgressBar) -> None:
    """Read every sample of every intact shard once: decode it and/or compare it with SRC."""
    try:
        backend = get_backend(manifest.backend)
    except PackerError as err:
        found.add(MANIFEST_NAME, "unreadable", f"shards cannot be opened: {err}")
        counts["skipped"] += manifest.num_samples
        return
    for shard in manifest.shards:
        if shard.num_samples <= 0:
            continue
        if shard.path not in intact:
            counts["skipped"] += shard.num_samples
            found.notes.append(f"{shard.path} is damaged: its {shard.num_samples} samples were "
                               "not read")
            bar.update(shard.num_samples)
            continue
        reader = backend.reader(os.path.join(root, shard.path), shard.num_samples)
        done = 0
        try:
            stored = reader.stored_count()
            if stored is not None and stored != shard.num_samples:
                found.add(shard.path, "count_mismatch", f"{shard.path} holds {stored} records, the "
                          f"manifest says {shard.num_samples}; the manifest does not match "
                          f"the shards: {_FIX}")
                continue
            for start in range(0, shard.num_samples, _BATCH):
                local = list(range(start, min(start + _BATCH, shard.num_samples)))
                for j, payload in zip(local, reader.read_many(local), strict=True):
                    number = shard.first + j
                    name = index.path(number) if index is not None else f"{shard.path}#{j}"
                    if decode is not None:
                        try:
                            with decoder_failures():
                                decode(payload)
                        except (UndecodableImage, ValueError) as err:
                            found.add(name, "decode_error", f"sample {number} ({escaped(name)}, "
                                      f"{shard.path} record {j}) does not decode: {err}")
                        counts["checked"] += 1
                    if src is not None and src.compare(name, payload, found):
                        counts["compared"] += 1
                done += len(local)
                bar.update(len(local))
        except ShardError as err:
            found.add(shard.path, "unreadable", f"{shard.path} cannot be read: {err}")
        finally:
            reader.close()
            if done < shard.num_samples:
                counts["skipped"] += shard.num_samples - done
                bar.update(shard.num_samples - done)


