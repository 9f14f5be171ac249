"""Run a brook broker as a real process for integration tests with real Kafka clients.

The broker is started as ``python -m brook broker --listeners-file <dir>/listeners --override
listeners=PLAINTEXT://127.0.0.1:<port> --override log.dirs=<dir>/logs [--override key=value ...]``,
on port 0 the first time: the system gives it a free port, which it writes to the listeners file
once it listens (no other test can take the port between a look-up and the bind, as with a port
chosen beforehand), and every restart asks for that port again. It is ready when the file names
its port and the port accepts TCP connections. Its stderr goes to ``broker.stderr.log`` in the
test's data directory (appended to across restarts) so a failure can show what the broker said.
"""

from __future__ import annotations

import os
import resource
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

STDERR_TAIL_LINES = 60

# Overrides every test broker gets (the conftest's fixtures, and tests that start their own):
# a 4-partition default for auto-created topics, and no initial rebalance delay (a new group's
# first join would wait 3 s for more members; the delay is tested on the fake clock in
# tests/coordinator/test_classic.py and on a real broker in tests/broker/test_pipelining.py and
# tests/broker/test_connection_writes.py, which set it).
BROKER_DEFAULTS = {"num.partitions": 4, "group.initial.rebalance.delay.ms": 0}


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_accepts(port: int, host: str = "127.0.0.1", timeout: float = 0.2) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def peak_rss_bytes(pid: int) -> int:
    """The peak resident set size of process ``pid`` (VmHWM)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


class BrokerError(AssertionError):
    """The broker process did not start or stop as expected (the message has its stderr tail)."""


class BrokerProcess:
    """One broker process on a data directory and a port.

    The port is the one given, or else the one the system gave the first start; it and the
    data directory stay the same across ``restart()``, so clients that know the bootstrap
    address reconnect to the restarted broker, and the data is the same data.
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        port: int | None = None,
        overrides: dict[str, object] | None = None,
        start_timeout: float = 30.0,
        stop_timeout: float = 30.0,
        open_files_limit: int | None = None,
        host: str = "127.0.0.1",
        prefix: list[str] | tuple[str, ...] = (),
    ) -> None:
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir = self.data_dir / "logs"
        self.port = port if port is not None else 0  # 0: not started yet, the system's choice
        self.overrides: dict[str, object] = dict(overrides or {})
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        # RLIMIT_NOFILE, soft and hard, of the broker process (None: this process's)
        self.open_files_limit = open_files_limit
        # The address it listens on, and what its command runs under (for example
        # ``ip netns exec NS``: a broker in a network namespace of its own, tests/chaos)
        self.host = host
        self.prefix = list(prefix)
        self.stderr_path = self.data_dir / "broker.stderr.log"
        self.listeners_path = self.data_dir / "listeners"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self._start_offset = 0  # where the stderr of the latest start begins

    # -- addresses -------------------------------------------------------------------------
    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    # -- the command -----------------------------------------------------------------------
    def command(self) -> list[str]:
        settings: dict[str, object] = {
            "listeners": f"PLAINTEXT://{self.host}:{self.port}",
            "log.dirs": str(self.log_dir),
        }
        settings.update(self.overrides)
        cmd = [*self.prefix, sys.executable, "-m", "brook", "broker",
               "--listeners-file", str(self.listeners_path)]
        for key, value in settings.items():
            cmd += ["--override", f"{key}={value}"]
        return cmd

    # -- life cycle ------------------------------------------------------------------------
    def _limit_open_files(self) -> None:
        n = self.open_files_limit
        resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))

    def start(self) -> "BrokerProcess":
        if self.running:
            raise BrokerError(f"broker on {self.bootstrap} is already running")
        if self.port and port_accepts(self.port, self.host):
            raise BrokerError(f"port {self.port} already accepts connections before the start")
        self.starts += 1
        deadline = time.monotonic() + self.start_timeout
        self._spawn()
        while True:
            code = self.proc.poll()
            if code is not None and self._port_taken() and time.monotonic() < deadline:
                # A restart asks for its port again, and a port the system once chose is in
                # the range it hands to outgoing connections: one of another test's clients may
                # hold it for a moment. The start is tried again, as an operator would.
                time.sleep(0.5)
                self._spawn(" again: a port was taken")
                continue
            if code is not None:
                raise BrokerError(
                    f"broker exited with code {code} before accepting connections on "
                    f"{self.bootstrap}\n{self.stderr_tail()}"
                )
            port = self._listening_port()
            if port is not None and port_accepts(port, self.host):
                self.port = port
                return self
            if time.monotonic() > deadline:
                self._force_kill()
                raise BrokerError(
                    f"broker did not accept connections on {self.bootstrap} within "
                    f"{self.start_timeout:.0f}s\n{self.stderr_tail()}"
                )
            time.sleep(0.05)

    def _spawn(self, note: str = "") -> None:
        self.listeners_path.unlink(missing_ok=True)
        with open(self.stderr_path, "ab") as err:
            self._start_offset = err.tell()
            err.write(f"\n===== start #{self.starts}{note}: {' '.join(self.command())}\n".encode())
            err.flush()
            self.proc = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=err,
                stderr=err,
                cwd=self.data_dir,
                start_new_session=True,
                preexec_fn=self._limit_open_files if self.open_files_limit else None,
            )

    def _port_taken(self) -> bool:
        """Whether the start that just failed, on ports known beforehand (a restart's), was
        refused one because a socket that does not listen held it."""
        if not self.port or port_accepts(self.port, self.host):
            return False
        with open(self.stderr_path, "rb") as f:
            f.seek(self._start_offset)
            said = f.read().decode(errors="replace")
        return any(line.startswith("brook: cannot listen on ")
                   and line.endswith(": Address already in use") for line in said.splitlines())

    def _listening_port(self) -> int | None:
        """The port the broker wrote to its listeners file, once it has."""
        try:
            first = self.listeners_path.read_text().split()[0]
        except (FileNotFoundError, IndexError):
            return None
        port = int(first.rsplit(":", 1)[1])
        if self.port and port != self.port:
            self._force_kill()
            raise BrokerError(f"broker listens on port {port}, not on {self.port}")
        return port

    def stop(self, sig: int = signal.SIGTERM) -> int:
        """Ask the broker to stop (SIGTERM by default) and wait for it; return its exit code.

        A broker that does not exit within ``stop_timeout`` is killed and the test fails.
        """
        if self.proc is None:
            return 0
        proc = self.proc
        if proc.poll() is None:
            proc.send_signal(sig)
            try:
                proc.wait(self.stop_timeout)
            except subprocess.TimeoutExpired:
                try:  # the stuck broker's stacks, in its stderr for the message below
                    proc.send_signal(signal.SIGUSR1)
                    time.sleep(0.5)
                except OSError:
                    pass
                self._force_kill()
                raise BrokerError(
                    f"broker did not exit within {self.stop_timeout:.0f}s of "
                    f"{signal.Signals(sig).name}\n{self.stderr_tail()}"
                ) from None
        self.proc = None
        self._wait_port_closed()
        return proc.returncode

    def kill(self) -> int:
        """SIGKILL the broker: no flush, no checkpoint, no clean-shutdown marker."""
        if self.proc is None:
            return 0
        proc = self.proc
        self._force_kill()
        self._wait_port_closed()
        return proc.returncode

    def restart(self, sig: int = signal.SIGTERM) -> "BrokerProcess":
        """Stop by ``sig`` (SIGKILL for a crash) and start again on the same port and data."""
        if sig == signal.SIGKILL:
            self.kill()
        else:
            self.stop(sig)
        return self.start()

    def close(self) -> None:
        """Tear down: a graceful stop, and a kill if that does not work."""
        try:
            self.stop()
        finally:
            if self.proc is not None:
                self._force_kill()

    def _force_kill(self) -> None:
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
        proc.wait(30)
        self.proc = None

    def _wait_port_closed(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while self.port and port_accepts(self.port, self.host) and time.monotonic() < deadline:
            time.sleep(0.05)

    # -- diagnostics -----------------------------------------------------------------------
    def stderr_tail(self, lines: int = STDERR_TAIL_LINES) -> str:
        try:
            text = self.stderr_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no broker stderr captured)"
        tail = text.splitlines()[-lines:]
        return f"--- broker stderr (last {len(tail)} lines of {self.stderr_path}) ---\n" + "\n".join(
            tail
        )

    def __enter__(self) -> "BrokerProcess":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"BrokerProcess({self.bootstrap}, {self.data_dir}, {state})"


class TcpProxy:
    """A TCP relay in front of a broker that can lose the broker's answers on purpose.

    Point the broker's ``advertised.listeners`` at the proxy so that clients only ever talk
    through it. ``swallow_responses()`` keeps forwarding requests but drops everything the
    broker sends back: the broker handles (appends) what it receives while the client hears
    nothing, so the client must retry requests that did succeed. ``reset()`` closes every
    connection and forwards normally again. The broker may be given before it has started
    (its port is looked up at each connection).
    """

    def __init__(self, upstream: "int | BrokerProcess", port: int | None = None) -> None:
        import threading

        self._upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", port or 0))
        self.port = self.listener.getsockname()[1]
        self.swallowed_bytes = 0
        self._swallow = False
        self._closed = False
        self._lock = threading.Lock()
        self._pairs: set[tuple[socket.socket, socket.socket]] = set()
        self._threading = threading
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def upstream(self) -> tuple[str, int]:
        up = self._upstream
        return ("127.0.0.1", up if isinstance(up, int) else up.port)

    def swallow_responses(self) -> None:
        self._swallow = True

    def reset(self) -> None:
        with self._lock:
            pairs = list(self._pairs)
            self._pairs.clear()
        for pair in pairs:
            self._shut(pair)
        self._swallow = False

    def close(self) -> None:
        self._closed = True
        try:
            self.listener.close()
        finally:
            self.reset()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.upstream, timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()  # the broker is down: the client sees a closed connection
                continue
            pair = (client, upstream)
            with self._lock:
                self._pairs.add(pair)
            for src, dst, answers in ((client, upstream, False), (upstream, client, True)):
                self._threading.Thread(target=self._pump, args=(src, dst, pair, answers),
                                       daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, pair, answers: bool) -> None:
        try:
            while True:
                data = src.recv(1 << 16)
                if not data:
                    break
                if answers and self._swallow:
                    self.swallowed_bytes += len(data)
                    continue
                dst.sendall(data)
        except OSError:
            pass
        finally:
            with self._lock:
                self._pairs.discard(pair)
            self._shut(pair)

    @staticmethod
    def _shut(pair) -> None:
        for sock in pair:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()


# =============================================================================================
# Workloads: deterministic keyed records with headers and explicit timestamps, produced by one
# client and consumed by the same or another, compared byte for byte.
# =============================================================================================

import asyncio  # noqa: E402
import functools  # noqa: E402
import random  # noqa: E402
from collections import defaultdict  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402

# The consumers also check each partition's offset range (ListOffsets) after reading.
CHECK_END_OFFSETS = True

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
CLIENTS = ("confluent", "kafka-python", "aiokafka")

Headers = tuple[tuple[str, bytes], ...]


@dataclass(frozen=True)
class Record:
    key: bytes | None
    value: bytes | None
    headers: Headers
    timestamp: int  # ms, CreateTime


@dataclass(frozen=True)
class Consumed:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers
    timestamp: int
    timestamp_type: str  # "create" or "append"


def make_records(n: int, seed: int, base_ts: int | None = None) -> list[Record]:
    """``n`` keyed records: varied value sizes (incompressible and compressible parts), some
    empty and some null values, several headers (repeated keys, empty values, non-ASCII keys),
    and distinct increasing CreateTime timestamps starting about an hour ago."""
    rng = random.Random(seed)
    if base_ts is None:
        base_ts = int(time.time() * 1000) - 3_600_000
    out = []
    for i in range(n):
        key = b"key-%07d-" % i + bytes([i % 256])
        if i % 5000 == 4999:
            value = None
        elif i % 1000 == 7:
            value = b""
        else:
            value = (b"value %d of seed %d;" % (i, seed)) * (i % 4) + rng.randbytes(i % 97)
        headers: list[tuple[str, bytes]] = [("seq", b"%d" % i)]
        if i % 3 == 0:
            headers += [("dup", b"a"), ("dup", b"b")]
        if i % 11 == 0:
            headers.append(("empty", b""))
        if i % 13 == 0:
            headers.append(("\u00fcn\u00efc\u00f8de", b"\x00\xff\x80"))
        out.append(Record(key, value, tuple(headers), base_ts + 3 * i))
    return out


@dataclass
class Delivery:
    """Where the producer was told each record went: ``positions[i] = (partition, offset)``."""

    positions: list[tuple[int, int] | None]
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0


def check_round_trip(records: list[Record], delivery: Delivery, consumed: list[Consumed]) -> None:
    """Every delivered record is consumed exactly once, at the offset it was acknowledged with,
    in produce order within its partition, with identical key, value, headers and timestamp."""
    assert not delivery.errors, f"{len(delivery.errors)} delivery errors, first: {delivery.errors[:3]}"
    missing = [i for i, pos in enumerate(delivery.positions) if pos is None]
    assert not missing, f"{len(missing)} records have no delivery report, first {missing[:5]}"

    expected: dict[int, list[tuple[int, int]]] = defaultdict(list)  # partition -> [(offset, i)]
    for i, (p, o) in enumerate(delivery.positions):  # type: ignore[misc]
        expected[p].append((o, i))
    for p, entries in expected.items():
        offsets = [o for o, _ in entries]
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets))), (
            f"partition {p}: acknowledged offsets are not contiguous in produce order"
        )

    got: dict[int, list[Consumed]] = defaultdict(list)
    for c in consumed:
        got[c.partition].append(c)
    assert set(got) <= set(expected), f"records in unexpected partitions {set(got) - set(expected)}"
    for p, entries in sorted(expected.items()):
        recs = got.get(p, [])
        got_offsets = [c.offset for c in recs]
        want_offsets = [o for o, _ in entries]
        if got_offsets != want_offsets:
            dup = len(got_offsets) - len(set(got_offsets))
            gone = sorted(set(want_offsets) - set(got_offsets))
            extra = sorted(set(got_offsets) - set(want_offsets))
            raise AssertionError(
                f"partition {p}: consumed {len(got_offsets)} records, expected {len(want_offsets)};"
                f" duplicates {dup}, missing offsets {gone[:10]}{'...' if len(gone) > 10 else ''},"
                f" unexpected offsets {extra[:10]}"
            )
        for c, (o, i) in zip(recs, entries):
            r = records[i]
            got_rec = Record(c.key, c.value, c.headers, c.timestamp)
            assert got_rec == r, f"partition {p} offset {o} (record {i}): got {got_rec!r}, want {r!r}"
            assert c.timestamp_type == "create", f"partition {p} offset {o}: {c.timestamp_type}"


def _norm_headers(headers) -> Headers:
    if not headers:
        return ()
    return tuple((k if isinstance(k, str) else k.decode(), bytes(v) if v is not None else None)
                 for k, v in headers)


# --- confluent-kafka (librdkafka) ------------------------------------------------------------

def confluent_config(bootstrap: str, **extra) -> dict:
    conf = {"bootstrap.servers": bootstrap, "broker.address.family": "v4"}
    conf.update({k.replace("_", "."): v for k, v in extra.items()})
    return conf


def confluent_produce(bootstrap: str, topic: str, records: list[Record], codec: str = "none",
                      partition: int | None = None, timeout: float = 120.0, **conf) -> Delivery:
    from confluent_kafka import KafkaException, Producer

    settings = {
        "compression.type": codec,
        "linger.ms": 20,
        "batch.size": 1_000_000,
        "batch.num.messages": 10_000,
        "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 1_048_576,
        "acks": "all",
    }
    settings.update(conf)
    producer = Producer(confluent_config(bootstrap, **settings))
    delivery = Delivery([None] * len(records))

    def on_delivery(i, err, msg):
        if err is not None:
            delivery.errors.append(f"record {i}: {err}")
        else:
            delivery.positions[i] = (msg.partition(), msg.offset())

    t0 = time.monotonic()
    extra = {} if partition is None else {"partition": partition}
    for i, r in enumerate(records):
        while True:
            try:
                producer.produce(topic, key=r.key, value=r.value, headers=list(r.headers),
                                 timestamp=r.timestamp, on_delivery=functools.partial(on_delivery, i),
                                 **extra)
                break
            except BufferError:
                producer.poll(0.05)
            except KafkaException as e:  # pragma: no cover - surfaces in the assertion
                delivery.errors.append(f"record {i}: produce() raised {e}")
                break
        if i % 1000 == 0:
            producer.poll(0)
    left = producer.flush(timeout)
    delivery.seconds = time.monotonic() - t0
    if left:
        delivery.errors.append(f"{left} records still undelivered after flush({timeout})")
    return delivery


def confluent_consume(bootstrap: str, topic: str, counts: dict[int, int],
                      timeout: float = 120.0, **conf) -> list[Consumed]:
    """Read ``counts[p]`` records from the beginning of each partition with ``assign()``, then
    check that the partition holds no more than that (high watermark)."""
    from confluent_kafka import OFFSET_BEGINNING, TIMESTAMP_CREATE_TIME, Consumer, TopicPartition

    settings = {
        "group.id": f"brook-tests-{topic}",  # required by the client; no group protocol is used
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "fetch.max.bytes": 52_428_800,
        "max.partition.fetch.bytes": 10_485_760,
        "fetch.wait.max.ms": 100,
    }
    settings.update(conf)
    consumer = Consumer(confluent_config(bootstrap, **settings))
    out: list[Consumed] = []
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in sorted(counts)])
        seen = dict.fromkeys(counts, 0)
        deadline = time.monotonic() + timeout
        while any(seen[p] < counts[p] for p in counts) and time.monotonic() < deadline:
            for m in consumer.consume(num_messages=10_000, timeout=0.5):
                if m.error():
                    raise AssertionError(f"consumer error: {m.error()}")
                ts_type, ts = m.timestamp()
                out.append(Consumed(m.partition(), m.offset(), m.key(), m.value(),
                                    _norm_headers(m.headers()), ts,
                                    "create" if ts_type == TIMESTAMP_CREATE_TIME else "append"))
                seen[m.partition()] += 1
        for p in counts if CHECK_END_OFFSETS else ():
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            assert high - low == counts[p], (
                f"partition {p} holds offsets [{low}, {high}), expected {counts[p]} records"
            )
    finally:
        consumer.close()
    return out


# --- kafka-python ----------------------------------------------------------------------------

def _kp_codec(codec: str):
    return None if codec == "none" else codec


def kafka_python_produce(bootstrap: str, topic: str, records: list[Record], codec: str = "none",
                         timeout: float = 300.0, **conf) -> Delivery:
    from kafka import KafkaProducer

    settings = dict(bootstrap_servers=bootstrap, compression_type=_kp_codec(codec), acks="all",
                    linger_ms=20, batch_size=1_000_000, max_request_size=10_485_760)
    settings.update(conf)
    producer = KafkaProducer(**settings)
    delivery = Delivery([None] * len(records))
    t0 = time.monotonic()
    try:
        futures = [producer.send(topic, key=r.key, value=r.value, headers=list(r.headers),
                                 timestamp_ms=r.timestamp) for r in records]
        producer.flush(timeout)
        for i, f in enumerate(futures):
            try:
                md = f.get(timeout=1)
                delivery.positions[i] = (md.partition, md.offset)
            except Exception as e:
                delivery.errors.append(f"record {i}: {e!r}")
    finally:
        producer.close(timeout=10)
    delivery.seconds = time.monotonic() - t0
    return delivery


def kafka_python_consume(bootstrap: str, topic: str, counts: dict[int, int],
                         timeout: float = 300.0, **conf) -> list[Consumed]:
    from kafka import KafkaConsumer, TopicPartition

    settings = dict(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                    auto_offset_reset="earliest", fetch_max_bytes=52_428_800,
                    max_partition_fetch_bytes=10_485_760, fetch_max_wait_ms=100)
    settings.update(conf)
    consumer = KafkaConsumer(**settings)
    out: list[Consumed] = []
    try:
        tps = [TopicPartition(topic, p) for p in sorted(counts)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        seen = dict.fromkeys(counts, 0)
        deadline = time.monotonic() + timeout
        while any(seen[p] < counts[p] for p in counts) and time.monotonic() < deadline:
            for tp, msgs in consumer.poll(timeout_ms=500, max_records=50_000).items():
                for m in msgs:
                    out.append(Consumed(m.partition, m.offset, m.key, m.value,
                                        _norm_headers(m.headers), m.timestamp,
                                        "create" if m.timestamp_type == 0 else "append"))
                seen[tp.partition] += len(msgs)
        ends = consumer.end_offsets(tps)
        starts = consumer.beginning_offsets(tps)
        for tp in tps if CHECK_END_OFFSETS else ():
            assert ends[tp] - starts[tp] == counts[tp.partition], (
                f"partition {tp.partition} holds offsets [{starts[tp]}, {ends[tp]}), "
                f"expected {counts[tp.partition]} records"
            )
    finally:
        consumer.close()
    return out


# --- aiokafka --------------------------------------------------------------------------------

def aiokafka_produce(bootstrap: str, topic: str, records: list[Record], codec: str = "none",
                     timeout: float = 300.0, **conf) -> Delivery:
    return asyncio.run(asyncio.wait_for(
        _aiokafka_produce(bootstrap, topic, records, codec, **conf), timeout))


async def _aiokafka_produce(bootstrap, topic, records, codec, **conf) -> Delivery:
    from aiokafka import AIOKafkaProducer

    settings = dict(bootstrap_servers=bootstrap, compression_type=_kp_codec(codec), acks="all",
                    linger_ms=20, max_batch_size=1_000_000, max_request_size=10_485_760)
    settings.update(conf)
    producer = AIOKafkaProducer(**settings)
    delivery = Delivery([None] * len(records))
    await producer.start()
    t0 = time.monotonic()
    try:
        futures = []
        for r in records:
            futures.append(await producer.send(topic, key=r.key, value=r.value,
                                               headers=list(r.headers), timestamp_ms=r.timestamp))
        results = await asyncio.gather(*futures, return_exceptions=True)
        for i, md in enumerate(results):
            if isinstance(md, BaseException):
                delivery.errors.append(f"record {i}: {md!r}")
            else:
                delivery.positions[i] = (md.partition, md.offset)
    finally:
        await producer.stop()
    delivery.seconds = time.monotonic() - t0
    return delivery


def aiokafka_consume(bootstrap: str, topic: str, counts: dict[int, int],
                     timeout: float = 300.0, **conf) -> list[Consumed]:
    return asyncio.run(asyncio.wait_for(
        _aiokafka_consume(bootstrap, topic, counts, timeout, **conf), timeout + 30))


async def _aiokafka_consume(bootstrap, topic, counts, timeout, **conf) -> list[Consumed]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    settings = dict(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                    auto_offset_reset="earliest", fetch_max_bytes=52_428_800,
                    max_partition_fetch_bytes=10_485_760, fetch_max_wait_ms=100)
    settings.update(conf)
    consumer = AIOKafkaConsumer(**settings)
    await consumer.start()
    out: list[Consumed] = []
    try:
        tps = [TopicPartition(topic, p) for p in sorted(counts)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        seen = dict.fromkeys(counts, 0)
        deadline = time.monotonic() + timeout
        while any(seen[p] < counts[p] for p in counts) and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=500, max_records=50_000)
            for tp, msgs in batches.items():
                for m in msgs:
                    out.append(Consumed(m.partition, m.offset, m.key, m.value,
                                        _norm_headers(m.headers), m.timestamp,
                                        "create" if m.timestamp_type == 0 else "append"))
                seen[tp.partition] += len(msgs)
        ends = await consumer.end_offsets(tps)
        starts = await consumer.beginning_offsets(tps)
        for tp in tps if CHECK_END_OFFSETS else ():
            assert ends[tp] - starts[tp] == counts[tp.partition], (
                f"partition {tp.partition} holds offsets [{starts[tp]}, {ends[tp]}), "
                f"expected {counts[tp.partition]} records"
            )
    finally:
        await consumer.stop()
    return out


PRODUCERS = {
    "confluent": confluent_produce,
    "kafka-python": kafka_python_produce,
    "aiokafka": aiokafka_produce,
}
CONSUMERS = {
    "confluent": confluent_consume,
    "kafka-python": kafka_python_consume,
    "aiokafka": aiokafka_consume,
}


def partition_counts(delivery: Delivery, partitions: int) -> dict[int, int]:
    counts = dict.fromkeys(range(partitions), 0)
    for pos in delivery.positions:
        if pos is not None:
            counts[pos[0]] = counts.get(pos[0], 0) + 1
    return counts


# --- topics ----------------------------------------------------------------------------------

def create_topic_confluent(bootstrap: str, topic: str, partitions: int = 4,
                           config: dict[str, str] | None = None, timeout: float = 30.0) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(confluent_config(bootstrap))
    fut = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1,
                                        config=config or {})], operation_timeout=timeout)[topic]
    fut.result(timeout)


def create_topic_kafka_python(bootstrap: str, topic: str, partitions: int = 4) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
    finally:
        admin.close()


def create_topic_aiokafka(bootstrap: str, topic: str, partitions: int = 4) -> None:
    async def run():
        from aiokafka.admin import AIOKafkaAdminClient, NewTopic

        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            await admin.create_topics(
                [NewTopic(topic, num_partitions=partitions, replication_factor=1)])
        finally:
            await admin.close()

    asyncio.run(run())


TOPIC_CREATORS = {
    "confluent": create_topic_confluent,
    "kafka-python": create_topic_kafka_python,
    "aiokafka": create_topic_aiokafka,
}
