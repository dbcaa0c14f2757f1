"""Whether a conversion has anything to pack: one rule, one wording, for the dry run and the run.

A conversion whose every item is skipped would write a dataset of 0 samples that looks complete
and trains on nothing, so it stops instead, with :class:`~packer.errors.EmptySourceError`. When
the scan already knows every skip (Parquet rows without an image, WebDataset samples without a
label, members the archive's damage cut), :func:`check_something_to_pack` stops it before DST
is touched, and the dry run says the same sentence (:func:`nothing_to_pack`). When the skips
are only found by reading (every file fails to decode), :func:`check_something_packed` stops it
before the manifest is written: DST then holds an unfinished conversion, never a dataset.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Final

from packer.errors import EmptySourceError
from packer.source.base import ItemReader, Source, SourceIndex

__all__ = ["check_merge_packed_something", "check_something_packed", "check_something_to_pack",
           "known_skip_counts", "nothing_to_pack"]

#: What to do about a conversion whose items are all skipped, by the most common reason.
_FIXES: Final[Mapping[str, str]] = {
    "missing_image": "give the images (a Parquet table that names its images by path reads them from "
                     "files: give root= the folder that holds them)",
    "missing": "make the files the source names exist, or give root= the folder its relative paths "
               "start from",
    "missing_label": "give the items labels, or name where they are (label_column=, label_field=)",
    "too_large": "raise max_bytes=",
}
_DEFAULT_FIX: Final = "fix or replace the source's files (each skipped item's reason says what is wrong)"


def known_skip_counts(index: SourceIndex, reader: ItemReader) -> tuple[list[int], Counter[str]]:
    """Per class, the items the scan expects to pack; and the items it knows will be skipped,
    by reason (:meth:`ItemReader.known_skip`)."""
    counts = [0] * len(index.classes)
    skips: Counter[str] = Counter()
    for item in index.items:
        reason = reader.known_skip(item)
        if reason is None:
            if item.label >= 0:  # -1: a schema without a class label
                counts[item.label] += 1
        else:
            skips[reason] += 1
    return counts, skips


def _reasons(skips: Mapping[str, int]) -> str:
    ordered = sorted(skips.items(), key=lambda pair: (-pair[1], pair[0]))
    return ", ".join(f"{reason} {count}" for reason, count in ordered)


def _fix(skips: Mapping[str, int]) -> str:
    """What to do, for the most common reason of ``skips``."""
    top = max(sorted(skips), key=lambda reason: skips[reason]) if skips else ""
    return _FIXES.get(top, _DEFAULT_FIX)


def nothing_to_pack(source: Source, skips: Mapping[str, int]) -> str:
    """Why a conversion of ``source`` stops when all its items are skipped (``skips``: the
    count by reason), and the fix; the dry run prints it after "the conversion would stop: "."""
    total = sum(skips.values())
    return (f"every one of the {total} {source.item_words()} of {source.describe()} {source.location!r} "
            f"is skipped ({_reasons(skips)}), so nothing would be packed: {_fix(skips)}")


def check_something_to_pack(source: Source, index: SourceIndex, reader: ItemReader) -> None:
    """Stop before anything is written when the scan knows every item is skipped.

    Raises:
        EmptySourceError: no item can be packed; the message gives the counts by reason and the fix.
    """
    if not index.items:
        return
    _, skips = known_skip_counts(index, reader)
    if sum(skips.values()) == len(index.items):
        raise EmptySourceError(f"The conversion stops: {nothing_to_pack(source, skips)}. Nothing was "
                               "written.")


def check_something_packed(source: Source, dst: str, packed: int, reasons: Iterable[str]) -> None:
    """Stop before the manifest is written when reading packed nothing (``packed`` samples;
    ``reasons``: each skipped item's reason).

    Raises:
        EmptySourceError: nothing was packed; DST is left an unfinished conversion, no dataset.
    """
    if packed:
        return
    skips = Counter(reasons)
    raise EmptySourceError(f"The conversion stops: {nothing_to_pack(source, skips)}. {dst!r} holds no "
                           "dataset (its unfinished conversion is replaced by the next one with "
                           "overwrite=True).")


def check_merge_packed_something(dst: str, packed: int, reasons: Iterable[str]) -> None:
    """:func:`check_something_packed` for ``merge()``, which knows the shards, not the source:
    array tasks that all packed nothing leave no dataset of 0 samples behind.

    Raises:
        EmptySourceError: the shards hold no sample; DST stays an unfinished conversion.
    """
    if packed:
        return
    skips = Counter(reasons)
    raise EmptySourceError(f"Cannot merge {dst!r}: every one of the {sum(skips.values())} items its tasks "
                           f"read was skipped ({_reasons(skips) or 'none found'}), so the dataset would "
                           f"hold 0 samples: {_fix(skips)}; then convert again with overwrite=True.")
