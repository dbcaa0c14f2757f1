"""What a conversion makes: :class:`ConversionOptions`, every choice that decides the output.

Built and validated once (by :func:`packer.convert`'s keywords, or by the command line) and
passed as one frozen value through planning, the dry run, array tasks and resume. How the run
goes (``overwrite``, ``resume``, ``workers``, ``engine``, ``progress``) is not part of it: those
never change the bytes written.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any, Final, TypeVar

from packer.digests import LEGACY_DIGEST, default_digest, get_digest
from packer.format.backends import Backend, get_backend
from packer.format.codecs import CHECK_LEVELS, DEFAULT_MAX_PIXELS, Codec, get_codec
from packer.sizes import parse_size
from packer.source.base import SourceOptions
from packer.source.limits import DEFAULT_MAX_BYTES

__all__ = ["DEFAULT_SHARD_SIZE", "ConversionOptions", "conversion_options", "option_keywords"]

#: Planned bytes per shard unless told otherwise (1 GiB).
DEFAULT_SHARD_SIZE: Final = 1 << 30


@dataclass(frozen=True)
class ConversionOptions:
    """Every option that decides a conversion's output; validated when built.

    Args:
        to: Backend name, ``"lmdb"`` or ``"hdf5"``.
        shard_size: The shard size, as a number or text such as ``"512MB"`` (kept as a number
            of bytes); shards hold a quarter to twice it.
        codec: How images are stored: ``"original"`` (source bytes untouched), ``"jpeg"``
            (re-encoded), ``"pixels"`` (decoded RGB).
        codec_options: The codec's options: ``{"quality": 90, "resize": 256}`` for ``jpeg``,
            ``{"resize": 256}`` for ``pixels``.
        check: ``"full"`` decodes every image once, ``"header"`` only opens it, ``"none"``
            trusts the files.
        max_pixels: Images with more pixels are skipped as ``decompression_bomb``.
        max_bytes: The most bytes of one archive member, table cell or record that are read
            (held in memory, or spooled), as a number or text such as ``"64MiB"`` (kept as a
            number of bytes; default 256 MiB); a larger one is skipped as ``too_large``.
        strict: Stop at the first file that cannot be packed instead of skipping it.
        include_hidden: Pack names starting with ``.`` too (ImageFolder does; packer does not).
        allow_empty: Accept class folders without images, as ImageFolder's ``allow_empty``.
        is_valid_file: Replaces the extension check; receives each file's full path.
        root: A list (or COCO) source's root: the folder its paths are relative to (default:
            the list's or the COCO file's folder).
        path_column: A CSV or JSON Lines list's image-path column (default: the first of
            ``path``, ``file_name``, ``filename``, ``file``, ``image``).
        label_column: Its label column (default: the first of ``label``, ``class``,
            ``target``, ``category``).
        classes_file: Class names of integer labels, one per line (line ``i`` names label ``i``).
        source_format: The kind of source (``tree``, ``list``, ``archive``, ``webdataset``,
            ``parquet``, ``coco``; see :mod:`packer.source.registry`); None detects it.
        label_field: A WebDataset sample's label member (``cls``, ``txt``, ``json:label``).
        image_column: A Parquet table's image column (default: ``image``, ``img``, ...).
        fields: A source's columns or members as typed fields, each ``"[NAME=]KEY:TYPE"``
            (:mod:`packer.source.fieldspecs`): a CSV or JSON Lines list's columns
            (``caption:text``), a WebDataset sample's members (``mask=seg.png:mask``). Samples
            then read back as dicts.
        drop_unannotated: A COCO file's images without an annotation are skipped as
            ``no_annotation`` (listed, so the counts add up) instead of packed with zero boxes.
        digest: What every checksum of the dataset is made with: ``"blake3"`` (about 4.7x
            faster; needs the ``fast`` extra to write and to read from a URL or verify) or
            ``"sha256"``; None: ``blake3`` where it is installed, else ``sha256``
            (:mod:`packer.digests`). Kept as the name chosen, and recorded.

    Raises:
        UnknownNameError: ``to``, ``codec`` or ``digest`` is not registered, or the codec cannot
            take ``codec_options``.
        MissingExtraError: ``digest="blake3"`` without its wheel.
        ValueError: ``shard_size``, ``check``, ``max_pixels`` or ``max_bytes`` is out of range.
    """

    to: str
    shard_size: int | str = DEFAULT_SHARD_SIZE
    codec: str = "original"
    codec_options: Mapping[str, Any] = field(default_factory=dict, hash=False)
    check: str = "full"
    max_pixels: int = DEFAULT_MAX_PIXELS
    max_bytes: int | str = DEFAULT_MAX_BYTES
    strict: bool = False
    include_hidden: bool = False
    allow_empty: bool = False
    is_valid_file: Callable[[str], bool] | None = None
    root: str | os.PathLike[str] | None = None  # kept as an absolute path (str)
    path_column: str | None = None
    label_column: str | None = None
    classes_file: str | os.PathLike[str] | None = None  # kept as an absolute path (str)
    source_format: str | None = None
    label_field: str | None = None
    image_column: str | None = None
    drop_unannotated: bool = False
    fields: Sequence[str] = ()  # kept as a tuple of str
    digest: str | None = None  # kept as the algorithm's name
    #: The registered backend ``to`` names.
    backend: Backend = field(init=False, repr=False, compare=False)
    #: The codec built from ``codec`` and ``codec_options``.
    stored_as: Codec = field(init=False, repr=False, compare=False)
    #: Whether ``digest`` was given (not the machine's default): an array task given none follows
    #: the algorithm its DST's plan records.
    digest_given: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        backend = get_backend(self.to)
        stored_as = get_codec(self.codec, self.codec_options)
        if self.check not in CHECK_LEVELS:
            raise ValueError(f"check must be one of {', '.join(CHECK_LEVELS)}, not {self.check!r}")
        if self.max_pixels <= 0:
            raise ValueError(f"max_pixels must be positive, not {self.max_pixels}")
        settle = object.__setattr__  # a frozen dataclass normalises its own fields here only
        settle(self, "shard_size", parse_size(self.shard_size))
        try:
            settle(self, "max_bytes", parse_size(self.max_bytes))
        except ValueError as err:
            raise ValueError(f"max_bytes: {err}") from None
        settle(self, "codec_options", dict(self.codec_options or {}))
        if isinstance(self.fields, str):
            raise TypeError(f"fields takes a sequence of '[NAME=]KEY:TYPE' strings, not the string "
                            f"{self.fields!r} (write fields=[{self.fields!r}])")
        settle(self, "fields", tuple(str(spec) for spec in self.fields))
        for name in ("root", "classes_file"):
            value = getattr(self, name)
            if value is not None:
                settle(self, name, os.path.abspath(os.fspath(value)))
        settle(self, "digest_given", self.digest is not None)
        settle(self, "digest", get_digest(self.digest or default_digest()).name)
        settle(self, "backend", backend)
        settle(self, "stored_as", stored_as)

    @property
    def shard_bytes(self) -> int:
        """``shard_size`` as a number of bytes."""
        return int(self.shard_size)

    @property
    def scan_filter(self) -> str:
        """How image files are recognised: ``"extensions"`` or ``"is_valid_file"``."""
        return "is_valid_file" if self.is_valid_file is not None else "extensions"

    @classmethod
    def from_recorded(cls, recorded: Mapping[str, Any], *, strict: bool = False,
                      is_valid_file: Callable[[str], bool] | None = None) -> ConversionOptions:
        """The options a dataset recorded (``manifest.extra["options"]``), to convert its source
        again the same way (``packer update``).

        Raises:
            ValueError: the dataset was converted with an ``is_valid_file`` filter and none was
                given (or one was given for a dataset without), or the record is not this
                packer's.
        """
        if (recorded.get("filter") == "is_valid_file") != (is_valid_file is not None):
            if is_valid_file is None:
                raise ValueError("the dataset was converted with a custom is_valid_file filter: pass the "
                                 "same is_valid_file (from Python) to convert its source the same way")
            raise ValueError("is_valid_file was given, but the dataset was converted without one")
        listed = dict(recorded.get("list") or {})
        source = dict(recorded.get("source") or {})
        options = cls(to=recorded["backend"], shard_size=recorded["shard_size"], codec=recorded["codec"],
                      codec_options=recorded["codec_params"], check=recorded["check"],
                      max_pixels=recorded["max_pixels"],
                      max_bytes=recorded.get("max_bytes", DEFAULT_MAX_BYTES), strict=strict,
                      include_hidden=recorded["include_hidden"], allow_empty=recorded["allow_empty"],
                      is_valid_file=is_valid_file, root=listed.get("root"),
                      path_column=listed.get("path_column"), label_column=listed.get("label_column"),
                      classes_file=listed.get("classes_file"), source_format=source.get("format"),
                      label_field=source.get("label_field"), image_column=source.get("image_column"),
                      drop_unannotated=bool(source.get("drop_unannotated", False)),
                      fields=tuple(listed.get("fields") or source.get("fields") or ()),
                      digest=recorded.get("digest", LEGACY_DIGEST))
        # the schema is the scan's (a dataset with fields records it beside the options): the
        # next scan gives it again, and a changed one changes every shard's fingerprint
        given = {key: value for key, value in recorded.items() if key != "schema"}
        if options.recorded() != given:
            raise ValueError(f"the recorded options {given} cannot be rebuilt by this packer "
                             f"(they give {options.recorded()})")
        return options

    def recorded(self) -> dict[str, Any]:
        """The options as recorded in DST's plan (and fingerprinted): equal records, equal bytes.
        ``max_bytes`` and ``digest`` are recorded only when they are not the defaults of the
        packers before them, so datasets converted before they existed keep their records and
        fingerprints."""
        return {
            "backend": self.backend.name, "codec": self.stored_as.name,
            "codec_params": self.stored_as.params(), "check": self.check,
            "max_pixels": self.max_pixels, "shard_size": self.shard_bytes,
            **({"max_bytes": self.max_bytes} if self.max_bytes != DEFAULT_MAX_BYTES else {}),
            **({"digest": self.digest} if self.digest != LEGACY_DIGEST else {}),
            "include_hidden": self.include_hidden, "allow_empty": self.allow_empty,
            "filter": self.scan_filter,
            **({"list": self._list_record} if self._list_record else {}),
            **({"source": self._source_record} if self._source_record else {}),
        }

    @property
    def _list_record(self) -> dict[str, Any]:
        """A list source's own options, recorded (its fields only when given, so lists converted
        before fields existed keep their records)."""
        if self.source_format not in (None, "tree", "list"):
            return self.list_options
        return {**self.list_options, **({"fields": list(self.fields)} if self.fields else {})}

    @property
    def _source_record(self) -> dict[str, Any]:
        """The kind of source and its own options, recorded for kinds other than trees and lists
        (whose record predates kinds: detection finds them again)."""
        if self.source_format in (None, "tree", "list"):
            return {}
        given = {"label_field": self.label_field, "image_column": self.image_column,
                 "drop_unannotated": self.drop_unannotated or None,  # recorded only when set
                 "fields": list(self.fields) or None}
        return {"format": str(self.source_format), **{k: v for k, v in given.items() if v is not None}}

    @property
    def source_options(self) -> SourceOptions:
        """How to read SRC, for :func:`packer.source.registry.open_source`, with the
        ``max_bytes`` bound (:mod:`packer.source.limits`)."""
        return SourceOptions(format=self.source_format, include_hidden=self.include_hidden,
                             allow_empty=self.allow_empty, is_valid_file=self.is_valid_file,
                             root=None if self.root is None else os.fspath(self.root),
                             path_column=self.path_column, label_column=self.label_column,
                             classes_file=None if self.classes_file is None else
                             os.fspath(self.classes_file), label_field=self.label_field,
                             image_column=self.image_column, max_bytes=int(self.max_bytes),
                             drop_unannotated=self.drop_unannotated,
                             fields=tuple(self.fields))

    def for_source(self, kind: str) -> ConversionOptions:
        """These options with ``source_format`` set to the kind detected (so it is recorded)."""
        return self if self.source_format == kind else replace(self, source_format=kind)

    @property
    def list_options(self) -> dict[str, str]:
        """The options that only apply to a list source, those that were given."""
        given = {"root": self.root, "path_column": self.path_column,
                 "label_column": self.label_column, "classes_file": self.classes_file}
        return {key: os.fspath(value) for key, value in given.items() if value is not None}

    def keywords(self) -> dict[str, Any]:
        """The keyword arguments of :func:`packer.convert` that build these options."""
        return {"to": self.to, "shard_size": self.shard_bytes, "codec": self.codec,
                "codec_options": dict(self.codec_options), "check": self.check,
                "max_pixels": self.max_pixels, "max_bytes": self.max_bytes, "strict": self.strict,
                "include_hidden": self.include_hidden, "allow_empty": self.allow_empty,
                "is_valid_file": self.is_valid_file, **self.list_options,
                **{k: v for k, v in (("source_format", self.source_format), ("label_field", self.label_field),
                                     ("image_column", self.image_column)) if v is not None},
                **({"drop_unannotated": True} if self.drop_unannotated else {}),
                **({"fields": tuple(self.fields)} if self.fields else {}), "digest": self.digest}


def conversion_options(options: ConversionOptions | None, values: Mapping[str, Any]) -> ConversionOptions:
    """``options``, or the options the keywords ``values`` name (the fields of
    :class:`ConversionOptions`); the one place the public functions build them.

    Raises:
        TypeError: both were given, or a keyword is not an option (the message lists them).
    """
    if options is not None:
        if values:
            raise TypeError(f"give options= or option keywords, not both (got {', '.join(sorted(values))})")
        return options
    known = {f.name for f in fields(ConversionOptions) if f.init}
    unknown = sorted(set(values) - known)
    if unknown:
        raise TypeError(f"unexpected keyword argument(s) {', '.join(unknown)}; the conversion options "
                        f"are {', '.join(sorted(known))}")
    return ConversionOptions(**values)


F = TypeVar("F", bound=Callable[..., Any])


def option_keywords(func: F) -> F:
    """Show the fields of :class:`ConversionOptions` as ``func``'s keyword-only parameters (for
    ``help()`` and ``inspect.signature``) in place of its ``**option_values``: the option list is
    written once, in the dataclass."""
    signature = inspect.signature(func)
    params = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    taken = {p.name for p in params}
    for option in fields(ConversionOptions):
        if not option.init or option.name in taken:
            continue
        default: Any = option.default
        if default is MISSING:
            factory = option.default_factory
            default = factory() if callable(factory) else inspect.Parameter.empty
        params.append(inspect.Parameter(option.name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                        annotation=option.type))
    func.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    return func
