"""Brace patterns of shard and table files, as WebDataset's users write them (``braceexpand``'s
grammar, which webdataset itself uses, so a pattern names the same files in both):

* a list, nested or not: ``{train,val}``, ``{a,b{1..3}}``, ``{,-extra}`` (one alternative empty);
* an integer range, either way, negative numbers too, zero-padded when an end is (``{000..146}``:
  every name three digits wide), with an optional step: ``{0..10..2}``, ``{5..1}``;
* a letter range: ``{a..e}``, ``{A..z..2}``;
* several braces in one pattern (every combination, the leftmost varying slowest), and ``\\``
  before a character to take it literally (``\\{``); ``{x}`` with no comma or range is literal.
  As in ``braceexpand``, escapes are removed once per level of braces a text sits in (so
  ``{a\\\\b,c}`` gives ``ab``: write ``\\\\\\\\`` there for one backslash); names with
  backslashes are rare, and matching ``braceexpand`` keeps a pattern naming the same files.

Unbalanced braces are refused. The expansion is counted before any name is made: a pattern naming
more than :data:`MAX_NAMES` files is refused. What the braces produce must keep every name under
the folder the pattern's text before its first brace names: each name's rest is checked as a key
(:func:`packer.keys.check_key`: no ``..`` segment, no absolute path, no control character).
"""

from __future__ import annotations

import itertools
import math
import re
import string
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final, Union

from packer.errors import SourceError
from packer.keys import check_key

__all__ = ["MAX_NAMES", "expand_braces"]

#: The most names one pattern may expand to.
MAX_NAMES: Final = 1_000_000

_INT_RANGE: Final = re.compile(r"^(-?\d+)\.\.(-?\d+)(?:\.\.-?(\d+))?$")
_CHAR_RANGE: Final = re.compile(r"^([A-Za-z])\.\.([A-Za-z])(?:\.\.-?(\d+))?$")
_ESCAPED: Final = re.compile(r"\\(.)")
_ALPHABET: Final = string.ascii_uppercase + string.ascii_lowercase


@dataclass(frozen=True)
class _Product:
    """Every combination of its items' texts, in order."""

    items: tuple[_Node, ...]


@dataclass(frozen=True)
class _Choice:
    """The texts of each alternative, one after the other."""

    alternatives: tuple[_Product, ...]


@dataclass(frozen=True)
class _Padded:
    """Integers written zero-padded to ``width`` (``%0Nd``: the sign counts in the width)."""

    numbers: range
    width: int

    def __len__(self) -> int:
        return len(self.numbers)

    def __iter__(self) -> Iterator[str]:
        return (f"{n:0{self.width}d}" for n in self.numbers)


_Node = Union[str, _Product, _Choice, _Padded, tuple[str, ...]]  # noqa: UP007 - a runtime alias


class _Unbalanced(Exception):
    pass


def _parse(pattern: str) -> _Product:
    """``pattern`` as a product of literal texts, choices and ranges."""
    items: list[_Node] = []
    start = pos = depth = 0
    while pos < len(pattern):
        char = pattern[pos]
        if char == "\\":
            pos += 2
            continue
        if char == "{":
            if depth == 0 and pos > start:
                items.append(pattern[start:pos])
                start = pos
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                inner = pattern[start + 1:pos]
                node = _expression(inner)
                items.extend(["{", _parse(inner), "}"] if node is None else [node])
                start = pos + 1
        pos += 1
    if depth != 0:
        raise _Unbalanced
    if start < pos:
        items.append(pattern[start:])
    return _Product(tuple(items))


def _expression(inner: str) -> _Node | None:
    """A brace's content as a range or a choice, or None when it is neither (taken literally)."""
    match = _INT_RANGE.match(inner)
    if match:
        first, last, step_text = match.groups()
        padded = any(s.startswith(("0", "-0")) for s in (first, last) if s not in ("0", "-0"))
        step = (int(step_text) or 1) if step_text else 1
        low, high = int(first), int(last)
        numbers = range(low, high + 1, step) if low < high else range(low, high - 1, -step)
        return _Padded(numbers, max(len(first), len(last)) if padded else 0)
    match = _CHAR_RANGE.match(inner)
    if match:
        step = (int(match.group(3)) or 1) if match.group(3) else 1
        low, high = _ALPHABET.index(match.group(1)), _ALPHABET.index(match.group(2))
        if low < high:
            return tuple(_ALPHABET[low:high + 1:step])
        return tuple(_ALPHABET[low:(high or -len(_ALPHABET)) - 1:-step])
    return _choice(inner)


def _choice(inner: str) -> _Choice | None:
    """``a,b{c,d},e`` as its alternatives (None without a comma outside nested braces)."""
    parts: list[_Product] = []
    start = pos = depth = 0
    while pos < len(inner):
        char = inner[pos]
        if char == "\\":
            pos += 2
            continue
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(_parse(inner[start:pos]))
            start = pos + 1
        pos += 1
    if depth != 0 or not parts:
        return None
    return _Choice((*parts, _parse(inner[start:])))


def _count(node: _Node) -> int:
    if isinstance(node, str):
        return 1
    if isinstance(node, _Product):
        return math.prod(_count(item) for item in node.items)
    if isinstance(node, _Choice):
        return sum(_count(alternative) for alternative in node.alternatives)
    return len(node)


def _texts(node: _Node) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, _Product):  # escapes go at every level, as braceexpand's _flatten does
        return [_ESCAPED.sub(r"\1", "".join(parts))
                for parts in itertools.product(*(_texts(item) for item in node.items))]
    if isinstance(node, _Choice):
        return [text for alternative in node.alternatives for text in _texts(alternative)]
    return list(node)


def _expands(node: _Node) -> bool:
    """Whether ``node`` holds a choice or a range (not only literal text)."""
    if isinstance(node, str):
        return False
    if isinstance(node, _Product):
        return any(_expands(item) for item in node.items)
    return True


def _fixed_folder(pattern: str) -> str:
    """The pattern's text up to the last ``/`` before its first (unescaped) brace, unescaped."""
    pos = 0
    while pos < len(pattern) and pattern[pos] != "{":
        pos += 2 if pattern[pos] == "\\" else 1
    head = pattern[:pos]
    return _ESCAPED.sub(r"\1", head[:head.rfind("/") + 1])


def expand_braces(pattern: str, *, limit: int = MAX_NAMES) -> list[str]:
    """The names ``pattern`` expands to, in order (see the module docstring); ``[pattern]``
    with escapes removed when it holds no brace expression.

    Raises:
        SourceError: unbalanced braces, or more than ``limit`` names.
        UnsafeKeyError: a name leaves the folder the pattern's fixed start names.
    """
    try:
        tree = _parse(pattern)
    except _Unbalanced:
        raise SourceError(f"Source pattern {pattern!r} has unbalanced braces: close each '{{' with "
                          "'}', or write a literal brace as '\\{'.") from None
    count = _count(tree)
    if count > limit:
        raise SourceError(f"Source pattern {pattern!r} names {count:,} files, more than the {limit:,} "
                          "one pattern may name: check its ranges (a range too wide, or a step "
                          "missing), or give a folder of the files instead.")
    names = _texts(tree)
    if _expands(tree):
        folder = _fixed_folder(pattern)
        for name in names:
            rest = name[len(folder):] if name.startswith(folder) else name
            if rest:  # empty: the folder itself, which is no file (refused as such by the caller)
                check_key(rest, source=pattern, what="file name (from its braces)")
    return names
