"""A contact sheet as one self-contained HTML page: the dataset summary, then the same grid.

Nothing is fetched: each thumbnail (its letterboxed cell, cut from the sheet) is an inline
JPEG ``data:`` URI, and the style sheet is inline, so the page can be mailed or attached to an
issue. Every text that comes from the dataset (paths, class names, which may hold ``<`` or
``&``) is escaped. The page holds no timestamp of its own, so the same sheet gives the same page.
"""

from __future__ import annotations

import base64
import io
from collections import Counter
from html import escape
from typing import Any, Final, Protocol

from PIL import Image

from packer.format.manifest import Manifest
from packer.tools.preview.draw import SheetCell, SheetRow

__all__ = ["DrawnSheet", "render_html", "sheet_summary"]


class DrawnSheet(Protocol):
    """What a page is made from: a drawn sheet (:class:`packer.tools.preview.sheet.ContactSheet`)."""

    @property
    def image(self) -> Image.Image: ...
    @property
    def rows(self) -> tuple[SheetRow, ...]: ...
    @property
    def cells(self) -> tuple[SheetCell, ...]: ...
    @property
    def thumb(self) -> int: ...
    @property
    def seed(self) -> int: ...
    @property
    def root(self) -> str: ...
    @property
    def manifest(self) -> Manifest: ...

#: Quality of the inline JPEG thumbnails: small pages, and plenty for checking labels.
THUMB_QUALITY: Final = 90

_STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; background: #fff; }
h1 { font-size: 1.3em; margin: 0 0 .5em; word-break: break-all; }
table.summary th { text-align: left; padding-right: 1em; font-weight: 600; vertical-align: top; }
table.counts td { padding: 0 1em 0 0; } table.counts td.n { text-align: right; }
section h2 { font-size: 1em; margin: 1.2em 0 .4em; }
section h2 small { font-weight: normal; color: #666; }
.grid { display: flex; flex-wrap: wrap; gap: 6px; }
figure { margin: 0; }
figure img { display: block; }
figcaption { font-size: 12px; color: #444; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
figure.failed figcaption { color: #a00; }
"""


def sheet_summary(sheet: DrawnSheet) -> dict[str, Any]:
    """The dataset summary shown above the grid, as data."""
    m = sheet.manifest
    return {
        "path": sheet.root,
        "backend": m.backend,
        "codec": m.codec,
        "codec_params": {k: v for k, v in sorted(m.codec_params.items()) if k in ("quality", "resize")},
        "num_samples": m.num_samples,
        "class_counts": dict(zip(m.classes, m.class_counts, strict=True)),
        "skipped": len(m.skipped),
        "skipped_by_reason": dict(sorted(Counter(s.reason for s in m.skipped).items())),
        "created": f"{m.created_by} at {m.created_at}",
        "shown": f"{len(sheet.cells)} samples of {len(sheet.rows)} classes, "
                 f"at most {max((len(r.cells) for r in sheet.rows), default=0)} per class, "
                 f"seed {sheet.seed}",
    }


def _cell_uri(sheet: DrawnSheet, cell: SheetCell) -> str:
    buffer = io.BytesIO()
    sheet.image.crop(cell.box).save(buffer, "JPEG", quality=THUMB_QUALITY)
    return "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _figure(sheet: DrawnSheet, cell: SheetCell) -> str:
    size = sheet.thumb
    title = cell.relpath if cell.error is None else f"{cell.relpath}: {cell.error}"
    failed = ' class="failed"' if cell.error else ""
    return (f'<figure{failed} style="width:{size}px">'
            f'<img src="{_cell_uri(sheet, cell)}" width="{size}" height="{size}" '
            f'alt="{escape(cell.caption)}" title="{escape(title)}">'
            f"<figcaption>{escape(cell.caption)}</figcaption></figure>")


def _summary_rows(summary: dict[str, Any]) -> list[str]:
    params = ", ".join(f"{k} {v}" for k, v in summary["codec_params"].items() if v is not None)
    skipped = summary["skipped"]
    reasons = ", ".join(f"{r} {n}" for r, n in summary["skipped_by_reason"].items())
    rows = {
        "backend": summary["backend"],
        "codec": summary["codec"] + (f" ({params})" if params else ""),
        "samples": f"{summary['num_samples']} in {len(summary['class_counts'])} classes",
        "skipped": f"{skipped}" + (f" ({reasons}; listed by packer info)" if skipped else ""),
        "written by": summary["created"],
        "shown": summary["shown"],
    }
    return [f"<tr><th>{escape(k)}</th><td>{escape(str(v))}</td></tr>" for k, v in rows.items()]


def render_html(sheet: DrawnSheet) -> str:
    """The whole page for ``sheet`` (see the module docstring)."""
    summary = sheet_summary(sheet)
    counts = "".join(f'<tr><td class="n">{i}</td><td>{escape(name)}</td><td class="n">{n}</td></tr>'
                     for i, (name, n) in enumerate(summary["class_counts"].items()))
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>packer preview: {escape(sheet.root)}</title>",
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>packer preview: {escape(sheet.root)}</h1>",
        '<table class="summary">', *_summary_rows(summary), "</table>",
        f"<details><summary>classes with sample counts ({len(summary['class_counts'])})</summary>",
        f'<table class="counts">{counts}</table></details>',
    ]
    for row in sheet.rows:
        shown = len(row.cells)
        parts.append(f"<section><h2>{escape(row.class_name)} <small>class {row.target}, "
                     f"{row.num_samples} sample{'s' * (row.num_samples != 1)}, showing {shown}"
                     "</small></h2>")
        parts.append('<div class="grid">' + "".join(_figure(sheet, c) for c in row.cells) + "</div>")
        parts.append("</section>")
    parts.append("</body></html>\n")
    return "\n".join(parts)
