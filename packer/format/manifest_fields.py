"""Reading a manifest's JSON fields with their types checked, so that a damaged or crafted
``index.json`` is refused with the field it got wrong (:mod:`packer.format.manifest`).
"""

from __future__ import annotations

from dataclasses import MISSING, fields
from typing import Any, get_args, get_origin, get_type_hints

from packer.errors import ManifestError

__all__ = ["get_field", "get_items", "is_json", "record"]


def get_field(data: dict[str, Any], key: str, kind: type, source: str) -> Any:
    if key not in data:
        raise ManifestError(f"{source} lacks the field {key!r}; re-convert the dataset.")
    value = data[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ManifestError(f"{source}: field {key!r} should be {kind.__name__}, "
                            f"not {type(value).__name__}; re-convert the dataset.")
    return value


def is_json(kind: type, value: Any) -> bool:
    """``isinstance`` for JSON values, where a bool is not an int."""
    return isinstance(value, kind) and not (kind is int and isinstance(value, bool))


def get_items(data: dict[str, Any], key: str, kind: type, source: str) -> tuple[Any, ...]:
    items = get_field(data, key, list, source)
    for position, value in enumerate(items):
        if not is_json(kind, value):
            raise ManifestError(f"{source}: {key}[{position}] should be {kind.__name__}, not "
                                f"{type(value).__name__}; re-convert the dataset.")
    return tuple(items)


def record(cls: type[Any], data: Any, source: str, where: str) -> Any:
    """Build the record dataclass ``cls`` from a JSON object, checking every field's type."""
    if not isinstance(data, dict):
        raise ManifestError(f"{source}: {where} should be an object, not {type(data).__name__}; "
                            "re-convert the dataset.")
    known = {f.name: f for f in fields(cls)}
    unknown = sorted(set(data) - set(known))
    missing = sorted(name for name, f in known.items() if name not in data
                     and f.default is MISSING and f.default_factory is MISSING)
    if unknown or missing:
        what = "; ".join(part for part in (f"unknown field(s) {unknown}" if unknown else "",
                                           f"missing field(s) {missing}" if missing else "") if part)
        raise ManifestError(f"{source}: {where} has {what}; re-convert the dataset.")
    hints = get_type_hints(cls)
    values: dict[str, Any] = {}
    for name, value in data.items():
        kind = hints[name]
        if get_origin(kind) is tuple:
            item_kind = get_args(kind)[0]
            ok = isinstance(value, list) and all(is_json(item_kind, v) for v in value)
            value = tuple(value) if ok else value
            expected = f"a list of {item_kind.__name__}"
        else:
            ok = is_json(kind, value)
            expected = kind.__name__
        if not ok:
            raise ManifestError(f"{source}: {where}.{name} should be {expected}, not "
                                f"{type(value).__name__}; re-convert the dataset.")
        values[name] = value
    return cls(**values)
