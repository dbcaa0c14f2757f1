"""An archive's members seen as the ImageFolder tree extracting it would give.

Scanning the extracted tree with :func:`packer.source.imagefolder.scan_imagefolder` and laying
out the archive's members here give the same classes, sample order, relative paths, hidden
entries and counts of other and root files:

* classes are the sorted top-level folders (named by a member's path, with or without a
  directory member of their own); a class's images are in :func:`imagefolder_order`;
* names starting with ``.`` are ignored and reported (the hidden entry itself, not what lies
  under it) unless ``include_hidden``; so is a top-level ``__MACOSX`` folder, which macOS's
  zip adds beside the tree;
* an archive whose members all lie under one top folder that holds no image of its own
  (``tar czf imagenette.tgz imagenette2/``) is read as if that folder were the root, and a
  note says so;
* a tar whose only image-bearing members are top-level ``.tar`` files is a tar of per-class
  tars (ImageNet's ``ILSVRC2012_img_train.tar``): class ``n01440764`` is member
  ``n01440764.tar``, read as if it were extracted into the folder ``n01440764/``.

Departures, each in the scan's notes: links are not followed (a symbolic link or special member
with an image name is skipped as ``not_a_regular_file``; tar hard links read their target's
data); a path that occurs twice is taken from its last copy, as extraction does. An image member
over ``max_bytes`` is skipped as ``too_large`` and counts as ``max_bytes + 1`` bytes in plans.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from packer.errors import EmptySourceError
from packer.source.archive.files import absolute_location
from packer.source.archive.members import DIR, FILE, NOT_REGULAR, Listing, Member, bounded_item
from packer.source.base import ScanReport, SourceIndex, SourceItem
from packer.source.imagefolder import IMG_EXTENSIONS
from packer.source.limits import DEFAULT_MAX_BYTES

__all__ = ["TreeLayout", "archive_tree", "imagefolder_order", "is_image_name"]

_MACOSX = "__MACOSX"


def imagefolder_order(relpaths: Iterable[str]) -> list[str]:
    """``class/.../name`` paths in the order ``scan_imagefolder`` gives their files: by class,
    then folders sorted by path (``sorted(os.walk(...))``), then names sorted in each folder."""
    def key(relpath: str) -> tuple[str, str, str]:
        folder, _, name = relpath.rpartition("/")
        return relpath.split("/", 1)[0], folder, name
    return sorted(relpaths, key=key)


def is_image_name(name: str) -> bool:
    """Whether ImageFolder takes a file of this name (its extension, any case)."""
    return name.lower().endswith(IMG_EXTENSIONS)


@dataclass(frozen=True)
class TreeLayout:
    """An archive laid out as a tree: the index, the top folder stripped (``"train/"`` or
    ``""``) and whether classes are member tars."""

    index: SourceIndex
    prefix: str = ""
    nested: bool = False


def _hidden_at(parts: list[str], include_hidden: bool) -> int | None:
    if include_hidden:
        return None
    return next((i for i, part in enumerate(parts) if part.startswith(".")), None)


def _top_folder(members: list[Member], include_hidden: bool) -> str:
    """The one top folder every visible member lies under, when it holds no image itself."""
    visible = [m for m in members if _hidden_at(m.name.split("/")[:1], include_hidden) is None]
    tops = {m.name.split("/", 1)[0] for m in visible}
    if len(tops) != 1:
        return ""
    top = tops.pop()
    if any(m.name == top and m.kind != DIR for m in visible) or not any("/" in m.name for m in visible):
        return ""
    for member in visible:
        parts = member.name.split("/")
        if len(parts) == 2 and member.kind != DIR and is_image_name(parts[1]) and \
                _hidden_at(parts[1:], include_hidden) is None:
            return ""
    return top + "/"


def _class_archives(listing: Listing, members: list[Member], prefix: str, include_hidden: bool,
                    notes: list[str], broken: dict[str, str]) -> list[Member] | None:
    """A tar of class tars as the members of the tree extracting each gives; None if it is not one."""
    tars = [m for m in members if m.kind == FILE and "/" not in m.name and m.name.lower().endswith(".tar")
            and _hidden_at([m.name], include_hidden) is None]
    if not tars or listing.format == "zip":
        return None
    for member in members:
        parts = member.name.split("/")
        if member.kind != DIR and is_image_name(member.name) and _hidden_at(parts, include_hidden) is None:
            return None
    chosen = {m.name for m in tars}
    tree = [m for m in members if m.name not in chosen]
    for member in tars:
        group = member.name[:-4]
        tree.append(Member(group, DIR, member.offset, 0, member.mtime_ns))
        inner = listing.inner.get(prefix + member.name)
        if inner is None or inner.error is not None:
            why = inner.error if inner is not None and inner.error else "not indexed"
            broken[group] = why
            notes.append(f"Class archive {member.name!r} cannot be read ({why}): class {group!r} has "
                         "no samples from it.")
            continue
        tree.extend(m._replace(name=f"{group}/{m.name}") for m in inner.members)
    notes.append(f"A tar of {len(tars)} per-class tars: each class is read from its member "
                 f"<class>.tar, as if extracted into <class>/.")
    return tree


def archive_tree(listing: Listing, *, include_hidden: bool = False, allow_empty: bool = False,
                 max_bytes: int = DEFAULT_MAX_BYTES) -> TreeLayout:
    """Lay out ``listing`` as the ImageFolder tree extracting it gives (module docstring);
    images over ``max_bytes`` are ``too_large``.

    Raises:
        EmptySourceError: no class folder, or a class without images and ``allow_empty`` off.
    """
    notes = list(listing.notes)
    hidden: set[str] = set()
    members = list(listing.members)
    if not include_hidden and any(m.name.split("/", 1)[0] == _MACOSX for m in members):
        hidden.add(_MACOSX)
        members = [m for m in members if m.name.split("/", 1)[0] != _MACOSX]
    prefix = _top_folder(members, include_hidden)
    if prefix:
        # the top folder's hidden siblings (every visible member lies under it)
        hidden.update(m.name.split("/", 1)[0] for m in members
                      if not m.name.startswith(prefix) and m.name != prefix[:-1])
        members = [m._replace(name=m.name[len(prefix):]) for m in members if m.name.startswith(prefix)]
        notes.append(f"Every member lies under the folder {prefix[:-1]!r}: it is taken as the tree's root.")
    broken: dict[str, str] = {}
    nested = _class_archives(listing, members, prefix, include_hidden, notes, broken)
    if nested is not None:
        members = nested
    classes: set[str] = set()
    images: dict[str, Member] = {}
    other = root_files = repeated = 0
    for member in members:
        parts = member.name.split("/")
        at = _hidden_at(parts, include_hidden)
        if at is not None:
            hidden.add("/".join(parts[:at + 1]))
            continue
        if len(parts) == 1:
            if member.kind == DIR:
                classes.add(parts[0])
            else:
                root_files += 1
            continue
        classes.add(parts[0])
        if member.kind == DIR:
            continue
        if is_image_name(parts[-1]):
            repeated += member.name in images
            images[member.name] = member
        else:
            other += 1
    if not classes:
        raise EmptySourceError(f"Couldn't find any class folder in the archive {listing.path!r}: it "
                               "needs one folder per class (<class>/<image>), or one <class>.tar per class.")
    names = sorted(classes)
    labels = {name: i for i, name in enumerate(names)}
    items = []
    links = 0
    for relpath in imagefolder_order(images):
        member = images[relpath]
        size, status = bounded_item(member, max_bytes, None if member.kind == FILE else NOT_REGULAR)
        links += member.kind != FILE
        items.append(SourceItem(relpath, labels[relpath.split("/", 1)[0]], size, member.mtime_ns,
                                member.locator(0, status)))
    if links:
        notes.append(f"{links} member(s) with image names are symbolic links or special files: packer "
                     "does not follow links inside archives, so they are skipped (not_a_regular_file).")
    if repeated:
        notes.append(f"{repeated} image path(s) occur more than once in the archive: the last copy of "
                     "each is taken, as extracting the archive would.")
    used = {item.label for item in items}
    empty = [name for name in names if labels[name] not in used]
    if empty and not allow_empty:
        why = "".join(f" (class archive {name}.tar cannot be read: {broken[name]})" for name in empty
                      if name in broken)
        raise EmptySourceError(f"Found no image for the class(es) {', '.join(map(repr, empty))} in the "
                               f"archive {listing.path!r}{why}; looked for extensions "
                               f"{' '.join(IMG_EXTENSIONS)}. Add images, or allow empty classes "
                               "(allow_empty=True).")
    report = ScanReport(ignored_hidden=tuple(sorted(hidden)), other_files=other, root_files=root_files,
                        notes=tuple(notes))
    index = SourceIndex(absolute_location(listing.path), tuple(names), tuple(items), report, include_hidden)
    return TreeLayout(index, prefix, nested is not None)
