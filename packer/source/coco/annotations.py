"""Reading a COCO instances file once: its categories, its images in id order, and each image's
annotations as one compact JSON text (the item's metadata, which only its shard task carries).

The file is one JSON object (the layout of ``instances_train2017.json``)::

    {"images": [{"id": 1, "file_name": "000000000001.jpg", "width": 640, "height": 480}, ...],
     "annotations": [{"id": 7, "image_id": 1, "category_id": 18, "bbox": [x, y, w, h],
                      "area": 1035.7, "iscrowd": 0, "segmentation": [[x1, y1, ...]]}, ...],
     "categories": [{"id": 18, "name": "dog", "supercategory": "animal"}, ...]}

Rules (each refusal a :class:`~packer.errors.SourceError` naming the entry and the fix, before
anything is written):

* ``images`` and ``categories`` are lists of objects (``annotations`` may be absent: no boxes);
  every id is an integer; an image has a ``file_name`` text; a category a non-empty ``name``.
* Image ids, category ids and category names are each unique: a repeated one is refused.
* Categories become the box classes in ascending id order: category id ``categories[i]`` is box
  label ``i`` (the names are the ``box_labels`` field's classes; the manifest records the ids).
* An annotation whose ``category_id`` no category has is refused (naming both ids).
* An annotation whose ``image_id`` no image has is dropped, counted in a scan note (a file whose
  ``images`` list was cut to a subset keeps working); nothing else is dropped.
* An image's annotations keep the file's order (as ``pycocotools``' ``getAnnIds`` gives them).
  ``iscrowd`` defaults to 0, ``segmentation`` to null, ``area`` to the bbox's ``w * h``; values are
  kept as the file gives them (the field types check them per sample: a bad bbox skips its image).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from packer.errors import EmptySourceError, SourceError, SourceNotFoundError

__all__ = ["CocoFile", "CocoImage", "looks_like_coco", "parse_coco"]

#: How much of a ``.json`` file detection reads: a COCO file names its lists near its start.
PEEK_BYTES: Final = 1 << 20
_TOP_KEY: Final = re.compile(rb'"(?:images|annotations|categories)"\s*:')


def looks_like_coco(path: str) -> bool:
    """Whether the file at ``path`` starts as a COCO file: one JSON object naming ``images``,
    ``annotations`` or ``categories`` in its first MiB (nothing parsed: a peek)."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(PEEK_BYTES)
    except OSError:
        return False
    head = head.removeprefix(b"\xef\xbb\xbf").lstrip()
    return head.startswith(b"{") and _TOP_KEY.search(head) is not None


@dataclass(frozen=True, slots=True)
class CocoImage:
    """One entry of ``images``: its id, its ``file_name`` as given, and its annotations as JSON
    text (``{"area", "bbox", "category", "image_id", "iscrowd", "segmentation"}``, one list
    entry per annotation; ``category`` holds box label indices)."""

    image_id: int
    file_name: str
    metadata: str


@dataclass(frozen=True)
class CocoFile:
    """A parsed COCO file: images by ascending id, categories by ascending id, and what was noted."""

    path: str
    images: tuple[CocoImage, ...]
    category_ids: tuple[int, ...]
    category_names: tuple[str, ...]
    annotations: int
    empty_images: int
    dropped: int
    notes: tuple[str, ...]


def _fail(path: str, what: str) -> SourceError:
    return SourceError(f"Bad COCO file {path!r}: {what}. Fix the file (nothing was written).")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _load(path: str) -> Mapping[str, Any]:
    """The file's top-level object."""
    try:
        with open(path, encoding="utf-8-sig") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        raise SourceNotFoundError(f"COCO file {path!r} does not exist.") from None
    except OSError as err:
        raise SourceNotFoundError(f"Cannot read the COCO file {path!r}: {err.strerror or err}.") from None
    except UnicodeDecodeError as err:
        raise _fail(path, f"not UTF-8 text ({err.reason} at byte {err.start})") from None
    except ValueError as err:
        raise _fail(path, f"not valid JSON ({err})") from None
    if not isinstance(data, dict):
        raise _fail(path, f"the top level is a JSON {type(data).__name__}, not an object with 'images', "
                          "'annotations' and 'categories'")
    return data


def _entries(path: str, data: Mapping[str, Any], key: str, *, required: bool) -> Sequence[Mapping[str, Any]]:
    """``data[key]``, a list of objects."""
    if key not in data:
        if required:
            raise _fail(path, f"no {key!r} list (a COCO instances file has 'images', 'annotations' and "
                              "'categories')")
        return []
    entries = data[key]
    if not isinstance(entries, list):
        raise _fail(path, f"{key!r} is a JSON {type(entries).__name__}, not a list")
    for position, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise _fail(path, f"{key}[{position}] is a JSON {type(entry).__name__}, not an object")
    return entries


def _categories(path: str, data: Mapping[str, Any]) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """Category ids ascending, and their names."""
    found: dict[int, str] = {}
    for position, entry in enumerate(_entries(path, data, "categories", required=True)):
        ident, name = entry.get("id"), entry.get("name")
        if not _is_int(ident):
            raise _fail(path, f"categories[{position}] has the id {ident!r}, not an integer")
        if not isinstance(name, str) or not name:
            raise _fail(path, f"category {ident} (categories[{position}]) has the name {name!r}, not a "
                              "non-empty text")
        if ident in found:
            raise _fail(path, f"the category id {ident} is given twice (categories[{position}])")
        found[ident] = name
    ids = tuple(sorted(found))
    names = tuple(found[i] for i in ids)
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise _fail(path, f"the category name {twice[0]!r} is given to more than one id (the names are "
                          "the box classes: one name per category)")
    return ids, names


def _images(path: str, data: Mapping[str, Any]) -> list[tuple[int, str]]:
    """``(id, file_name)`` of every image, by ascending id."""
    images: dict[int, str] = {}
    for position, entry in enumerate(_entries(path, data, "images", required=True)):
        ident, name = entry.get("id"), entry.get("file_name")
        if not _is_int(ident):
            raise _fail(path, f"images[{position}] has the id {ident!r}, not an integer")
        if ident in images:
            raise _fail(path, f"the image id {ident} is given twice (images[{position}] repeats "
                              f"{images[ident]!r}): one entry per image")
        if not isinstance(name, str):
            raise _fail(path, f"image {ident} (images[{position}]) has no 'file_name' text")
        images[ident] = name
    return sorted(images.items())


def _area(entry: Mapping[str, Any]) -> Any:
    """The annotation's ``area``, or its bbox's ``w * h`` when it has none (0 without a usable bbox)."""
    if "area" in entry:
        return entry["area"]
    box = entry.get("bbox")
    if isinstance(box, list) and len(box) == 4 and all(isinstance(v, int | float) for v in box):
        return float(box[2]) * float(box[3])
    return 0.0


def _grouped(path: str, data: Mapping[str, Any], images: Mapping[int, int], labels: Mapping[int, int]
             ) -> tuple[list[dict[str, list[Any]]], int, int, tuple[Any, Any] | None]:
    """Each image's annotations (by image position), the count kept, the count dropped and the
    first dropped ``(annotation id, image id)``."""
    groups: list[dict[str, list[Any]]] = [
        {"area": [], "bbox": [], "category": [], "iscrowd": [], "segmentation": []} for _ in images]
    kept = dropped = 0
    first: tuple[Any, Any] | None = None
    for position, entry in enumerate(_entries(path, data, "annotations", required=False)):
        image, category = entry.get("image_id"), entry.get("category_id")
        where = f"annotation {entry.get('id')!r} (annotations[{position}])"
        if not _is_int(category) or category not in labels:
            listed = ", ".join(map(str, list(labels)[:10])) + (", ..." if len(labels) > 10 else "")
            raise _fail(path, f"{where} names the category_id {category!r}, which 'categories' does not "
                              f"list (its ids: {listed or 'none'})")
        slot = images.get(image) if _is_int(image) else None
        if slot is None:
            dropped += 1
            first = first or (entry.get("id"), image)
            continue
        group = groups[slot]
        group["bbox"].append(entry.get("bbox"))
        group["category"].append(labels[category])
        group["iscrowd"].append(entry.get("iscrowd", 0))
        group["area"].append(_area(entry))
        group["segmentation"].append(entry.get("segmentation"))
        kept += 1
    return groups, kept, dropped, first


def parse_coco(path: str) -> CocoFile:
    """Parse the COCO file at ``path`` once (see the module docstring).

    Raises:
        SourceNotFoundError: the file cannot be read.
        SourceError: it is no COCO file, or breaks a rule above; the message names the entry.
        EmptySourceError: it lists no image.
    """
    data = _load(path)
    category_ids, names = _categories(path, data)
    images = _images(path, data)
    if not images:
        raise EmptySourceError(f"The COCO file {path!r} lists no image: nothing to convert.")
    positions = {ident: i for i, (ident, _) in enumerate(images)}
    groups, kept, dropped, first = _grouped(path, data, positions, {c: i for i, c in enumerate(category_ids)})
    del data  # the parsed file: only the compact texts below are kept
    entries = []
    for (ident, file_name), group in zip(images, groups, strict=True):
        text = json.dumps({**group, "image_id": ident}, sort_keys=True, separators=(",", ":"),
                          ensure_ascii=False)
        entries.append(CocoImage(ident, file_name, text))
    empty = sum(1 for group in groups if not group["bbox"])
    notes = []
    if dropped and first is not None:
        notes.append(f"{dropped} annotation(s) name an image id that 'images' does not list (the first: "
                     f"annotation {first[0]!r}, image_id {first[1]!r}): dropped.")
    return CocoFile(path, tuple(entries), category_ids, names, kept, empty, dropped, tuple(notes))
