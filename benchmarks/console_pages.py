"""What the web console's pages take to answer on a large cluster, how many requests each sends
the broker, and what the console's lag sampling costs the broker.

    .venv/bin/python benchmarks/console_pages.py [--topics 1000] [--partitions 10] [--groups 1000]

A real broker (`python -m brook broker` with `metrics.port`) gets `--topics` topics of
`--partitions` partitions with one record in each partition, and `--groups` groups, group i
with an offset committed on every partition of topic i % topics. Then:

1. One sampling round (what the sampler does every --lag-interval: Backend.sample), timed in
   this process, with the requests it sent the broker counted (the broker's
   brook_requests_total, by API, before and after).
2. A `brook console` process with a sampling interval long enough not to run during the
   measurement: each page asked `--rounds` times over HTTP after one warm-up; the median and
   worst time, the median CPU time the console and the broker ran for during a request (their
   threads' run time: what the page costs, which other work on a shared machine moves far less
   than the wall time), and the broker requests the last of them sent. Then the pages the console's
   metadata snapshot serves, each round after the snapshot grew old, and after it was gone.
3. The broker's CPU over `--idle` seconds without the console, then with a console sampling
   every 5 s (its default) and no page open: the difference is what the sampling costs.
4. Pages asked in turn for `--busy` seconds while that console samples every 5 s: what a page
   takes with a sampling round running beside it.

Not a test and not part of `make bench`: a measurement to read (docs/console.md has the last).
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from brokers import WORK_ROOT, brook_broker, free_port, process_schedstat  # noqa: E402

PAGES = ["/groups", "/groups/g-0", "/lag/g-0", "/reset/g-0?to=earliest&scope=all",
         "/offsets-topic", "/offsets-topic?group=g-0", "/offsets-topic/0",
         "/cluster", "/cluster/brokers/1", "/topics", "/topics/t-0",
         "/topics/t-0/messages", "/topics/t-0/messages?contains=zzz", "/security"]
# The pages the shared metadata snapshot serves (brook.console.topology), asked again once it
# is old (MAX_AGE: it serves the page and is renewed in the background) and once it is gone
# (STALE_AGE: the page waits for a Metadata answer): what a page costs when nobody opened one
# in the last few seconds.
COLD_PAGES = ["/topics", "/cluster", "/topics/t-0/messages"]


BUSY_PAGES = ["/groups", "/groups/g-0", "/topics", "/topics/t-0/messages", "/cluster"]


def requests_by_api(metrics_port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=30).read()
    out: dict[str, float] = {}
    for m in re.finditer(r'^brook_requests_total\{request="([^"]+)"[^}]*\} ([0-9.e+]+)$',
                         text.decode(), re.M):
        out[m.group(1)] = out.get(m.group(1), 0) + float(m.group(2))
    return out


def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, int]:
    return {k: int(after.get(k, 0) - before.get(k, 0)) for k in sorted(after)
            if after.get(k, 0) - before.get(k, 0) > 0}


def requests_text(d: dict[str, int]) -> str:
    return f"{sum(d.values())} (" + ", ".join(f"{k} {v}" for k, v in d.items()) + ")"


def setup(broker, topics: int, partitions: int, groups: int) -> None:
    from confluent_kafka import ConsumerGroupTopicPartitions, Producer, TopicPartition
    from confluent_kafka.admin import NewTopic

    admin = broker.admin
    t0 = time.monotonic()
    names = [f"t-{i}" for i in range(topics)]
    for i in range(0, topics, 50):
        batch = names[i:i + 50]
        for f in admin.create_topics([NewTopic(t, partitions, 1) for t in batch],
                                     operation_timeout=60, request_timeout=60).values():
            f.result(120)
    print(f"  {topics} topics x {partitions} partitions created in "
          f"{time.monotonic() - t0:.1f} s", flush=True)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50,
                         "log_level": 2})
    for t in names:
        for p in range(partitions):
            producer.produce(t, value=b'{"n": 1}', partition=p)
        producer.poll(0)
    producer.flush(120)
    t0 = time.monotonic()
    futures = []
    for g in range(groups):
        topic = names[g % topics]
        tps = [TopicPartition(topic, p, 1 if g % 2 else 0) for p in range(partitions)]
        futures.append(admin.alter_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(f"g-{g}", tps)], request_timeout=60)[f"g-{g}"])
        if len(futures) >= 100:
            for f in futures:
                f.result(120)
            futures = []
    for f in futures:
        f.result(120)
    print(f"  {groups} groups committed in {time.monotonic() - t0:.1f} s", flush=True)


def start_console(bootstrap: str, interval: float, log: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "brook", "-b", bootstrap, "console",
                             "--listen", f"127.0.0.1:{port}", "--lag-interval", str(interval),
                             "--timeout", "30"],
                            stdout=subprocess.DEVNULL, stderr=open(log, "ab"))
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url + "/static/console.css", timeout=2)
            return proc, url
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"the console did not start:\n{log.read_text()}")


def fetch(url: str) -> tuple[float, int]:
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(url, timeout=120) as r:
            r.read()
            status = r.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    return time.perf_counter() - t0, status


def timed(url: str, console_pid: int, broker_pid: int) -> tuple[float, int, float, float]:
    """fetch(url), and the CPU the console and the broker ran for meanwhile (their threads'
    run time, nanosecond resolution: unlike the wall time, little moved by other work on the
    machine): (seconds, status, console CPU seconds, broker CPU seconds)."""
    c0, b0 = process_schedstat(console_pid)[0], process_schedstat(broker_pid)[0]
    seconds, status = fetch(url)
    return (seconds, status, process_schedstat(console_pid)[0] - c0,
            process_schedstat(broker_pid)[0] - b0)


def row(page: str, results: list[tuple[float, int, float, float]], sent: dict) -> str:
    ms = [r[0] * 1000 for r in results]
    return (f"{page:45} {statistics.median(ms):9.0f} {max(ms):9.0f} "
            f"{statistics.median(r[2] * 1000 for r in results):8.0f} "
            f"{statistics.median(r[3] * 1000 for r in results):8.0f} {results[-1][1]:6}  "
            f"{requests_text(sent)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--topics", type=int, default=1000)
    ap.add_argument("--partitions", type=int, default=10)
    ap.add_argument("--groups", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--idle", type=float, default=60.0)
    ap.add_argument("--busy", type=float, default=60.0)
    args = ap.parse_args()

    WORK_ROOT.mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=WORK_ROOT, prefix="console-"))
    metrics_port = free_port()
    broker = brook_broker(work, {"group.initial.rebalance.delay.ms": "0",
                                 "metrics.port": str(metrics_port),
                                 "offsets.topic.num.partitions": "50"})
    broker.start()
    console = None
    try:
        print(f"cluster: {args.topics} topics, {args.topics * args.partitions} partitions, "
              f"{args.groups} groups (one brook broker)")
        setup(broker, args.topics, args.partitions, args.groups)

        from brook.console.backend import Backend
        from brook.security.client_settings import ClientSecurity

        backend = Backend(broker.bootstrap, 60.0, ClientSecurity())
        backend.sample()  # connections made, metadata cached
        before, t0 = requests_by_api(metrics_port), time.perf_counter()
        backend.sample()
        took = time.perf_counter() - t0
        sampled = delta(before, requests_by_api(metrics_port))
        print(f"\none sampling round: {took * 1000:.0f} ms, broker requests "
              f"{requests_text(sampled)}")
        backend.close()

        console, url = start_console(broker.bootstrap, 60, work / "console.log")
        fetch(url + "/groups")  # the first sample
        pids = (console.pid, broker.proc.pid)
        print(f"\n{'page':45} {'median ms':>9} {'worst ms':>9} {'console':>8} {'broker':>8} "
              "status  broker requests (last)\n"
              f"{'':45} {'':9} {'':9} {'CPU ms':>8} {'CPU ms':>8}")
        for page in PAGES:
            fetch(url + page)  # warm-up
            results = []
            for i in range(args.rounds):
                if i == args.rounds - 1:
                    before = requests_by_api(metrics_port)
                results.append(timed(url + page, *pids))
            sent = delta(before, requests_by_api(metrics_port))
            print(row(page, results, sent), flush=True)
        from brook.console.topology import MAX_AGE, STALE_AGE

        for wait, why in ((MAX_AGE, "snapshot old"), (STALE_AGE, "no snapshot")):
            for page in COLD_PAGES:
                results = []
                for i in range(args.rounds):
                    time.sleep(wait + 0.2)
                    if i == args.rounds - 1:
                        before = requests_by_api(metrics_port)
                    results.append(timed(url + page, *pids))
                time.sleep(0.5)  # a refresh in the background is counted with its page
                sent = delta(before, requests_by_api(metrics_port))
                print(row(f"{page} ({why})", results, sent), flush=True)
        console.terminate()
        console.wait(30)
        console = None

        cpu0 = broker.cpu()
        time.sleep(args.idle)
        idle = (broker.cpu() - cpu0) / args.idle
        console, url = start_console(broker.bootstrap, 5, work / "console.log")
        time.sleep(10)  # the first rounds
        cpu0 = broker.cpu()
        time.sleep(args.idle)
        sampling = (broker.cpu() - cpu0) / args.idle
        print(f"\nbroker CPU over {args.idle:.0f} s: {idle * 100:.1f} % of a core without the "
              f"console, {sampling * 100:.1f} % with it sampling every 5 s "
              f"(the sampling: {(sampling - idle) * 100:.1f} %)")

        # The pages while that console samples every 5 s (its default), for --busy seconds:
        # what a page takes when a sampling round runs beside it.
        print(f"\npages asked in turn for {args.busy:.0f} s while the console samples every 5 s"
              f"\n{'page':45} {'median ms':>9} {'p90 ms':>9} {'worst ms':>9} {'asked':>6}")
        busy: dict[str, list[float]] = {page: [] for page in BUSY_PAGES}
        deadline = time.monotonic() + args.busy
        while time.monotonic() < deadline:
            for page in BUSY_PAGES:
                busy[page].append(fetch(url + page)[0] * 1000)
                time.sleep(0.2)
        for page, ms in busy.items():
            ms.sort()
            print(f"{page:45} {statistics.median(ms):9.0f} {ms[int(len(ms) * 0.9)]:9.0f} "
                  f"{ms[-1]:9.0f} {len(ms):6}", flush=True)
    finally:
        if console is not None:
            console.terminate()
            console.wait(30)
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
