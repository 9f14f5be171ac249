"""`make demo` runs brook.demo; it asserts its own results, so running it is the test."""

from brook import demo


def test_demo_runs_end_to_end(capsys):
    demo.main()
    out = capsys.readouterr().out
    assert "every produced record" not in out  # no assertion message leaked
    assert "after the restart" in out and "records/s consumed" in out
    assert "after recovery" in out and "tombstones left" in out and "clean shutdown" in out
