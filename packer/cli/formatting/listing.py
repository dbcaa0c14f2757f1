"""Long lists in text output: the first :data:`MAX_LISTED` entries, then where to find the rest."""

from __future__ import annotations

from collections.abc import Sequence

from packer.tools.findings import MAX_LISTED

__all__ = ["MAX_LISTED", "append_listing"]


def append_listing(lines: list[str], title: str, items: Sequence[str], *, more: str) -> None:
    """Append ``title (n):`` and the first items to ``lines``; ``more`` says where the rest are."""
    if not items:
        return
    lines.append(f"{title} ({len(items)}):")
    lines.extend(f"  {item}" for item in items[:MAX_LISTED])
    if len(items) > MAX_LISTED:
        lines.append(f"  ... and {len(items) - MAX_LISTED} more ({more})")
