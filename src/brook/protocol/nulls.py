"""Nulls where Kafka's schemas allow none.

kio reads a length of -1 as null for any string, bytes or array, nullable in the schema or not.
Kafka refuses such a request while parsing it; so does brook: `first_null` finds the first
non-nullable field of a parsed request that holds null, and the request is rejected as
malformed before any handler sees it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from functools import cache
from typing import Any

from kio.serial._introspect import (  # kio's own reading of its schemas' field types
    EntityField,
    EntityTupleField,
    classify_field,
    is_optional,
)

Check = Callable[[Any], "str | None"]


def first_null(entity: Any) -> str | None:
    """The path of the first field of ``entity`` that holds null where its schema does not
    allow it (``topics[0].partitions``), or None when there is none."""
    check = _checker(type(entity))
    return None if check is None else check(entity)


# Fields read from a length that may be -1; numbers and booleans are never null.
_NULLABLE_ON_THE_WIRE = {"string", "bytes", "records"}


@cache
def _checker(cls: type) -> Check | None:
    """A function checking an entity of ``cls``, or None when nothing in it can be a bad null
    (so that lists of such entities, a request's partitions, are not walked at all)."""
    steps: list[tuple[str, bool, Check | None, bool]] = []  # name, nullable, nested, many
    for f in fields(cls):
        kind = classify_field(f)
        nullable = is_optional(f)
        if isinstance(kind, (EntityField, EntityTupleField)):
            nested = _checker(kind.type_)
            if nested is None and nullable:
                continue
            steps.append((f.name, nullable, nested, isinstance(kind, EntityTupleField)))
        elif not nullable and (kind.is_array or f.metadata.get("kafka_type") in
                               _NULLABLE_ON_THE_WIRE):
            steps.append((f.name, False, None, False))
    if not steps:
        return None

    def check(entity: Any) -> str | None:
        for name, nullable, nested, many in steps:
            value = getattr(entity, name)
            if value is None:
                if nullable:
                    continue
                return name
            if nested is None:
                continue
            if many:
                for i, item in enumerate(value):
                    inner = nested(item)
                    if inner is not None:
                        return f"{name}[{i}].{inner}"
            else:
                inner = nested(value)
                if inner is not None:
                    return f"{name}.{inner}"
        return None

    return check
