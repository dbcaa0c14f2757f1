"""The ``packer`` command line: parse, call one library function, print. No logic lives here.

Exit codes: 0 success; 1 a packer error (one line on stderr: what, which path, what to do);
2 a usage error; 3 the destination exists (pass ``--overwrite``); 130 interrupted.
"""

from __future__ import annotations

import logging
from typing import Any

import click

from packer.cli.convert import convert, merge
from packer.cli.inspect import export_command, info, preview, show, verify
from packer.cli.measure import bench, demo
from packer.cli.remote import cache, push
from packer.cli.versions import gc, update
from packer.conversion.merging import DISTRIBUTION
from packer.errors import PackerError

__all__ = ["cli", "main"]


class _CommandFailed(click.ClickException):
    """A packer error shown as one ``Error: ...`` line on stderr, with packer's exit code."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class _PackerGroup(click.Group):
    """Turns packer errors and Ctrl-C into one line and an exit code, for every command."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except PackerError as err:
            raise _CommandFailed(str(err), err.exit_code) from err
        except KeyboardInterrupt:
            raise _CommandFailed("Interrupted; a conversion in progress left DST incomplete: run "
                                 "the same command with --resume to finish it.", 130) from None


@click.group(cls=_PackerGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name=DISTRIBUTION, prog_name="packer")
@click.option("-v", "--verbose", count=True, help="More log output (-vv for debug).")
def cli(verbose: int) -> None:
    """Pack an ImageFolder tree into LMDB or HDF5 shards and read it fast in PyTorch."""
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:  # libraries that set their own loggers' levels
        handler.setLevel(level)                   # (Dask logs at INFO) obey -v too


for _command in (convert, update, merge, gc, info, verify, show, preview, export_command, bench, demo,
                 push, cache):
    cli.add_command(_command)


def main() -> None:
    """Entry point of the ``packer`` script and ``python -m packer``."""
    cli(prog_name="packer")
