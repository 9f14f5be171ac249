"""Request parsing and response encoding on top of kio's generated entities.

Every API version has its own generated classes; handlers build responses with `make`,
which drops the arguments a version's class does not have, so one handler serves the
whole version range it declares.
"""

from __future__ import annotations

import io
import struct
from dataclasses import fields
from functools import cache
from types import ModuleType
from typing import Any, NamedTuple

from kio.index import load_payload_module, load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

from . import bounds, inter_broker, legacy
from .nulls import first_null

_KEY_VERSION = struct.Struct(">hh")
_SIZE = struct.Struct(">i")

API_VERSIONS_KEY = 18
SASL_HANDSHAKE_KEY = 17  # the two APIs a connection speaks before it is authenticated
SASL_AUTHENTICATE_KEY = 36


class MalformedRequestError(Exception):
    """The frame is not a valid request: the connection is closed."""


class UnsupportedVersionError(Exception):
    def __init__(self, api_key: int, api_version: int, correlation_id: int) -> None:
        super().__init__(f"api key {api_key} version {api_version} is not supported")
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id


class Request(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any
    size: int  # bytes of the frame, for metrics and limits


def peek_header(frame: bytes) -> tuple[int, int, int]:
    """api key, api version and correlation id: the first 8 bytes of every request header."""
    if len(frame) < 8:
        raise MalformedRequestError(f"request of {len(frame)} bytes is shorter than a header")
    api_key, api_version = _KEY_VERSION.unpack_from(frame, 0)
    (correlation_id,) = _SIZE.unpack_from(frame, 4)
    return api_key, api_version, correlation_id


@cache
def request_class(api_key: int, api_version: int) -> type:
    if api_key in inter_broker.REQUESTS:
        return inter_broker.REQUESTS[api_key]
    if legacy.has(api_key, api_version):
        return legacy.request_class(api_key, api_version)
    return load_request_schema(api_key, api_version)


@cache
def response_class(api_key: int, api_version: int) -> type:
    if api_key in inter_broker.RESPONSES:
        return inter_broker.RESPONSES[api_key]
    if legacy.has(api_key, api_version):
        return legacy.response_class(api_key, api_version)
    return load_response_schema(api_key, api_version)


@cache
def response_module(api_key: int, api_version: int) -> ModuleType:
    if api_key in inter_broker.RESPONSES:
        return inter_broker
    if legacy.has(api_key, api_version):
        return legacy.module(api_key, api_version, "response")
    return load_payload_module(api_key, api_version, EntityType.response)


@cache
def _reader(cls: type):
    return entity_reader(cls)


@cache
def _writer(cls: type):
    return entity_writer(cls)


def parse_request(frame: bytes, supported: dict[int, tuple[int, int]]) -> Request:
    """Parse one request frame (without its size prefix).

    Raises `UnsupportedVersionError` for a known API at a version outside `supported`
    (the caller answers ApiVersions, closes for others), `MalformedRequestError` for
    anything else that is not a valid request. Nothing else escapes.
    """
    api_key, api_version, correlation_id = peek_header(frame)
    versions = supported.get(api_key)
    if versions is None:
        raise MalformedRequestError(f"unknown api key {api_key}")
    if not versions[0] <= api_version <= versions[1]:
        raise UnsupportedVersionError(api_key, api_version, correlation_id)
    cls = request_class(api_key, api_version)
    header_cls = cls.__header_schema__
    try:
        # Before kio reads it: kio reserves memory for an array from its count alone.
        bounds.check(cls, frame, bounds.check_header(header_cls.__flexible__, frame))
    except bounds.BoundsError as exc:
        raise MalformedRequestError(
            f"malformed request (api key {api_key} v{api_version}): {exc}") from None
    try:
        header, offset = _reader(header_cls)(frame, 0)
        body, _ = _reader(cls)(frame, offset)
    except Exception as exc:  # kio raises several types for bad bytes; all mean the same
        raise MalformedRequestError(
            f"malformed request (api key {api_key} v{api_version}): {type(exc).__name__}: {exc}"
        ) from None
    null = first_null(body)
    if null is not None:
        raise MalformedRequestError(
            f"malformed request (api key {api_key} v{api_version}): null {null}, which its "
            f"schema does not allow")
    return Request(api_key, api_version, correlation_id, header.client_id, body, len(frame))


def encode_response(api_key: int, api_version: int, correlation_id: int, body: Any) -> bytes:
    """The whole response frame: size prefix, response header, body."""
    cls = type(body)
    header_cls = cls.__header_schema__
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    _writer(header_cls)(buf, header_cls(correlation_id=correlation_id))
    _writer(cls)(buf, body)
    out = buf.getbuffer()
    _SIZE.pack_into(out, 0, len(out) - 4)
    del out
    return buf.getvalue()


@cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls))


def make(cls: type, **values: Any) -> Any:
    """Build `cls`, keeping only the arguments this version of the entity has."""
    names = _field_names(cls)
    return cls(**{k: v for k, v in values.items() if k in names})


def has_field(cls: type, name: str) -> bool:
    return name in _field_names(cls)
