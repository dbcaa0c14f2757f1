"""What makes two conversions "the same run", so that ``resume`` can finish an interrupted one.

A conversion records a fingerprint of its plan (source path, options, classes, and every source
file's relative path, label and size: what decides the shard boundaries) in its in-progress
marker, and each finished shard records the fingerprint of its own inputs, each file's identity
(path, label, size *and modification time*), in its receipt. ``resume`` continues only when the
plan is unchanged, keeps each shard whose receipt matches, and redoes the rest: a file rewritten in
place, even with the same size, changes its mtime and so its shard is written again. (Storage
whose times cannot be trusted: ``packer verify --against SRC`` compares bytes.)
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from packer.errors import ResumeError
from packer.source.base import SourceIndex, SourceItem

__all__ = ["check_resumable", "item_identities", "plan_fingerprint", "shard_contents", "shard_fingerprint",
           "shard_inputs"]

#: The options that decide a shard's bytes (not its boundaries, labels or scan).
_PAYLOAD_OPTIONS = ("backend", "codec", "codec_params", "check", "max_pixels")


def _digest(payload: dict[str, Any]) -> str:
    text = json.dumps(payload, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


def item_identities(items: Sequence[SourceItem], *, labels: bool) -> tuple[tuple[Any, ...], ...]:
    """Each item's ``(relpath, label, size, mtime_ns)``, or without the label: what the shard
    fingerprints hash (the locator is not identity: a member that moved in a rebuilt archive
    is the same input)."""
    if labels:
        return tuple((item.relpath, item.label, item.size, item.mtime_ns) for item in items)
    return tuple((item.relpath, item.size, item.mtime_ns) for item in items)


def plan_fingerprint(src: str, options: dict[str, Any], index: SourceIndex,
                     metadata: Sequence[str] = ()) -> str:
    """Identity of a conversion plan: equal fingerprints give equal datasets (``metadata``: a list
    source's other columns, per item)."""
    payload: dict[str, Any] = {
        "source": src,
        "options": options,
        "classes": index.classes,
        "items": [(item.relpath, item.label, item.size) for item in index.items],
    }
    if metadata:
        payload["metadata"] = list(metadata)
    return _digest(payload)


def shard_fingerprint(index: int, options: dict[str, Any], items: Sequence[tuple[Any, ...]],
                      metadata: Sequence[str] = ()) -> str:
    """Identity of a shard's inputs, kept in its receipt: same fingerprint, same shard (and receipt)."""
    payload: dict[str, Any] = {"index": index, "options": options, "items": items}
    if metadata:
        payload["metadata"] = list(metadata)
    return _digest(payload)


def _payload_options(options: dict[str, Any]) -> dict[str, Any]:
    # the digest names the shard and its contents' checksums: recorded only when not sha256
    chosen = {key: options[key] for key in _PAYLOAD_OPTIONS}
    return {**chosen, "digest": options["digest"]} if "digest" in options else chosen


def shard_inputs(options: dict[str, Any], items: Sequence[tuple[Any, ...]],
                 fields: Sequence[str] = ()) -> str:
    """What a shard is made of, label-free: the options that decide its bytes and each item's
    ``(relpath, size, mtime_ns)``. ``packer update`` reuses a shard whose inputs are unchanged;
    labels and list metadata live in the sample index, so relabelling reuses every shard. In a
    dataset with fields the items' field values (``fields``, the scan's JSON per item) are in the
    records, so they are inputs too: a changed caption or box rewrites its shard."""
    return _digest(_inputs_payload(options, items, fields))


def shard_contents(options: dict[str, Any], items: Sequence[tuple[str, str]],
                   fields: Sequence[str] = ()) -> str:
    """:func:`shard_inputs` by content: each item's ``(relpath, hex digest of its source bytes)``
    by the dataset's algorithm (``""`` for a file that could not be read), for ``packer update
    --checksum``."""
    return _digest(_inputs_payload(options, items, fields))


def _inputs_payload(options: dict[str, Any], items: Sequence[Sequence[Any]],
                    fields: Sequence[str]) -> dict[str, Any]:
    payload: dict[str, Any] = {"options": _payload_options(options), "items": [list(item) for item in items]}
    if fields:  # absent without fields: the inputs of datasets of images and classes are unchanged
        payload["fields"] = list(fields)
    return payload


def check_resumable(dst: str, marker: dict[str, Any], fingerprint: str, src: str,
                    options: dict[str, Any], num_items: int) -> None:
    """Refuse to resume a run whose source or options differ from this one's.

    Raises:
        ResumeError: the message says what differs and how to start again.
    """
    if marker.get("fingerprint") == fingerprint:
        return
    if not marker.get("fingerprint"):
        why = "its plan was not recorded (it stopped before writing anything)"
    elif marker.get("source") != src:
        why = f"it converted {marker.get('source')!r}, not {src!r}"
    elif marker.get("options") != options:
        then = marker.get("options") or {}
        changed = sorted(k for k in set(then) | set(options) if then.get(k) != options.get(k))
        why = "options differ: " + ", ".join(f"{k} was {then.get(k)!r}, now {options.get(k)!r}"
                                             for k in changed)
    else:
        why = (f"the source tree changed since ({marker.get('items')} images then, {num_items} now, "
               "or files renamed or resized)")
    raise ResumeError(f"Cannot resume the conversion in {dst!r}: {why}. Run the same conversion "
                      "as before with resume=True, or start again with overwrite=True.")
