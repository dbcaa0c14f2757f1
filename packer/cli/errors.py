"""Library messages in the command line's terms: flags and commands instead of keywords and calls.

The library's errors speak in its own terms (see :mod:`packer.errors`): an option as its keyword
(``resume=True``, ``workers=``, ``label_column=``), a function as a call (``merge()``,
``verify_dataset(deep=True)``), an engine as ``open_engine("dask")``. Before the command line
prints one, :func:`cli_message` rewrites those spellings as the user typed them: ``--resume``,
``--workers``, ``--label-column``, ``packer merge DST``, ``packer verify DST --deep``,
``--engine dask``. The table comes from the click commands themselves (each option's keyword
and flags, each command's arguments), looked up in the command that is running first; the few
keywords that the command line spells differently are in :data:`ALIASES`, and the library
functions that a command runs in :data:`COMMANDS`. Text that names no known keyword or function
is left as it is, so translating twice changes nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Final

import click

from packer.cli.output import terminal_safe

__all__ = ["ALIASES", "CALL_FLAGS", "COMMANDS", "cli_message", "in_cli_terms", "interrupted_message",
           "report_in_cli_terms"]

#: Library function -> the command that runs it (``packer <command>``).
COMMANDS: Final[Mapping[str, str]] = {
    "convert": "convert", "convert_task": "convert", "plan_conversion": "convert",
    "update": "update", "merge": "merge", "collect_garbage": "gc", "upgrade": "upgrade",
    "dataset_info": "info", "verify_dataset": "verify", "sample_info": "show", "save_sample": "show",
    "export_dataset": "export", "write_contact_sheet": "preview", "push_dataset": "push",
    "export_webdataset": "export", "export_yolo": "export", "export_coco": "export", "export_masks": "export",
}

#: Library functions whose command needs a flag to run them (``packer export --as-yolo``).
CALL_FLAGS: Final[Mapping[str, str]] = {
    "export_webdataset": "--as-webdataset", "export_yolo": "--as-yolo", "export_coco": "--as-coco",
    "export_masks": "--as-masks",
}

#: Library keywords whose flag is not the keyword with dashes (``open_engine(cores=...)``).
ALIASES: Final[Mapping[str, str]] = {"cores": "--job-cores", "memory": "--job-memory"}

_CALL = re.compile(r"\b(?P<name>[a-z_][a-z0-9_]*)\((?P<args>[^()]*)\)")
_ENGINE = re.compile(r"""\bopen_engine\(\s*["'](?P<name>[\w-]+)["']\s*\)""")
_KEYWORD = re.compile(r"""(?<![\w.\-'"?&/])(?P<name>[a-z][a-z0-9_]*)="""
                      r"""(?P<value>True\b|False\b|"[^"]*"|'[^']*'|[\w.:/-]+)?""")


def _commands(group: click.Command) -> Iterator[click.Command]:
    """``group``'s commands, subgroups' commands included."""
    for command in getattr(group, "commands", {}).values():
        yield command
        yield from _commands(command)


def _option(command: click.Command | None, name: str) -> click.Option | None:
    """The option of ``command`` whose keyword or long flag (dashes as underscores) is ``name``."""
    for param in command.params if command is not None else ():
        if isinstance(param, click.Option):
            longs = [flag[2:].replace("-", "_") for flag in param.opts if flag.startswith("--")]
            if name == param.name or name in longs:
                return param
    return None


def _flag(option: click.Option) -> str:
    """``--partition/--queue``: an option's long flags."""
    return "/".join(flag for flag in option.opts if flag.startswith("--")) or option.opts[0]


class _Terms:
    """The translation for one command line: its group, and the command that is running."""

    def __init__(self, group: click.Group, command: click.Command | None) -> None:
        self.group, self.command = group, command

    def keyword(self, name: str, value: str | None) -> str | None:
        """``--flag`` (or ``--flag VALUE``) for ``name=value``; None if ``name`` is no option."""
        option = _option(self.command, name)
        if option is None:
            option = next((found for command in _commands(self.group)
                           if (found := _option(command, name)) is not None), None)
        flag = _flag(option) if option is not None else ALIASES.get(name)
        if flag is None or value == "False":
            return None
        if value is None or value == "True" or (option is not None and option.is_flag):
            return flag
        return f"{flag} {value.strip(chr(34) + chr(39))}"

    def call(self, match: re.Match[str]) -> str:
        """``packer verify DST --deep`` for ``verify_dataset(deep=True)``."""
        command = self.group.commands.get(COMMANDS.get(match["name"], ""))
        if command is None:
            return match[0]
        words = ["packer", command.name or match["name"]]
        words += [param.human_readable_name for param in command.params
                  if isinstance(param, click.Argument)]
        words += [CALL_FLAGS[match["name"]]] if match["name"] in CALL_FLAGS else []
        terms = _Terms(self.group, command)
        for argument in filter(None, (part.strip() for part in match["args"].split(","))):
            name, equals, value = argument.partition("=")
            flag = terms.keyword(name.strip(), value.strip() or None) if equals else None
            if flag is not None:
                words.append(flag)
        return " ".join(words)

    def rewrite(self, message: str) -> str:
        message = _ENGINE.sub(lambda m: f"--engine {m['name']}", message)
        message = _CALL.sub(self.call, message)
        return _KEYWORD.sub(lambda m: self.keyword(m["name"], m["value"]) or m[0], message)


def cli_message(message: str, group: click.Group, command: str | None = None) -> str:
    """``message`` with the library's keywords and calls as the command line's flags and
    commands (``command``: the name of the command that is running, looked up first)."""
    # A name from data reaches the terminal escaped, a URL's password masked (cli.output).
    return terminal_safe(_Terms(group, group.commands.get(command or "")).rewrite(message))


def in_cli_terms(text: str) -> str:
    """``text`` from the library (a finding, a source) in the terms of the command that is
    running; unchanged outside a command."""
    ctx = click.get_current_context(silent=True)
    root = ctx.find_root().command if ctx is not None else None
    if ctx is None or not isinstance(root, click.Group):
        return text
    return cli_message(text, root, ctx.command.name)


def report_in_cli_terms(text: str) -> str:
    """A report of many lines from the library (a dry run's plan, verify's findings) in the
    command's terms, line by line: :func:`in_cli_terms` escapes what it translates into one line."""
    return "\n".join(in_cli_terms(line) for line in text.split("\n"))


#: What Ctrl-C leaves behind, by command; the others were only reading.
_INTERRUPTED: Final[Mapping[str, str]] = {
    "convert": "Interrupted; a conversion in progress left DST incomplete: run the same command "
               "with --resume to finish it.",
    "update": "Interrupted; DST still holds its current version: run the same command with "
              "--resume to finish the update.",
    "export": "Interrupted; the files exported so far are in OUT, each one whole: run the same "
              "command with --overwrite to export again.",
    "merge": "Interrupted; run the same command again to finish.",
    "upgrade": "Interrupted; DST is still the dataset it was (upgraded, or not yet): run the same "
               "command again.",
}


def interrupted_message(command: str | None) -> str:
    """The one line the command line prints when Ctrl-C stops ``command``."""
    return _INTERRUPTED.get(command or "", "Interrupted.")
