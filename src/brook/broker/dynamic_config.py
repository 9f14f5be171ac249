"""A broker's configuration in layers, as Kafka's DynamicBrokerConfig keeps it: dynamic
per-broker configs over the cluster-wide dynamic defaults over server.properties over the
built-in defaults. What DescribeConfigs shows of a broker (values, sources, synonyms) and
what AlterConfigs may change are decided here; the broker applies the merged result.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

from ..storage.config import BROKER_KEYS
from . import config_defs as defs
from .config_defs import (
    SOURCE_DEFAULT,
    SOURCE_DYNAMIC_BROKER,
    SOURCE_DYNAMIC_DEFAULT_BROKER,
    SOURCE_STATIC_BROKER,
)


@dataclass(frozen=True, slots=True)
class Synonym:
    name: str
    value: str | None
    source: int


@dataclass(frozen=True, slots=True)
class Entry:
    """One config as DescribeConfigs answers it."""
    name: str
    value: str | None
    source: int
    read_only: bool
    sensitive: bool
    type: int
    synonyms: tuple[Synonym, ...] = ()
    doc: str | None = None


# A topic key -> the broker keys it falls back to, most specific first (Kafka's
# ServerTopicConfigSynonyms.TOPIC_CONFIG_SYNONYMS with brokerConfigSynonyms).
TOPIC_SYNONYMS: dict[str, list[str]] = {}
for _key, _field, _scale in BROKER_KEYS:
    TOPIC_SYNONYMS.setdefault(_field.replace("_", "."), []).append(_key)
TOPIC_SYNONYMS.pop("producer.id.expiration.ms", None)  # broker-level only
TOPIC_SYNONYMS.update({
    "compression.type": ["compression.type"],
    "min.insync.replicas": ["min.insync.replicas"],
    "unclean.leader.election.enable": ["unclean.leader.election.enable"],
    "preallocate": ["log.preallocate"],
    "message.downconversion.enable": ["log.message.downconversion.enable"],
})


class DynamicConfigError(ValueError):
    """A dynamic config that cannot be set (INVALID_CONFIG, with this message)."""


@dataclass
class BrokerConfigLayers:
    static: dict[str, str]
    cluster_default: dict[str, str] = field(default_factory=dict)
    per_broker: dict[str, str] = field(default_factory=dict)

    def merged(self) -> dict[str, str]:
        """The properties the broker runs on: a dynamic key replaces the static one and its
        synonyms (a dynamic log.retention.hours wins over a static log.retention.ms)."""
        props = dict(self.static)
        for layer in (self.cluster_default, self.per_broker):
            for key in layer:
                for s in defs.synonyms(key):
                    if s not in layer:
                        props.pop(s, None)
            props.update(layer)
        return props

    def _layers(self) -> list[tuple[Mapping[str, str], int]]:
        return [(self.per_broker, SOURCE_DYNAMIC_BROKER),
                (self.cluster_default, SOURCE_DYNAMIC_DEFAULT_BROKER),
                (self.static, SOURCE_STATIC_BROKER),
                (defs.defaults(), SOURCE_DEFAULT)]

    def synonyms_of(self, name: str, sensitive: bool = False) -> list[Synonym]:
        """Where `name`'s value could come from, in order of precedence: each layer, each
        synonym in it; those before the first entry of `name` itself are dropped (as Kafka
        does: describing log.retention.hours does not list a log.retention.ms)."""
        names = defs.synonyms(name)
        found = [Synonym(n, None if sensitive else layer[n], source)
                 for layer, source in self._layers() for n in names if n in layer]
        while found and found[0].name != name:
            found.pop(0)
        return found

    def _entry(self, name: str, value: str | None, synonyms: list[Synonym],
               with_synonyms: bool, with_docs: bool) -> Entry:
        sensitive = defs.is_sensitive(name)
        key = defs.KEYS.get(name)
        return Entry(name, None if sensitive else value,
                     synonyms[0].source if synonyms else SOURCE_DEFAULT,
                     read_only=not defs.is_dynamic(name), sensitive=sensitive,
                     type=defs.config_type(name),
                     synonyms=tuple(synonyms) if with_synonyms else (),
                     doc=(key.doc if key is not None else None) if with_docs else None)

    def describe_broker(self, names: Iterable[str] | None, *, with_synonyms: bool = False,
                        with_docs: bool = False) -> list[Entry]:
        """Every config of this broker (or those of `names` that it knows), with its value."""
        merged = self.merged()
        known = set(defs.KEYS) | set(merged) | set(self.static)
        wanted = sorted(known if names is None else known & set(names))
        out = []
        for name in wanted:
            key = defs.KEYS.get(name)
            value = merged.get(name, key.default if key is not None else None)
            synonyms = self.synonyms_of(name, defs.is_sensitive(name))
            out.append(self._entry(name, value, synonyms, with_synonyms, with_docs))
        return out

    def describe_default(self, names: Iterable[str] | None, *, with_synonyms: bool = False,
                         with_docs: bool = False) -> list[Entry]:
        """The cluster-wide dynamic defaults (the broker resource with an empty name): only
        the keys set there, as Kafka answers."""
        wanted = sorted(self.cluster_default if names is None
                        else set(self.cluster_default) & set(names))
        out = []
        for name in wanted:
            synonyms = [s for s in self.synonyms_of(name, defs.is_sensitive(name))
                        if s.source == SOURCE_DYNAMIC_DEFAULT_BROKER]
            out.append(self._entry(name, self.cluster_default[name], synonyms, with_synonyms,
                                   with_docs))
        return out

    def topic_synonyms(self, topic_key: str) -> list[Synonym]:
        """The broker-level synonyms of a topic key (what a topic without its own value
        inherits), as DescribeConfigs on a topic lists them."""
        broker_keys = TOPIC_SYNONYMS.get(topic_key)
        if not broker_keys:
            return []
        return self.synonyms_of(broker_keys[0], defs.is_sensitive(broker_keys[0]))


def check_dynamic_configs(configs: Mapping[str, str | None]) -> None:
    """The keys a dynamic layer (one broker's, or the cluster-wide default) may hold, and
    their values' types: DynamicConfigError (INVALID_CONFIG) names what is refused. Keys brook
    does not know are kept and shown, as Kafka keeps custom configs."""
    read_only = sorted(k for k in configs if defs.key_of(k) is not None and not defs.is_dynamic(k))
    if read_only:
        raise DynamicConfigError("Cannot update these configs dynamically: "
                                 f"{', '.join(read_only)} (the broker reads them at start only)")
    secrets = sorted(k for k in configs if defs.config_type(k) == defs.PASSWORD)
    if secrets:
        raise DynamicConfigError(f"Cannot update these configs dynamically: {', '.join(secrets)} "
                                 "(brook keeps no secrets among dynamic configs)")
    for key, value in configs.items():
        if value is None:
            raise DynamicConfigError(f"Null value not supported for broker config: {key}")
        try:
            defs.check_value(key, value)
        except ValueError as exc:
            raise DynamicConfigError(str(exc)) from None


def replaced(layers: BrokerConfigLayers, default: bool, configs: Mapping[str, str]) -> BrokerConfigLayers:
    """`layers` with the cluster-wide default layer (`default`) or this broker's replaced."""
    if default:
        return BrokerConfigLayers(layers.static, dict(configs), dict(layers.per_broker))
    return BrokerConfigLayers(layers.static, dict(layers.cluster_default), dict(configs))
