"""What the command line prints: names that come from data reach the terminal escaped.

A class, a path or a note in a dataset is somebody else's text; an ESC or OSC sequence in it
would move the cursor, clear the screen or set the terminal's title. Every command prints
through :func:`say`, which writes each control character as its escape and keeps the lines
(and the tabs) that packer's own formatting puts there, and masks the password of any URL
typed with one (``http://user:***@host``): the stores never keep it in their URL, but a
command may echo what it was given.
"""

from __future__ import annotations

import re

import click

from packer.keys import escaped

__all__ = ["mask_passwords", "say", "terminal_safe"]


#: ``scheme://user:password@``: what a URL typed with its credentials carries.
_URL_PASSWORD = re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.-]*://[^/@\s:]*):[^/@\s]*@")


def mask_passwords(text: str) -> str:
    """``text`` with the password of every URL in it replaced by ``***`` (the user name kept)."""
    return _URL_PASSWORD.sub(r"\1:***@", text)


def terminal_safe(text: str) -> str:
    """``text`` with URL passwords masked and every control character but newlines and tabs
    escaped (``\\x1b``)."""
    text = mask_passwords(text)
    return "\n".join(escaped(line) for line in text.split("\n"))


def say(text: str = "", *, err: bool = False, nl: bool = True) -> None:
    """``click.echo`` of :func:`terminal_safe` text."""
    click.echo(terminal_safe(text), err=err, nl=nl)
