"""Item statuses: why an item a source lists cannot be a sample, as one table every source uses.

A source that finds, while scanning, that an item cannot be packed (an archive member the
archive's damage cut, a WebDataset sample without a label, a Parquet row without an image)
still lists it, with a status in its locator; its reader raises the status's skip reason
(:data:`packer.source.sourcefile.SKIP_REASONS`) instead of reading, so the manifest lists it
with the other skipped files. :data:`OK` (0) means the item can be read.

Statuses live in locators only, which nothing writes to disk: their numbers may grow, but
the numbers of the first eight never change (archive locators were made with them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

__all__ = ["CORRUPT", "EMPTY", "FROM_FILE", "LABEL_OUT_OF_RANGE", "LABEL_STATUSES", "MISSING",
           "MISSING_IMAGE", "MISSING_LABEL", "MISSING_MEMBER", "NEGATIVE_LABEL", "NO_ANNOTATION",
           "NOT_REGULAR", "OK", "OUTSIDE_ROOT", "PERMISSION_DENIED", "STATUS_REASONS", "TOO_LARGE",
           "TRUNCATED", "UNKNOWN_LABEL_NAME", "UNSAFE_PATH", "skip_reason"]

OK: Final = 0
#: The archive ends before the member's last byte.
TRUNCATED: Final = 1
#: The archive's own check fails in the member (a CRC, a compressed stream).
CORRUPT: Final = 2
#: A symbolic link, device or other special entry, not a file.
NOT_REGULAR: Final = 3
#: Named (by a list, by a table's image path) but not there.
MISSING: Final = 4
#: No image at all (a WebDataset sample without an image member, a row with neither bytes nor path).
MISSING_IMAGE: Final = 5
#: No label (a WebDataset sample without its label member, a row whose label is null).
MISSING_LABEL: Final = 6
#: More bytes than ``max_bytes`` (:mod:`packer.source.limits`).
TOO_LARGE: Final = 7
#: Zero bytes.
EMPTY: Final = 8
#: A negative label (how Hugging Face marks an unlabelled row).
NEGATIVE_LABEL: Final = 9
#: A label number past the source's class names.
LABEL_OUT_OF_RANGE: Final = 10
#: A label name that is not one of the source's class names.
UNKNOWN_LABEL_NAME: Final = 11
#: An image path that fails packer's key rules (``..``, control characters): never opened.
UNSAFE_PATH: Final = 12
#: An absolute image path outside the root a conversion was given (or with no root given).
OUTSIDE_ROOT: Final = 13
#: Not a skip: the image is a file a table names by path, read from there (a Parquet row).
FROM_FILE: Final = 14
#: A file that cannot be opened for reading.
PERMISSION_DENIED: Final = 15
#: A COCO image without annotations, dropped on request (``drop_unannotated``).
NO_ANNOTATION: Final = 16
#: A WebDataset sample without a member that ``fields=`` names (its mask, its caption).
MISSING_MEMBER: Final = 17

#: Each status that skips, and its skip reason (one of ``SKIP_REASONS``).
STATUS_REASONS: Final[Mapping[int, str]] = {
    TRUNCATED: "truncated", CORRUPT: "corrupt_member", NOT_REGULAR: "not_a_regular_file",
    MISSING: "missing", MISSING_IMAGE: "missing_image", MISSING_LABEL: "missing_label",
    TOO_LARGE: "too_large", EMPTY: "empty_file", NEGATIVE_LABEL: "missing_label",
    LABEL_OUT_OF_RANGE: "missing_label", UNKNOWN_LABEL_NAME: "missing_label",
    UNSAFE_PATH: "missing_image", OUTSIDE_ROOT: "missing_image", PERMISSION_DENIED: "permission_denied",
    NO_ANNOTATION: "no_annotation", MISSING_MEMBER: "missing_member",
}

#: The statuses that concern the label (the image itself may be fine).
LABEL_STATUSES: Final = frozenset({MISSING_LABEL, NEGATIVE_LABEL, LABEL_OUT_OF_RANGE, UNKNOWN_LABEL_NAME})


def skip_reason(status: int) -> str | None:
    """The skip reason of ``status``, or None for one that reads (:data:`OK`, :data:`FROM_FILE`)."""
    return STATUS_REASONS.get(status)
