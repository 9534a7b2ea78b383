"""The bounds check in front of kio: every length a request frame declares is checked
against what remains of the frame BEFORE kio decodes it.

Why a wrapper: kio's native (Rust) reader reserves an array's memory from the length read
off the wire (`Vec::with_capacity(n)`) before it reads a single element, so a 24-byte
Metadata v12 frame declaring a compact array of 2^35-2 topics makes the process abort
(`memory allocation of 274877906928 bytes failed`: a Rust abort, not an exception Python
could catch), and an int32 array length of 2^31-1 reserves 16 GiB. That is upstream's
native code; it cannot be fixed here, so no frame reaches it unchecked.

What is bounded: a walker, generated once per (API key, version) from kio's own schema
classes (the dataclass fields and their `kafka_type`, read the way kio's native schema
compiler reads them: compact forms in flexible versions, the request header's legacy
client id, tagged fields), walks the header and body and refuses with ProtocolError (the
connection is closed, as Kafka closes one on a request it cannot parse) any string, bytes
or records length past the frame's end, any negative length but a nullable -1, and any
array whose element count times its elements' least wire size exceeds the bytes left. So
every element kio reserves room for is at least one byte of the frame: what kio allocates
is a small multiple of the frame's size (a pointer per element, and the Python objects it
builds), and the frame is bounded by socket.request.max.bytes. A tagged field the version
does not define is walked past and its span returned, for the decoder to drop it before
kio (which refuses it; Kafka's readers keep it aside and read on). The walk allocates
nothing that grows with the frame. It is generated Python, straight-line per entity, with
the common cases inline (one-byte varints, no tagged fields), so a small Produce costs
about a microsecond more to decode.
"""

from __future__ import annotations

import dataclasses
import functools
import struct
import threading
from collections.abc import Callable
from typing import Any

from kio.index import load_request_schema

from .errors import ProtocolError
from .schema_fields import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

# Wire sizes of kio's fixed-size kafka types (uuid: 16 bytes, null or not).
FIXED = {"bool": 1, "int8": 1, "uint8": 1, "int16": 2, "uint16": 2, "error_code": 2,
         "int32": 4, "uint32": 4, "timedelta_i32": 4, "int64": 8, "uint64": 8,
         "float64": 8, "timedelta_i64": 8, "datetime_i64": 8, "uuid": 16}
VARIABLE = ("string", "bytes", "records")

# A walker: (frame, offset of the first byte, end of the frame) -> offset after the walk.
Walker = Callable[[bytes, int, int], int]


class _Refused(Exception):
    """A length that cannot fit: raised inside a walk, reported by `check_request`."""


# --------------------------------------------------------------------------- the runtime
# What the generated code calls beyond its inline cases. An offset past the frame's end
# shows as IndexError or struct.error at the next read, or at the end-of-entity check.


def _uvarint(b: bytes, p: int, end: int) -> tuple[int, int]:
    """An unsigned varint of at most 5 bytes (kio reads no longer one): (value, offset)."""
    value = shift = 0
    for q in range(p, min(p + 5, end)):
        byte = b[q]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, q + 1
        shift += 7
    raise _Refused("varint runs past the frame" if p + 5 > end else "varint too long")


Unknown = tuple[int, int, int, list[tuple[int, int]]]
"""A tagged-field section holding fields the schema does not define: where its count
starts and ends, the count without them, and each such field's span (its tag, size and
value)."""

# A walk's state, on the rare path: the `unknown` sections noted, the `depth` of known
# tagged fields being walked.
_SECTIONS = threading.local()


def _tags(b: bytes, p: int, end: int, known: dict[int, Walker]) -> int:
    """A flexible entity's tagged fields: each known one walked by its schema (as kio reads
    it), an unknown one skipped by its declared size and its span noted (`check_request`
    returns them: Kafka's readers keep such fields aside and read on, kio refuses them).
    One inside a known tagged field is refused: dropping it would change that field's
    size too (no request defines such nesting today)."""
    start = p
    n, p = _uvarint(b, p, end)
    counted = p
    if 2 * n > end - p:
        raise _Refused(f"{n} tagged fields, {end - p} bytes left")
    unknown: list[tuple[int, int]] = []
    for _ in range(n):
        field = p
        tag, p = _uvarint(b, p, end)
        size, p = _uvarint(b, p, end)
        if size > end - p:
            raise _Refused(f"tagged field of {size} bytes, {end - p} left")
        walk = known.get(tag)
        if walk is None:
            p += size
            unknown.append((field, p))
            continue
        depth = getattr(_SECTIONS, "depth", 0)
        _SECTIONS.depth = depth + 1
        try:
            p = walk(b, p, end)
        finally:
            _SECTIONS.depth = depth
    if unknown:
        if getattr(_SECTIONS, "depth", 0):
            raise _Refused("an unknown tagged field inside a tagged field")
        noted = getattr(_SECTIONS, "unknown", None)
        if noted is None:  # the first walk: `check_request` walks again, noting them
            raise _UnknownTags
        noted.append((start, counted, n - len(unknown), unknown))
    return p


class _UnknownTags(Exception):
    """The frame holds a tagged field its schema does not define."""


_RUNTIME: dict[str, Any] = {"_uvarint": _uvarint, "_tags": _tags, "_Refused": _Refused,
                            "_i16": struct.Struct(">h").unpack_from,
                            "_i32": struct.Struct(">i").unpack_from}

# --------------------------------------------------------------------------- the compiler

Lines = list[str]


def _indent(lines: Lines) -> Lines:
    return ["    " + line for line in lines]


class _Compiler:
    """Generates one Python function per (entity class, nullable) that walks it: straight
    line code, fixed-size runs folded into one addition. `trace`: each length read first
    calls `_at(offset, kind)` (the tests find every length position so)."""

    def __init__(self, trace: bool = False) -> None:
        self.trace = trace
        self.source: list[str] = []
        self.names: dict[tuple[type, bool], str] = {}
        self.least: dict[tuple[type, bool], int] = {}
        self.namespace: dict[str, Any] = dict(_RUNTIME)
        self.tag_tables: list[tuple[str, list[tuple[int, str]]]] = []

    def entity(self, cls: type, nullable: bool, header: bool = False) -> str:
        """The name of the function walking `cls` (compiled on first use)."""
        key = (cls, nullable)
        if key in self.names:
            return self.names[key]
        name = self.names[key] = f"_w{len(self.names)}_{cls.__name__}"
        flexible = bool(getattr(cls, "__flexible__", False))
        lines: Lines = []
        least = 0
        if nullable:  # kio: an int8 marker, -1 = null
            lines += [*self._at("i8"), "p += 1", "if b[p - 1] == 0xFF: return p"]
            least += 1
        tagged: list[tuple[int, str]] = []
        pending = 0  # fixed bytes not yet added to p
        for f in dataclasses.fields(cls):
            tag = get_field_tag(f)
            if tag is not None:
                tagged.append((int(tag), self._tagged(cls, f)))
                continue
            fixed = _fixed(f, header)
            if fixed is not None:
                pending += fixed
                least += fixed
                continue
            if pending:
                lines.append(f"p += {pending}")
                pending = 0
            code, field_least = self._field(f, flexible, header, tagged=False)
            lines += code
            least += field_least
        if pending:
            lines.append(f"p += {pending}")
        if flexible:
            table = f"{name}_tags"
            self.namespace[table] = {}
            self.tag_tables.append((table, tagged))
            lines += [*self._at("uvarint"), "if b[p] == 0: p += 1",
                      f"else: p = _tags(b, p, end, {table})"]
            least += 1
        self._define(name, lines, "fields past the frame")
        self.least[key] = max(least, 1)
        return name

    def _at(self, kind: str) -> Lines:
        return [f"_at(p, {kind!r})"] if self.trace else []

    def _uvarint_into(self, var: str) -> Lines:
        """Read an unsigned varint into `var` (one byte inline)."""
        return [*self._at("uvarint"), f"{var} = b[p]", f"if {var} < 128: p += 1",
                f"else: {var}, p = _uvarint(b, p, end)"]

    def _variable(self, ktype: str, flexible: bool, nullable: bool) -> tuple[Lines, int]:
        """Lines skipping a string, bytes or records value (refusing a negative length but
        a nullable -1), and its least wire size. Past-the-end is caught at the next read."""
        null = "pass" if nullable else "raise _Refused('null where a value is required')"
        if flexible:
            return [*self._uvarint_into("x"), "if x: p += x - 1", f"else: {null}"], 1
        unpack, size = ("_i16", 2) if ktype == "string" else ("_i32", 4)
        return [*self._at(unpack[1:]), f"x = {unpack}(b, p)[0]",
                f"if x >= 0: p += {size} + x",
                f"elif x == -1: p += {size}; {null}",
                "else: raise _Refused(f'negative length {x}')"], size

    def _define(self, name: str, lines: Lines, past: str) -> None:
        self.source.append("\n".join([f"def {name}(b, p, end):", *_indent(lines),
                                      f"    if p > end: raise _Refused({past!r})",
                                      "    return p"]))

    def _field(self, f: dataclasses.Field[Any], flexible: bool, header: bool,
               tagged: bool) -> tuple[Lines, int]:
        """Lines walking one field that is not a fixed-size scalar, and its least size."""
        if header and f.name == "client_id":  # kio: always a nullable int16 string
            return self._variable("string", False, nullable=True)
        kind = classify_field(f)
        if isinstance(kind, EntityField):
            nullable = is_optional(f)
            fn = self.entity(kind.type_, nullable)
            return [f"p = {fn}(b, p, end)"], self.least[(kind.type_, nullable)]
        ktype = "" if isinstance(kind, EntityTupleField) else get_schema_field_type(f)
        if not isinstance(kind, (EntityTupleField, PrimitiveTupleField)):
            if ktype not in VARIABLE:
                raise TypeError(f"unknown kafka_type {ktype!r} of {f.name}")
            return self._variable(ktype, flexible, nullable=is_optional(f) and not tagged)
        # An array (-1 or compact 0: null): every element takes at least `least` bytes.
        if isinstance(kind, EntityTupleField):
            fn = self.entity(kind.type_, False)
            least = self.least[(kind.type_, False)]
            body = [f"for _ in range(n): p = {fn}(b, p, end)"]
        elif ktype in FIXED:
            least = FIXED[ktype]
            body = [f"if n > 0: p += n * {least}"]
        else:
            element, least = self._variable(ktype, flexible, nullable=False)
            body = ["for _ in range(n):", *_indent(element)]
        # Null only where the schema allows it: Kafka's readers refuse a null array whose
        # field is not nullable ("non-nullable field ... was serialized as null"), where kio
        # would hand the handler None for it.
        least_n = -1 if is_optional(f) else 0
        if flexible:
            count = [*self._uvarint_into("n"), "n -= 1",
                     f"if n < {least_n}: raise _Refused('a null array where the schema has"
                     " none')"]
        else:
            count = [*self._at("i32"), "n = _i32(b, p)[0]", "p += 4",
                     f"if n < {least_n}: raise _Refused(f'array length {{n}}')"]
        check = (f"if n * {least} > end - p: raise _Refused(f'array of {{n}} elements of"
                 f" >= {least} bytes, {{end - p}} bytes left')")
        return [*count, check, *body], 1 if flexible else 4

    def _tagged(self, cls: type, f: dataclasses.Field[Any]) -> str:
        """A function walking one tagged field's value (by its schema, as kio reads it)."""
        name = f"_t{len(self.source)}_{cls.__name__}_{f.name}"
        fixed = _fixed(f, header=False)
        if fixed is not None:
            lines = [f"p += {fixed}"]
        else:
            lines, _ = self._field(f, bool(getattr(cls, "__flexible__", False)), False,
                                   tagged=True)
        self._define(name, lines, "tagged field past the frame")
        return name

    def build(self, header_cls: type, body_cls: type) -> Walker:
        head = self.entity(header_cls, False, header=True)
        body = self.entity(body_cls, False)
        self.source.append(f"def _walk(b, p, end):\n    return {body}(b, {head}(b, p, end),"
                           " end)")
        exec("\n\n".join(self.source), self.namespace)  # the source: kio's schema
        for table, tagged in self.tag_tables:
            self.namespace[table].update({tag: self.namespace[fn] for tag, fn in tagged})
        walker: Walker = self.namespace["_walk"]
        return walker


def _fixed(f: dataclasses.Field[Any], header: bool) -> int | None:
    """The wire size of a fixed-size scalar field, else None."""
    if header and f.name == "client_id":
        return None
    if isinstance(classify_field(f), (EntityField, EntityTupleField, PrimitiveTupleField)):
        return None
    return FIXED.get(get_schema_field_type(f))


@functools.cache
def walker(api_key: int, version: int) -> Walker:
    """The walker of one request version's header and body (compiled once)."""
    cls = load_request_schema(api_key, version)
    return _Compiler().build(cls.__header_schema__, cls)


def length_positions(payload: bytes, api_key: int, version: int) -> list[tuple[int, str]]:
    """(offset, kind) of every length (and null marker) a request frame holds, in order:
    kind "i8", "i16", "i32" or "uvarint" (for the tests, which mutate them)."""
    found: list[tuple[int, str]] = []
    compiler = _Compiler(trace=True)
    compiler.namespace["_at"] = lambda p, kind: found.append((p, kind))
    cls = load_request_schema(api_key, version)
    compiler.build(cls.__header_schema__, cls)(payload, 0, len(payload))
    return found


def check_request(payload: bytes, api_key: int, version: int) -> list[Unknown]:
    """Refuse (ProtocolError) a request frame any of whose lengths cannot fit in it; the
    tagged-field sections holding fields this version does not define (almost always
    none), in frame order, for the decoder to drop those fields."""
    walk = walker(api_key, version)
    try:
        try:
            walk(payload, 0, len(payload))
            return []
        except _UnknownTags:  # rare: walked again, the sections noted (nothing to set up
            unknown: list[Unknown] = []  # on the common path)
            _SECTIONS.unknown = unknown
            try:
                walk(payload, 0, len(payload))
            finally:
                _SECTIONS.unknown = None
            return unknown
    except _Refused as exc:
        raise ProtocolError(f"malformed API {api_key} v{version} request: {exc}") from None
    except (IndexError, struct.error):
        raise ProtocolError(f"malformed API {api_key} v{version} request: a length runs"
                            " past the frame") from None
