"""The installed `brook` executable (and `python -m brook`): version, and errors as one line on
stderr with a non-zero exit code and no traceback unless --debug."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import urllib.request
import sys
import time
from pathlib import Path

import pytest

from tests.support.broker_harness import free_port, port_accepts
from brook import __version__
from brook.cli.broker import broker_overrides

BROOK = str(Path(sys.executable).with_name("brook"))


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "BROOK_BOOTSTRAP_SERVER"}
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env)


def test_version_from_the_executable_and_the_module():
    for cmd in ([BROOK], [sys.executable, "-m", "brook"]):
        result = run(*cmd, "--version")
        assert result.returncode == 0
        assert result.stdout == f"brook {__version__}\n"


def test_an_unreachable_broker_fails_fast_in_one_line():
    port = free_port()
    started = time.monotonic()
    result = run(BROOK, "groups", "list", "--bootstrap-server", f"127.0.0.1:{port}")
    assert time.monotonic() - started < 10
    assert result.returncode == 1
    assert result.stderr == (f"brook: cannot connect to a broker at 127.0.0.1:{port}: "
                             "Connection refused\n")
    assert result.stdout == ""


def test_debug_shows_the_traceback():
    port = free_port()
    result = run(BROOK, "--debug", "topics", "list", "-b", f"127.0.0.1:{port}")
    assert result.returncode == 1
    assert result.stderr.startswith("Traceback (most recent call last):")
    assert result.stderr.splitlines()[-1] == (
        f"brook: cannot connect to a broker at 127.0.0.1:{port}: Connection refused")


@pytest.mark.parametrize("args, message", [
    (["groups", "describe"],
     "brook: Missing argument 'GROUP'. (see 'brook groups describe --help')"),
    (["topics", "frobnicate"], "brook: No such command 'frobnicate'."),
    (["groups", "list", "-b", "no-port"], "brook: invalid --bootstrap-server 'no-port': "
                                          "expected host:port"),
    (["consume", "t", "--max-messages", "0"], "brook: Invalid value for '--max-messages'"),
    (["broker", "--metrics-port", "70000"], "brook: Invalid value for '--metrics-port'"),
    (["broker", "--metrics-port", "0"], "brook: Invalid value for '--metrics-port'"),
    (["broker", "--log-level", "LOUD"], "brook: Invalid value for --log-level: 'LOUD' is not"),
])
def test_invalid_arguments_are_one_line_with_exit_code_2(args, message):
    result = run(BROOK, *args)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(message), result.stderr
    assert "Traceback" not in result.stderr


def test_no_arguments_shows_the_help():
    result = run(BROOK)
    assert result.returncode == 2
    shown = result.stdout + result.stderr
    assert "Usage: brook" in shown and "groups" in shown and "dump-log" in shown


def test_metrics_port_is_the_metrics_port_key():
    assert broker_overrides(["log.dirs=/x"], 9404) == {"log.dirs": "/x", "metrics.port": "9404"}
    assert broker_overrides(["metrics.port=1"], None) == {"metrics.port": "1"}
    assert broker_overrides([], None) == {}


def test_broker_serves_metrics_on_the_metrics_port(tmp_path):
    port, metrics_port = free_port(), free_port()
    proc = subprocess.Popen([BROOK, "broker", "--metrics-port", str(metrics_port),
                             "-o", f"listeners=PLAINTEXT://127.0.0.1:{port}",
                             "-o", f"log.dirs={tmp_path / 'logs'}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 30
        while not port_accepts(port) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read().decode()
            time.sleep(0.05)
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as r:
            assert b"brook_" in r.read()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0


def test_a_listener_on_port_0_gets_a_port_advertised_and_written_to_the_listeners_file(tmp_path):
    from confluent_kafka.admin import AdminClient

    listeners = tmp_path / "listeners"
    proc = subprocess.Popen([BROOK, "broker", "--listeners-file", str(listeners),
                             "-o", "listeners=PLAINTEXT://127.0.0.1:0",
                             "-o", "advertised.listeners=PLAINTEXT://localhost:0",
                             "-o", f"log.dirs={tmp_path / 'logs'}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            cwd=tmp_path)
    try:
        deadline = time.monotonic() + 30
        while not listeners.exists():
            assert proc.poll() is None, proc.stderr.read()
            assert time.monotonic() < deadline, "no listeners file"
            time.sleep(0.05)
        text = listeners.read_text()
        port = int(text.rsplit(":", 1)[1])
        assert port > 0 and text == f"PLAINTEXT://127.0.0.1:{port}\n"
        assert port_accepts(port)
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
        brokers = admin.list_topics(timeout=10).brokers
        assert [(b.host, b.port) for b in brokers.values()] == [("localhost", port)]
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    assert f"listening on PLAINTEXT://127.0.0.1:{port}," in proc.stderr.read()


COMMANDS = [[], ["topics"], ["groups"], ["offsets"], ["topics", "list"], ["topics", "describe"],
            ["topics", "create"], ["topics", "delete"], ["topics", "alter-config"],
            ["topics", "delete-records"], ["groups", "list"], ["groups", "describe"],
            ["groups", "reset-offsets"], ["groups", "delete"], ["groups", "delete-offsets"],
            ["offsets", "export"], ["offsets", "import"], ["produce"], ["consume"], ["dump-log"],
            ["broker"], ["cluster"]]


def help_text(*args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "BROOK_BOOTSTRAP_SERVER"}
    env["COLUMNS"] = "200"
    result = subprocess.run([BROOK, *args, "--help"], capture_output=True, text=True, env=env,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_help_texts():
    texts = {" ".join(c): help_text(*c) for c in COMMANDS}
    for name, text in texts.items():
        assert "<bool>" not in text, name  # flags take no value
    assert "--version  " in texts[""] and "--if-not-exists  " in texts["topics create"]
    root = texts[""].splitlines()
    dump_line = next(ln for ln in root if "dump-log " in ln)
    assert "(JSON lines with --output json)." in dump_line  # no line break inside
    assert "list, describe, reset-offsets, delete, delete-offsets." in texts["groups"]
    assert "[default: \\t, a tab]" in texts["consume"]
    create = texts["topics create"]
    assert "(default: the broker's)" in create and "[default: -1]" not in create
    assert "YYYY-MM-DDTHH:mm:SS.sss[zone]" in texts["groups reset-offsets"]  # not eaten as markup
    assert "/consumers/GROUP/offsets/TOPIC/PARTITION" in texts["offsets import"]
    for name in ("topics list", "groups delete-offsets", "offsets import", "produce", "consume"):
        assert "--bootstrap-server" in texts[name] and "--timeout" in texts[name], name


def test_bootstrap_and_timeout_before_or_after_the_command(broker):
    env = {k: v for k, v in os.environ.items() if k != "BROOK_BOOTSTRAP_SERVER"}
    dead = f"127.0.0.1:{free_port()}"

    def brook(*args: str, **extra_env: str) -> subprocess.CompletedProcess:
        return subprocess.run([BROOK, *args], capture_output=True, text=True, timeout=60,
                              env={**env, **extra_env})

    for args in (["-b", broker.bootstrap, "topics", "list"],
                 ["--bootstrap-server", broker.bootstrap, "--timeout", "5", "groups", "list"],
                 ["topics", "list", "--timeout", "5", "-b", broker.bootstrap],
                 ["-b", dead, "topics", "list", "-b", broker.bootstrap],  # after the command wins
                 ["-b", broker.bootstrap, "topics", "list"]):
        result = brook(*args, BROOK_BOOTSTRAP_SERVER=dead)  # either -b beats the environment
        assert result.returncode == 0, (args, result.stderr)
    result = brook("topics", "list", BROOK_BOOTSTRAP_SERVER=broker.bootstrap)
    assert result.returncode == 0, result.stderr
    result = brook("-b", broker.bootstrap, "topics", "list", "-b", dead)
    assert result.returncode == 1 and f"cannot connect to a broker at {dead}" in result.stderr
    result = brook("topics", "list", "--timeout", "0", "-b", broker.bootstrap)
    assert result.returncode == 2 and "Invalid value for '--timeout'" in result.stderr


def test_timeout_after_the_command_applies():
    silent = socket.socket()  # accepts connections (the backlog) and never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    try:
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        started = time.monotonic()
        result = run(BROOK, "topics", "list", "-b", address, "--timeout", "1")
        assert time.monotonic() - started < 8
        assert result.returncode == 1
        assert result.stderr.startswith(f"brook: cannot list topics: no answer from {address} "
                                        "within 1 s"), result.stderr
    finally:
        silent.close()


# What the `brook` command and a broker it runs import (every integration test starts brokers,
# and a start once took 3.5-6 s of imports: pandas and pyarrow through the transactions
# command's client, hypothesis, trio and pytest through kio's strategies).
_HEAVY_IMPORTS = """
import sys
sys.argv = ["brook", "--version"]
from brook.cli import main
try:
    main()
except SystemExit:
    pass
import brook.broker.server
print(" ".join(sorted(m for m in ("pandas", "pyarrow", "hypothesis", "pytest", "trio", "pyspark",
                                  "confluent_kafka") if sys.modules.get(m))))
"""


def test_the_command_and_its_broker_import_no_data_frames_and_no_test_libraries():
    result = run(sys.executable, "-c", _HEAVY_IMPORTS)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1:] == [""], result.stdout
