"""Client quotas (KIP-13, KIP-55, KIP-124, KIP-219), sans-I/O: which quota applies to a
request, how fast its client goes, and how long it must wait.

Entities are Kafka's: a user (the principal's name), a client id, or both, each either named
or the default (`<default>` in ZooKeeper's paths). A client's quota of each kind is the first
of Kafka's eight levels that sets it:

    1. /config/users/<user>/clients/<client-id>
    2. /config/users/<user>/clients/<default>
    3. /config/users/<user>
    4. /config/users/<default>/clients/<client-id>
    5. /config/users/<default>/clients/<default>
    6. /config/users/<default>
    7. /config/clients/<client-id>
    8. /config/clients/<default>

Every client that the same entity's quota applies to shares one measured rate (its "metric
tags"): all the client ids of alice under a quota of /config/users/alice, but each user
separately under /config/users/<default>, as in Kafka's DefaultQuotaCallback.

The rate is Kafka's windowed Rate: `quota.window.num` (11) samples of
`quota.window.size.seconds` (1 s); the value over the time since the oldest sample began,
counted as at least one whole window. Over its quota, a client waits
`(rate - quota) / quota * window` ms: how long, with nothing more recorded, until the rate
is back at the quota.

Kafka counts that time as at least `num - 1` windows, so that a new (or idle) client may send
ten windows' worth of its quota at once; measured here against confluent-kafka clients
sending as fast as they could, that burst came back every 11 s, when its sample expired, with
the client stalled in between (10.8 s of quota in one second, then 0.02 of it per second
for ten). brook measures a new client over the one window it has been in instead: the same
clients then got 0.82-1.17 of their quota in every second and 0.99-1.00 of it in every 10 s.
The throttle times clients are given have Kafka's meaning and formula either way. Kafka caps the wait of the request-time quota at one window and leaves
the byte-rate waits uncapped; so does this.

Time comes from the caller (milliseconds), so everything here is tested on a fake clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote, unquote

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"  # stored and described, not enforced
#: The quota keys AlterClientQuotas takes (Kafka's QuotaConfigs for client entities).
KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE, CONTROLLER_MUTATION_RATE)
#: Keys whose value Kafka takes as a whole number (a long in its config definitions).
LONG_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE)

USER = "user"
CLIENT_ID = "client-id"
ENTITY_TYPES = (USER, CLIENT_ID)
DEFAULT = "<default>"  # a default entity's name in ZooKeeper's paths

DEFAULT_WINDOW_NUM = 11  # quota.window.num
DEFAULT_WINDOW_SIZE_MS = 1000  # quota.window.size.seconds
#: A client's measured rate is dropped after this long without a request (Kafka's
#: InactiveSensorExpirationTimeSeconds), so the clients that came and went cost nothing.
INACTIVE_EXPIRY_MS = 3600 * 1000


# ---------------------------------------------------------------- entities

@dataclass(frozen=True, slots=True)
class Entity:
    """A quota entity. For each of user and client id: absent (`*_set` False), the default
    (set, name None) or a name."""

    user_set: bool = False
    user: str | None = None
    client_set: bool = False
    client_id: str | None = None

    @classmethod
    def of(cls, components: dict[str, str | None]) -> "Entity":
        """From AlterClientQuotas' components ({"user": "alice", "client-id": None}: None is
        the default); ValueError for an unknown type or an empty entity."""
        unknown = set(components) - set(ENTITY_TYPES)
        if unknown:
            raise ValueError(f"Unexpected entity type(s): {', '.join(sorted(unknown))}")
        if not components:
            raise ValueError("Invalid empty client quota entity")
        return cls(USER in components, components.get(USER), CLIENT_ID in components,
                   components.get(CLIENT_ID))

    def components(self) -> dict[str, str | None]:
        out: dict[str, str | None] = {}
        if self.user_set:
            out[USER] = self.user
        if self.client_set:
            out[CLIENT_ID] = self.client_id
        return out

    def path(self) -> str:
        """Its node under ZooKeeper's /config (`users/alice/clients/app`), names sanitized
        as Kafka does so that a name with '/' or one spelled `<default>` stays itself."""
        parts = []
        if self.user_set:
            parts += ["users", _name_in_path(self.user)]
        if self.client_set:
            parts += ["clients", _name_in_path(self.client_id)]
        return "/".join(parts)

    @classmethod
    def from_path(cls, path: str) -> "Entity":
        parts = path.split("/")
        if parts[:1] == ["users"] and len(parts) == 2:
            return cls(True, _name_from_path(parts[1]))
        if parts[:1] == ["users"] and len(parts) == 4 and parts[2] == "clients":
            return cls(True, _name_from_path(parts[1]), True, _name_from_path(parts[3]))
        if parts[:1] == ["clients"] and len(parts) == 2:
            return cls(client_set=True, client_id=_name_from_path(parts[1]))
        raise ValueError(f"not a client quota entity path: {path!r}")


def sanitize(name: str) -> str:
    """Kafka's Sanitizer: URL-encoding, with '*' and '~' encoded and space as %20."""
    return quote(name, safe="").replace("~", "%7E")


def _name_in_path(name: str | None) -> str:
    return DEFAULT if name is None else sanitize(name)


def _name_from_path(part: str) -> str | None:
    return None if part == DEFAULT else unquote(part)


def validate_value(key: str, value: float) -> str | None:
    """Why Kafka refuses this value for this key (INVALID_REQUEST), or None."""
    if key not in KEYS:
        return f"Invalid configuration key {key}"
    if not value > 0:
        return f"Quota {key} must be greater than 0"
    if key in LONG_KEYS:
        if value > 2**63 - 1:
            return f"Proposed value for {key} is too large for a LONG."
        if abs(value % 1.0) > 1e-6:
            return f"{key} cannot be a fractional value."
    return None


def quota_text(key: str, value: float) -> str:
    """A value as ZooKeeper's config nodes hold it ("1048576", "12.5")."""
    return str(int(value)) if key in LONG_KEYS or value == int(value) else repr(value)


def quota_values(configs: dict[str, str]) -> dict[str, float]:
    """The quotas among a config node's entries (a user's also holds SCRAM credentials);
    an unreadable value is left out."""
    out = {}
    for key, text in configs.items():
        if key in KEYS:
            try:
                out[key] = float(text)
            except ValueError:
                pass
    return out


# ---------------------------------------------------------------- the windowed rate

class Rate:
    """Kafka's Rate over a SampledStat: samples of `window_ms`, `samples` of them (plus the
    one that may overlap the start of the monitored span). Values per second."""

    __slots__ = ("samples", "window_ms", "_starts", "_last", "_values", "_current")

    def __init__(self, samples: int = DEFAULT_WINDOW_NUM, window_ms: int = DEFAULT_WINDOW_SIZE_MS) -> None:
        self.samples = samples
        self.window_ms = window_ms
        self._starts: list[int] = []  # each sample's start
        self._last: list[int] = []  # each sample's last event
        self._values: list[float] = []
        self._current = 0

    def record(self, value: float, now: int) -> None:
        if not self._starts:
            self._new_sample(now)
        i = self._current
        if now - self._starts[i] >= self.window_ms:  # the current sample is complete
            i = self._current = (i + 1) % (self.samples + 1)
            if i == len(self._starts):
                self._new_sample(now)
            else:
                self._reset(i, now)
        self._values[i] += value
        self._last[i] = now

    def _new_sample(self, now: int) -> None:
        self._starts.append(now)
        self._last.append(now)
        self._values.append(0.0)

    def _reset(self, i: int, now: int) -> None:
        self._starts[i] = self._last[i] = now
        self._values[i] = 0.0

    def _purge(self, now: int) -> None:
        """Samples with no event within the monitored span count no more."""
        expire = self.samples * self.window_ms
        for i, last in enumerate(self._last):
            if now - last >= expire:
                self._reset(i, now)

    def window_size(self, now: int) -> int:
        """The span the rate is measured over (ms): since the oldest sample began, but at
        least one whole window (a client that just started is not measured over the few ms it
        has been there; Kafka counts `samples - 1` windows, see the module's docstring)."""
        self._purge(now)
        if not self._starts:
            self._new_sample(now)
        return max(now - min(self._starts), self.window_ms)

    def measure(self, now: int) -> float:
        self._purge(now)
        total = sum(self._values)
        return total / (self.window_size(now) / 1000)

    def last_event(self) -> int:
        return max(self._last) if self._last else 0


def throttle_time_ms(rate: float, quota: float, window_ms: int) -> int:
    """How long (ms), with nothing more recorded, until `rate` measured over `window_ms` is
    back at `quota`: the X with rate * W / (W + X) = quota."""
    return round((rate - quota) / quota * window_ms)


# ---------------------------------------------------------------- the quotas of a broker

class ClientQuotas:
    """The configured quotas and the measured rates. `active` is False while no quota is set,
    so the request path checks one attribute and does nothing else."""

    def __init__(self, window_num: int = DEFAULT_WINDOW_NUM,
                 window_size_ms: int = DEFAULT_WINDOW_SIZE_MS) -> None:
        self.window_num = window_num
        self.window_size_ms = window_size_ms
        #: entity -> key -> value
        self.configs: dict[Entity, dict[str, float]] = {}
        self.active = False
        self._keys_set: set[str] = set()
        #: (key, user tag, client-id tag) -> its rate: one per entity whose quota applies
        self._rates: dict[tuple[str, str, str], Rate] = {}
        self._next_expiry = 0
        #: key -> (throttled answers, their total wait in ms), for the metrics
        self.throttled: dict[str, tuple[int, int]] = {}

    # ------------------------------------------------------------ configuration

    def replace(self, entity: Entity, values: dict[str, float]) -> None:
        """The entity's quotas become `values` ({} removes the entity)."""
        if values:
            self.configs[entity] = dict(values)
        else:
            self.configs.pop(entity, None)
        self._refresh()

    def replace_all(self, configs: dict[Entity, dict[str, float]]) -> None:
        """Every entity's quotas (a reload: what is not in `configs` has none)."""
        self.configs = {entity: dict(values) for entity, values in configs.items() if values}
        self._refresh()

    def _refresh(self) -> None:
        self._keys_set = {k for v in self.configs.values() for k in v}
        self.active = bool(self._keys_set & {PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE})

    def enforced(self, key: str) -> bool:
        return key in self._keys_set

    def quota(self, key: str, user: str, client_id: str) -> tuple[float, tuple[str, str]] | None:
        """The quota of `key` for this user and client id, and the tags of the rate it is
        measured with (Kafka's eight levels, first match wins); None: no quota."""
        configs = self.configs
        named_user = (True, user)
        default_user = (True, None)
        for (us, u), (cs, c), tags in (
                (named_user, (True, client_id), (user, client_id)),
                (named_user, (True, None), (user, client_id)),
                (named_user, (False, None), (user, "")),
                (default_user, (True, client_id), (user, client_id)),
                (default_user, (True, None), (user, client_id)),
                (default_user, (False, None), (user, "")),
                ((False, None), (True, client_id), ("", client_id)),
                ((False, None), (True, None), ("", client_id))):
            values = configs.get(Entity(us, u, cs, c))
            if values is not None and key in values:
                return values[key], tags
        return None

    # ------------------------------------------------------------ measuring

    def record(self, key: str, user: str, client_id: str, value: float, now: int) -> int:
        """Record `value` (bytes, or percent-seconds of request time) for this client and
        return how long it must be throttled (ms, 0 if within its quota)."""
        found = self.quota(key, user, client_id)
        if found is None:
            return 0
        limit, tags = found
        rate = self._rate(key, tags, now)
        rate.record(value, now)
        measured = rate.measure(now)
        if measured <= limit:
            return 0
        throttle = throttle_time_ms(measured, limit, rate.window_size(now))
        if key == REQUEST_PERCENTAGE:  # Kafka caps only the request-time quota's wait
            throttle = min(throttle, self.window_size_ms)
        return max(throttle, 0)

    def unrecord(self, key: str, user: str, client_id: str, value: float, now: int) -> None:
        """Take back a recorded value (a Fetch answered empty because it was throttled)."""
        found = self.quota(key, user, client_id)
        if found is not None:
            self._rate(key, found[1], now).record(-value, now)

    def measured(self, key: str, user: str, client_id: str, now: int) -> float:
        """The client's measured rate of `key` (0 without a quota)."""
        found = self.quota(key, user, client_id)
        if found is None:
            return 0.0
        rate = self._rates.get((key, *found[1]))
        return rate.measure(now) if rate is not None else 0.0

    def _rate(self, key: str, tags: tuple[str, str], now: int) -> Rate:
        if now >= self._next_expiry:
            self._expire(now)
        rate = self._rates.get((key, *tags))
        if rate is None:
            rate = self._rates[(key, *tags)] = Rate(self.window_num, self.window_size_ms)
        return rate

    def _expire(self, now: int) -> None:
        self._next_expiry = now + 60_000
        for k in [k for k, r in self._rates.items() if now - r.last_event() >= INACTIVE_EXPIRY_MS]:
            del self._rates[k]

    # ------------------------------------------------------------ DescribeClientQuotas

    def describe(self, filters: list[tuple[str, int, str | None]], strict: bool
                 ) -> list[tuple[Entity, dict[str, float]]]:
        """The entities matching every filter component (entity type, match type: 0 exact
        name, 1 default, 2 any named or default, match) and, with `strict`, no other type."""
        out = []
        for entity, values in sorted(self.configs.items(), key=lambda e: e[0].path()):
            components = entity.components()
            ok = True
            for entity_type, match_type, match in filters:
                if entity_type not in components:
                    ok = False
                elif match_type == MATCH_EXACT and components[entity_type] != match:
                    ok = False
                elif match_type == MATCH_DEFAULT and components[entity_type] is not None:
                    ok = False
                if not ok:
                    break
            if ok and strict and set(components) - {f[0] for f in filters}:
                ok = False
            if ok:
                out.append((entity, dict(values)))
        return out


MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
