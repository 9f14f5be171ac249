"""What TLS and SCRAM cost: produce and consume through an SSL listener against the PLAINTEXT
listener of the same broker, in the same run, and SCRAM authentications per second.

Run alone with `.venv/bin/python benchmarks/run_all.py bench_tls`, or directly
(`.venv/bin/python benchmarks/bench_tls.py`) to print the figures without touching docs.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from brokers import REPO, WORK_ROOT, Broker, brook_broker, free_port

sys.path.insert(0, str(REPO))  # the tests' certificate maker and SCRAM client
from tests.support.kafka_wire import WireClient  # noqa: E402
from tests.support.sasl_wire import ScramClient, authenticate, handshake  # noqa: E402
from tests.support.tls_certs import TlsFiles  # noqa: E402

COMMAND = ".venv/bin/python benchmarks/run_all.py bench_tls"

VALUE_SIZE = 1024
RECORDS = 100_000  # 100 MB per produce and per consume run
ROUNDS = 3
AUTHENTICATIONS = 300
PRODUCE_CONFIG = {"linger.ms": 5, "batch.size": 1_048_576, "acks": "1",
                  "queue.buffering.max.kbytes": 1_048_576, "enable.idempotence": False}

TITLE = "TLS and SCRAM"
DESCRIPTION = f"""\
One brook broker with a PLAINTEXT listener, an SSL listener (TLS 1.3, an ECDSA P-256
certificate, no client certificates) and a SASL_SSL listener (SCRAM). A confluent-kafka
producer writes {RECORDS:,} records of {VALUE_SIZE} B to a one-partition topic (`acks=1`,
`linger.ms=5`), and a confluent-kafka consumer reads a topic of the same size from its start
(assigned, no group), through each listener in turn, alternating which goes first,
{ROUNDS} rounds; figures are the median round, with the broker's CPU per MB (its process CPU
time over the run). Over PLAINTEXT a fetch's records go from the page cache to the socket with
`sendfile`; over TLS they are read and encrypted by the broker (256 KiB at a time), which is
the main cost. SCRAM: {AUTHENTICATIONS} connections one after another, each a TLS handshake and a full
SCRAM-SHA-512 exchange (4096 iterations) made by the benchmark's own client, against the same
number of TLS handshakes alone; the client's PBKDF2 is most of the time, so the notes give the
broker's CPU per authentication too.
"""


def start(work: Path, files: TlsFiles) -> tuple[Broker, dict[str, dict]]:
    plain, tls, sasl = free_port(), free_port(), free_port()
    broker = brook_broker(work, {
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SSL://127.0.0.1:{tls},SASL_SSL://127.0.0.1:{sasl}",
        "ssl.keystore.location": str(files.broker_keystore),
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
    })
    broker.port = plain
    broker.start()
    from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
    for f in broker.admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            "bench", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"bench-secret")]).values():
        f.result(30)
    ways = {
        "PLAINTEXT": {"bootstrap.servers": f"127.0.0.1:{plain}"},
        "SSL": {"bootstrap.servers": f"127.0.0.1:{tls}", "security.protocol": "SSL",
                "ssl.ca.location": str(files.ca)},
    }
    return broker, {**ways, "_sasl_port": sasl, "_tls_port": tls}


def produce(broker: Broker, conf: dict, topic: str) -> dict:
    value = bytes(range(256)) * (VALUE_SIZE // 256)
    p = Producer({**conf, **PRODUCE_CONFIG})
    cpu0, t0 = broker.cpu(), time.perf_counter()
    for _ in range(RECORDS):
        while True:
            try:
                p.produce(topic, value, partition=0)
                break
            except BufferError:
                p.poll(0.005)
    if p.flush(120):
        raise RuntimeError("records still queued after 120 s")
    seconds = time.perf_counter() - t0
    mb = RECORDS * VALUE_SIZE / 1e6
    return {"rate": mb / seconds, "cpu_per_mb": (broker.cpu() - cpu0) / mb}


def consume(broker: Broker, conf: dict, topic: str) -> dict:
    c = Consumer({**conf, "group.id": "bench-tls", "enable.auto.commit": False,
                  "fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": 10_485_760,
                  "queued.max.messages.kbytes": 262_144})
    c.assign([TopicPartition(topic, 0, 0)])
    got = 0
    cpu0, t0 = broker.cpu(), time.perf_counter()
    deadline = t0 + 120
    while got < RECORDS and time.perf_counter() < deadline:
        for m in c.consume(10_000, timeout=1):
            if m.error() is None:
                got += 1
    seconds = time.perf_counter() - t0
    c.close()
    if got < RECORDS:
        raise RuntimeError(f"consumed {got} of {RECORDS} in 120 s")
    mb = RECORDS * VALUE_SIZE / 1e6
    return {"rate": mb / seconds, "cpu_per_mb": (broker.cpu() - cpu0) / mb}


def connections(broker: Broker, port: int, files: TlsFiles, scram: bool) -> dict:
    import ssl
    context = ssl.create_default_context(cafile=str(files.ca))
    cpu0, t0 = broker.cpu(), time.perf_counter()
    for _ in range(AUTHENTICATIONS):
        with WireClient(f"127.0.0.1:{port}", ssl_context=context) as c:
            if scram:
                if handshake(c, "SCRAM-SHA-512").error_code != 0:
                    raise RuntimeError("SaslHandshake refused")
                client = ScramClient("sha512", "bench", "bench-secret")
                first = authenticate(c, client.first())
                final = authenticate(c, client.final(first.auth_bytes))
                if final.error_code != 0:
                    raise RuntimeError(f"SCRAM refused: {final.error_message}")
            else:
                c.sock.do_handshake()
    seconds = time.perf_counter() - t0
    return {"rate": AUTHENTICATIONS / seconds, "cpu_ms": (broker.cpu() - cpu0) / AUTHENTICATIONS * 1000}


def run() -> list[dict]:
    WORK_ROOT.mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="tls-", dir=WORK_ROOT))
    files = TlsFiles(work)
    broker, ways = start(work, files)
    sasl_port, tls_port = ways.pop("_sasl_port"), ways.pop("_tls_port")
    runs: dict[tuple[str, str], list[dict]] = {}
    try:
        for way in ways:  # the topics each consume run reads, and a warm-up
            broker.create_topic(f"read-{way}", 1)
            produce(broker, ways[way], f"read-{way}")
            consume(broker, ways[way], f"read-{way}")
        for rnd in range(ROUNDS):
            print(f"   round {rnd + 1} of {ROUNDS}", file=sys.stderr, flush=True)
            order = list(ways) if rnd % 2 == 0 else list(reversed(ways))
            for way in order:
                topic = f"write-{way}-{rnd}"
                broker.create_topic(topic, 1)
                runs.setdefault(("produce", way), []).append(produce(broker, ways[way], topic))
            for way in order:
                runs.setdefault(("consume", way), []).append(consume(broker, ways[way], f"read-{way}"))
        scram = connections(broker, sasl_port, files, scram=True)
        handshakes = connections(broker, tls_port, files, scram=False)
    finally:
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)
    results = []
    for what in ("produce", "consume"):
        tls, plain = runs[(what, "SSL")], runs[(what, "PLAINTEXT")]
        cpu_tls = statistics.median(r["cpu_per_mb"] for r in tls) * 1000
        cpu_plain = statistics.median(r["cpu_per_mb"] for r in plain) * 1000
        results.append(dict(
            name=f"{what} {VALUE_SIZE} B records over SSL, MB/s",
            value=statistics.median(r["rate"] for r in tls), unit="MB/s",
            peer="PLAINTEXT", peer_value=statistics.median(r["rate"] for r in plain), command=COMMAND,
            notes=(f"rounds SSL {_rates(tls)}, PLAINTEXT {_rates(plain)} MB/s; broker CPU per MB "
                   f"SSL {cpu_tls:.1f} ms, PLAINTEXT {cpu_plain:.1f} ms")))
    results.append(dict(
        name="SCRAM-SHA-512 authentications over SASL_SSL, per second (one client, in turn)",
        value=scram["rate"], unit="auth/s", peer="TLS handshakes alone", peer_value=handshakes["rate"],
        command=COMMAND,
        notes=(f"{AUTHENTICATIONS} connections each; broker CPU per connection {scram['cpu_ms']:.2f} ms "
               f"with SCRAM, {handshakes['cpu_ms']:.2f} ms for the TLS handshake alone; the client's "
               f"PBKDF2 (4096 rounds of SHA-512) is most of the rest; load average "
               f"{os.getloadavg()[0]:.1f} at the end")))
    return results


def _rates(runs: list[dict]) -> str:
    return ", ".join(f"{r['rate']:,.0f}" for r in runs)


if __name__ == "__main__":
    for r in run():
        print(f"{r['name']:<75} {r['value']:>10,.2f} {r['unit']:<8} {r['peer']}: "
              f"{r['peer_value']:,.2f}  {r.get('notes', '')}")
