"""One unit of conversion work: pack one planned shard, in whatever process runs it.

A :class:`ShardTask` carries everything a worker needs (it pickles small and holds no handle);
:func:`write_shard` reads, checks and encodes each source file, writes the shard under
``DST/.tmp`` with a name no other attempt uses, fsyncs and hashes it, renames it into DST under
the name its contents give (:func:`packer.format.shardset.shard_file_name`; when a file of that
name is already there it holds these very bytes, and is kept) and then writes its receipt
``DST/.receipts/<fingerprint>.json``. A shard file with a matching receipt is finished:
``resume=True`` keeps it untouched. Running the same task twice gives the same bytes.

The receipt carries the shard's rows of the records array (each payload's digest is known
from packing, for ``original`` the source's own; the backend says where each landed), so that
finishing the dataset reads no shard back; the file is hashed while it is synced to disk.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields, replace

from packer.conversion.destination.resume import shard_contents
from packer.conversion.receipts import RECEIPTS_DIR, ShardResult, receipt_path
from packer.digests import SHA256, DigestAlgorithm
from packer.errors import BadImageError
from packer.format.backends import ShardWriter, get_backend
from packer.format.codecs import Codec
from packer.format.fields.encoding import SampleEncoder
from packer.format.fields.schema import Field, Schema
from packer.format.fields.types.images import ImageType
from packer.format.manifest import ShardEntry, SkippedFile
from packer.format.records import digest64, digest_prefix, records_to_bytes, shard_records_of
from packer.format.shardset import shard_file_name
from packer.source.base import ItemReader, SourceItem
from packer.source.sourcefile import UnpackableFile
from packer.store.durable import atomic_write_bytes, fsync_dir

__all__ = ["SegmentResult", "SegmentTask", "ShardAssembler", "ShardTask", "Task", "field_values", "shard_of",
           "write_segment", "write_shard"]

#: ``notify(event, relpath)``: ``"file"`` before a file is read (so a crash can be pinned on
#: it), then ``"packed"`` or ``"skipped"``.
Notify = Callable[[str, str], None]


@dataclass(frozen=True)
class ShardTask:
    """Everything needed to pack shard ``index``: source items and their reader, options, where
    to write."""

    index: int
    name: str
    reader: ItemReader  # picklable; opens the source lazily in the worker
    dst: str
    staging: str
    backend: str
    codec: Codec  # pickled by reference to its class: a registered codec reaches spawned workers
    check: str
    max_pixels: int
    strict: bool
    planned_bytes: int
    items: tuple[SourceItem, ...]
    fingerprint: str
    inputs: str  # label-free identity of the items (recorded in the manifest for `update`)
    options: dict[str, object]  # the recorded options, for the shard's content digest
    metadata: tuple[str, ...] = ()  # the source's other fields per item (JSON), else empty
    crashed: dict[str, str] = field(default_factory=dict)
    #: The samples' fields; None: ImageFolder's ``{image, label}`` (a record is the image alone).
    schema: Schema | None = None
    #: The algorithm of the shard's checksums (:mod:`packer.digests`; pickled by name).
    digest: DigestAlgorithm = SHA256

    def run(self, notify: Notify) -> ShardResult:
        """Do the work (in a worker process)."""
        return write_shard(self, notify)

    def with_crash(self, relpath: str, detail: str) -> ShardTask:
        """The same task, with ``relpath`` known to crash the decoder: it is skipped."""
        return replace(self, crashed={**self.crashed, relpath: detail})


@dataclass
class _Packed:
    """What packing a run of items produced, in order."""

    relpaths: list[str] = field(default_factory=list)
    targets: list[int] = field(default_factory=list)
    skipped: list[SkippedFile] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    bytes_in: int = 0
    metadata: list[str] = field(default_factory=list)
    sources: list[tuple[int, int, int]] = field(default_factory=list)
    digests: list[tuple[str, str]] = field(default_factory=list)  # every item: (relpath, hex digest or "")
    payload_digests: list[int] = field(default_factory=list)  # per payload: records.digest64

    def extend(self, other: _Packed) -> None:
        """Append what ``other`` packed after what this one did (lists joined, counts added)."""
        for name in (f.name for f in fields(self)):
            setattr(self, name, getattr(self, name) + getattr(other, name))



def field_values(task: ShardTask) -> tuple[str, ...]:
    """The items' field values (the scan's JSON per item) when the records hold fields, which
    make them inputs of the shard's bytes; empty for a dataset of images and classes."""
    return task.metadata if task.schema is not None else ()

def sample_encoder(task: ShardTask) -> SampleEncoder:
    """How the task's samples become records: by the task's schema, each image field bound to
    the task's codec object. Without one, the schema ``{image, label}`` (the label goes to the
    sample index): a record is the codec's output itself, as it always was."""
    if task.schema is not None:
        bound = {f.name: ImageType(task.codec) for f in task.schema if f.type == "image"}
        return SampleEncoder(task.schema, bound=bound)
    image = Field("image", "image", {"codec": task.codec.name, "codec_params": task.codec.params(),
                                     "check": task.check, "max_pixels": task.max_pixels})
    return SampleEncoder(Schema((image,)), bound={"image": ImageType(task.codec)})


def _pack_items(task: ShardTask, start: int, stop: int, sink: Callable[[bytes], object],
                notify: Notify) -> _Packed:
    """Read, check and encode items ``start:stop`` in order, handing each payload to ``sink``."""
    packed = _Packed()
    encoder = sample_encoder(task)
    algorithm = task.digest
    for position in range(start, stop):
        item = task.items[position]
        relpath, label, size, mtime_ns = item.relpath, item.label, item.size, item.mtime_ns
        notify("file", relpath)
        digest = b""
        try:
            data = task.reader.read(item)
            digest = algorithm.of(data)  # once, from the bytes in hand: the source's and the record's
            if relpath in task.crashed:  # read (its digest counts), but never decoded again
                raise UnpackableFile("decode_error", task.crashed[relpath])
            values = (task.reader.values(item, data, task.metadata[position] if task.metadata else "")
                      if task.schema is not None else {"image": data})
            payload = encoder.encode(values)
        except UnpackableFile as err:
            bad = err
        else:
            sink(payload)
            packed.relpaths.append(relpath)
            packed.targets.append(label)
            packed.sizes.append(len(payload))
            packed.bytes_in += len(data)
            short = digest_prefix(digest)
            packed.sources.append((size, mtime_ns, short))  # samples/sources.npy
            packed.digests.append((relpath, digest.hex()))
            # the records array's digest: the payload's (the source's when stored untouched)
            packed.payload_digests.append(short if payload is data else digest64(payload, algorithm))
            if task.metadata:
                packed.metadata.append(task.metadata[position])
            notify("packed", relpath)
            continue
        packed.digests.append((relpath, digest.hex()))
        if task.strict:
            raise BadImageError(f"{task.reader.where(relpath)!r} cannot be packed: "
                                f"{bad.reason} ({bad.detail}). Fix or remove the file, or "
                                "convert without strict=True to skip and list it.",
                                path=relpath, reason=bad.reason)
        packed.skipped.append(SkippedFile(relpath, bad.reason, bad.detail, size, mtime_ns))
        notify("skipped", relpath)
    return packed


def _temporary(task: ShardTask, what: str) -> str:
    """A staging path no other attempt uses (a dead worker's leftovers never collide)."""
    return os.path.join(task.staging, f"{task.name}{what}.{os.getpid()}.{uuid.uuid4().hex[:8]}")


def _finish(writer: ShardWriter, task: ShardTask, packed: _Packed) -> tuple[str, bytes | None]:
    """Close ``writer``; return the hex digest (by the task's algorithm) of the file it wrote
    and its records (:func:`packer.format.records.records_to_bytes`, None where the backend
    cannot tell).

    Once :meth:`ShardWriter.finish` has put the last bytes, the file is hashed in a thread
    while :meth:`ShardWriter.close` syncs it and the backend locates the records: the hash
    waits on a core, the sync on the disk.
    """
    backend = get_backend(task.backend)
    writer.finish()
    with ThreadPoolExecutor(1, thread_name_prefix="packer-hash") as pool:  # joined on the way out
        hashing = pool.submit(task.digest.file, writer.path)
        writer.close()
        records = (None if backend.ranges is None else
                   records_to_bytes(shard_records_of(backend, writer.path, packed.payload_digests)))
        return hashing.result(), records


def _publish(task: ShardTask, tmp_path: str, packed: _Packed,
             finished: tuple[str, bytes | None]) -> ShardResult:
    """Rename the written shard (``finished``: its digest and records, from :func:`_finish`)
    into DST under its content name, fsync, then write its receipt. A file of that name
    already in DST holds the same bytes (another version's, or an earlier attempt's): it is
    kept, never rewritten, and the new copy dropped."""
    checksum, records = finished
    try:
        num_bytes = os.path.getsize(tmp_path)
        name = shard_file_name(checksum, get_backend(task.backend).suffix)
        final = os.path.join(task.dst, name)
        if os.path.isfile(final) and os.path.getsize(final) == num_bytes:
            os.unlink(tmp_path)
        else:
            os.replace(tmp_path, final)
    except BaseException:
        if os.path.exists(tmp_path):
            os.unlink(tmp_path)
        raise
    fsync_dir(task.dst)
    first = -1  # global numbering is only known once every earlier shard is done
    contents = shard_contents(task.options, packed.digests, field_values(task))
    entry = ShardEntry(name, first, len(packed.relpaths), num_bytes, checksum, task.inputs, contents)
    result = ShardResult(entry, tuple(packed.relpaths), tuple(packed.targets), tuple(packed.skipped),
                         packed.bytes_in, task.fingerprint, tuple(packed.metadata), tuple(packed.sources),
                         records)
    os.makedirs(os.path.join(task.dst, RECEIPTS_DIR), exist_ok=True)
    receipt = result.to_json().encode("utf-8", "surrogateescape")
    atomic_write_bytes(receipt_path(task.dst, task.fingerprint), receipt)
    return result


def write_shard(task: ShardTask, notify: Notify) -> ShardResult:
    """Pack ``task`` into ``DST/<name>`` and its receipt; see the module docstring.

    Raises:
        BadImageError: under ``strict``, the first file that cannot be packed.
        SourceError: a source file vanished, changed or could not be read (I/O error).
        ShardWriteError, OSError: the shard could not be written (disk full, read-only, ...).
    """
    tmp_path = _temporary(task, "")
    writer = get_backend(task.backend).writer(tmp_path, capacity=max(task.planned_bytes, 1))
    try:
        packed = _pack_items(task, 0, len(task.items), writer.write, notify)
    except BaseException:
        writer.abort()
        raise
    # A failure to finish (a full disk) leaves the file in staging until the run's cleanup, so
    # that the coordinator still sees the room it took when it says why the write failed.
    return _publish(task, tmp_path, packed, _finish(writer, task, packed))


@dataclass(frozen=True)
class SegmentResult:
    """Payloads of one segment, back to back in a staging file, with what they are."""

    shard: int
    segment: int
    path: str
    packed: _Packed


def write_segment(task: SegmentTask, notify: Notify) -> SegmentResult:
    """Pack items ``start:stop`` of a shard into a staging file (no shard is written yet).

    Used when there are fewer shards than workers: the segments of a shard are packed in
    parallel, then a :class:`ShardAssembler` writes the shard from them, byte for byte what
    :func:`write_shard` would have written.
    """
    shard = task.shard
    path = _temporary(shard, f".segment-{task.segment:04d}")
    try:
        with open(path, "wb") as spill:
            packed = _pack_items(shard, task.start, task.stop, spill.write, notify)
    except BaseException:
        if os.path.exists(path):
            os.unlink(path)
        raise
    return SegmentResult(shard.index, task.segment, path, packed)


class ShardAssembler:
    """Writes a segmented shard as its segments arrive, in order, then publishes it.

    Runs in the coordinator while workers pack later segments, so writing overlaps decoding;
    the bytes are exactly those :func:`write_shard` would have written.
    """

    def __init__(self, task: ShardTask, segments: int) -> None:
        self.task = task
        self._total = segments
        self._next = 0
        self._waiting: dict[int, SegmentResult] = {}
        self._whole = _Packed()
        self._tmp_path = _temporary(task, "")
        self._writer: ShardWriter | None = None

    def add(self, segment: SegmentResult) -> ShardResult | None:
        """Take one finished segment; return the published shard once all are in."""
        self._waiting[segment.segment] = segment
        while self._next in self._waiting:
            self._append(self._waiting.pop(self._next))
            self._next += 1
        if self._next < self._total:
            return None
        writer, self._writer = self._open_writer(), None  # a failure to finish: see write_shard
        return _publish(self.task, self._tmp_path, self._whole, _finish(writer, self.task, self._whole))

    def _open_writer(self) -> ShardWriter:
        if self._writer is None:
            backend = get_backend(self.task.backend)
            self._writer = backend.writer(self._tmp_path, capacity=max(self.task.planned_bytes, 1))
        return self._writer

    def _append(self, segment: SegmentResult) -> None:
        writer = self._open_writer()
        with open(segment.path, "rb") as spill:
            for size in segment.packed.sizes:
                writer.write(spill.read(size))
        writer.sync()  # flush while workers still decode: less to wait for at close
        os.unlink(segment.path)
        self._whole.extend(segment.packed)

    def abort(self) -> None:
        """Drop the partial shard (the run failed elsewhere)."""
        if self._writer is not None:
            self._writer.abort()
            self._writer = None


@dataclass(frozen=True)
class SegmentTask:
    """Items ``start:stop`` of ``shard``, packed into a staging file by one worker."""

    shard: ShardTask
    segment: int
    start: int
    stop: int

    def run(self, notify: Notify) -> SegmentResult:
        """Do the work (in a worker process)."""
        return write_segment(self, notify)

    def with_crash(self, relpath: str, detail: str) -> SegmentTask:
        """The same task, with ``relpath`` known to crash the decoder."""
        return replace(self, shard=self.shard.with_crash(relpath, detail))


#: A unit of work for an engine: a whole shard, or one segment of a shard.
Task = ShardTask | SegmentTask


def shard_of(task: Task) -> ShardTask:
    """The shard a task writes (a segment's shard, or the task itself)."""
    return task.shard if isinstance(task, SegmentTask) else task
