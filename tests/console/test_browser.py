"""The console in a real headless Chromium (Debian's chromium and chromium-driver, driven by
Selenium), served by a real `brook console` process in front of a real broker process:
what a person sees and does. Each test saves screenshots of its pages in
build/console-screenshots/ (BROOK_SCREENSHOTS names another directory)."""

from __future__ import annotations

import base64
import json
import os
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewTopic

from brook.coordinator.group.partitioner import partition_for
from tests.support.console_harness import (OFFSETS_PARTITIONS, ConsoleProcess,
                                           chromium_available, chromium_driver)
from tests.support.group_offsets import commit, committed
from tests.support.group_offsets import unique_name as name

from .transactional import write_transactions

SHOTS = Path(os.environ.get("BROOK_SCREENSHOTS")
             or Path(__file__).parents[2] / "build" / "console-screenshots")


@pytest.fixture(scope="module")
def console(broker, tmp_path_factory):
    with ConsoleProcess(tmp_path_factory.mktemp("console"), broker.bootstrap,
                        "--lag-interval", "1") as proc:
        yield proc


@pytest.fixture(scope="module")
def browser():
    why = chromium_available()
    if why:
        pytest.skip(why)
    driver = chromium_driver()
    try:
        yield driver
    finally:
        driver.quit()


def shot(driver, file: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1300, min(max(height, 700), 2400))
    driver.save_screenshot(str(SHOTS / file))
    driver.set_window_size(1300, 1000)


def wait_for(condition, timeout: float = 30.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def by_id(driver, element_id: str):
    from selenium.webdriver.common.by import By
    return driver.find_element(By.ID, element_id)


def make_topic(admin, partitions: int = 2) -> str:
    topic = name("t")
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(10)
    return topic


def total_lag_series(driver) -> list:
    data = driver.execute_script("return window.brookLag && window.brookLag.data")
    return [] if not data or not data["series"] else data["series"][0]["values"]


def test_lag_chart_rises_while_a_producer_runs_and_falls_to_zero_as_a_consumer_catches_up(
        broker, admin, console, browser):
    topic = make_topic(admin, 2)
    group = name("lagging")
    # the group starts caught up: an offset committed at the (empty) end of each partition
    commit(admin, group, {(topic, 0): 0, (topic, 1): 0})
    browser.get(f"{console.url}groups/{group}")
    browser.execute_script("window.notReloaded = true")
    wait_for(lambda: len(total_lag_series(browser)) >= 2, what="the chart's first samples")
    assert total_lag_series(browser)[-1] == 0

    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for _ in range(8):  # 8 rounds of 50 records, 0.5 s apart: the lag grows in steps
        for i in range(50):
            producer.produce(topic, value=b"%d" % i, key=b"%d" % i)
        producer.flush(10)
        time.sleep(0.5)
    wait_for(lambda: (total_lag_series(browser) or [0])[-1] == 400, what="the lag of 400")
    values = [v for v in total_lag_series(browser) if v is not None]
    rising = [v for v in values if 0 < v < 400]
    assert rising, f"no sample while the producer ran: {values}"
    assert values == sorted(values), values  # only rose while nothing consumed
    assert by_id(browser, "lag-now").text == "400"
    shot(browser, "group-lagging.png")

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": True,
                         "auto.commit.interval.ms": 200})
    consumer.subscribe([topic])
    read = 0
    try:
        deadline = time.monotonic() + 30
        while read < 400 and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                read += 1
            if read % 40 == 0:
                time.sleep(0.3)  # catch up in a few steps the chart can see
        assert read == 400  # committed by auto-commit, every 200 ms
        wait_for(lambda: (total_lag_series(browser) or [1])[-1] == 0, what="the lag back to 0")
    finally:
        consumer.close()
    values = [v for v in total_lag_series(browser) if v is not None]
    peak = values.index(max(values))
    assert values[-1] == 0 and max(values) == 400 and all(
        a >= b for a, b in zip(values[peak:], values[peak + 1:])), values
    assert by_id(browser, "lag-now").text == "0"
    assert browser.execute_script("return window.notReloaded") is True  # live, no reload
    assert browser.execute_script("return window.brookLag.updates") >= 5
    shot(browser, "group-caught-up.png")


def test_an_offset_reset_through_the_page_is_what_committed_returns(broker, admin, console,
                                                                     browser):
    from selenium.webdriver.support.ui import Select

    topic = make_topic(admin, 2)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for p in (0, 1):
        for i in range(10):
            producer.produce(topic, value=b"v", partition=p)
    producer.flush(10)
    group = name("reset")
    commit(admin, group, {(topic, 0): 9, (topic, 1): 10})

    browser.get(f"{console.url}groups/{group}")
    Select(by_id(browser, "reset-to")).select_by_value("shift")
    by_id(browser, "reset-value").send_keys("-4")
    by_id(browser, "reset-preview").click()
    wait_for(lambda: browser.find_elements("id", "reset-dry-run"), what="the dry run")
    rows = [r.text for r in browser.find_elements("css selector", "#reset-plan tbody tr")]
    assert rows == [f"{topic} 0 9 5", f"{topic} 1 10 6"]
    shot(browser, "reset-dry-run.png")

    check = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
        assert [tp.offset for tp in check.committed(tps, timeout=10)] == [9, 10]  # dry run
        by_id(browser, "reset-execute").click()
        wait_for(lambda: browser.find_elements("id", "reset-done"), what="the reset")
        assert [tp.offset for tp in check.committed(tps, timeout=10)] == [5, 6]
    finally:
        check.close()
    shot(browser, "reset-done.png")


def test_the_message_browser_shows_json_pretty_printed_and_binary_in_hex(broker, admin, console,
                                                                         browser):
    topic = make_topic(admin, 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce(topic, key=b"order-1", partition=0, headers=[("source", b"shop")],
                     value=json.dumps({"order": 1, "lines": [{"sku": "B-7", "qty": 2}]}).encode())
    producer.produce(topic, key=b"blob", partition=0, value=bytes(range(0, 256, 7)))
    producer.produce(topic, key=b"note", partition=0, value=b"plain words")
    producer.flush(10)
    browser.get(f"{console.url}topics/{topic}/messages")
    json_value = browser.find_element("css selector", "#m0 pre.kind-json[data-part=value]").text
    assert json_value.startswith('{\n  "order": 1,\n  "lines": [\n    {\n      "sku": "B-7"')
    hex_value = browser.find_element("css selector", "#m1 pre.kind-hex[data-part=value]").text
    assert hex_value.startswith("00000000  00 07 0e 15 1c 23 2a 31")
    assert browser.find_element("css selector", "#m2 pre.kind-text[data-part=value]").text == "plain words"
    assert "source: shop" in browser.find_element("css selector", "#m0").text
    shot(browser, "messages.png")


def test_the_message_browser_marks_transaction_markers_and_aborted_records(broker, admin, console,
                                                                          browser):
    from selenium.webdriver.support.ui import Select

    topic = make_topic(admin, 1)
    write_transactions(broker.bootstrap, topic, name("txn"))
    browser.get(f"{console.url}topics/{topic}/messages?order=oldest")

    def article(offset: int):
        return browser.find_element("css selector", f"#m{offset}")

    assert "COMMIT marker" in article(4).text and "ABORT marker" in article(7).text
    assert not article(4).find_elements("css selector", "pre")  # no key or value as data
    for offset in (1, 2, 3):
        assert "committed transaction" in article(offset).text
    for offset in (5, 6):
        assert "aborted transaction" in article(offset).text
        value = article(offset).find_element("css selector", "pre[data-part=value]")
        assert value.value_of_css_property("text-decoration-line") == "line-through"
    assert "transaction" not in article(0).text and "transaction" not in article(8).text
    shot(browser, "messages-transactions.png")
    # read_committed, chosen on the page: the markers and the aborted records are gone
    Select(by_id(browser, "m-isolation")).select_by_value("read_committed")
    by_id(browser, "browse-form").submit()
    wait_for(lambda: "isolation=read_committed" in browser.current_url, what="the new page")
    shown = [a.get_attribute("id") for a in browser.find_elements("css selector",
                                                                  "article.message")]
    assert shown == ["m0", "m1", "m2", "m3", "m8"]
    assert "last stable offset 9" in browser.find_element("tag name", "main").text
    shot(browser, "messages-read-committed.png")


def test_the_offsets_topic_page_names_the_partition_and_broker_coordinating_a_group(
        broker, admin, console, browser):
    topic = make_topic(admin, 1)
    group = name("where")
    commit(admin, group, {(topic, 0): 0})
    browser.get(f"{console.url}offsets-topic")
    field = by_id(browser, "locate")
    field.send_keys(group)
    field.submit()
    wait_for(lambda: browser.find_elements("id", "located"), what="the located group")
    assert by_id(browser, "located-partition").text == str(partition_for(group, OFFSETS_PARTITIONS))
    assert by_id(browser, "located-leader").text == "broker 1"
    assert by_id(browser, "located-coordinator").text.startswith("broker 1 (")
    highlighted = browser.find_element("css selector", "#offsets-partitions tr.hit td").text
    assert highlighted == str(partition_for(group, OFFSETS_PARTITIONS))
    shot(browser, "offsets-topic.png")
    by_id(browser, "located-partition").click()
    wait_for(lambda: browser.find_elements("id", "offsets-records"), what="the records")
    assert f"offset_commit group={group} topic={topic} partition=0 offset=0" in \
        by_id(browser, "offsets-records").text
    shot(browser, "offsets-partition.png")


def test_the_other_pages_render(broker, admin, console, browser):
    """Cluster, topics, a topic, broker configs and the group list, for the screenshots; with
    a sort by a column done by keyboard."""
    from selenium.webdriver.common.keys import Keys

    topic = make_topic(admin, 3)
    for _ in range(2):  # groups of its own to sort, whatever ran before
        commit(admin, name("sorted"), {(topic, 0): 1})
    for path, file, marker in (("cluster", "cluster.png", "Brokers"),
                               ("topics", "topics.png", "Create a topic"),
                               (f"topics/{topic}", "topic.png", "Partitions"),
                               ("cluster/brokers/1", "broker-configs.png", "configs"),
                               ("security", "security.png", "SCRAM users"),
                               ("groups", "groups.png", "Consumer groups")):
        browser.get(console.url + path)
        assert marker in browser.find_element("tag name", "main").text
        shot(browser, file)
    # keyboard: Tab to the first sort button of the groups table and press Enter twice
    buttons = browser.find_elements("css selector", "#groups thead button.sort")
    buttons[0].send_keys(Keys.ENTER)
    buttons[0].send_keys(Keys.ENTER)
    th = browser.find_elements("css selector", "#groups thead th")[0]
    assert th.get_attribute("aria-sort") == "descending"
    # read in one step: the rows refresh themselves every few seconds (the sort survives it),
    # so elements found one by one may be gone by the time their text is asked for
    names = browser.execute_script(
        "return [...document.querySelectorAll('#groups tbody tr')]"
        ".map(r => r.cells[0].innerText.trim())")
    assert names == sorted(names, reverse=True)


def background(driver) -> str:
    return driver.execute_script("return getComputedStyle(document.body).backgroundColor")


def test_the_theme_follows_the_system(console, browser):
    browser.get(console.url + "cluster")
    assert background(browser) == "rgb(255, 255, 255)"
    try:
        browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [
            {"name": "prefers-color-scheme", "value": "dark"}]})
        browser.get(console.url + "offsets-topic")
        assert background(browser) == "rgb(13, 17, 23)"
        shot(browser, "offsets-topic-dark.png")
    finally:
        browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})


def post(url: str, data: dict, auth: str | None = None) -> tuple[int, str]:
    body = "&".join(f"{k}={v}" for k, v in data.items()).encode()
    request = urllib.request.Request(url, data=body, method="POST")
    if auth:
        request.add_header("Authorization", auth)
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_read_only_mode_hides_changes_and_refuses_a_post_made_by_hand(broker, admin, browser,
                                                                       tmp_path):
    topic = make_topic(admin, 1)
    group = name("ro")
    commit(admin, group, {(topic, 0): 0})
    with ConsoleProcess(tmp_path, broker.bootstrap, "--read-only") as ro:
        browser.get(f"{ro.url}groups/{group}")
        assert "read-only" in browser.find_element("css selector", "header").text
        assert not browser.find_elements("id", "reset-form")
        assert not browser.find_elements("css selector", "form[method=post]")
        # a POST made by hand, from the page itself (same origin, the cookie sent)...
        status = browser.execute_async_script("""
            const done = arguments[arguments.length - 1];
            fetch(arguments[0], {method: "POST", body: new URLSearchParams({confirm: arguments[1]})})
              .then(r => done(r.status)).catch(e => done(String(e)));""",
            f"/delete-group/{group}", group)
        assert status == 403
        # ... and from outside a browser
        code, text = post(f"{ro.url}delete-group/{group}", {"confirm": group})
        assert code == 403 and "read-only" in text
        code, _ = post(f"{ro.url}topics", {"name": "created-by-hand"})
        assert code == 403
        shot(browser, "read-only-group.png")
    assert committed(admin, group) == {(topic, 0): 0}  # the group and its offset are still there
    assert "created-by-hand" not in admin.list_topics(timeout=10).topics


def test_a_login_is_required_with_basic_authentication(broker, browser, tmp_path):
    users = tmp_path / "users"
    users.write_text("alice:open-sesame\n")
    users.chmod(0o600)
    with ConsoleProcess(tmp_path, broker.bootstrap, "--basic-auth-file", str(users)) as auth:
        for path in ("groups", "static/console.css", "lag/x"):
            try:
                urllib.request.urlopen(auth.url + path, timeout=10)
                raise AssertionError(f"{path} answered without a login")
            except urllib.error.HTTPError as exc:
                assert exc.code == 401 and exc.headers["WWW-Authenticate"].startswith("Basic")
        browser.get(auth.url + "groups")  # headless Chromium answers the 401 with no page
        assert "Consumer groups" not in browser.find_element("tag name", "body").text
        host = auth.url.split("//", 1)[1]
        browser.get(f"http://alice:wrong@{host}groups")
        assert "Consumer groups" not in browser.find_element("tag name", "body").text
        browser.get(f"http://alice:open-sesame@{host}groups")
        assert browser.find_element("tag name", "h1").text == "Consumer groups"
        good = "Basic " + base64.b64encode(b"alice:open-sesame").decode()
        request = urllib.request.Request(auth.url + "groups", headers={"Authorization": good})
        with urllib.request.urlopen(request, timeout=10) as r:
            assert r.status == 200
        assert "open-sesame" not in auth.stderr()


def focusables(driver) -> list[str]:
    """Each visible link, button and field of the page, tagged with a number (data-k)."""
    return driver.execute_script("""
        const out = [];
        document.querySelectorAll("a[href], button, input:not([type=hidden]), select, textarea")
          .forEach((el, i) => {
            const box = el.getBoundingClientRect();
            if (el.disabled || (box.width === 0 && box.height === 0 && !el.matches(".skip")))
              return;
            el.dataset.k = String(i);
            out.push(String(i));
          });
        return out;""")


def test_keyboard_reaches_every_control_and_every_control_has_a_name(broker, admin, console,
                                                                    browser):
    """Tab first to "Skip to content", then to every link, button and field of the page in
    turn; "/" puts the cursor in the page's filter; "g" then a letter opens a page; and every
    control has an accessible name as Chromium computes it (its label)."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    topic = make_topic(admin, 1)
    group = name("keys")
    commit(admin, group, {(topic, 0): 0})
    for path in ("security", "topics", f"topics/{topic}", f"topics/{topic}/messages",
                 f"groups/{group}", "offsets-topic", "cluster"):
        browser.get(console.url + path)
        wait_for(lambda: browser.execute_script("return document.readyState") == "complete")
        for el in browser.find_elements("css selector", "input:not([type=hidden]), select, "
                                                        "textarea, button"):
            assert el.accessible_name.strip(), (path, el.get_attribute("outerHTML")[:200])
    browser.get(console.url + "security")
    wanted = set(focusables(browser))
    ActionChains(browser).send_keys(Keys.TAB).perform()  # from the page as loaded
    first = browser.switch_to.active_element
    assert first.text == "Skip to content"
    reached = set()
    for _ in range(len(wanted) + 10):
        k = browser.switch_to.active_element.get_attribute("data-k")
        if k is not None:
            reached.add(k)
        ActionChains(browser).send_keys(Keys.TAB).perform()
    assert wanted <= reached, sorted(wanted - reached)
    # "/" from anywhere but a field: the page's search field
    browser.get(console.url + "topics")
    browser.find_element("tag name", "h1").click()
    ActionChains(browser).send_keys("/").perform()
    assert browser.switch_to.active_element.get_attribute("id") == "q"
    # "g" then "t": the topics page; "g" then "k": the cluster
    browser.find_element("tag name", "h1").click()
    ActionChains(browser).send_keys("g").send_keys("t").perform()
    wait_for(lambda: browser.current_url.endswith("/topics"), what="the topics page")
    browser.find_element("tag name", "h1").click()
    ActionChains(browser).send_keys("g").send_keys("k").perform()
    wait_for(lambda: browser.current_url.endswith("/cluster"), what="the cluster page")
