"""Response entities that read what Kafka writes where kio's types are stricter than the wire.

kio reads a `datetime_i64` field as an aware datetime and refuses a negative one, but Kafka
writes -1 in some of them for "none": DescribeTransactions' `transaction_start_time` of a
transactional id with no transaction open (Empty, or one that never began). A client of those
APIs (`brook transactions describe`) reads the answer with a copy of kio's entity whose field
is a plain int64 instead; everything else, the layout included, is kio's.
"""

from __future__ import annotations

import dataclasses
from functools import cache

from kio.static.primitive import i64

from .messages import response_class, response_module

_MARKS = ("__type__", "__version__", "__flexible__", "__api_key__", "__header_schema__")


def with_fields(cls: type, **changed: tuple[type, str | None]) -> type:
    """A copy of the kio entity `cls` whose fields named in `changed` have another type and
    kio type ((type, kafka_type); kafka_type None for a nested entity)."""
    specs = []
    for f in dataclasses.fields(cls):
        metadata, tp = dict(f.metadata), f.type
        if f.name in changed:
            tp, kafka_type = changed[f.name]
            if kafka_type is not None:
                metadata["kafka_type"] = kafka_type
        kw: dict = {"metadata": metadata}
        if f.default is not dataclasses.MISSING:
            kw["default"] = f.default
        if f.default_factory is not dataclasses.MISSING:
            kw["default_factory"] = f.default_factory
        specs.append((f.name, tp, dataclasses.field(**kw)))
    copy = dataclasses.make_dataclass(cls.__name__, specs, frozen=True, slots=True, kw_only=True)
    for mark in _MARKS:
        setattr(copy, mark, getattr(cls, mark))
    return copy


DESCRIBE_TRANSACTIONS = 65


@cache
def describe_transactions_response(version: int) -> type:
    """DescribeTransactions' response with `transaction_start_time` in milliseconds (-1: none)."""
    state = with_fields(response_module(DESCRIBE_TRANSACTIONS, version).TransactionState,
                        transaction_start_time=(i64, "int64"))
    return with_fields(response_class(DESCRIBE_TRANSACTIONS, version),
                       transaction_states=(tuple[state, ...], None))
