"""Plain value fields: ``text``, ``json``, ``ndarray``, ``bytes``, ``int``, ``float``, and the param
checks every built-in type shares.

Stored forms (all little-endian, all deterministic: one value, one byte string):

=========== ===============================================================================
``text``    UTF-8, strict (lone surrogates refused; NUL is a character like any other, kept)
``json``    canonical JSON: sorted keys, ``,``/``:`` separators, UTF-8 (not ASCII-escaped),
            NaN and infinities refused; tuples come back as lists
``ndarray`` ``<ndim:u32><dim:u64>*ndim`` then the elements in C order, little-endian
``bytes``   the bytes as given
``int``     int64; ``float``: float64 (every NaN stored as the one canonical quiet NaN)
=========== ===============================================================================
"""

from __future__ import annotations

import json
import math
import numbers
import struct
import warnings
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Final

import numpy as np

from packer.format.fields.base import FieldType, FieldValueError

__all__ = ["INVALID_VALUE", "BytesType", "FloatType", "IntType", "JsonType", "NdarrayType", "TextType"]

#: A value of the wrong kind or shape for its field (a str for an ``int``, a 3-D array for a 2-D one).
INVALID_VALUE: Final = "invalid_value"
_MIB: Final = 1 << 20
_I64: Final = struct.Struct("<q")
_F64: Final = struct.Struct("<d")
_NDIM: Final = struct.Struct("<I")
#: numpy allows at most 64 dimensions; a header claiming more is damaged.
_MAX_NDIM: Final = 64
#: Array element kinds an ``ndarray`` field may hold: bool, signed, unsigned, float, complex.
_NDARRAY_KINDS: Final = "biufc"


def known(params: Mapping[str, Any], allowed: Iterable[str]) -> None:
    """Refuse a param the type does not take, naming it and the ones it takes."""
    choices = sorted(allowed)
    unknown = sorted(set(params) - set(choices))
    if unknown:
        raise ValueError(f"unknown param {', '.join(map(repr, unknown))}; the params are "
                         f"{', '.join(choices) or '(none)'}")


def choice(params: Mapping[str, Any], name: str, choices: Iterable[str], default: str | None) -> str:
    """Param ``name``: one of ``choices`` (``default`` when absent; None makes it required)."""
    options = tuple(choices)
    value = params.get(name, default)
    if value not in options:
        raise ValueError(f"param {name!r} must be one of {', '.join(options)}, not {value!r}")
    return str(value)


def flag(params: Mapping[str, Any], name: str, default: bool) -> bool:
    """Param ``name``: a bool (``default`` when absent)."""
    value = params.get(name, default)
    if not isinstance(value, bool):
        raise ValueError(f"param {name!r} must be true or false, not {value!r}")
    return value


def positive_int(params: Mapping[str, Any], name: str, default: int) -> int:
    """Param ``name``: an int of at least 1 (``default`` when absent)."""
    value = params.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"param {name!r} must be a positive integer, not {value!r}")
    return value


def field_name(params: Mapping[str, Any], name: str) -> str:
    """Param ``name``: the (required) name of another field of the schema."""
    value = params.get(name)
    if not isinstance(value, str) or not value:
        raise ValueError(f"param {name!r} must name a field of the schema, not {value!r}")
    return value


def class_names(params: Mapping[str, Any], name: str = "classes") -> list[str]:
    """Param ``name``: a list of distinct, non-empty class names (empty when absent: unnamed)."""
    value = params.get(name, [])
    if not isinstance(value, list | tuple) or not all(isinstance(c, str) and c for c in value):
        raise ValueError(f"param {name!r} must be a list of class names (non-empty strings), not {value!r}")
    if len(set(value)) != len(value):
        twice = sorted(c for c, n in Counter(value).items() if n > 1)
        raise ValueError(f"param {name!r} names {', '.join(map(repr, twice))} more than once")
    return list(value)


def exact_int(value: Any, what: str) -> int:
    """``value`` as an int if it is one (Python or numpy; not a bool), else an ``invalid_value``."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Integral):
        raise FieldValueError(INVALID_VALUE, f"{what} must be an integer, not {type(value).__name__}")
    return int(value)


class TextType(FieldType):
    """A UTF-8 string (a caption), at most ``max_bytes`` (default 1 MiB) long when encoded."""

    name: ClassVar[str] = "text"

    def check_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        known(params, ("max_bytes",))
        return {"max_bytes": positive_int(params, "max_bytes", _MIB)}

    def encode(self, value: Any, params: Mapping[str, Any], *, context: Mapping[str, Any]) -> bytes:
        if not isinstance(value, str):
            raise FieldValueError(INVALID_VALUE, f"text must be a str, not {type(value).__name__}")
        try:
            data = value.encode("utf-8")
        except UnicodeEncodeError as err:
            raise FieldValueError(INVALID_VALUE, f"text is not valid Unicode ({err.reason} at "
                                                 f"character {err.start})") from None
        if len(data) > params["max_bytes"]:
            raise FieldValueError("too_large", f"text of {len(data)} bytes is over max_bytes "
                                               f"{params['max_bytes']}")
        return data

    def decode(self, payload: bytes | memoryview, params: Mapping[str, Any]) -> str:
        if len(payload) > params["max_bytes"]:
            raise ValueError(f"text record of {len(payload)} bytes is over max_bytes {params['max_bytes']}")
        return bytes(payload).decode("utf-8")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


class JsonType(FieldType):
    """Any JSON value (annotations, metadata), stored canonically, at most ``max_bytes`` (16 MiB)."""

    name: ClassVar[str] = "json"

    def check_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        known(params, ("max_bytes",))
        return {"max_bytes": positive_int(params, "max_bytes", 16 * _MIB)}

    def encode(self, value: Any, params: Mapping[str, Any], *, context: Mapping[str, Any]) -> bytes:
        try:
            text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                              allow_nan=False)
            data = text.encode("utf-8")
        except (TypeError, ValueError, RecursionError) as err:  # not JSON, NaN, too deep, surrogates
            raise FieldValueError(INVALID_VALUE, f"not a JSON value: {err}") from None
        if len(data) > params["max_bytes"]:
            raise FieldValueError("too_large", f"JSON of {len(data)} bytes is over max_bytes "
                                               f"{params['max_bytes']}")
        return data

    def decode(self, payload: bytes | memoryview, params: Mapping[str, Any]) -> Any:
        if len(payload) > params["max_bytes"]:
            raise ValueError(f"JSON record of {len(payload)} bytes is over max_bytes {params['max_bytes']}")
        try:
            return json.loads(bytes(payload).decode("utf-8"), parse_constant=_no_constant)
        except RecursionError:
            raise ValueError("JSON record nested too deep") from None


def _shape_param(value: Any) -> list[int | None] | None:
    if value is None:
        return None
    if not isinstance(value, list | tuple) or len(value) > _MAX_NDIM or not all(
            d is None or (isinstance(d, int) and not isinstance(d, bool) and d >= 0) for d in value):
        raise ValueError(f"param 'shape' must be null (any shape) or a list of at most {_MAX_NDIM} "
                         f"sizes (non-negative ints, or null for a variable size), not {value!r}")
    return list(value)


class NdarrayType(FieldType):
    """A numpy array of one ``dtype`` (bool, int, uint, float, complex) and a fixed or partly
    variable ``shape`` (a list of sizes, null for a variable one; null for any shape)."""

    name: ClassVar[str] = "ndarray"

    def check_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        known(params, ("dtype", "shape"))
        try:
            dtype = np.dtype(params.get("dtype") or "object")
        except TypeError as err:
            raise ValueError(f"param 'dtype' must be a numpy dtype name: {err}") from None
        if dtype.kind not in _NDARRAY_KINDS:
            raise ValueError(f"param 'dtype' must be a bool, integer, float or complex dtype name "
                             f"(uint8, int64, float32, ...), not {params.get('dtype')!r}")
        return {"dtype": dtype.name, "shape": _shape_param(params.get("shape"))}

    def encode(self, value: Any, params: Mapping[str, Any], *, context: Mapping[str, Any]) -> bytes:
        dtype = np.dtype(params["dtype"])
        array = _exactly(value, dtype)
        shape = params["shape"]
        if shape is not None and (len(shape) != array.ndim or any(
                want is not None and want != got for want, got in zip(shape, array.shape, strict=True))):
            raise FieldValueError(INVALID_VALUE, f"array of shape {list(array.shape)} does not fit "
                                                 f"shape {shape}")
        header = _NDIM.pack(array.ndim) + struct.pack(f"<{array.ndim}Q", *array.shape)
        return header + np.ascontiguousarray(array, dtype=dtype.newbyteorder("<")).tobytes()

    def decode(self, payload: bytes | memoryview, params: Mapping[str, Any]) -> np.ndarray:
        dtype = np.dtype(params["dtype"]).newbyteorder("<")
        if len(payload) < _NDIM.size:
            raise ValueError("ndarray record shorter than its header")
        (ndim,) = _NDIM.unpack_from(payload)
        start = _NDIM.size + 8 * ndim
        if ndim > _MAX_NDIM or len(payload) < start:
            raise ValueError(f"ndarray record header claims {ndim} dimensions in {len(payload)} bytes")
        shape = struct.unpack_from(f"<{ndim}Q", payload, _NDIM.size)
        if math.prod(shape) * dtype.itemsize != len(payload) - start:  # Python ints: no overflow
            raise ValueError(f"ndarray record of shape {list(shape)} ({dtype.name}) does not fit its "
                             f"{len(payload) - start} data bytes")
        wanted = params["shape"]
        if wanted is not None and (len(wanted) != ndim or any(
                w is not None and w != s for w, s in zip(wanted, shape, strict=True))):
            raise ValueError(f"ndarray record of shape {list(shape)} does not fit shape {wanted}")
        array = np.frombuffer(payload, dtype=dtype, offset=start).reshape(shape)
        if dtype.kind == "b" and np.frombuffer(payload, np.uint8, offset=start).max(initial=0) > 1:
            raise ValueError("bool ndarray record holds bytes other than 0 and 1")
        return array.astype(dtype.newbyteorder("="), copy=True)


def _exactly(value: Any, dtype: np.dtype) -> np.ndarray:
    """``value`` as an array of ``dtype`` when every element keeps its value, else an ``invalid_value``."""
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as err:  # ragged lists
        raise FieldValueError(INVALID_VALUE, f"not an array: {err}") from None
    if array.dtype.kind not in _NDARRAY_KINDS:
        raise FieldValueError(INVALID_VALUE, f"array of {array.dtype} cannot be {dtype.name}")
    if np.can_cast(array.dtype, dtype, casting="safe"):
        return array.astype(dtype)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ComplexWarning: the comparison below refuses what it drops
        cast = array.astype(dtype)
        same = np.array_equal(cast.astype(array.dtype), array, equal_nan=dtype.kind in "fc")
    if not same:
        raise FieldValueError(INVALID_VALUE, f"array of {array.dtype} would change values as "
                                             f"{dtype.name}: cast it first")
    return cast


class _Parameterless(FieldType):
    """A type that takes no params (one value as it is)."""

    def check_params(self, params: Mapping[str, Any]) -> dict[str, Any]:
        known(params, ())
        return {}


class BytesType(_Parameterless):
    """Raw bytes, stored as given."""

    name: ClassVar[str] = "bytes"

    def encode(self, value: Any, params: Mapping[str, Any], *, context: Mapping[str, Any]) -> bytes:
        if not isinstance(value, bytes | bytearray | memoryview):
            raise FieldValueError(INVALID_VALUE, f"bytes field given {type(value).__name__}")
        return bytes(value)

    def decode(self, payload: bytes | memoryview, params: Mapping[str, Any]) -> bytes:
        return bytes(payload)


class IntType(_Parameterless):
    """One signed 64-bit integer."""

    name: ClassVar[str] = "int"

    def encode(self, value: Any, params: Mapping[str, Any], *, context: Mapping[str, Any]) -> bytes:
        number = exact_int(value, "int field")
        if not -(1 << 63) <= number < (1 << 63):
            raise FieldValueError(INVALID_VALUE, f"{number} does not fit in 64 bits")
        return _I64.pack(number)

    def decode(self, payload: bytes | memoryview, params: Mapping[str, Any]) -> int:
        if len(payload) != _I64.size:
            raise ValueError(f"int record of {len(payload)} bytes, not 8")
        return int(_I64.unpack(payload)[0])


class FloatType(_Parameterless):
    """One 64-bit float (NaN and infinities allowed; every NaN stored the same way)."""

    name: ClassVar[str] = "float"

    def encode(self, value: Any, params: Mapping[str, Any], *, context: Mapping[str, Any]) -> bytes:
        if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
            raise FieldValueError(INVALID_VALUE, f"float field given {type(value).__name__}")
        try:
            number = float(value)
        except OverflowError:  # an int past float's range
            raise FieldValueError(INVALID_VALUE, f"{value} is out of float64's range") from None
        return _F64.pack(math.nan if math.isnan(number) else number)

    def decode(self, payload: bytes | memoryview, params: Mapping[str, Any]) -> float:
        if len(payload) != _F64.size:
            raise ValueError(f"float record of {len(payload)} bytes, not 8")
        return float(_F64.unpack(payload)[0])
