"""LogManager: owns every partition log under one or more `log.dirs`.

It loads logs at start-up (recovering those not cleanly shut down), creates and deletes
them, and runs the periodic work Kafka's log manager runs: flush by time, retention,
compaction, delayed file deletion and the checkpoints. The work is driven by `tick(now)`
(sans-I/O: the broker calls it from its event loop, tests call it with a fake clock).

Compaction runs inline in `tick` unless `start_cleaner()` started the cleaner thread: then
`tick` only plans passes and swaps in what the thread cleaned, so the thread calling `tick`
stays the only one that changes a log.
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Callable, Iterable

from ..clock import SYSTEM_CLOCK, Clock
from ..records.errors import RecordsError
from .checkpoint import CorruptCheckpointError, read_checkpoint, write_checkpoint
from .cleaner import CleanAborted, CleanerThread, CleanJob, CleanResult, LogCleaner
from .config import LogConfig
from .fd_cache import DEFAULT_CAPACITY as DEFAULT_FD_CACHE_SIZE
from .fd_cache import SEGMENT_FILES, capacity_for
from .producer_budget import DEFAULT_PRODUCER_ID_MAX_COUNT, ProducerIdBudget
from .log import Log, parse_topic_partition

log = logging.getLogger(__name__)

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
HIGH_WATERMARK_CHECKPOINT = "replication-offset-checkpoint"  # a cluster's replicas only
CLEAN_SHUTDOWN_MARKER = ".kafka_cleanshutdown"
CLEANER_POLL_MS = 100  # how often tick looks for the cleaner thread's swaps
# How long deleting a log waits, on the caller's thread, for a pass over it to stop.
DELETE_WAIT_FOR_CLEANER_S = 5.0
DELETE_DIR_SUFFIX = "-delete"  # Kafka's suffix for a log directory being deleted

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class ManagerConfig:
    """Broker-level intervals of the periodic work (Kafka's keys, Kafka's defaults except
    the flush scheduler: Kafka's default of never makes `flush.ms` silently inert)."""

    flush_scheduler_interval_ms: int = 1000  # log.flush.scheduler.interval.ms
    retention_check_interval_ms: int = 300_000  # log.retention.check.interval.ms
    recovery_point_checkpoint_interval_ms: int = 60_000  # log.flush.offset.checkpoint.interval.ms
    start_offset_checkpoint_interval_ms: int = 60_000  # log.flush.start.offset.checkpoint.interval.ms
    cleaner_backoff_ms: int = 15_000  # log.cleaner.backoff.ms
    cleaner_enable: bool = True  # log.cleaner.enable
    producer_expiration_check_interval_ms: int = 600_000  # producer.id.expiration.check.interval.ms
    producer_id_max_count: int = DEFAULT_PRODUCER_ID_MAX_COUNT  # producer.id.max.count (brook's)
    # Segment files kept open at most (brook's; storage.fd_cache), lowered to a quarter of
    # the open files limit.
    segment_fd_cache_size: int = DEFAULT_FD_CACHE_SIZE  # log.segment.fd.cache.size

    @classmethod
    def from_broker_props(cls, props: dict[str, str]) -> "ManagerConfig":
        keys = {
            "log.flush.scheduler.interval.ms": "flush_scheduler_interval_ms",
            "log.retention.check.interval.ms": "retention_check_interval_ms",
            "log.flush.offset.checkpoint.interval.ms": "recovery_point_checkpoint_interval_ms",
            "log.flush.start.offset.checkpoint.interval.ms": "start_offset_checkpoint_interval_ms",
            "log.cleaner.backoff.ms": "cleaner_backoff_ms",
            "producer.id.expiration.check.interval.ms": "producer_expiration_check_interval_ms",
            "producer.id.max.count": "producer_id_max_count",
            "log.segment.fd.cache.size": "segment_fd_cache_size",
        }
        values: dict = {name: int(props[k]) for k, name in keys.items() if k in props}
        if "log.cleaner.enable" in props:
            values["cleaner_enable"] = str(props["log.cleaner.enable"]).lower() == "true"
        if values.get("segment_fd_cache_size", 1) < 1:
            raise ValueError("log.segment.fd.cache.size must be at least 1")
        return cls(**values)


class LogManager:
    def __init__(self, log_dirs: Iterable[str], default_config: LogConfig, *,
                 clock: Clock = SYSTEM_CLOCK, manager_config: ManagerConfig | None = None,
                 topic_config: Callable[[str], LogConfig] | None = None) -> None:
        self.log_dirs = [os.path.abspath(d) for d in log_dirs]
        if not self.log_dirs:
            raise ValueError("at least one log dir is needed")
        self.default_config = default_config
        self.clock = clock
        self.manager_config = manager_config or ManagerConfig()
        self._topic_config = topic_config
        self.logs: dict[TopicPartition, Log] = {}
        self.producer_budget = ProducerIdBudget(self.manager_config.producer_id_max_count)
        self._dir_of: dict[TopicPartition, str] = {}
        self._logs_per_dir = dict.fromkeys(self.log_dirs, 0)  # kept, not counted per new log
        self.cleaner = LogCleaner()
        self.cleaner_thread: CleanerThread | None = None
        now = clock.milliseconds()
        self._next_run = {
            "flush": now + self.manager_config.flush_scheduler_interval_ms,
            "retention": now + self.manager_config.retention_check_interval_ms,
            "recovery_checkpoint": now + self.manager_config.recovery_point_checkpoint_interval_ms,
            "start_checkpoint": now + self.manager_config.start_offset_checkpoint_interval_ms,
            "cleaner": now + self.manager_config.cleaner_backoff_ms,
            "producer_expiry": now + self.manager_config.producer_expiration_check_interval_ms,
        }
        self.started = False

    def config_for(self, topic: str) -> LogConfig:
        return self._topic_config(topic) if self._topic_config else self.default_config

    # ------------------------------------------------------------ start-up and shutdown

    def startup(self) -> None:
        """Load every log; logs of a dir without the clean-shutdown marker are recovered."""
        size = capacity_for(self.manager_config.segment_fd_cache_size)
        if size < self.manager_config.segment_fd_cache_size:
            log.warning("log.segment.fd.cache.size=%d lowered to %d, a quarter of the open files "
                        "limit", self.manager_config.segment_fd_cache_size, size)
        SEGMENT_FILES.resize(size)
        for log_dir in self.log_dirs:
            os.makedirs(log_dir, exist_ok=True)
            marker = os.path.join(log_dir, CLEAN_SHUTDOWN_MARKER)
            clean = os.path.exists(marker)
            recovery_points = self._read_checkpoint(log_dir, RECOVERY_POINT_CHECKPOINT)
            start_offsets = self._read_checkpoint(log_dir, LOG_START_CHECKPOINT)
            self.cleaner.checkpoints.update(self._read_checkpoint(log_dir, CLEANER_CHECKPOINT))
            for name in sorted(os.listdir(log_dir)):
                path = os.path.join(log_dir, name)
                if not os.path.isdir(path):
                    continue
                if name.endswith(DELETE_DIR_SUFFIX):  # a deletion a crash interrupted
                    shutil.rmtree(path, ignore_errors=True)
                    continue
                try:
                    tp = parse_topic_partition(name)
                except ValueError:
                    continue
                if tp in self.logs:
                    raise RuntimeError(f"{tp} has logs in two log dirs: {self._dir_of[tp]} and {log_dir}")
                self.logs[tp] = Log(path, self.config_for(tp[0]), clock=self.clock,
                                    recovery_point=recovery_points.get(tp, 0),
                                    log_start_offset=start_offsets.get(tp, 0),
                                    had_clean_shutdown=clean, producer_budget=self.producer_budget)
                self._dir_of[tp] = log_dir
                self._logs_per_dir[log_dir] += 1
            if clean:
                os.unlink(marker)  # from now on a crash must be recovered
            count = sum(1 for d in self._dir_of.values() if d == log_dir)
            if count:
                log.info("loaded %d logs from %s (%s shutdown)", count, log_dir, "clean" if clean else "unclean")
            else:
                log.info("no logs in %s yet", log_dir)
        self.started = True

    def start_cleaner(self) -> None:
        """Compact on a background thread from now on (if `log.cleaner.enable`)."""
        if self.manager_config.cleaner_enable and self.cleaner_thread is None:
            self.cleaner_thread = CleanerThread()

    def stop_cleaner(self) -> None:
        """Abandon any pass in progress (recovery removes files it left) and end the thread."""
        thread, self.cleaner_thread = self.cleaner_thread, None
        if thread is not None:
            thread.stop()

    def shutdown(self) -> None:
        """Stop the cleaner, flush and close every log, write the checkpoints, then the
        clean-shutdown markers."""
        self.stop_cleaner()
        for lg in self.logs.values():
            lg.flush()
            lg.close()
        self.checkpoint_recovery_points()
        self.checkpoint_log_start_offsets()
        self.checkpoint_cleaner()
        for log_dir in self.log_dirs:
            with open(os.path.join(log_dir, CLEAN_SHUTDOWN_MARKER), "w"):
                pass
        self.started = False

    def _read_checkpoint(self, log_dir: str, name: str) -> dict[TopicPartition, int]:
        try:
            return read_checkpoint(os.path.join(log_dir, name))
        except CorruptCheckpointError as exc:
            log.warning("ignoring %s: %s", name, exc)  # recovery scans from the start instead
            return {}

    # ------------------------------------------------------------ logs

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self.logs.get((topic, partition))

    def get_or_create_log(self, topic: str, partition: int, config: LogConfig | None = None) -> Log:
        tp = (topic, partition)
        existing = self.logs.get(tp)
        if existing is not None:
            return existing
        counts = self._logs_per_dir
        log_dir = min(self.log_dirs, key=counts.__getitem__)  # fewest logs, as Kafka does
        lg = Log(os.path.join(log_dir, f"{topic}-{partition}"), config or self.config_for(topic),
                 clock=self.clock, had_clean_shutdown=True, producer_budget=self.producer_budget)
        self.logs[tp] = lg
        self._dir_of[tp] = log_dir
        counts[log_dir] += 1
        return lg

    def update_config(self, topic: str, config: LogConfig) -> None:
        for (t, _), lg in self.logs.items():
            if t == topic:
                lg.config = config
                for seg in lg.segments:
                    seg.config = config

    def delete_log(self, topic: str, partition: int) -> None:
        tp = (topic, partition)
        lg = self.logs.pop(tp, None)
        if lg is None:
            return
        self._logs_per_dir[self._dir_of.pop(tp)] -= 1
        self.cleaner.remove(tp)
        thread = self.cleaner_thread
        if thread is not None and thread.job is not None and thread.job.log is lg:
            # The thread must not read, or write into, a directory going away.
            running = thread.abort(DELETE_WAIT_FOR_CLEANER_S)
            if running is not None:
                _delete_under_cleaner(lg, running)
                return
        lg.delete()

    def all_logs(self) -> list[Log]:
        return list(self.logs.values())

    # ------------------------------------------------------------ periodic work

    def tick(self, now: int | None = None) -> None:
        """Run whatever periodic work is due at `now`."""
        now = self.clock.milliseconds() if now is None else now
        mc = self.manager_config
        due = self._next_run
        self.drain_cleaner()
        if now >= due["flush"]:
            self.flush_dirty_logs(now)
            due["flush"] = now + mc.flush_scheduler_interval_ms
        if now >= due["retention"]:
            self.cleanup_logs(now)
            due["retention"] = now + mc.retention_check_interval_ms
        if mc.cleaner_enable and now >= due["cleaner"] and self.cleaning is None:
            self.clean_logs(now)
            due["cleaner"] = now + mc.cleaner_backoff_ms
        if now >= due["producer_expiry"]:
            for lg in self.logs.values():
                lg.remove_expired_producers(now)
            due["producer_expiry"] = now + mc.producer_expiration_check_interval_ms
        if now >= due["recovery_checkpoint"]:
            self.checkpoint_recovery_points()
            due["recovery_checkpoint"] = now + mc.recovery_point_checkpoint_interval_ms
        if now >= due["start_checkpoint"]:
            self.checkpoint_log_start_offsets()
            due["start_checkpoint"] = now + mc.start_offset_checkpoint_interval_ms
        in_use = self._read_by_cleaner()
        for lg in self.logs.values():
            if lg.pending_deletes:
                lg.delete_pending_files(now, in_use=in_use)

    def next_due_ms(self) -> int:
        """When `tick` next has something to do (for a runtime that sleeps until then)."""
        cleaning = self.cleaning
        in_use = self._read_by_cleaner()
        pending = [due for lg in self.logs.values() for due, seg in lg.pending_deletes
                   if id(seg) not in in_use]
        dues = [due for name, due in self._next_run.items() if cleaning is None or name != "cleaner"]
        if cleaning is not None:
            dues.append(self.clock.milliseconds() + CLEANER_POLL_MS)
        return min(dues + pending)

    def _read_by_cleaner(self) -> frozenset[int]:
        """The ids of the segments the cleaner thread's pass reads: their files stay open
        until the pass is over, even when retention or a swap queued them for deletion."""
        job = self.cleaner_thread.job if self.cleaner_thread is not None else None
        return frozenset(map(id, job.segments)) if job is not None else frozenset()

    @property
    def cleaning(self) -> Log | None:
        """The log the cleaner thread is cleaning (its swaps not all applied yet), if any."""
        job = self.cleaner_thread.job if self.cleaner_thread is not None else None
        return job.log if job is not None else None

    def flush_dirty_logs(self, now: int) -> int:
        return sum(lg.flush_if_due(now) for lg in self.logs.values())

    def cleanup_logs(self, now: int) -> int:
        """Retention: delete old segments of every log (compact-only logs keep theirs)."""
        deleted = 0
        for lg in list(self.logs.values()):
            deleted += lg.delete_old_segments()
        return deleted

    def clean_logs(self, now: int) -> CleanResult | None:
        """Compact the dirtiest eligible log. Inline without a cleaner thread (returns the
        result); with one, hand the pass to the thread (returns None; `tick` swaps in what
        it cleaned, `drain_cleaner` too)."""
        thread = self.cleaner_thread
        if thread is None:
            return self.cleaner.clean_once(self.logs, now)
        if not thread.busy:
            job = self.cleaner.next_job(self.logs, now)
            if job is not None:
                thread.submit(job)
        return None

    def drain_cleaner(self) -> CleanResult | None:
        """Swap in what the cleaner thread has cleaned; the result once its pass is over."""
        done = self.cleaner_thread.drain() if self.cleaner_thread is not None else None
        if done is None:
            return None
        job, outcome = done
        return self._finish_clean(job, outcome)

    def wait_for_cleaner(self, timeout: float | None = None) -> bool:
        """Wait until the cleaner thread has done its part of the current pass (tools and
        tests; the broker never waits). True if it has."""
        return self.cleaner_thread is None or self.cleaner_thread.wait(timeout)

    def _finish_clean(self, job: CleanJob, outcome: CleanResult | BaseException) -> CleanResult | None:
        if isinstance(outcome, CleanAborted):
            return None
        if isinstance(outcome, RecordsError):
            return self.cleaner.finish(job, error=outcome)
        if isinstance(outcome, BaseException):
            log.error("%s: cleaning failed; retrying after log.cleaner.backoff.ms", job.log, exc_info=outcome)
            return None
        if self.logs.get(job.topic_partition) is not job.log:
            return None  # deleted meanwhile
        return self.cleaner.finish(job, outcome)

    def _by_dir(self, value: Callable[[TopicPartition, Log], int]) -> dict[str, dict[TopicPartition, int]]:
        out: dict[str, dict[TopicPartition, int]] = {d: {} for d in self.log_dirs}
        for tp, lg in self.logs.items():
            out[self._dir_of[tp]][tp] = value(tp, lg)
        return out

    def checkpoint_recovery_points(self) -> None:
        for log_dir, entries in self._by_dir(lambda tp, lg: lg.recovery_point).items():
            write_checkpoint(os.path.join(log_dir, RECOVERY_POINT_CHECKPOINT), entries)

    def checkpoint_log_start_offsets(self) -> None:
        for log_dir, entries in self._by_dir(lambda tp, lg: lg.log_start_offset).items():
            write_checkpoint(os.path.join(log_dir, LOG_START_CHECKPOINT), entries)

    def read_high_watermarks(self) -> dict[TopicPartition, int]:
        """The replicas' high watermarks as last checkpointed, from every log dir."""
        out: dict[TopicPartition, int] = {}
        for log_dir in self.log_dirs:
            out.update(self._read_checkpoint(log_dir, HIGH_WATERMARK_CHECKPOINT))
        return out

    def checkpoint_high_watermarks(self, high_watermarks: dict[TopicPartition, int]) -> None:
        """Kafka's replication-offset-checkpoint: a restarted replica starts from the high
        watermark it had, never from its log end (which may hold what was never committed)."""
        for log_dir, entries in self._by_dir(lambda tp, lg: high_watermarks.get(tp, -1)).items():
            write_checkpoint(os.path.join(log_dir, HIGH_WATERMARK_CHECKPOINT),
                             {tp: o for tp, o in entries.items() if o >= 0})

    def checkpoint_cleaner(self) -> None:
        cps = self.cleaner.checkpoints
        for log_dir, entries in self._by_dir(lambda tp, lg: cps.get(tp, -1)).items():
            write_checkpoint(os.path.join(log_dir, CLEANER_CHECKPOINT),
                             {tp: o for tp, o in entries.items() if o >= 0})


def _delete_under_cleaner(lg: Log, running: Future) -> None:
    """Delete a log whose files a cleaner pass still reads: the directory leaves its name at
    once (a topic created again gets a fresh one; the pass cannot create files in it any
    more) and its files are unlinked, but their descriptors are closed only when the pass is
    over: closed now, their numbers could go to other files while the thread reads them."""
    doomed = f"{lg.directory}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
    os.rename(lg.directory, doomed)
    shutil.rmtree(doomed, ignore_errors=True)
    segments = list(lg.segments) + [seg for _, seg in lg.pending_deletes]

    def close(_: Future) -> None:
        for seg in segments:
            seg.close_without_index()

    running.add_done_callback(close)

