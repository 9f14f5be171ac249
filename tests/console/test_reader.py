"""Paging through a partition (reader.browse) over a made-up log: oldest and newest first,
filters, gaps where records were compacted away, and the scan limit."""

from brook.console.reader import RawRecord, browse


def log(offsets):
    records = {o: RawRecord(o, 1000 + o, "CreateTime", b"k%d" % o, b"v%d" % o, [])
               for o in offsets}
    reads = []

    def read_range(start, stop, n):
        reads.append((start, stop, n))
        return [records[o] for o in sorted(records) if start <= o < stop][:n]
    return read_range, reads


def offsets(page):
    return [r.offset for r in page.records]


def test_oldest_first_from_an_offset():
    read, _ = log(range(0, 50))
    page = browse(read, 0, 50, 10, False, 5, lambda r: True, 1000)
    assert offsets(page) == [10, 11, 12, 13, 14]
    assert page.newer == 15 and page.older == 5


def test_newest_first_from_the_end_and_from_an_offset():
    read, _ = log(range(0, 50))
    page = browse(read, 0, 50, 50, True, 5, lambda r: True, 1000)
    assert offsets(page) == [49, 48, 47, 46, 45]
    assert page.older == 44 and page.newer is None
    page = browse(read, 0, 50, 20, True, 3, lambda r: True, 1000)
    assert offsets(page) == [20, 19, 18]


def test_filters_read_on_until_the_page_is_full():
    read, _ = log(range(0, 1000))
    page = browse(read, 0, 1000, 1000, True, 3, lambda r: r.offset % 100 == 0, 5000)
    assert offsets(page) == [900, 800, 700]
    assert not page.scan_limited


def test_the_scan_stops_at_its_limit():
    read, _ = log(range(0, 1000))
    page = browse(read, 0, 1000, 0, False, 10, lambda r: False, 300)
    assert page.records == [] and page.scan_limited and page.scanned == 300


def test_gaps_in_the_log_are_skipped():
    read, _ = log([0, 1, 2, 500, 501])
    assert offsets(browse(read, 0, 502, 502, True, 4, lambda r: True, 5000)) == [501, 500, 2, 1]
    assert offsets(browse(read, 0, 502, 0, False, 4, lambda r: True, 5000)) == [0, 1, 2, 500]


def test_positions_outside_the_log_are_clamped():
    read, _ = log(range(10, 20))
    assert offsets(browse(read, 10, 20, 0, False, 2, lambda r: True, 100)) == [10, 11]
    assert offsets(browse(read, 10, 20, 999, True, 2, lambda r: True, 100)) == [19, 18]
    assert browse(read, 10, 10, 10, True, 2, lambda r: True, 100).records == []
