"""``packer.write``: a packed dataset from any iterable of sample dicts, as a conversion makes one.

The samples are spooled beside DST (:mod:`packer.conversion.writing.spool`), then written by the
conversion's own machinery: the same crash safety (DST marked in progress, shards renamed into
place, the manifest last), ``resume`` (a rerun over the same samples keeps every finished
shard), determinism (the same samples and options give the same bytes, whatever ``workers``),
content-named shards and every engine. The spool goes when the call ends, however it ends; a
spool left by a write that was killed (SIGKILL, a power cut) is removed by the next write to
the same DST from the same machine, once its process is gone.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from packer.conversion.destination.state import Destination
from packer.conversion.engines.base import Engine
from packer.conversion.execution import ConversionResult, choose_engine, write_job
from packer.conversion.job import plan_source
from packer.conversion.options import ConversionOptions, conversion_options, option_keywords
from packer.conversion.schemas import stored_schema
from packer.conversion.writing.spool import SPOOL_NAME, SpoolSource, spool_samples
from packer.errors import SchemaError
from packer.format.fields.schema import Field, Schema

__all__ = ["write"]


def _schema(schema: Schema | Sequence[Field | Mapping[str, Any]]) -> Schema:
    checked = schema if isinstance(schema, Schema) else Schema.of(list(schema))
    label = checked.label_field()
    if label is not None and not label.params["classes"]:
        raise SchemaError(f"field {label.name!r} (label): give its class names, "
                          "params={'classes': [...]}: the dataset records them (and counts each class)")
    return checked


@option_keywords
def write(dst: str | os.PathLike[str], samples: Iterable[Mapping[str, Any]],
          schema: Schema | Sequence[Field | Mapping[str, Any]], options: ConversionOptions | None = None,
          *, overwrite: bool = False, resume: bool = False, workers: int | None = None,
          engine: Engine | None = None, progress: bool = False, **option_values: Any) -> ConversionResult:
    """Pack ``samples`` (dicts of field values, in order) into a dataset at ``dst``.

    Args:
        dst: New or empty directory (an earlier dataset with ``overwrite``; an interrupted
            write with ``resume``).
        samples: Any iterable of dicts, one per sample, keyed by the schema's field names:
            an image as file bytes, a PIL image or a ``uint8`` array; a mask as an array or PIL
            image; boxes as ``[N, 4]`` numbers; text as ``str``... ``"__key__"`` names the sample
            (its path in the dataset; default its number, ``00000042``).
        schema: The fields (a :class:`~packer.format.fields.schema.Schema`, or a list of
            ``{"name", "type", "params"}``); a ``label`` field needs its ``classes``. Every
            image field is stored by ``codec`` (with ``codec_options``, ``check``, ``max_pixels``).
        options: As for :func:`packer.convert`, or the same choices as keywords (``to`` is
            required); the options of a source (``root``, ``label_column``, ...) do not apply.
        overwrite: Replace an earlier dataset at ``dst``.
        resume: Finish an interrupted write of the same samples, keeping its finished shards.
        workers: Processes that pack shards (default: the CPUs); ignored with ``engine``.
        engine: Where shard tasks run, as for :func:`packer.convert`.
        progress: Show a progress bar.
        **option_values: The options as keywords (``to="lmdb"``, ``codec="jpeg"``, ...).

    A sample whose value does not fit its field (a mask of another size, a box without area,
    a missing value or label) is skipped and listed in the manifest's ``skipped`` with its
    reason, or raises under ``strict``.

    Raises:
        SchemaError: the schema is not valid. ValueError: a sample is not a dict, names a field
            the schema lacks, or repeats a key. The errors of :func:`packer.convert` besides.
    """
    started = time.perf_counter()
    checked = _schema(schema)
    chosen_options = conversion_options(options, option_values)
    given = chosen_options.source_options.given()
    if given:
        raise TypeError(f"write() takes no source options ({', '.join(sorted(given))}): its source "
                        "is the samples themselves")
    stored_schema(checked.to_list(), chosen_options)  # a codec the fields cannot follow: refused now
    chosen = choose_engine(engine, workers)
    destination = Destination(dst)
    remove_stale_spools(destination.path)
    folder = _spool_folder(destination.path)
    try:
        with open(os.path.join(folder, SPOOL_NAME), "wb") as out:
            items = spool_samples(samples, checked, out, max_bytes=chosen_options.max_bytes,
                                  where=destination.path)
        source = SpoolSource(folder, checked, items)
        state = destination.check(source.inside(), overwrite=overwrite, resume=resume, task=False)
        job = plan_source(source, destination, state, chosen_options, num_tasks=None)
        return write_job(job, chosen, resume=resume, progress=progress, started=started)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _spool_prefix(dst: str) -> str:
    return f".{os.path.basename(dst)}.packer-spool-{socket.gethostname()}-"


def _spool_folder(dst: str) -> str:
    """A new private folder beside ``dst`` (on its file system, so on shared storage where DST
    is: an engine's workers on other machines read the spool too), named by host and process."""
    parent = os.path.dirname(dst) or "."
    os.makedirs(parent, exist_ok=True)
    return tempfile.mkdtemp(prefix=f"{_spool_prefix(dst)}{os.getpid()}-", dir=parent)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def remove_stale_spools(dst: str) -> list[str]:
    """Remove the spools that killed writes to ``dst`` left on this machine (their process is
    gone); return their paths. A spool of a running write, or of another machine, is kept."""
    parent, prefix = os.path.dirname(dst) or ".", _spool_prefix(dst)
    removed = []
    with contextlib.suppress(FileNotFoundError):
        for name in sorted(os.listdir(parent)):
            pid = name[len(prefix):].split("-", 1)[0] if name.startswith(prefix) else ""
            if pid.isdigit() and not _alive(int(pid)):
                shutil.rmtree(os.path.join(parent, name), ignore_errors=True)
                removed.append(os.path.join(parent, name))
    return removed
