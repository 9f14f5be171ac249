"""Any request entity from plain data: `request(key, version, field=value, ...)`, where nested
entities are dicts (lists of dicts for arrays), fields the version lacks are dropped, and
fields left out take their natural empty value (None, (), False). For tests that need exact
requests of many APIs without spelling out every kio class."""

from __future__ import annotations

import dataclasses
import typing

from brook.protocol.messages import request_class


def _entity_type(tp):
    """The entity class inside a field's type (X, tuple[X, ...], X | None)."""
    if dataclasses.is_dataclass(tp):
        return tp
    for arg in typing.get_args(tp):
        found = _entity_type(arg)
        if found is not None:
            return found
    return None


def _convert(tp, value):
    if isinstance(value, dict):
        return build(_entity_type(tp), value)
    if isinstance(value, list):
        return tuple(_convert(tp, v) for v in value)
    return value


def _empty(f):
    text = str(f.type)
    if "None" in text:
        return None
    if text.startswith("tuple"):
        return ()
    if f.type is bool:
        return False
    raise TypeError(f"field {f.name} ({text}) needs a value")


def build(cls, data: dict):
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name in data:
            kwargs[f.name] = _convert(f.type, data[f.name])
        elif f.default is dataclasses.MISSING:
            kwargs[f.name] = _empty(f)
    return cls(**kwargs)


def request(key: int, version: int, **fields):
    return build(request_class(key, version), fields)
