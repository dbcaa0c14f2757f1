"""Whether a manifest agrees with itself: the checks ``verify`` reports and ``export`` and
``show`` require before they trust a manifest's numbers.

A manifest that parses can still be damaged or crafted: shard ranges that overlap or leave
gaps, more classes than class counts, counts that do not add up, a sample-index file missing
from the list. Reading through such a manifest fails deep inside (an ``IndexError`` from a
shard, a ``KeyError`` from the sample index) or, worse, reads the wrong samples; checking it
first turns that into one :class:`~packer.errors.ManifestError` naming the manifest's file.
"""

from __future__ import annotations

import os

from packer.errors import DatasetError, ManifestError
from packer.format.manifest import MANIFEST_NAME, Manifest
from packer.format.sample_index import INDEX_FILES
from packer.store import open_store
from packer.tools.layout import path_layout

__all__ = ["checked_manifest", "manifest_problems", "require_consistent", "require_images_and_classes",
           "shard_ranges_hold"]


def shard_ranges_hold(manifest: Manifest) -> bool:
    """Whether the shards' sample ranges follow each other from 0 without gap or overlap."""
    expected = 0
    for shard in manifest.shards:
        if shard.first != expected or shard.num_samples < 0:
            return False
        expected += shard.num_samples
    return True


def manifest_problems(manifest: Manifest) -> list[tuple[str, str]]:
    """Every inconsistency among the manifest's fields, as ``(file it concerns, what)`` pairs
    (the file is ``index.json`` or a shard's path); empty for a sound manifest."""
    found: list[tuple[str, str]] = []
    if len(manifest.class_counts) != len(manifest.classes):
        found.append((MANIFEST_NAME, f"{len(manifest.classes)} classes but "
                      f"{len(manifest.class_counts)} class counts"))
    elif manifest.schema.label_field() is not None and sum(manifest.class_counts) != manifest.num_samples:
        found.append((MANIFEST_NAME, f"class counts add up to {sum(manifest.class_counts)}, the "
                      f"shards hold {manifest.num_samples} samples"))
    if any(count < 0 for count in manifest.class_counts):
        found.append((MANIFEST_NAME, "a class count is negative"))
    if len(set(manifest.classes)) != len(manifest.classes):
        found.append((MANIFEST_NAME, "a class name appears twice"))
    expected = 0
    for shard in manifest.shards:
        if shard.first != expected or shard.num_samples < 0:
            found.append((shard.path, f"{shard.path} starts at sample {shard.first} with "
                          f"{shard.num_samples} samples; the shards before it end at {expected}"))
        expected = max(shard.first + shard.num_samples, expected)
    for name in INDEX_FILES:
        if name not in manifest.sample_index:
            found.append((MANIFEST_NAME, f"no sample_index entry {name!r}"))
    return found


def require_consistent(manifest: Manifest, source: str) -> None:
    """Refuse a manifest that disagrees with itself (:func:`manifest_problems`) or whose
    record of its source is damaged (:func:`packer.tools.layout.path_layout`).

    Args:
        manifest: The manifest to check.
        source: Its file (or URL), named in the error.

    Raises:
        ManifestError: the first problem found, naming ``source``.
    """
    problems = manifest_problems(manifest)
    if problems:
        more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
        raise ManifestError(f"{source} disagrees with itself: {problems[0][1]}{more}; the dataset is "
                            "damaged: run verify_dataset(), then restore it from a copy or convert "
                            "it again with overwrite=True.")
    path_layout(manifest, source)


def checked_manifest(root: str | os.PathLike[str]) -> Manifest:
    """The manifest of the dataset at ``root`` (a path or URL), once :func:`require_consistent`
    accepts it; what ``packer show`` checks before it reads a sample.

    Raises:
        NotADatasetError, IncompleteDatasetError, ManifestError: see :meth:`Manifest.load`, and
            :func:`require_consistent`.
    """
    store = open_store(root)
    manifest = Manifest.load(store)
    require_consistent(manifest, store.describe(MANIFEST_NAME))
    return manifest


def require_images_and_classes(manifest: Manifest, root: str, what: str) -> None:
    """Refuse a dataset with fields in a tool that handles only ``(image, class)`` samples yet,
    rather than treat its records as image files.

    Raises:
        DatasetError: the dataset's samples have other fields; the message names them and what
            reads them instead.
    """
    schema = manifest.schema
    if not schema.is_imagefolder():
        fields = ", ".join(f"{f.name} ({f.type})" for f in schema)
        raise DatasetError(f"{what} handles datasets of images and classes; {root!r} holds samples "
                           f"with fields ({fields}), which it does not handle yet: read them with "
                           "packer.open_dataset(), look at them with packer show and packer preview")
