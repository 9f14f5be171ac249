import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "dev", max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


# --- brokers as real processes, for the integration tests with real Kafka clients -------------
import pytest  # noqa: E402

from broker_harness import BrokerProcess  # noqa: E402

# Overrides every test broker gets: a 4-partition default for auto-created topics.
BROKER_DEFAULTS = {"num.partitions": 4}


@pytest.fixture(scope="module")
def broker(tmp_path_factory, request):
    """One broker process for the whole test module, on a fresh data directory."""
    name = request.module.__name__.rsplit(".", 1)[-1]
    proc = BrokerProcess(tmp_path_factory.mktemp(f"broker-{name}"), overrides=BROKER_DEFAULTS)
    proc.start()
    try:
        yield proc
    finally:
        proc.close()


class BrokerFactory:
    """Makes brokers of a test's own (each on its own data directory and port) and stops them."""

    def __init__(self, base_dir) -> None:
        self.base_dir = base_dir
        self.brokers: list[BrokerProcess] = []

    def __call__(self, overrides: dict | None = None, start: bool = True) -> BrokerProcess:
        settings = dict(BROKER_DEFAULTS)
        settings.update(overrides or {})
        proc = BrokerProcess(self.base_dir / f"broker{len(self.brokers)}", overrides=settings)
        self.brokers.append(proc)
        if start:
            proc.start()
        return proc

    def close(self) -> None:
        for proc in self.brokers:
            proc.close()


@pytest.fixture
def broker_factory(tmp_path):
    """For tests that restart or kill a broker: ``broker = broker_factory({"key": value})``."""
    factory = BrokerFactory(tmp_path)
    try:
        yield factory
    finally:
        factory.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failing integration test shows the tail of its brokers' stderr."""
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed:
        return
    funcargs = getattr(item, "funcargs", {})
    procs = []
    for value in funcargs.values():
        if isinstance(value, BrokerProcess):
            procs.append(value)
        elif isinstance(value, BrokerFactory):
            procs.extend(value.brokers)
    for proc in procs:
        report.sections.append((f"broker {proc.bootstrap} stderr", proc.stderr_tail()))


def pytest_configure(config):
    # kafka-python 3 loads its protocol schemas with importlib.resources' legacy functions.
    for message in ("read_text is deprecated", "open_text is deprecated"):
        config.addinivalue_line("filterwarnings", f"ignore:{message}:DeprecationWarning")
