"""`brook produce` and `brook consume`: lines in, messages out, and back (Kafka's console
producer and consumer, with confluent-kafka's Producer and Consumer)."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Iterator, Optional

import typer

from . import output
from .errors import CliError
from .options import bootstrap_option, timeout_option
from .output import Format, output_option

if TYPE_CHECKING:
    from .client import Cluster

NULL = "null"  # how Kafka's console consumer prints a null key or value


# --- pure helpers -----------------------------------------------------------------------------


def arg_bytes(text: str) -> bytes:
    """A command-line argument as the bytes it was given as (not UTF-8 ones included)."""
    return os.fsencode(text)


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def parse_headers(text: str | None) -> list[tuple[str, bytes]]:
    """`k1=v1,k2=v2` as record headers (`k=` gives an empty value; `k` alone is an error)."""
    out = []
    for item in (text or "").split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise CliError(f"invalid header {item.strip()!r} in --headers: expected key=value",
                           code=2)
        out.append((key.strip(), arg_bytes(value)))
    return out


class NoSeparator(CliError):
    def __init__(self, number: int, separator: bytes) -> None:
        shown = separator.decode("utf-8", errors="backslashreplace")
        super().__init__(f"line {number}: no key separator {shown!r}", code=2)


def split_line(line: bytes, separator: bytes | None, number: int) -> tuple[bytes | None, bytes]:
    """(key, value) of one input line, as bytes: the whole line is the value unless a key
    separator is given, which must then occur (Kafka's console producer with parse.key=true)."""
    if separator is None:
        return None, line
    key, sep, value = line.partition(separator)
    if not sep:
        raise NoSeparator(number, separator)
    return key, value


def text(data: bytes | None) -> str:
    return NULL if data is None else data.decode("utf-8", errors="backslashreplace")


def message_view(msg: Any) -> dict[str, Any]:
    """A consumed confluent-kafka Message as plain values (JSON output)."""
    ts_type, ts = msg.timestamp()
    return {
        "topic": msg.topic(), "partition": msg.partition(), "offset": msg.offset(),
        "timestamp": ts if ts_type else None,
        "timestamp_type": {1: "CreateTime", 2: "LogAppendTime"}.get(ts_type),
        "key": None if msg.key() is None else text(msg.key()),
        "value": None if msg.value() is None else text(msg.value()),
        "headers": {k: None if v is None else text(v) for k, v in (msg.headers() or [])},
    }


def format_message(view: dict[str, Any], *, print_key: bool, print_offset: bool,
                   print_timestamp: bool, separator: str = "\t") -> str:
    """Kafka's console consumer line: [CreateTime:ts] [Partition:p Offset:o] [key] value."""
    parts = []
    if print_timestamp:
        kind = view["timestamp_type"] or "NoTimestampType"
        parts.append(f"{kind}:{view['timestamp'] if view['timestamp'] is not None else -1}")
    if print_offset:
        parts.append(f"Partition:{view['partition']}")
        parts.append(f"Offset:{view['offset']}")
    if print_key:
        parts.append(NULL if view["key"] is None else view["key"])
    parts.append(NULL if view["value"] is None else view["value"])
    return separator.join(parts)


def _lines(stream: IO[bytes]) -> Iterator[bytes]:
    """The lines of a binary stream without their b"\\n" (any other byte is kept)."""
    for line in stream:
        yield line[:-1] if line.endswith(b"\n") else line


def _cluster(bootstrap: str | None, timeout: float | None) -> "Cluster":
    from .client import Cluster

    return Cluster(bootstrap, timeout)


# --- produce ----------------------------------------------------------------------------------


def produce(
    topic: str = typer.Argument(..., metavar="TOPIC"),
    file: Optional[Path] = typer.Option(None, "--file", "-f",
                                        help="Read lines from this file instead of stdin."),
    key_separator: Optional[str] = typer.Option(
        None, "--key-separator", help="Split each line into key and value at the first SEP."),
    headers: Optional[str] = typer.Option(None, "--headers",
                                          help="k1=v1,k2=v2: headers of every message."),
    partition: Optional[int] = typer.Option(None, "--partition",
                                            help="Write to this partition (default: by key)."),
    bootstrap: Optional[str] = bootstrap_option(),
    timeout: Optional[float] = timeout_option(),
) -> None:
    """Send each line of stdin (or of --file) as one message."""
    from confluent_kafka import Producer

    if key_separator == "":
        raise CliError("--key-separator must not be empty", code=2)
    separator = None if key_separator is None else arg_bytes(key_separator)
    header_list = parse_headers(headers)
    cluster = _cluster(bootstrap, timeout)
    partitions = cluster.partitions(topic)
    if partition is not None and partition not in partitions:
        raise CliError(f"topic '{topic}' has no partition {partition}", code=2)
    delivery_timeout_ms = int(max(cluster.timeout, 30) * 1000)
    producer = Producer(cluster.config(**{"message.timeout.ms": delivery_timeout_ms,
                                          "linger.ms": 5}))
    failures: list[str] = []

    def delivered(err, _msg) -> None:
        if err is not None:
            failures.append(err.str())

    count = 0
    extra: dict[str, Any] = {} if partition is None else {"partition": partition}

    def send(lines: Iterator[bytes], advance=None) -> None:
        nonlocal count
        for n, line in enumerate(lines, 1):
            key, value = split_line(line, separator, n)
            while True:
                try:
                    producer.produce(topic, value=value, key=key, headers=header_list or None,
                                     on_delivery=delivered, **extra)
                    break
                except BufferError:  # the local queue is full: let deliveries drain it
                    producer.poll(0.1)
            producer.poll(0)
            count += 1
            if advance:
                advance(len(line) + 1)

    stopped: NoSeparator | None = None
    try:
        if file is None:
            send(_lines(sys.stdin.buffer))
        else:
            _send_file(file, send)
    except NoSeparator as exc:
        stopped = exc  # what came before it is delivered first, and said so
    finally:
        remaining = producer.flush(cluster.timeout + 30)
    if stopped is not None:
        raise CliError(stopped.message + _before(count, remaining + len(failures), failures),
                       code=stopped.code)
    if remaining:
        raise CliError(f"{remaining} of {plural(count, 'message')} were not delivered in time")
    if failures:
        raise CliError(f"{len(failures)} of {plural(count, 'message')} were not delivered: "
                       f"{failures[0]}")
    output.note(f"Produced {plural(count, 'message')} to '{topic}'.")


def _before(count: int, undelivered: int, failures: list[str]) -> str:
    """What became of the lines before one that stopped the producer."""
    if count == 0:
        return ""
    lines = "the line before it" if count == 1 else f"the {count} lines before it"
    if not undelivered:
        return f"; {lines} {'was' if count == 1 else 'were'} produced"
    why = f": {failures[0]}" if failures else ""
    return f"; of {lines}, {undelivered} {'was' if undelivered == 1 else 'were'} not delivered{why}"


def _send_file(path: Path, send) -> None:
    try:
        stream = open(path, "rb")
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror or exc}") from exc
    with stream:
        size = os.fstat(stream.fileno()).st_size
        if not output.stderr_is_terminal():
            send(_lines(stream))
            return
        with output.progress() as bar:
            task = bar.add_task(f"producing {path.name}", total=size)
            send(_lines(stream), lambda n: bar.advance(task, n))


# --- consume ----------------------------------------------------------------------------------


def consume(
    topic: str = typer.Argument(..., metavar="TOPIC"),
    group: Optional[str] = typer.Option(
        None, "--group", help="Consume as this group (and commit its offsets); default: read "
                              "every partition without a group."),
    from_beginning: bool = typer.Option(
        False, "--from-beginning",
        help="Start at the earliest offset (with --group: when it has no committed offset)."),
    max_messages: Optional[int] = typer.Option(None, "--max-messages", min=1,
                                               help="Exit after this many messages."),
    timeout_ms: Optional[int] = typer.Option(None, "--timeout-ms", min=1,
                                             help="Exit when no message came for this long."),
    print_key: bool = typer.Option(False, "--print-key", help="Print each message's key."),
    print_offset: bool = typer.Option(False, "--print-offset",
                                      help="Print each message's partition and offset."),
    print_timestamp: bool = typer.Option(False, "--print-timestamp",
                                         help="Print each message's timestamp."),
    separator: str = typer.Option("\t", "--separator", show_default=False,
                                  help="Between printed fields. [default: \\t, a tab]"),
    bootstrap: Optional[str] = bootstrap_option(),
    timeout: Optional[float] = timeout_option(),
    fmt: Format = output_option(),
) -> None:
    """Print messages of a topic, one per line (JSON lines with --output json)."""
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, TopicPartition

    cluster = _cluster(bootstrap, timeout)
    partitions = cluster.partitions(topic)
    conf = cluster.config(**{
        "group.id": group or "brook-console",
        "enable.auto.commit": group is not None,
        "auto.offset.reset": "earliest" if from_beginning else "latest",
        "enable.partition.eof": False,
    })
    consumer = Consumer(conf)
    if group is not None:
        consumer.subscribe([topic])
    else:
        start = OFFSET_BEGINNING if from_beginning else OFFSET_END
        consumer.assign([TopicPartition(topic, p, start) for p in partitions])
    count = 0
    last = time.monotonic()
    stop = []  # SIGTERM stops the loop as Ctrl-C does: commit, leave the group, print the total
    previous = signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    try:
        while not stop and (max_messages is None or count < max_messages):
            msg = consumer.poll(0.2)
            if msg is None:
                sys.stdout.flush()  # caught up: whoever reads the output sees it now
                if timeout_ms is not None and (time.monotonic() - last) * 1000 >= timeout_ms:
                    break
                continue
            if msg.error():
                raise CliError(f"cannot consume '{topic}': {msg.error().str()}")
            last = time.monotonic()
            view = message_view(msg)
            if fmt is Format.json:
                output.json_line(view)
            else:
                output.line(format_message(view, print_key=print_key, print_offset=print_offset,
                                           print_timestamp=print_timestamp, separator=separator))
            count += 1
        sys.stdout.flush()
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
        consumer.close()  # with --group, commits the offsets of what was printed and leaves
    output.note(f"Processed a total of {count} messages")
