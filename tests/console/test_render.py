"""How the console shows keys, values and times, and the message browser's filters."""

import pytest

from brook.console.render import (hex_dump, matches, parse_time, show_bytes, size_text,
                                  timestamp_text, topic_name_problem)


def test_auto_pretty_prints_json_objects_and_arrays():
    shown = show_bytes(b'{"id":7,"items":["a","b"]}')
    assert shown["kind"] == "json"
    assert shown["text"] == '{\n  "id": 7,\n  "items": [\n    "a",\n    "b"\n  ]\n}'


def test_auto_shows_text_as_text_and_binary_as_hex():
    assert show_bytes(b"hello 42") == {"kind": "text", "text": "hello 42", "size": 8, "cut": False}
    assert show_bytes(b"42")["kind"] == "text"  # a bare number is text unless JSON is asked for
    assert show_bytes(b"42", "json")["kind"] == "json"
    binary = show_bytes(bytes([0, 1, 2, 255]))
    assert binary["kind"] == "hex"
    assert binary["text"].startswith("00000000  00 01 02 ff")


def test_formats_asked_for():
    assert show_bytes(b'{"a":1}', "text")["text"] == '{"a":1}'
    assert show_bytes(b'{"a":1}', "hex")["kind"] == "hex"
    assert show_bytes(b"\xffabc", "text")["text"] == "\\xffabc"
    assert show_bytes(b"not json", "json")["kind"] == "text"
    assert show_bytes(None)["kind"] == "null"


def test_large_values_are_cut_where_shown():
    shown = show_bytes(b"x" * 100_000)
    assert shown["cut"] and shown["size"] == 100_000 and len(shown["text"]) == 65536


def test_hex_dump_lines():
    dump = hex_dump(bytes(range(20)))
    lines = dump.splitlines()
    assert lines[0] == "00000000  00 01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f  " + "." * 16
    assert lines[1].startswith("00000010  10 11 12 13") and lines[1].endswith("....")


def test_filters_of_the_message_browser():
    headers = [("trace", b"abc-123")]
    assert matches(b"user-1", b"v", headers, "user", "")
    assert not matches(None, b"v", headers, "user", "")
    assert matches(b"k", b"an order", headers, "", "order")
    assert matches(b"k", b"v", headers, "", "abc-1")
    assert not matches(b"k", b"v", headers, "", "zzz")
    assert matches(None, None, [], "", "")


def test_times():
    assert parse_time("1700000000000") == 1_700_000_000_000
    assert parse_time("2024-05-01T12:00") == 1_714_564_800_000
    assert parse_time("2024-05-01T12:00:00+02:00") == 1_714_557_600_000
    with pytest.raises(ValueError, match="is not a time"):
        parse_time("yesterday")
    assert timestamp_text(1_714_564_800_123) == "2024-05-01 12:00:00.123Z"
    assert timestamp_text(-1) == "-"
    assert size_text(512) == "512 B" and size_text(2048) == "2.0 KiB" and size_text(None) == "-"


@pytest.mark.parametrize("name,ok", [("orders", True), ("a.b_c-1", True), ("", False),
                                     ("..", False), ("a b", False), ("a/b", False),
                                     ("x" * 250, False), ("ü", False)])
def test_topic_names(name, ok):
    assert (topic_name_problem(name) is None) == ok
