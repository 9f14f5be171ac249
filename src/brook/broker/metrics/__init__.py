"""The broker's Prometheus metrics, served over HTTP when `metrics.port` is set.

Three kinds, each with its own cost:

- **Counted as it happens** (Produce, Fetch, every request; `counts`): bytes and messages in
  and bytes out per topic, requests and their total time per API, as a few integer increments
  on plain objects written by the event loop alone.
- **Read when scraped, a few series** (`collector`): those counts, and the group
  coordinator's groups per state, rebalances, offsets cache and the load of the
  ``__consumer_offsets`` partitions, exported through prometheus_client's registry.
- **Read when scraped, a series per partition and per committed offset** (`state_families`):
  the partitions' offsets and sizes and consumer group lag, written as exposition text
  directly (a broker may hold hundreds of thousands of committed offsets).

What is read when scraped is read *on the event loop* (`loop_reader`), in slices between which
the loop serves its clients: every value is read as the event loop left it, and the scrape's
thread waits without competing for the interpreter lock meanwhile.

`BrokerMetrics` (`broker_metrics`) is one broker's: its registry, the hot path's hooks, and
the exposition putting the registry's families and the state families together, which
`serving` answers scrapes with. docs/metrics.md lists the metrics and Kafka's names for them.
"""

from .broker_metrics import BrokerMetrics
from .collector import BrokerCollector
from .counts import REQUEST_TIME_BUCKETS, RequestStats, TopicStats
from .loop_reader import LOOP_WAIT_SECONDS, PAUSE_SECONDS, SLICE_SECONDS, LoopReader
from .serving import GZIP_LEVEL, MetricsServer
from .state_families import LAG_FAMILY, PARTITION_FAMILIES, STATE_FAMILIES, StateFamilies

__all__ = [
    "GZIP_LEVEL",
    "LAG_FAMILY",
    "LOOP_WAIT_SECONDS",
    "PARTITION_FAMILIES",
    "PAUSE_SECONDS",
    "REQUEST_TIME_BUCKETS",
    "SLICE_SECONDS",
    "STATE_FAMILIES",
    "BrokerCollector",
    "BrokerMetrics",
    "LoopReader",
    "MetricsServer",
    "RequestStats",
    "StateFamilies",
    "TopicStats",
]
