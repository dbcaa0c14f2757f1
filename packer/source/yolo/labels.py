"""One YOLO label file (``labels/<split>/<stem>.txt``) parsed: a box per line, as Ultralytics
writes them: ``class cx cy w h`` normalised to [0, 1], or a segment ``class x1 y1 x2 y2 ...``
(whose box is its polygon's bounds, as Ultralytics derives it; the polygon is kept)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from packer.source.sourcefile import UnpackableFile

__all__ = ["YoloLabels", "parse_labels"]


@dataclass
class YoloLabels:
    """An image's boxes (cxcywh, normalised, float32 ``[N, 4]``), classes and segments (the
    polygon of a segment line, flat normalised ``[x1, y1, ...]``; ``[]`` for a box line)."""

    boxes: list[list[float]] = field(default_factory=list)
    classes: list[int] = field(default_factory=list)
    segments: list[list[float]] = field(default_factory=list)

    def box_array(self) -> np.ndarray:
        """The boxes as float32 ``[N, 4]``."""
        return np.asarray(self.boxes, dtype=np.float32).reshape(-1, 4)


def _bad(where: str, number: int, why: str) -> UnpackableFile:
    return UnpackableFile("invalid_value", f"{where}, line {number}: {why}")


def _line(where: str, number: int, tokens: list[str], labels: YoloLabels) -> None:
    try:
        label = int(tokens[0])
    except ValueError:
        raise _bad(where, number, f"the class {tokens[0]!r} is not a whole number") from None
    if label < 0:
        raise _bad(where, number, f"the class {label} is negative")
    try:
        values = [float(token) for token in tokens[1:]]
    except ValueError as err:
        raise _bad(where, number, f"a coordinate is not a number ({err})") from None
    if not all(math.isfinite(v) for v in values):
        raise _bad(where, number, "a coordinate is not finite")
    if len(values) == 4:
        labels.boxes.append(values)
        labels.segments.append([])
    elif len(values) >= 6 and len(values) % 2 == 0:
        xs, ys = values[0::2], values[1::2]
        x1, y1, x2, y2 = min(xs), min(ys), max(xs), max(ys)
        labels.boxes.append([(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1])
        labels.segments.append(values)
    else:
        raise _bad(where, number, f"{len(tokens)} values: a box is 'class cx cy w h', a segment "
                                  "'class x1 y1 x2 y2 x3 y3 ...'")
    labels.classes.append(label)


def parse_labels(data: bytes, where: str) -> YoloLabels:
    """The labels in ``data``, the bytes of the label file ``where`` (for messages).

    Raises:
        UnpackableFile: ``invalid_value``: the file is not UTF-8 text, or a line is no box or
            segment; the detail names the line.
    """
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise UnpackableFile("invalid_value", f"{where} is not UTF-8 text ({err.reason})") from None
    labels = YoloLabels()
    for number, line in enumerate(text.splitlines(), start=1):
        tokens = line.split()
        if tokens:
            _line(where, number, tokens, labels)
    return labels
