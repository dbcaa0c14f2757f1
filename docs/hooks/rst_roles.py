"""MkDocs hook: render the reST roles in packer's docstrings (:func:`x`, :class:`~a.b.C`).

The docstrings are Google style, but some cross-references keep Sphinx's role syntax, which
Markdown renders as the literal text ":func:" before a code span. This hook drops the role and,
for a ``~``-prefixed target, keeps only its last dotted component, as Sphinx shows it. It only
changes the generated HTML, never the docstrings.
"""

from __future__ import annotations

import re
from typing import Any

_ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|attr|data|exc|obj):<code>(~?)([^<]*)</code>")


def _render(match: re.Match[str]) -> str:
    tilde, target = match.groups()
    return f"<code>{target.rsplit('.', 1)[-1] if tilde else target}</code>"


def on_page_content(html: str, **kwargs: Any) -> str:
    return _ROLE.sub(_render, html)
