"""A YOLO set's class names: from ``classes_file=`` (one per line), else from the ``names`` of
the dataset's YAML file (Ultralytics' ``data.yaml``: a list, or a mapping of 0..K-1 to names),
read with PyYAML (the ``yolo`` extra)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Final

from packer.errors import MissingExtraError, SourceError
from packer.keys import check_name
from packer.source.classnames import read_class_names

__all__ = ["YAML_NAMES", "class_names", "yaml_files"]

#: The most bytes of a YAML file read (a data.yaml is a few KiB, COCO's 80 names included).
_MAX_YAML: Final = 1 << 20
#: File names a dataset's YAML file may have.
YAML_NAMES: Final = (".yaml", ".yml")


def yaml_files(base: str) -> list[str]:
    """The YAML files directly in ``base``, sorted (hidden ones left out)."""
    try:
        names = os.listdir(base)
    except OSError:
        return []
    return sorted(os.path.join(base, n) for n in names
                  if n.lower().endswith(YAML_NAMES) and not n.startswith(".")
                  and os.path.isfile(os.path.join(base, n)))


def _load(path: str) -> Any:
    try:
        import yaml
    except ImportError:
        raise MissingExtraError(f"Reading the class names in {path!r} needs PyYAML: pip install "
                                "'packer-shards[yolo]', or give classes_file= (one name per line).") from None
    if os.path.getsize(path) > _MAX_YAML:
        raise SourceError(f"The YAML file {path!r} is larger than {_MAX_YAML} bytes: a dataset's "
                          "data.yaml is a few KiB. Give classes_file= instead.")
    try:
        with open(path, encoding="utf-8-sig") as handle:
            return yaml.safe_load(handle)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        raise SourceError(f"Cannot read the YAML file {path!r}: {err}. Fix it, or give "
                          "classes_file=.") from None


def _names(path: str, document: Mapping[str, Any]) -> tuple[str, ...]:
    """The ``names`` of a data.yaml document, checked against its ``nc``."""
    raw = document["names"]
    if isinstance(raw, Mapping):
        keys = sorted(raw, key=lambda k: (not isinstance(k, int), k if isinstance(k, int) else 0))
        if keys != list(range(len(raw))):
            raise SourceError(f"The names in {path!r} are keyed {list(raw)[:5]}: a YOLO set's names map "
                              "0, 1, ... K-1 to names. Fix the file, or give classes_file=.")
        raw = [raw[k] for k in keys]
    if not isinstance(raw, list) or not all(isinstance(n, str | int) for n in raw):
        raise SourceError(f"The names in {path!r} are not a list or mapping of names. Fix the file, or "
                          "give classes_file=.")
    names = tuple(str(n) for n in raw)
    count = document.get("nc")
    if count is not None and count != len(names):
        raise SourceError(f"{path!r} says nc: {count} but names {len(names)} classes: make them agree.")
    if len(set(names)) != len(names):
        raise SourceError(f"{path!r} names a class twice: one name per class.")
    for name in names:
        check_name(name, source=path, what="class")
    return names


def class_names(base: str, classes_file: str | None) -> tuple[tuple[str, ...], str | None]:
    """The box classes and the file they came from (None: no names were found).

    Raises:
        SourceError: the YAML files disagree or are malformed, or describe a pose set
            (``kpt_shape``), whose label lines this source does not read.
        MissingExtraError: a YAML file is there and PyYAML is not.
    """
    if classes_file is not None:
        return read_class_names(classes_file), classes_file
    found: dict[str, tuple[str, ...]] = {}
    for path in yaml_files(base):
        document = _load(path)
        if isinstance(document, Mapping) and "kpt_shape" in document:
            raise SourceError(f"{path!r} describes a pose (keypoints) set, whose label lines are not "
                              "boxes: packer reads YOLO detection and segmentation sets.")
        if isinstance(document, Mapping) and "names" in document:
            found[path] = _names(path, document)
    if len(set(found.values())) > 1:
        raise SourceError(f"The YAML files {', '.join(map(repr, found))} name different classes: give "
                          "classes_file= (one name per line) to say which.")
    if not found:
        return (), None
    path, names = next(iter(found.items()))
    return names, path
