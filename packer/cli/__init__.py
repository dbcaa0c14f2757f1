"""The ``packer`` command line: parse, call one library function, print. No logic lives here.

Exit codes: 0 success; 1 a packer error (one line on stderr: what, which path, what to do);
2 a usage error; 3 the destination exists (pass ``--overwrite``); 130 interrupted. Errors are
printed in the command line's terms: the library's ``resume=True`` reads ``--resume`` here
(:mod:`packer.cli.errors`).
"""

from __future__ import annotations

import logging
from typing import Any

import click

from packer.cli.convert import convert, merge
from packer.cli.errors import cli_message, interrupted_message
from packer.cli.inspect import export_command, info, preview, show, verify
from packer.cli.measure import bench, demo
from packer.cli.remote import cache, push
from packer.cli.versions import gc, update, upgrade
from packer.conversion.merging import DISTRIBUTION
from packer.errors import PackerError
from packer.keys import escaped

__all__ = ["cli", "main"]


class _CommandFailed(click.ClickException):
    """A packer error shown as one ``Error: ...`` line on stderr, with packer's exit code."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class _PackerGroup(click.Group):
    """Turns packer errors and Ctrl-C into one line and an exit code, for every command, in
    the command line's terms (flags, not keywords)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except PackerError as err:
            message = escaped(cli_message(str(err), self, ctx.invoked_subcommand))  # one line, always
            raise _CommandFailed(message, err.exit_code) from err
        except click.ClickException as err:  # a library ValueError a command turned into a usage error
            err.message = cli_message(err.message, self, ctx.invoked_subcommand)
            raise
        except KeyboardInterrupt:
            raise _CommandFailed(interrupted_message(ctx.invoked_subcommand), 130) from None


@click.group(cls=_PackerGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name=DISTRIBUTION, prog_name="packer")
@click.option("-v", "--verbose", count=True, help="More log output (-vv for debug).")
def cli(verbose: int) -> None:
    """Pack an ImageFolder tree into LMDB or HDF5 shards and read it fast in PyTorch."""
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:  # libraries that set their own loggers' levels
        handler.setLevel(level)                   # (Dask logs at INFO) obey -v too


for _command in (convert, update, upgrade, merge, gc, info, verify, show, preview, export_command, bench,
                 demo, push, cache):
    cli.add_command(_command)


def main() -> None:
    """Entry point of the ``packer`` script and ``python -m packer``."""
    cli(prog_name="packer")
