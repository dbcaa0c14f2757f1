"""Convert an ImageFolder tree into a packed dataset: scan, plan, write shards in parallel, commit.

The order of events is the crash-safety contract: DST is checked (nothing touched), SRC is scanned
and planned, DST is marked "in progress" with the plan
(:class:`~packer.conversion.destination.Destination`), the shard tasks run on an engine
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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from packer.conversion.engines.base import Engine
from packer.conversion.execution import choose_engine, write_error, write_shards
from packer.conversion.job import plan_job
from packer.conversion.merging import build_manifest
from packer.conversion.options import DEFAULT_SHARD_SIZE, ConversionOptions
from packer.conversion.resume import check_resumable
from packer.errors import OutputError
from packer.format.codecs import DEFAULT_MAX_PIXELS
from packer.format.manifest import Manifest

__all__ = ["DEFAULT_SHARD_SIZE", "ConversionResult", "convert", "run_conversion"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ConversionResult:
    """What a conversion did: the manifest it wrote and how long and how much it took."""

    dst: str
    manifest: Manifest
    found: int
    seconds: float
    bytes_in: int
    resumed_shards: int = 0
    already_complete: bool = False

    @property
    def images_per_second(self) -> float:
        """Samples packed per second of wall time."""
        return self.manifest.num_samples / self.seconds if self.seconds > 0 else 0.0


def convert(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    to: str,
    shard_size: int | str = DEFAULT_SHARD_SIZE,
    codec: str = "original",
    codec_options: Mapping[str, Any] | None = None,
    check: str = "full",
    max_pixels: int = DEFAULT_MAX_PIXELS,
    strict: bool = False,
    overwrite: bool = False,
    resume: bool = False,
    workers: int | None = None,
    engine: Engine | None = None,
    include_hidden: bool = False,
    allow_empty: bool = False,
    is_valid_file: Callable[[str], bool] | None = None,
    root: str | os.PathLike[str] | None = None,
    path_column: str | None = None,
    label_column: str | None = None,
    classes_file: str | os.PathLike[str] | None = None,
    source_format: str | None = None,
    label_field: str | None = None,
    image_column: str | None = None,
    progress: bool = False,
) -> ConversionResult:
    """Pack the ImageFolder tree (or list file) ``src`` into shards of backend ``to`` under ``dst``.

    Args:
        src: Root of the tree, ``src/<class>/**/<image>``; a list file of images and labels
            (plain text, CSV or JSON Lines; see :mod:`packer.source.listfile`); a tar or zip
            archive of a tree; WebDataset shards; or Parquet image tables (``source_format``).
        dst: New or empty directory (or an earlier packer dataset, with ``overwrite``).
        to: Backend name, ``"lmdb"`` or ``"hdf5"``.
        shard_size: The shard size, as a number or text such as ``"512MB"``: shards hold a
            quarter to twice it, about 0.8 of it on average (:mod:`packer.conversion.sharding`).
        codec: How images are stored; ``"original"`` keeps the source bytes untouched,
            ``"jpeg"`` re-encodes, ``"pixels"`` stores decoded RGB (see packer.format.codecs.reencode).
        codec_options: The codec's options: ``{"quality": 90, "resize": 256}`` for ``jpeg``,
            ``{"resize": 256}`` for ``pixels`` (short side in pixels; never enlarged).
        check: ``"full"`` decodes every image once, ``"header"`` only opens it, ``"none"``
            trusts the files.
        max_pixels: Images with more pixels are skipped as ``decompression_bomb``.
        strict: Stop at the first file that cannot be packed instead of skipping it (with
            several workers, the first one any worker meets).
        overwrite: Replace an existing packer dataset or interrupted conversion at ``dst``.
        resume: Finish an interrupted conversion of the same source with the same options,
            keeping its finished shards (array tasks' too); on a complete one, do nothing; on
            an empty ``dst``, simply start.
        workers: Worker processes writing shards on this machine (default: the CPUs this
            process may use). The output is byte-identical whatever the number.
        engine: Where the shard tasks run instead (see :mod:`packer.conversion.engines`, and
            :mod:`packer.conversion.engines.dask_cluster` for Dask and Slurm/PBS); not with ``workers``.
        include_hidden: Pack names starting with ``.`` too (ImageFolder does; packer does not).
        allow_empty: Accept class folders without images, as ImageFolder's ``allow_empty``.
        is_valid_file: Replaces the extension check; receives each file's full path.
        root: When ``src`` is a list file (:mod:`packer.source.listfile`): the folder its
            paths are relative to (default: the list's).
        path_column: A CSV or JSON Lines list's image-path column (default: ``path``,
            ``file_name``, ...).
        label_column: Its label column (default: ``label``, ``class``, ...).
        classes_file: Class names of integer labels, one per line (line ``i`` names label ``i``).
        source_format: The kind of ``src``: ``tree``, ``list``, ``archive`` (a ``.tar``,
            ``.tar.gz``, ``.zip`` of a tree or of per-class tars), ``webdataset`` (shards, a folder
            or a brace pattern) or ``parquet``; None detects it (:mod:`packer.source.registry`).
        label_field: WebDataset: the member holding the label (``cls``, ``txt``, ``json:label``).
        image_column: Parquet: the image column (default: the first image-like column).
        progress: Show a tqdm bar on stderr when it is a terminal.

    Raises:
        SourceError: SRC is missing, has no classes, has an empty class, or (``strict``) holds
            a bad file (:class:`BadImageError`).
        OutputExistsError: DST is not empty and neither ``overwrite`` nor ``resume`` applies.
        ResumeError: ``resume`` over a run of another source tree or other options.
        OutputError: DST cannot be used (a file, inside SRC, a foreign directory, read-only,
            disk full).
        ConversionError: a worker was killed (out of memory?) or failed;
            :class:`ConversionInterrupted` on Ctrl-C. Finished shards stay for ``resume``.
        UnknownNameError: ``to`` or ``codec`` is not registered.
    """
    options = ConversionOptions(to=to, shard_size=shard_size, codec=codec,
                                codec_options=codec_options or {}, check=check, max_pixels=max_pixels,
                                strict=strict, include_hidden=include_hidden, allow_empty=allow_empty,
                                is_valid_file=is_valid_file, root=root,
                                path_column=path_column, label_column=label_column,
                                classes_file=classes_file, source_format=source_format,
                                label_field=label_field, image_column=image_column)
    return run_conversion(src, dst, options, overwrite=overwrite, resume=resume, workers=workers,
                          engine=engine, progress=progress)


def run_conversion(src: str | os.PathLike[str], dst: str | os.PathLike[str], options: ConversionOptions,
                   *, overwrite: bool = False, resume: bool = False, workers: int | None = None,
                   engine: Engine | None = None, progress: bool = False) -> ConversionResult:
    """:func:`convert` with its options already built: what the command line calls.

    Arguments other than ``options`` and errors are as for :func:`convert`.
    """
    started = time.perf_counter()
    chosen = choose_engine(engine, workers)
    job = plan_job(src, dst, options, overwrite=overwrite, resume=resume, num_tasks=None)
    destination, plan = job.destination, job.plan
    if resume and job.state == "complete":
        manifest = destination.ensure_complete(plan.fingerprint)
        return ConversionResult(job.dst, manifest, plan.items, time.perf_counter() - started, 0,
                                resumed_shards=len(manifest.shards), already_complete=True)
    if resume and job.state == "partial":
        marker = destination.marker()
        check_resumable(job.dst, marker, plan.fingerprint, job.src, plan.options, plan.items)
        # An array job's plan names its task count; finishing it here is one task of one.
        plan = replace(plan, num_tasks=marker.get("num_tasks"))
    try:
        staging, kept = destination.start(plan, keep=resume)
    except OSError as err:
        raise write_error(job.dst, err) from err
    todo = [task for task in job.tasks if task.index not in kept]
    results = write_shards(job, todo, kept, staging, chosen, progress=progress)
    try:
        manifest = build_manifest(job.dst, plan, [results[i] for i in range(len(job.tasks))])
        destination.finish(manifest)
    except OSError as err:
        raise OutputError(f"Writing the manifest of {job.dst!r} failed: {err.strerror or err}. "
                          "Fix it (free space?), then run the same command with --resume.") from err
    seconds = time.perf_counter() - started
    log.info("packed %d samples into %s in %.1f s", manifest.num_samples, job.dst, seconds)
    bytes_in = sum(r.bytes_in for i, r in results.items() if i not in kept)
    return ConversionResult(job.dst, manifest, len(job.index.items), seconds, bytes_in,
                            resumed_shards=len(kept))
