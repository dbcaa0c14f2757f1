"""Convert an ImageFolder tree into a packed dataset: scan, plan, write shards in parallel, commit.

The order of events is the crash-safety contract: DST is checked (nothing touched), SRC is scanned
and planned, DST's lease is taken (a second conversion into it is refused with the name of the
process converting) and DST is marked "in progress" with the plan
(:func:`~packer.conversion.destination.lifecycle.conversion_slot`), the shard tasks run on an engine
(:mod:`packer.conversion.engines`: local worker processes by default), each writing its shard under
``DST/.tmp``, fsyncing, hashing, renaming it into place and leaving a receipt; then the sample index
is written, and ``index.json`` last, atomically (:mod:`packer.conversion.merging`). A run killed at
any instant leaves a DST that readers reject as incomplete and that ``resume`` finishes, keeping
every finished shard. Every file with an image name is packed or listed in ``skipped`` with a
reason. The output depends neither on the number of workers nor on the engine, nor on whether the
shards were written by one run or by array tasks (:func:`packer.conversion.array_run.convert_task`)
and merged.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from typing import Any

from packer.conversion.engines.base import Engine
from packer.conversion.execution import ConversionResult, choose_engine, write_job
from packer.conversion.job import plan_job
from packer.conversion.options import (
    DEFAULT_SHARD_SIZE,
    ConversionOptions,
    conversion_options,
    option_keywords,
)
from packer.conversion.remote.to_url import convert_to_url
from packer.store.urls import is_url

__all__ = ["DEFAULT_SHARD_SIZE", "ConversionResult", "convert", "run_conversion", "write_job"]

log = logging.getLogger(__name__)


@option_keywords
def convert(src: str | os.PathLike[str], dst: str | os.PathLike[str],
            options: ConversionOptions | None = None, *, overwrite: bool = False, resume: bool = False,
            workers: int | None = None, engine: Engine | None = None, progress: bool = False,
            staging: str | os.PathLike[str] | None = None, staging_limit: int | str | None = None,
            storage_options: Mapping[str, Any] | None = None, **option_values: Any) -> ConversionResult:
    """Pack the source ``src`` into shards under ``dst``.

    Args:
        src: Root of an ImageFolder tree, ``src/<class>/**/<image>``; a list file of images and
            labels (plain text, CSV or JSON Lines; see :mod:`packer.source.listfile`); a tar or
            zip archive of a tree, or a tar of per-class tars; WebDataset shards; or Parquet image
            tables. The kind is detected (:mod:`packer.source.registry`) or named by ``source_format``.
        dst: New or empty directory (or an earlier packer dataset, with ``overwrite``); or a URL
            (``s3://bucket/prefix``, ``gs://``, ``az://``): the shards are written to a local
            staging folder, uploaded as they finish and removed there, ``index.json`` last
            (:mod:`packer.conversion.remote.to_url`).
        options: Every choice that decides the output, as one :class:`ConversionOptions`; or
            give them as keywords instead (``to="lmdb"``, ``shard_size="512MB"``,
            ``codec="jpeg"``, ``check``, ``max_pixels``, ``strict``, ``include_hidden``,
            ``allow_empty``, ``is_valid_file``, ``root``, ``path_column``, ``label_column``,
            ``classes_file``, ``source_format``, ``label_field``, ``image_column``,
            ``drop_unannotated``, ``fields``: each one is documented on
            :class:`ConversionOptions`). ``to`` is required.
        overwrite: Replace an existing packer dataset or interrupted conversion at ``dst``.
        resume: Finish an interrupted conversion of the same source with the same options,
            keeping its finished shards (array tasks' too); on a complete one, do nothing; on
            an empty ``dst``, simply start.
        workers: Worker processes writing shards on this machine (default: the CPUs this
            process may use). The output is byte-identical whatever the number.
        engine: Where the shard tasks run instead (see :mod:`packer.conversion.engines`, and
            :mod:`packer.conversion.engines.dask_cluster` for Dask and Slurm/PBS); not with ``workers``.
        progress: Show a tqdm bar on stderr when it is a terminal.
        staging: ``dst`` is a URL: the local staging folder (default: one per URL under
            ``$PACKER_STAGING``, else ``~/.cache/packer-staging``); a killed run resumes from it.
        staging_limit: ``dst`` is a URL: most bytes of finished shards waiting for their upload
            (a number or ``"8GB"``; default four shards); the workers wait while it is reached.
        storage_options: ``dst`` is a URL: credentials and client options (:mod:`packer.store`).
        **option_values: The fields of :class:`ConversionOptions`, when ``options`` is not given.

    Raises:
        SourceError: SRC is missing, has no classes, has an empty class, or (``strict``) holds
            a bad file (:class:`BadImageError`); :class:`EmptySourceError` when every item is
            skipped (nothing would be packed: no 0-sample dataset is written).
        OutputExistsError: DST is not empty and neither ``overwrite`` nor ``resume`` applies.
        ResumeError: ``resume`` over a run of another source tree or other options.
        OutputError: DST cannot be used (a file, inside SRC, a foreign directory, read-only,
            disk full).
        ConversionError: a worker was killed (out of memory?) or failed;
            :class:`ConversionInterrupted` on Ctrl-C. Finished shards stay for ``resume``.
        UnknownNameError: ``to`` or ``codec`` is not registered.
        TypeError: an unknown option keyword, or both ``options`` and keywords.
    """
    return run_conversion(src, dst, conversion_options(options, option_values), overwrite=overwrite,
                          resume=resume, workers=workers, engine=engine, progress=progress,
                          staging=staging, staging_limit=staging_limit, storage_options=storage_options)


def run_conversion(src: str | os.PathLike[str], dst: str | os.PathLike[str], options: ConversionOptions,
                   *, overwrite: bool = False, resume: bool = False, workers: int | None = None,
                   engine: Engine | None = None, progress: bool = False,
                   staging: str | os.PathLike[str] | None = None, staging_limit: int | str | None = None,
                   storage_options: Mapping[str, Any] | None = None) -> ConversionResult:
    """:func:`convert` with its options already built: what the command line calls.

    Arguments other than ``options`` and errors are as for :func:`convert`.
    """
    started = time.perf_counter()
    chosen = choose_engine(engine, workers)
    if is_url(dst):
        return convert_to_url(src, os.fspath(dst), options, engine=chosen, staging=staging,
                              staging_limit=staging_limit, storage_options=storage_options,
                              overwrite=overwrite, resume=resume, progress=progress)
    if staging is not None or staging_limit is not None or storage_options is not None:
        raise ValueError("staging, staging_limit and storage_options are for a DST that is a URL; "
                         f"{os.fspath(dst)!r} is a local path")
    job = plan_job(src, dst, options, overwrite=overwrite, resume=resume, num_tasks=None)
    with job.source:  # what reading made on this machine (an archive's spool) goes at the end
        return write_job(job, chosen, resume=resume, progress=progress, started=started)
