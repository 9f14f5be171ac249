"""The metadata snapshot the console's pages share (topology.MetadataCache), on a fake clock:
one Metadata request serves the pages for MAX_AGE seconds, a change made through the console
drops it, and a topic it does not know is asked about again at once."""

from types import SimpleNamespace as NS

from kio.schema.errors import ErrorCode

from brook.console.topology import MAX_AGE, MetadataCache


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


def test_one_request_serves_the_pages_until_it_is_too_old():
    clock, topics = Clock(), ["a"]
    cache = MetadataCache(lambda: answer(*topics), clock=clock)
    assert set(cache.get().topics) == {"a"}
    topics.append("b")
    clock.now += MAX_AGE - 0.1
    assert set(cache.get().topics) == {"a"} and cache.requests == 1
    clock.now += 0.1
    assert set(cache.get().topics) == {"a", "b"} and cache.requests == 2
    assert cache.get().brokers == {1: ("h", 9092, None)}


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
