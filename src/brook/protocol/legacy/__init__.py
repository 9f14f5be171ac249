"""Entities of the API versions Kafka 3.9 serves and Kafka 4.0 removed (KIP-896), which the
current kio (generated from Kafka 4's schemas) no longer has: vendored from kio 0.6.1 by
scripts/vendor_legacy_schemas.py, one package per API as in kio (`<api>/v<N>/request.py`)."""

from __future__ import annotations

from importlib import import_module
from types import ModuleType

from kio.static.constants import EntityType

#: api key -> (kio's name of the API, the versions below Kafka 4.0's minimum brook has here)
VERSIONS: dict[int, tuple[str, tuple[int, ...]]] = {
    0: ("produce", (0, 1, 2)),
    1: ("fetch", (0, 1, 2, 3)),
    2: ("list_offsets", (0,)),
    8: ("offset_commit", (0, 1)),
    9: ("offset_fetch", (0,)),
    19: ("create_topics", (0, 1)),
    20: ("delete_topics", (0,)),
    23: ("offset_for_leader_epoch", (0, 1)),
    32: ("describe_configs", (0,)),
    35: ("describe_log_dirs", (0,)),
    29: ("describe_acls", (0,)),
    30: ("create_acls", (0,)),
    31: ("delete_acls", (0,)),
    27: ("write_txn_markers", (0,)),
}


def has(api_key: int, api_version: int) -> bool:
    entry = VERSIONS.get(api_key)
    return entry is not None and api_version in entry[1]


def module(api_key: int, api_version: int, kind: str) -> ModuleType:
    """The `request` or `response` module of a legacy version."""
    name, _ = VERSIONS[api_key]
    return import_module(f"{__name__}.{name}.v{api_version}.{kind}")


def _payload(api_key: int, api_version: int, kind: EntityType) -> type:
    mod = module(api_key, api_version, kind.name)
    return next(v for v in vars(mod).values()
                if isinstance(v, type) and v.__module__ == mod.__name__
                and getattr(v, "__type__", None) is kind)


def request_class(api_key: int, api_version: int) -> type:
    return _payload(api_key, api_version, EntityType.request)


def response_class(api_key: int, api_version: int) -> type:
    return _payload(api_key, api_version, EntityType.response)


#: Apache Kafka 3.9's versions of the APIs brook serves (validVersions of its JSON schemas).
KAFKA_39_VERSIONS: dict[int, tuple[int, int]] = {
    0: (0, 11), 1: (0, 17), 2: (0, 9), 3: (0, 12), 4: (0, 7), 5: (0, 4), 6: (0, 8), 7: (0, 3),
    8: (0, 9), 9: (0, 9), 10: (0, 6), 11: (0, 9), 12: (0, 4), 13: (0, 5), 14: (0, 5),
    15: (0, 5), 16: (0, 5), 17: (0, 1), 18: (0, 4), 19: (0, 7), 20: (0, 6), 21: (0, 2), 22: (0, 5),
    23: (0, 4), 24: (0, 5), 25: (0, 4), 26: (0, 4), 27: (0, 1), 28: (0, 4), 29: (0, 3), 30: (0, 3), 31: (0, 3), 32: (0, 4), 33: (0, 2), 35: (0, 4), 36: (0, 2), 37: (0, 3), 42: (0, 2), 43: (0, 2),
    44: (0, 1), 45: (0, 0), 46: (0, 0), 47: (0, 0), 48: (0, 1), 49: (0, 1), 50: (0, 0), 51: (0, 0),
    56: (0, 3), 65: (0, 0), 66: (0, 1),
    60: (0, 1), 61: (0, 0),
    68: (0, 0), 69: (0, 0),  # ConsumerGroupHeartbeat, ConsumerGroupDescribe (KIP-848)
}
