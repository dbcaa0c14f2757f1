"""What a field type is: how one named value of a sample is checked, stored and read back.

A sample is a set of named, typed fields (its :class:`~packer.format.fields.schema.Schema`).
Each field's type turns a value into stored bytes at write time and stored bytes back into a
value at read time, with its parameters (an image's codec, a box format, an array's dtype)
recorded in the manifest beside the type's name, so a dataset always knows how to read itself.
Types are registered by name (:mod:`packer.format.fields.registry`); a plugin adds one.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar

from packer.source.sourcefile import UnpackableFile

__all__ = ["FieldType", "FieldValueError"]


class FieldValueError(UnpackableFile):
    """A value that does not fit its field (a mask of another size than its image, a box with no
    area): ``reason`` is one of ``SKIP_REASONS``, ``detail`` says what.

    An :class:`~packer.source.sourcefile.UnpackableFile`: the writer skips and lists the sample
    (or raises under ``strict``) exactly as it does a file that cannot be packed.
    """


class FieldType(ABC):
    """One kind of field value. Stateless: everything a field needs is in its ``params``.

    ``in_record``: stored in the sample's record (one range per sample, so remote reads stay
    one request); False for values kept as arrays in the sample index (the class ``label``).
    ``refers_to``: the params that name another field of the schema (a mask's ``image``),
    which the schema checks exist and have the type given here.
    """

    #: The name recorded in manifests (``image``, ``mask``, ``boxes``, ...).
    name: ClassVar[str]
    in_record: ClassVar[bool] = True
    #: param name -> the type the field it names must have (e.g. ``{"image": "image"}``).
    refers_to: ClassVar[Mapping[str, str]] = {}

    @abstractmethod
    def check_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """``params`` validated, with defaults filled in: what the manifest records.

        Raises:
            ValueError: an unknown or ill-typed parameter; the message names it and the choices.
        """

    @abstractmethod
    def encode(self, value: Any, params: Mapping[str, Any], *, context: Mapping[str, Any]) -> bytes:
        """The stored bytes of ``value``. ``context`` holds the sample's other values already
        encoded this far, decoded where a type needs them (an image's ``(width, height)`` under
        ``"<image field>.size"``), so that a mask or boxes can be checked against their image.

        Raises:
            FieldValueError: the value does not fit (the sample is skipped with that reason).
        """

    @abstractmethod
    def decode(self, payload: bytes | memoryview, params: Mapping[str, Any]) -> Any:
        """The value of stored bytes (numpy arrays, str, int, a PIL image for images).

        Raises:
            ValueError: the bytes are not this type's (a damaged record); the reader turns it
                into a ShardError naming the shard.
        """

    def context_of(self, name: str, value: Any, payload: bytes, params: Mapping[str, Any]) -> dict[str, Any]:
        """What the fields after this one may check against (see :meth:`encode`): an image
        gives ``{"<name>.size": (width, height)}``. Nothing by default."""
        return {}

    def in_image_pixels(self, params: Mapping[str, Any]) -> bool:
        """True when the values are measured in the pixels of the image field they refer to (a
        mask, boxes in pixels): stored resized, that image would no longer fit them, so a schema
        refuses the pair. False by default."""
        return False
