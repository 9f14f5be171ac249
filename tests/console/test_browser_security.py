"""The Security page's forms and the Cluster page's live rates in a real headless Chromium,
served by a real `brook console` process: an ACL added and deleted, a SCRAM credential set and
deleted, a client quota set and removed, each checked with a real client; and the produce and
fetch rates rising while a producer and a consumer run, and falling to zero, without a reload.
Screenshots go where test_browser.py's go."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.acl_broker import PASSWORDS
from tests.support.broker_harness import BROKER_DEFAULTS, BrokerProcess, free_port
from tests.support.console_harness import ConsoleProcess
from tests.support.group_offsets import unique_name as name

from .test_browser import browser, by_id, shot, wait_for  # noqa: F401 - a fixture
from .test_security import acls_of, quotas_of, scram_login, secured  # noqa: F401 - a fixture


@pytest.fixture(scope="module")
def admin_console(secured, tmp_path_factory):  # noqa: F811
    """A console logged in to the SASL broker as its admin, through --command-config."""
    work = tmp_path_factory.mktemp("console-admin")
    config = work / "admin.properties"
    config.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="admin" password="{PASSWORDS["admin"]}";\n')
    config.chmod(0o600)
    with ConsoleProcess(work, secured.bootstrap, "--command-config", str(config)) as proc:
        yield proc


def fill(driver, values: dict[str, str]) -> None:
    from selenium.webdriver.support.ui import Select

    for field, value in values.items():
        element = by_id(driver, field)
        if element.tag_name == "select":
            Select(element).select_by_visible_text(value)
        else:
            element.clear()
            element.send_keys(value)


def submit(driver, form_id: str) -> str:
    """Press the form's button; the text of the page that follows (its message)."""
    driver.find_element("css selector", f"#{form_id} button[type=submit]").click()
    wait_for(lambda: driver.find_elements("id", "done-message")
             or driver.find_elements("css selector", "main .error, main [role=alert]"),
             what=f"the answer to {form_id}")
    return driver.find_element("tag name", "main").text


def test_an_acl_added_and_deleted_through_the_forms(secured, admin_console,  # noqa: F811
                                                    browser):  # noqa: F811
    topic, principal = name("acl-topic"), "User:" + name("carol")
    browser.get(admin_console.url + "security")
    fill(browser, {"a-resource": "Topic", "a-name": topic, "a-principal": principal,
                   "a-operation": "Write", "a-permission": "Allow"})
    assert PASSWORDS["admin"] not in browser.page_source  # the console's own password
    shot(browser, "security-acl-form.png")
    answer = submit(browser, "acl-add")
    assert "Added the ACL: ALLOW" in answer, answer
    assert acls_of(secured, principal) == {("TOPIC", topic, "LITERAL", "*", "WRITE", "ALLOW")}
    # the filter form, then the row's own Delete button
    browser.get(admin_console.url + "security")
    fill(browser, {"f-resource": "Topic", "f-principal": principal})
    browser.find_element("css selector", "#acl-filter button[type=submit]").click()
    wait_for(lambda: "principal=User" in browser.current_url, what="the filtered page")
    rows = browser.find_elements("css selector", "#acls tbody tr")
    assert [r.find_elements("tag name", "td")[1].text for r in rows] == [topic]
    shot(browser, "security-acls-filtered.png")
    rows[0].find_element("css selector", "button[type=submit]").click()
    wait_for(lambda: browser.find_elements("id", "done-message"), what="the deletion")
    assert "Deleted 1 ACL(s)." in by_id(browser, "done-message").text
    assert topic in by_id(browser, "done-rows").text
    assert acls_of(secured, principal) == set()


def test_a_scram_credential_set_and_deleted_through_the_forms(secured, admin_console,  # noqa: F811
                                                              browser):  # noqa: F811
    user, password = name("dave"), "Br0wser-secret-pw"
    browser.get(admin_console.url + "security")
    fill(browser, {"u-user": user, "u-mechanism": "SCRAM-SHA-256", "u-iterations": "8192",
                   "u-password": password, "u-confirm": password})
    answer = submit(browser, "user-set")
    assert f"User {user}: SCRAM-SHA-256 credential set" in answer, answer
    assert password not in browser.page_source
    assert scram_login(secured, user, password)
    browser.get(admin_console.url + "security")
    row = [r.text for r in browser.find_elements("css selector", "#users tbody tr")
           if r.text.startswith(user)]
    assert row == [f"{user} SCRAM-SHA-256 8192"]
    assert password not in browser.page_source
    assert by_id(browser, "u-password").get_attribute("value") == ""  # never put back
    shot(browser, "security-users.png")
    fill(browser, {"d-user": user})
    answer = submit(browser, "user-delete")
    assert f"User {user}: SCRAM-SHA-256 deleted." in answer, answer
    assert not scram_login(secured, user, password)
    # neither the new password nor the console's own (--command-config) in its log
    assert password not in admin_console.stderr()
    assert PASSWORDS["admin"] not in admin_console.stderr()


def test_a_client_quota_set_and_removed_through_the_forms(secured, admin_console,  # noqa: F811
                                                          browser):  # noqa: F811
    user = name("erin")
    browser.get(admin_console.url + "security")
    fill(browser, {"q-user": user, "q-quota": "producer_byte_rate", "q-value": "1048576"})
    answer = submit(browser, "quota-set")
    assert f"Set producer_byte_rate=1048576 for user {user}." in answer, answer
    assert quotas_of(secured, user) == {(None, "producer_byte_rate"): 1048576.0}
    browser.get(admin_console.url + "security")
    rows = [r for r in browser.find_elements("css selector", "#quotas tbody tr")
            if r.find_elements("tag name", "td")[0].text == user]
    assert len(rows) == 1 and "producer_byte_rate" in rows[0].text
    shot(browser, "security-quotas.png")
    rows[0].find_element("css selector", "button[type=submit]").click()
    wait_for(lambda: browser.find_elements("id", "done-message"), what="the removal")
    assert f"Removed producer_byte_rate from user {user}." in by_id(browser, "done-message").text
    assert quotas_of(secured, user) == {}


@pytest.fixture(scope="module")
def metered(tmp_path_factory):
    port = free_port()
    with BrokerProcess(tmp_path_factory.mktemp("broker-rates"),
                       overrides={**BROKER_DEFAULTS, "metrics.port": port}) as proc:
        proc.metrics_port = port
        yield proc


def rate_cells(driver) -> dict[str, str]:
    """Broker 1's rate cells by class, read in one script (htmx replaces the table)."""
    return driver.execute_script("""
        const out = {};
        for (const td of document.querySelectorAll("#rates tbody tr[data-broker='1'] td"))
            out[td.className.replace("num", "").trim()] = td.textContent.trim();
        return out;""")


def test_the_cluster_pages_rates_rise_while_clients_run_and_fall_to_zero(metered, browser,  # noqa: F811
                                                                         tmp_path):
    topic = name("rated")
    admin = AdminClient({"bootstrap.servers": metered.bootstrap})  # kept: its futures die with it
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
    with ConsoleProcess(tmp_path, metered.bootstrap, "--lag-interval", "1",
                        "--metrics-port", str(metered.metrics_port)) as console:
        browser.get(console.url + "cluster")
        browser.execute_script("window.notReloaded = true")
        wait_for(lambda: "produce-bytes" in rate_cells(browser), what="the first rates")
        producer = Producer({"bootstrap.servers": metered.bootstrap, "linger.ms": 5})
        consumer = Consumer({"bootstrap.servers": metered.bootstrap, "group.id": name("g"),
                             "auto.offset.reset": "earliest"})
        consumer.subscribe([topic])
        seen: list[dict[str, str]] = []
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                for _ in range(100):
                    producer.produce(topic, value=b"v" * 500)
                producer.poll(0)
                consumer.consume(500, 0.1)
                cells = rate_cells(browser)
                seen.append(cells)
                if (cells.get("produce-bytes", "0 B/s") != "0 B/s"
                        and cells.get("fetch-bytes", "0 B/s") != "0 B/s"):
                    break
                time.sleep(0.1)
            producer.flush(10)
            busy = seen[-1]
            assert busy.get("produce-bytes", "0 B/s") != "0 B/s", seen[-5:]
            assert float(busy["produce-messages"].rstrip("/s").replace(",", "")) > 0
            shot(browser, "cluster-rates.png")
        finally:
            consumer.close()
        # nothing runs now: the next refreshes bring the rates down to zero
        wait_for(lambda: rate_cells(browser).get("produce-bytes") == "0 B/s", timeout=20,
                 what="the produce rate back to 0")
        assert browser.execute_script("return window.notReloaded") is True  # live, no reload
