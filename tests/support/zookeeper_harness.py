"""The ZooKeeper server the cluster tests start: brook's local launcher of Debian's ZooKeeper."""

from brook.cluster.local_zookeeper import (  # noqa: F401
    MAX_SESSION_TIMEOUT_MS, MIN_SESSION_TIMEOUT_MS, TICK_MS, ZooKeeperError, ZooKeeperServer,
    four_letter_word, free_port, missing_reason)
