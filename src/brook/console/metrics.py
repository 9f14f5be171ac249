"""Live produce and fetch rates per broker, from the brokers' Prometheus metrics (brook's
`metrics.port`): brook-only, since other Kafka brokers export theirs through JMX.

The console finds a broker's metrics at `http://HOST:PORT/metrics`, HOST the broker's address
as the cluster names it and PORT the console's `--metrics-port`, or at the URL given for that
broker with `--metrics-url ID=URL`. Each read asks only for the few families the rates need
(`name[]`), so it costs the broker a small answer however many partitions it holds. A rate is
the difference of two reads' counters over the time between them: the first read of a broker
gives none ("measuring"), the Cluster page's next refresh does.
"""

from __future__ import annotations

import re
import threading
import time
import urllib.request
from typing import Any
from urllib.parse import urlencode

#: counter (sample name) -> (what the page calls it, the label that must match, or None)
COUNTERS = {
    "produce_bytes": ("brook_topic_bytes_in_total", None),
    "produce_messages": ("brook_topic_messages_in_total", None),
    "fetch_bytes": ("brook_topic_bytes_out_total", None),
    "produce_requests": ("brook_requests_total", 'request="Produce"'),
    "fetch_requests": ("brook_requests_total", 'request="Fetch"'),
}
FAMILIES = ("brook_topic_bytes_in", "brook_topic_messages_in", "brook_topic_bytes_out",
            "brook_requests")
SCRAPE_TIMEOUT = 2.0
_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def parse_totals(text: str) -> dict[str, float]:
    """The counters of COUNTERS in a Prometheus text exposition, summed over their labels
    (every topic); a counter absent is 0."""
    totals = dict.fromkeys(COUNTERS, 0.0)
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        name, labels, value = m.group(1), m.group(2) or "", m.group(3)
        for key, (sample, label) in COUNTERS.items():
            if name == sample and (label is None or label in labels):
                try:
                    totals[key] += float(value)
                except ValueError:
                    pass
    return totals


def parse_metrics_urls(values: list[str]) -> dict[int, str]:
    """--metrics-url ID=URL values -> {broker id: URL}."""
    out: dict[int, str] = {}
    for value in values:
        broker, sep, url = value.partition("=")
        try:
            broker_id = int(broker)
        except ValueError:
            broker_id = -1
        if not sep or broker_id < 0 or not url.startswith(("http://", "https://")):
            raise ValueError(f"--metrics-url takes BROKER_ID=http://HOST:PORT/metrics, not {value!r}")
        out[broker_id] = url
    return out


class BrokerRates:
    """The last read of each broker's counters, and the rates since the read before."""

    def __init__(self, port: int | None = None, urls: dict[int, str] | None = None,
                 timeout: float = SCRAPE_TIMEOUT, clock=time.monotonic) -> None:
        self.port = port
        self.urls = dict(urls or {})
        self.timeout = timeout
        self.clock = clock
        self._last: dict[int, tuple[float, dict[str, float]]] = {}
        self._lock = threading.Lock()

    @property
    def configured(self) -> bool:
        return self.port is not None or bool(self.urls)

    def url(self, broker: dict[str, Any]) -> str | None:
        if broker["id"] in self.urls:
            return self.urls[broker["id"]]
        if self.port is None:
            return None
        host = broker["host"]
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}/metrics"

    def read(self, url: str) -> str:
        query = urlencode([("name[]", n) for n in FAMILIES]
                          + [("name[]", s) for s in sorted({s for s, _ in COUNTERS.values()})])
        with urllib.request.urlopen(f"{url}{'&' if '?' in url else '?'}{query}",
                                    timeout=self.timeout) as answer:
            return answer.read().decode("utf-8", "replace")

    def rates(self, brokers: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
        """Per broker id: {"url", "error" (why none), "rates" ({key: per second} or None
        while measuring)}."""
        out: dict[int, dict[str, Any]] = {}
        for b in brokers:
            url = self.url(b)
            if url is None:
                continue
            entry: dict[str, Any] = {"url": url, "error": None, "rates": None}
            try:
                totals = parse_totals(self.read(url))
            except Exception as exc:  # noqa: BLE001 - unreachable, refused, not metrics
                entry["error"] = _reason(exc)
                out[b["id"]] = entry
                continue
            now = self.clock()
            with self._lock:
                before = self._last.get(b["id"])
                self._last[b["id"]] = (now, totals)
            if before is not None and now > before[0]:
                dt = now - before[0]
                entry["rates"] = {k: max(0.0, (totals[k] - before[1][k]) / dt) for k in totals}
            out[b["id"]] = entry
        return out


def _reason(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)
    return f"cannot read its metrics: {reason or exc}"
