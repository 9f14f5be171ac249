"""The console's pages against a real broker process (Starlette's TestClient runs the console
in this process): what each page shows, and that each change it makes is what a Kafka client
then sees (checked with confluent-kafka's own AdminClient and Consumer)."""

from __future__ import annotations

import json
import re
import time
from contextlib import contextmanager
from html import unescape

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import ConfigResource, NewTopic, ResourceType
from starlette.testclient import TestClient

from brook.console.app import ConsoleSettings, create_app
from brook.console.backend import Backend
from brook.coordinator.group.partitioner import partition_for
from brook.security.client_settings import ClientSecurity
from tests.support.console_harness import OFFSETS_PARTITIONS
from tests.support.group_offsets import commit, committed
from tests.support.group_offsets import unique_name as name

from .transactional import write_transactions



@pytest.fixture(scope="module")
def console(broker):
    backend = Backend(broker.bootstrap, 10.0, ClientSecurity(), lag_interval=1.0)
    with TestClient(create_app(backend, ConsoleSettings(lag_interval=1.0)),
                    raise_server_exceptions=False) as c:
        c.backend = backend
        yield c


def text(html: str) -> str:
    """A page's text without tags, whitespace folded."""
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", html)))


def post(c: TestClient, path: str, data: dict, **kw):
    html = c.get("/topics").text  # any page with a form carries the token
    token = re.search(r'name="csrf_token" value="([0-9a-f]+)"', html).group(1)
    return c.post(path, data={**data, "csrf_token": token}, **kw)


def make_topic(admin, partitions: int = 2) -> str:
    topic = name("t")
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(10)
    return topic


def produce(broker, topic: str, values, partition: int = 0, key=None, **kw) -> None:
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for v in values:
        p.produce(topic, value=v, key=key, partition=partition, **kw)
    assert p.flush(20) == 0


@contextmanager
def member(broker, group: str, topic: str):
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                  "session.timeout.ms": 6000})
    c.subscribe([topic])
    deadline = time.time() + 20
    while not c.assignment() and time.time() < deadline:
        c.poll(0.2)
    assert c.assignment()
    try:
        yield c
    finally:
        c.close()


def test_groups_list_and_group_page_show_state_offsets_and_lag(broker, admin, console):
    topic = make_topic(admin)
    produce(broker, topic, [b"x"] * 7, partition=0)
    produce(broker, topic, [b"y"] * 3, partition=1)
    group = name("g")
    commit(admin, group, {(topic, 0): 2, (topic, 1): 3})
    console.backend._overview = None  # sampled afresh
    page = text(console.get("/groups").text)
    p = partition_for(group, OFFSETS_PARTITIONS)
    assert re.search(rf"{group} Empty - 0 2 5 ", page), page
    r = console.get(f"/groups/{group}")
    assert r.status_code == 200
    page = text(r.text)
    assert "State Empty" in page and f"partition {p}" in page
    assert f"{topic} 0 2 7 5" in page and f"{topic} 1 3 3 0" in page
    chart = console.get(f"/lag/{group}").json()
    assert chart["series"][0]["label"] == "total" and chart["lag"] == 5.0
    assert console.get(f"/groups/{name('none')}").status_code == 404


def test_reset_dry_run_then_execute_is_what_a_client_sees(broker, admin, console):
    topic = make_topic(admin)
    produce(broker, topic, [b"x"] * 10, partition=0)
    produce(broker, topic, [b"x"] * 4, partition=1)
    group = name("g")
    commit(admin, group, {(topic, 0): 8, (topic, 1): 4})
    r = console.get(f"/reset/{group}?to=shift&value=-5&scope=topics&topics={topic}")
    page = text(r.text)
    assert r.status_code == 200 and "Dry run: nothing has changed yet" in page
    assert f"{topic} 0 8 3" in page and f"{topic} 1 4 0" in page
    assert "below the log start offset" in page  # 4 - 5 clamped to 0
    assert committed(admin, group) == {(topic, 0): 8, (topic, 1): 4}
    r = post(console, f"/reset/{group}", {"to": "shift", "value": "-5", "scope": "topics",
                                          "topics": topic})
    assert r.status_code == 200 and "Committed the new offsets of 2 partition(s)" in text(r.text)
    assert committed(admin, group) == {(topic, 0): 3, (topic, 1): 0}
    r = post(console, f"/reset/{group}", {"to": "latest", "scope": "all"})
    assert committed(admin, group) == {(topic, 0): 10, (topic, 1): 4}


def test_reset_to_a_time_and_to_an_offset(broker, admin, console):
    topic = make_topic(admin, 1)
    base = 1_700_000_000_000
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(5):
        p.produce(topic, value=b"v", partition=0, timestamp=base + i * 60_000)
    assert p.flush(20) == 0
    group = name("g")
    commit(admin, group, {(topic, 0): 0})
    r = post(console, f"/reset/{group}", {"to": "timestamp", "value": "2023-11-14T22:15:00Z",
                                          "scope": "all"})
    assert r.status_code == 200, text(r.text)
    assert committed(admin, group) == {(topic, 0): 2}  # 22:13:20 + 2 min = 22:15:20
    post(console, f"/reset/{group}", {"to": "offset", "value": "4", "scope": "all"})
    assert committed(admin, group) == {(topic, 0): 4}


def test_reset_is_refused_while_the_group_has_members(broker, admin, console):
    topic = make_topic(admin, 1)
    produce(broker, topic, [b"x"] * 3)
    group = name("g")
    with member(broker, group, topic):
        r = console.get(f"/reset/{group}?to=earliest&scope=topics&topics={topic}")
        assert r.status_code == 502
        assert "while it has active members" in text(r.text)
        r = post(console, f"/reset/{group}", {"to": "earliest", "scope": "topics",
                                              "topics": topic})
        assert "while it has active members" in text(r.text)
        r = post(console, f"/delete-group/{group}", {"confirm": group})
        assert "it has active members" in text(r.text)


def test_delete_offsets_and_delete_group(broker, admin, console):
    a, b = make_topic(admin, 1), make_topic(admin, 1)
    produce(broker, a, [b"x"])
    produce(broker, b, [b"x"])
    group = name("g")
    commit(admin, group, {(a, 0): 1, (b, 0): 1})
    r = post(console, f"/delete-offsets/{group}", {"topics": a})
    assert r.status_code == 200 and "Deleted 1 committed offset(s)" in text(r.text)
    assert committed(admin, group) == {(b, 0): 1}
    r = post(console, f"/delete-group/{group}", {"confirm": "not-it"})
    assert r.status_code == 400 and "type the group's name" in text(r.text)
    r = post(console, f"/delete-group/{group}", {"confirm": group})
    assert r.status_code == 200 and f"Deleted consumer group '{group}'" in text(r.text)
    assert committed(admin, group) == {}


def test_offsets_topic_names_the_partition_and_broker_of_a_group(broker, admin, console):
    topic = make_topic(admin, 1)
    produce(broker, topic, [b"x"] * 2)
    group = name("g")
    commit(admin, group, {(topic, 0): 2})
    p = partition_for(group, OFFSETS_PARTITIONS)
    page = text(console.get(f"/offsets-topic?group={group}").text)
    assert f"hashes to partition {p} of {OFFSETS_PARTITIONS}; its leader is broker 1" in page
    assert "coordinator: broker 1" in page
    # the partition's records decoded as dump-log --offsets-decoder shows them
    page = text(console.get(f"/offsets-topic/{p}?group={group}").text)
    assert f"offset_commit group={group} topic={topic} partition=0 offset=2" in page
    # a tombstone after the group is deleted
    post(console, f"/delete-group/{group}", {"confirm": group})
    page = text(console.get(f"/offsets-topic/{p}?group={group}").text)
    assert "tombstone" in page
    overview = console.get("/offsets-topic")
    assert overview.status_code == 200
    assert len(re.findall(r'href="/offsets-topic/\d+"', overview.text)) == OFFSETS_PARTITIONS


def test_cluster_and_broker_configs(broker, console):
    page = text(console.get("/cluster").text)
    assert "Controller broker 1" in page
    assert re.search(rf"1 {re.escape(broker.bootstrap)} - yes \d+ \d+ configs", page), page
    page = text(console.get("/cluster/brokers/1").text)
    assert "offsets.topic.num.partitions 5 STATIC_BROKER_CONFIG" in page
    # a config set dynamically shows its source, and is highlighted as not at its default
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})

    def alter(op, value=None):
        resource = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
            ConfigEntry("log.retention.hours", value, incremental_operation=op)])
        admin.incremental_alter_configs([resource], request_timeout=10)[resource].result(10)
    alter(AlterConfigOpType.SET, "50")
    try:
        html = console.get("/cluster/brokers/1").text
        assert re.search(r'<tr class="set"><td class="mono">log\.retention\.hours</td>\s*'
                         r'<td class="mono wrap">50</td>\s*<td>DYNAMIC_BROKER_CONFIG</td>'
                         r'<td>yes</td>', html), text(html)[:3000]
    finally:
        alter(AlterConfigOpType.DELETE)
    r = console.get("/cluster/brokers/7")
    assert r.status_code == 502 and "no broker 7" in text(r.text)


def test_topics_create_alter_grow_and_delete(broker, admin, console):
    topic = name("new")
    r = post(console, "/topics", {"name": topic, "partitions": "2",
                                  "configs": "retention.ms=3600000\n"}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == f"/topics/{topic}"
    page = text(console.get(f"/topics/{topic}").text)
    assert "retention.ms 3600000 DYNAMIC_TOPIC_CONFIG" in page
    assert topic in text(console.get(f"/topics?q={topic[4:]}").text)
    commit(admin, name("g"), {(topic, 0): 0})  # __consumer_offsets exists from here on
    assert "__consumer_offsets" not in text(console.get("/topics").text)
    assert "__consumer_offsets internal" in text(console.get("/topics?internal=1").text)
    r = post(console, f"/topics/{topic}/configs", {"set": "cleanup.policy=compact",
                                                   "delete": "retention.ms"})
    assert r.status_code == 200
    res = ConfigResource(ResourceType.TOPIC, topic)
    configs = admin.describe_configs([res])[res].result(10)
    assert configs["cleanup.policy"].value == "compact"
    assert configs["retention.ms"].is_default
    r = post(console, f"/topics/{topic}/partitions", {"partitions": "3"})
    assert len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == 3
    r = post(console, f"/topics/{topic}/partitions", {"partitions": "2"})
    assert r.status_code == 400 and "has 3 partitions already" in text(r.text)
    r = post(console, "/topics", {"name": topic})
    assert "already exists" in text(r.text)
    r = post(console, "/topics", {"name": "bad name"})
    assert r.status_code == 400 and "is not a topic name" in text(r.text)
    r = post(console, "/topics", {"name": name("x"), "configs": "no-equals"})
    assert r.status_code == 400 and "expected key=value" in text(r.text)
    r = post(console, f"/topics/{topic}/delete", {"confirm": topic})
    assert r.status_code == 200 and f"Deleted topic '{topic}'" in text(r.text)
    r = post(console, "/topics/__consumer_offsets/delete", {"confirm": "__consumer_offsets"})
    assert "internal and cannot be deleted" in text(r.text)


def test_messages_json_pretty_binary_hex_headers_filters_and_order(broker, admin, console):
    topic = make_topic(admin, 1)
    produce(broker, topic, [json.dumps({"order": 1, "items": ["a", "b"]}).encode()],
            key=b"user-1", headers=[("trace", b"t-9")])
    produce(broker, topic, [bytes([0, 1, 2, 254, 255])], key=b"user-2")
    produce(broker, topic, [b"plain text %d" % i for i in range(5)], key=b"user-3")
    html = console.get(f"/topics/{topic}/messages?partition=0").text
    assert '<pre class="value kind-json" data-part="value">{\n  &#34;order&#34;: 1,\n  &#34;items&#34;: [' in html
    assert '<pre class="value kind-hex" data-part="value">00000000  00 01 02 fe ff' in html
    page = text(html)
    assert "trace : t-9" in page
    offsets = [int(o) for o in re.findall(r'id="m(\d+)"', html)]
    assert offsets == [6, 5, 4, 3, 2, 1, 0]  # newest first
    html = console.get(f"/topics/{topic}/messages?order=oldest&limit=2").text
    assert [int(o) for o in re.findall(r'id="m(\d+)"', html)] == [0, 1]
    html = console.get(f"/topics/{topic}/messages?key=user-2").text
    assert [int(o) for o in re.findall(r'id="m(\d+)"', html)] == [1]
    html = console.get(f"/topics/{topic}/messages?contains=text+3").text
    assert [int(o) for o in re.findall(r'id="m(\d+)"', html)] == [5]
    html = console.get(f"/topics/{topic}/messages?format=hex&offset=0&order=oldest&limit=1").text
    assert "kind-hex" in html and "kind-json" not in html
    r = console.get(f"/topics/{topic}/messages?partition=3")
    assert r.status_code == 400 and "has no partition 3" in text(r.text)
    r = console.get(f"/topics/{name('missing')}/messages")
    assert r.status_code == 404 and "unknown topic" in text(r.text)


def marks(html: str) -> dict[int, tuple[str, str]]:
    """The message browser's articles: offset -> (marker type, transaction outcome)."""
    out = {}
    for tag in re.findall(r"<article [^>]*>", html):
        attr = dict(re.findall(r'([\w-]+)="([^"]*)"', tag))
        out[int(attr["id"][1:])] = (attr.get("data-control", ""),
                                    attr.get("data-transaction", ""))
    return out


def test_messages_mark_transaction_markers_and_aborted_records(broker, admin, console):
    topic = make_topic(admin, 1)
    write_transactions(broker.bootstrap, topic, name("txn"))
    html = console.get(f"/topics/{topic}/messages?partition=0&order=oldest").text
    shown = marks(html)
    assert shown == {0: ("", ""), 1: ("", "committed"), 2: ("", "committed"),
                     3: ("", "committed"), 4: ("COMMIT", ""), 5: ("", "aborted"),
                     6: ("", "aborted"), 7: ("ABORT", ""), 8: ("", "")}
    page = text(html)
    assert "COMMIT marker" in page and "ABORT marker" in page
    assert page.count("aborted transaction") == 2 and page.count("committed transaction") == 3
    # A marker is no message: its key and value are not shown as if they were data.
    marker = html[html.index('id="m4"'):html.index('id="m5"')]
    assert 'data-part="value"' not in marker and "00000000" not in marker
    # Newest first pages the same records the other way round.
    html = console.get(f"/topics/{topic}/messages?partition=0&limit=4").text
    assert [int(o) for o in re.findall(r'id="m(\d+)"', html)] == [8, 7, 6, 5]
    # read_committed: what a read_committed consumer reads, no marker, no aborted record.
    html = console.get(f"/topics/{topic}/messages?partition=0&order=oldest"
                       "&isolation=read_committed").text
    assert [int(o) for o in re.findall(r'id="m(\d+)"', html)] == [0, 1, 2, 3, 8]
    assert "aborted-" not in html and "marker" not in text(html).replace("markers", "")
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": name("g"),
                  "isolation.level": "read_committed", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    values, deadline = [], time.time() + 20
    while len(values) < 5 and time.time() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            values.append((m.offset(), m.value()))
    c.close()
    assert [o for o, _ in values] == [0, 1, 2, 3, 8]
    # A filter looks into records only: markers are not what it finds.
    html = console.get(f"/topics/{topic}/messages?partition=0&contains=aborted").text
    assert [int(o) for o in re.findall(r'id="m(\d+)"', html)] == [6, 5]
    r = console.get(f"/topics/{topic}/messages?isolation=snapshot")
    assert r.status_code == 400 and "read_committed" in text(r.text)


def test_the_offsets_topic_marks_offsets_committed_in_a_transaction(broker, admin, console):
    topic, group = make_topic(admin, 1), name("txn-group")
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": name("tx")})
    p.init_transactions(30)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        p.begin_transaction()
        p.produce(topic, b"out", partition=0)
        p.send_offsets_to_transaction([TopicPartition(topic, 0, 42)],
                                      c.consumer_group_metadata(), 30)
        p.commit_transaction(30)
    finally:
        c.close()
    partition = partition_for(group, OFFSETS_PARTITIONS)
    deadline, html = time.time() + 20, ""
    while time.time() < deadline:
        html = console.get(f"/offsets-topic/{partition}?limit=500").text
        if "COMMIT marker" in html:
            break
        time.sleep(0.3)
    page = text(html)
    assert re.search(rf"offset_commit committed transaction {re.escape(group)} offset_commit "
                     rf"group={re.escape(group)} topic={topic} partition=0 offset=42", page), page
    assert "COMMIT marker" in page and "Traceback" not in page


def test_messages_from_a_time(broker, admin, console):
    topic = make_topic(admin, 1)
    base = 1_700_000_000_000
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(4):
        p.produce(topic, value=b"m%d" % i, partition=0, timestamp=base + i * 1000)
    assert p.flush(20) == 0
    html = console.get(f"/topics/{topic}/messages?time={base + 1500}&order=oldest").text
    assert [int(o) for o in re.findall(r'id="m(\d+)"', html)] == [2, 3]
    assert "2023-11-14 22:13:22.000Z" in html


def test_produce_a_message_from_the_page(broker, admin, console):
    topic = make_topic(admin, 2)
    r = post(console, f"/topics/{topic}/messages", {"partition": "1", "key": "k1",
                                                    "value": '{"hello": "world"}',
                                                    "headers": "a=1,b=2"},
             follow_redirects=False)
    assert r.status_code == 303
    r = console.get(r.headers["location"])
    assert "Produced: offset 0 of partition 1" in text(r.text)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": name("check")})
    c.assign([TopicPartition(topic, 1, 0)])
    msg = c.poll(10)
    c.close()
    assert (msg.key(), msg.value(), msg.headers()) == (b"k1", b'{"hello": "world"}',
                                                       [("a", b"1"), ("b", b"2")])
    r = post(console, f"/topics/{topic}/messages", {"value": "x", "headers": "novalue"})
    assert r.status_code == 400 and "invalid header" in text(r.text)


def test_a_group_id_with_odd_characters_has_its_own_page(broker, admin, console):
    from urllib.parse import quote

    topic = make_topic(admin, 1)
    group = f"team/a b?c#d%e-{name('x')}"
    commit(admin, group, {(topic, 0): 0})
    path = quote(group, safe="")
    r = console.get(f"/groups/{path}")
    assert r.status_code == 200 and f'id="group-id">{group}<' in unescape(r.text)
    assert f'data-lag-url="/lag/{path}"' in r.text
    assert console.get(f"/lag/{path}").status_code == 200
    r = console.get(f"/reset/{path}?to=latest&scope=all")
    assert r.status_code == 200 and "Dry run" in r.text
    console.backend._overview = None
    assert f'href="/groups/{path}"' in console.get("/groups").text


def test_sampling_in_batches_reads_what_one_request_a_group_reads(broker, admin, console):
    topic = make_topic(admin, 2)
    produce(broker, topic, [b"x"] * 4, partition=1)
    idle, busy = name("idle"), name("busy")
    commit(admin, idle, {(topic, 0): 0, (topic, 1): 1})
    backend = console.backend
    with member(broker, busy, topic):
        cluster = backend.cluster()
        ids = [idle, busy]
        batched = backend._read_groups(cluster, ids)
        backend._batched = False
        try:
            one_by_one = backend._read_groups(cluster, ids)
        finally:
            backend._batched = True
    assert batched == one_by_one
    groups, committed = batched
    assert groups[busy].state == "Stable" and groups[busy].assignor == "range"
    assert {tp for m in groups[busy].members for tp in m.partitions} == {(topic, 0), (topic, 1)}
    assert committed[idle] == {(topic, 0): 0, (topic, 1): 1}


def test_the_groups_list_starts_no_round_while_one_is_under_way(broker, admin):
    """On a busy machine a sampling round can outlast the interval: the groups page then shows
    the last sample at once instead of starting a second round beside it."""
    import threading

    commit(admin, name("g"), {(make_topic(admin, 1), 0): 0})
    backend = Backend(broker.bootstrap, 10.0, ClientSecurity(), lag_interval=0.5)
    backend.sample()
    last = backend.groups_overview()[0]
    time.sleep(2.1)  # older than 2 intervals and a second: a page would sample again
    real, started, release = backend._read_groups, threading.Event(), threading.Event()

    def slow_round(*args):  # the sampler's round, held up
        started.set()
        release.wait(10)
        return real(*args)
    backend._read_groups = slow_round
    sampler = threading.Thread(target=backend.sample)
    sampler.start()
    try:
        assert started.wait(10)
        t0 = time.monotonic()
        at, rows = backend.groups_overview()
        assert time.monotonic() - t0 < 1 and at == last and rows
    finally:
        release.set()
        sampler.join(20)
    backend._read_groups = real
    time.sleep(2.1)
    assert backend.groups_overview()[0] > last  # no round under way: a new one
