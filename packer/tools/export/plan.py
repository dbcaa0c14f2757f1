"""Where each sample of an export lands under OUT, decided and checked before anything is written.

The class names and sample paths an export joins under OUT come from data (folder names,
listed paths, WebDataset keys, Parquet image paths, labels that became class names), so each
one passes :mod:`packer.keys` here: a class folder is one safe folder name, a path a safe
relative key, and the names of the list files ``as_list`` writes are single names too. All of
them are checked before the first file is written, so a crafted or damaged dataset is refused
whole, with one error naming the bad name and the dataset file holding it, never half-exported
or written outside OUT. Pure string work: nothing here touches the file system.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

import numpy as np

from packer.errors import ManifestError, OutputError, ShardError
from packer.format.codecs import ExportFormat
from packer.format.manifest import Manifest
from packer.format.sample_index import SampleIndex
from packer.keys import check_key, check_name
from packer.tools.export.listing import CLASSES_NAME, keyed_listing, list_text
from packer.tools.layout import Layout

__all__ = ["DatasetFiles", "ExportPlan", "plan_export"]


@dataclass(frozen=True)
class ExportPlan:
    """What an export writes: class folders, then each chosen sample, then the list files."""

    folders: tuple[str, ...]  # class folders to make, even empty ones
    relpaths: tuple[str, ...]  # each chosen sample's path under OUT, as stored
    names: tuple[str, ...]  # the same, renamed to the codec's export suffix; unique
    lists: tuple[tuple[str, str], ...] = ()  # ``as_list``: (file name, text) written beside them

    @property
    def renamed(self) -> int:
        """Files whose name differs from their stored path."""
        return sum(a != b for a, b in zip(self.relpaths, self.names, strict=True))


@dataclass(frozen=True)
class DatasetFiles:
    """The dataset files that hold what is checked, as errors name them."""

    manifest: str  # index.json: class names, the list's name
    paths: str  # the sample index's paths
    targets: str  # the sample index's targets


def _file_names(relpaths: Sequence[str], fmt: ExportFormat) -> list[str]:
    """Exported relative paths: the codec's suffix where it replaces the stored one, unique
    (a name taken already keeps its whole name and gains the suffix: ``a.png.jpg``)."""
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


def _check_targets(targets: np.ndarray, num_classes: int, source: str) -> None:
    if targets.size and (int(targets.min()) < 0 or int(targets.max()) >= num_classes):
        raise ShardError(f"{source}: targets outside 0..{num_classes - 1}: the sample index is "
                         "damaged (verify_dataset(deep=True)).")


def _sample_path(number: int, stored: str, class_name: str, layout: Layout, sources: DatasetFiles, *,
                 as_list: bool) -> str:
    """Where sample ``number`` (stored path ``stored``) lands under OUT, once checked."""
    key = check_key(stored, source=sources.paths, what=f"path of sample {number}")
    parts = key.split("/")
    if "\\" in key or (layout == "tree" and (len(parts) < 2 or parts[0] != class_name)):
        where = f"inside its class folder {class_name!r}" if layout == "tree" else "inside the dataset"
        raise ManifestError(f"Sample path {stored!r} is not a file {where}: the sample index is "
                            "damaged (verify_dataset(deep=True)).")
    return key if layout == "tree" or as_list else f"{class_name}/{key}"


def _lists(manifest: Manifest, index: SampleIndex, chosen: Sequence[int], names: Sequence[str],
           listing: dict[str, Any] | None, sources: DatasetFiles) -> list[tuple[str, str]]:
    """The list (and, for a keyed dataset, the class names) ``as_list`` writes beside the files."""
    targets = [int(index.targets[i]) for i in chosen]
    metadata = [index.metadata(i) for i in chosen]
    if listing is not None:
        list_name = check_name(PurePosixPath(listing["list"]).name or listing["list"],
                               source=sources.manifest, what="list file name")
        labels: list[Any] = (targets if listing["labels"] == "numbers"
                             else [manifest.classes[t] for t in targets])
        files = [(list_name, list_text({**listing, "list": list_name}, names, labels, metadata)[1])]
    else:
        columns = list(dict.fromkeys(key for row in metadata for key in row))
        listed = keyed_listing(columns)
        files = [list_text(listed, names, targets, metadata),
                 (CLASSES_NAME, "".join(f"{check_name(name, source=sources.manifest, what='class')}\n"
                                        for name in manifest.classes))]
    taken = set(names)
    for name, _ in files:
        if name in taken:
            raise OutputError(f"The export would write both a sample and its list as {name!r}: export "
                              "it as a tree of class folders instead (without as_list=True).")
    return files


def plan_export(manifest: Manifest, index: SampleIndex, chosen: Sequence[int], class_ids: Sequence[int],
                layout: Layout, listing: dict[str, Any] | None, fmt: ExportFormat, sources: DatasetFiles, *,
                as_list: bool) -> ExportPlan:
    """Decide and check every name the export of the samples ``chosen`` writes under OUT.

    Args:
        manifest, index: The dataset's manifest and sample index.
        chosen: The sample numbers to export, ascending.
        class_ids: The selected classes (each gets its folder, unless ``as_list``).
        layout: How the dataset's paths are laid out (:func:`packer.tools.layout.path_layout`).
        listing: A list file's ``extra.list`` (:func:`packer.tools.layout.recorded_listing`).
        fmt: The codec's export format (renames).
        sources: The dataset files named in errors.
        as_list: Write the files at their paths and a list beside them; not for a tree.

    Raises:
        UnsafeKeyError: a class name or path that is not a safe name inside OUT.
        ManifestError: a tree's path outside its class folder, two samples exported as one name.
        ShardError: a target that is no class (the sample index is damaged).
        OutputError: ``as_list`` and a sample named as its list.
    """
    targets = np.asarray(index.targets)
    _check_targets(targets, len(manifest.classes), sources.targets)
    folders = () if as_list else tuple(check_name(manifest.classes[c], source=sources.manifest, what="class")
                                       for c in class_ids)
    relpaths = [_sample_path(i, index.path(i), manifest.classes[int(targets[i])], layout, sources,
                             as_list=as_list) for i in chosen]
    names = _file_names(relpaths, fmt)
    lists = _lists(manifest, index, chosen, names, listing, sources) if as_list else []
    return ExportPlan(folders, tuple(relpaths), tuple(names), tuple(lists))
