"""The one check every path from data passes before packer reads, writes or uploads through it.

A key is a relative POSIX path inside a place packer owns: a dataset's root, an export's OUT, a
temporary mirror, an archive's or a list file's root. Keys come from data that somebody else
made (a manifest, a sample index, an archive member, a list file, a label that becomes a folder,
a remote listing), so each is checked once where it enters, by :func:`check_key` (or
:func:`check_name` for one folder or file name), and refused with :class:`UnsafeKeyError`:

* not empty, not absolute (no leading ``/``), no ``..`` segment;
* no NUL, no control character (C0 but tab, DEL, C1, Unicode line and paragraph separators):
  they would reach terminals and logs raw, and no real file name needs them;
* normalised once: ``.`` segments and empty segments (``a//b``) are dropped.

A refused key never touches the file system: the check is pure string work.
"""

from __future__ import annotations

import re

from packer.errors import UnsafeKeyError

__all__ = ["check_key", "check_name", "escaped", "is_safe_key", "key_problem"]

#: Control characters: C0, DEL and C1 (Unicode's category Cc), and the Unicode line and
#: paragraph separators, which end a line on a terminal too. Tab is the one exception: it is
#: whitespace on a terminal, moves nothing, and real file names hold it (torchvision's
#: ImageFolder reads them, and parity is packer's first promise). A regex: keys are checked by
#: the million (every item of a source), and this is ~10x faster than a loop over characters.
_CONTROL = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029]")


def _control(text: str) -> str | None:
    """The first control character in ``text``, or ``None``."""
    match = _CONTROL.search(text)
    return match.group() if match else None


def key_problem(key: object) -> str | None:
    """Why ``key`` is no safe relative key (a phrase), or ``None`` when it is one."""
    if not isinstance(key, str):
        return f"is a {type(key).__name__}, not a path"
    if not key:
        return "is empty"
    if "\x00" in key:
        return "holds a NUL byte"
    char = _control(key)
    if char is not None:
        return f"holds the control character {char!r}"
    if key.startswith("/"):
        return "is an absolute path"
    segments = [s for s in key.split("/") if s not in ("", ".")]
    if ".." in segments:
        return "has a '..' segment"
    if not segments:
        return "names no file (only '.' and '/')"
    return None


def is_safe_key(key: object) -> bool:
    """Whether :func:`check_key` would accept ``key``."""
    return key_problem(key) is None


def check_key(key: str, *, source: str, what: str = "path") -> str:
    """``key`` normalised (``.`` and empty segments dropped), once it is a safe relative key.

    Args:
        key: The path as the data gives it.
        source: The file (or URL) that holds it, named in the error.
        what: What the key is, for the error (``"shard path"``, ``"member name"``, ...).

    Raises:
        UnsafeKeyError: empty, absolute, a ``..`` segment, a NUL or a control character.
    """
    problem = key_problem(key)
    if problem is not None:
        raise UnsafeKeyError(
            f"{escaped(source)} names the {what} {key!r}, which {problem}: packer "
            "refuses any path that could lead outside its place; the input is damaged or crafted, "
            "re-create it from a trusted copy.", key=key if isinstance(key, str) else repr(key),
            source=source)
    return "/".join(s for s in key.split("/") if s not in ("", "."))


def check_name(name: str, *, source: str, what: str = "class name") -> str:
    """``name`` once it is a safe single folder or file name (a safe key without ``/``).

    Raises:
        UnsafeKeyError: as :func:`check_key`, and also a ``/`` or a name that is only ``.``.
    """
    checked = check_key(name, source=source, what=what)
    if checked != name or "/" in name:
        raise UnsafeKeyError(
            f"{escaped(source)} names the {what} {name!r}, which is not one folder name "
            "(it holds '/' or is '.'): packer makes a folder of it, so it refuses this input, damaged "
            "or crafted; re-create it from a trusted copy.", key=name, source=source)
    return name


def escaped(text: object) -> str:
    """``text`` with each control character written as its escape (``\\x1b``), the rest as it
    is, so that a name from data printed on a terminal never moves its cursor or sets its title."""
    return _CONTROL.sub(lambda match: repr(match.group())[1:-1], str(text))
