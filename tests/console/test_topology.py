"""The metadata snapshot the console's pages share (topology.MetadataCache), on a fake clock:
one Metadata request serves the pages for MAX_AGE seconds, an older snapshot one more page
while the next is taken in the background, none past STALE_AGE; a change made through the
console drops it, and a topic it does not know is asked about again at once."""

from types import SimpleNamespace as NS

from kio.schema.errors import ErrorCode

from brook.console.topology import MAX_AGE, STALE_AGE, MetadataCache


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def answer(*topics: str):
    return NS(brokers=[NS(node_id=1, host="h", port=9092, rack=None)], controller_id=1,
              topics=[NS(name=t, is_internal=False, error_code=ErrorCode.none,
                         partitions=[NS(partition_index=0, leader_id=1, replica_nodes=(1,),
                                        isr_nodes=(1,))]) for t in topics])


def test_one_request_serves_the_pages_and_an_older_snapshot_is_renewed_in_the_background():
    clock, topics, background = Clock(), ["a"], []
    cache = MetadataCache(lambda: answer(*topics), clock=clock, spawn=background.append)
    assert set(cache.get().topics) == {"a"}
    topics.append("b")
    clock.now += MAX_AGE - 0.1
    assert set(cache.get().topics) == {"a"} and cache.requests == 1 and not background
    clock.now += 0.1
    # too old: this page still gets it, and the next one is asked for in the background, once
    assert set(cache.get().topics) == {"a"} and set(cache.get().topics) == {"a"}
    assert cache.requests == 1 and len(background) == 1
    background.pop()()
    assert set(cache.get().topics) == {"a", "b"} and cache.requests == 2
    assert cache.get().brokers == {1: ("h", 9092, None)}


def test_a_snapshot_past_its_stale_age_is_not_shown_the_page_waits_for_a_new_one():
    clock, topics, background = Clock(), ["a"], []
    cache = MetadataCache(lambda: answer(*topics), clock=clock, spawn=background.append)
    cache.get()
    topics.append("b")
    clock.now += STALE_AGE
    assert set(cache.get().topics) == {"a", "b"} and cache.requests == 2 and not background


def test_a_failed_refresh_in_the_background_leaves_the_snapshot_to_the_next_page():
    clock, background, fail = Clock(), [], []

    def fetch():
        if fail:
            raise OSError("gone")
        return answer("a")
    cache = MetadataCache(fetch, clock=clock, spawn=background.append)
    cache.get()
    clock.now += MAX_AGE
    fail.append(1)
    cache.get()
    background.pop()()  # logged, not raised
    assert set(cache.get().topics) == {"a"}
    assert len(background) == 1  # asked again by the next page


def test_a_change_through_the_console_drops_the_snapshot():
    clock, topics = Clock(), ["a"]
    cache = MetadataCache(lambda: answer(*topics), clock=clock)
    cache.get()
    topics.remove("a")
    cache.invalidate()
    assert cache.get().topics == {} and cache.requests == 2


def test_a_topic_missing_from_the_snapshot_is_asked_about_again():
    clock, topics = Clock(), ["a"]
    cache = MetadataCache(lambda: answer(*topics), clock=clock)
    cache.get()
    topics.append("new")
    assert cache.topic("new").partitions[0].leader == 1 and cache.requests == 2
    assert cache.topic("a") is not None and cache.requests == 2  # known: no request
    assert cache.topic("never") is None and cache.requests == 3
