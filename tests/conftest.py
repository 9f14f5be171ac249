import os
import re
import subprocess
import sys
import types

from hypothesis import HealthCheck, settings

from tests.support.examples import examples

# The examples of property tests that set no number of their own: a quarter of them under
# BROOK_EXAMPLE_SCALE=0.25 (make test-fast), as for those that do (tests/support/examples.py).
settings.register_profile(
    "ci", max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "dev", max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("ci" if os.environ.get("CI") else "dev")


# --- brokers as real processes, for the integration tests with real Kafka clients -------------
import pytest  # noqa: E402

from tests.support.broker_harness import BROKER_DEFAULTS, BrokerProcess  # noqa: E402
from tests.support.cluster_harness import zookeeper_server  # noqa: E402,F401 (one for the run)


@pytest.fixture(scope="module")
def broker(tmp_path_factory, request):
    """One broker process for the whole test module, on a fresh data directory."""
    name = request.module.__name__.rsplit(".", 1)[-1]
    with BrokerProcess(tmp_path_factory.mktemp(f"broker-{name}"), overrides=BROKER_DEFAULTS) as proc:
        yield proc


class BrokerFactory:
    """Makes brokers of a test's own (each on its own data directory and port) and stops them."""

    def __init__(self, base_dir) -> None:
        self.base_dir = base_dir
        self.brokers: list[BrokerProcess] = []

    def __call__(self, overrides: dict | None = None, start: bool = True,
                 **process) -> BrokerProcess:
        """``process``: more of BrokerProcess's arguments (``open_files_limit=1024``)."""
        settings = dict(BROKER_DEFAULTS)
        settings.update(overrides or {})
        proc = BrokerProcess(self.base_dir / f"broker{len(self.brokers)}", overrides=settings,
                             **process)
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
    if report.when == "teardown" and report.passed and _launched:
        unmarked = _unmarked_launches(item)
        if unmarked:
            report.outcome = "failed"
            report.longrepr = (f"{item.nodeid} started a {' and a '.join(unmarked)} process "
                               f"but is not marked {' and '.join(unmarked)}: teach the tier "
                               "classification in tests/conftest.py what this test uses")
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
    if config.getoption("dist", "no") == "loadgroup" and pytest.version_tuple >= (9, 2):
        # pytest 9.2's node ids drop the group pytest-xdist 3.8 adds to them: every test would
        # run on any worker (a module's broker, and Spark, started on several)
        raise pytest.UsageError("--dist loadgroup needs pytest < 9.2 (pytest-dev/pytest-xdist#1386)"
                                "; pyproject.toml pins it")
    # kafka-python 3 loads its protocol schemas with importlib.resources' legacy functions.
    for message in ("read_text is deprecated", "open_text is deprecated"):
        config.addinivalue_line("filterwarnings", f"ignore:{message}:DeprecationWarning")


# --- Spark: one session for the whole run --------------------------------------------------------


@pytest.fixture(scope="session")
def spark_session():
    """The run's local SparkSession (local[2]): Spark allows one per process, and starting one
    takes seconds. Under xdist every Spark test runs on one worker (the "spark" group)."""
    pytest.importorskip("pyspark")
    from brook.spark import local_session

    session = local_session("brook-tests")
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="module")
def spark(spark_session):
    """The SparkSession, for a module: streaming queries it leaves running are stopped."""
    yield spark_session
    for query in spark_session.streams.active:
        query.stop()


# --- tiers: markers set from what a test reaches ------------------------------------------------
#
# broker     starts a broker process (BrokerProcess, the broker / broker_factory fixtures, a
#            brook CLI subprocess, the demo)
# spark      runs Spark (the session-scoped ``spark`` fixture, or a Spark job in a subprocess)
# timeboxed  runs for a set time, kept in a module constant named *_SECONDS (from an environment
#            variable: SOAK_SECONDS, ATHERIS_SECONDS)
# browser    drives a headless Chromium (tests.support.console_harness.chromium_driver): the web
#            console's tests in a real browser, `make test-console`
#
# `make test-fast` runs the rest. A test is classified by what its code, its fixtures' code and
# the functions and classes of tests/ they use refer to, so a new test needs no marker by hand;
# a test that starts a brook process or Spark without being marked so fails at teardown.

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
TIER_MARKERS = ("broker", "spark", "timeboxed", "browser")
_BROKER_STARTERS = ("BrokerProcess", "BrokerFactory")
_BROKER_MODULES = ("brook.demo", "brook.demo_broker", "brook.demo_spark")
_BROWSER_STARTERS = ("chromium_driver",)
_DURATION = re.compile(r"[A-Z][A-Z0-9_]*_SECONDS$")


class _Reach:
    """What a test's code refers to, followed through the functions and classes of tests/."""

    def __init__(self) -> None:
        self.objects: list[object] = []
        self.durations: set[str] = set()
        self.names: set[str] = set()
        self.strings: set[str] = set()
        self.subprocess = False
        self._seen: set[int] = set()

    def add(self, obj) -> None:
        obj = getattr(obj, "__wrapped__", obj)
        if id(obj) in self._seen:
            return
        self._seen.add(id(obj))
        self.objects.append(obj)
        if getattr(obj, "__name__", None) in _BROKER_STARTERS:
            return  # starts a broker: what it runs inside says nothing more
        if isinstance(obj, type):
            for value in vars(obj).values():
                if isinstance(value, (staticmethod, classmethod)):
                    value = value.__func__
                elif isinstance(value, property):
                    value = value.fget
                if isinstance(value, types.FunctionType):
                    self.add(value)
        elif isinstance(obj, types.FunctionType):
            self._code(obj.__code__, obj.__globals__)

    def _code(self, code: types.CodeType, globals_: dict) -> None:
        for const in code.co_consts:
            if isinstance(const, types.CodeType):
                self._code(const, globals_)
            elif isinstance(const, str):
                self.strings.add(const)
        self.names.update(code.co_names)
        for name in code.co_names:
            if name in ("subprocess", "Popen", "create_subprocess_exec"):
                self.subprocess = True
            if name not in globals_:
                continue
            value = globals_[name]
            if isinstance(value, (int, float)) and _DURATION.match(name) and _assigned_in(
                    globals_, name):
                self.durations.add(name)
            elif isinstance(value, str):
                self.strings.add(value)
            elif _in_tests(value):
                self.add(value)
            elif isinstance(value, types.ModuleType) or callable(value):
                self.objects.append(value)

    def starts_broker(self) -> bool:
        if any(getattr(o, "__name__", None) in _BROKER_STARTERS and _in_tests(o)
               for o in self.objects):
            return True
        if any(_module_name(o).startswith(_BROKER_MODULES) for o in self.objects):
            return True
        return self.subprocess and any(
            s == "brook" or s.startswith("brook.") or os.path.basename(s) == "brook"
            for s in self.strings)

    def runs_spark(self) -> bool:
        if {"local_session", "SparkSession"} & self.names:
            return True
        if any(_module_name(o) == "brook.demo_spark" for o in self.objects):
            return True
        return self.subprocess and any(s.startswith("brook.") and "spark" in s
                                       for s in self.strings)

    def timeboxed(self) -> bool:
        return bool(self.durations)

    def drives_browser(self) -> bool:
        return any(getattr(o, "__name__", None) in _BROWSER_STARTERS and _in_tests(o)
                   for o in self.objects)


def _assigned_in(globals_: dict, name: str) -> bool:
    """Whether a module of tests/ sets ``name`` itself (rather than importing it)."""
    path = globals_.get("__file__") or ""
    if not _under_tests(path):
        return False
    with open(path, encoding="utf-8") as f:
        return re.search(rf"^{name}\s*(:[^=]*)?=", f.read(), re.M) is not None


def _module_name(obj) -> str:
    if isinstance(obj, types.ModuleType):
        return obj.__name__
    return getattr(obj, "__module__", None) or ""


def _in_tests(obj) -> bool:
    if not isinstance(obj, (type, types.FunctionType)):
        return False
    module = sys.modules.get(getattr(obj, "__module__", None) or "")
    return _under_tests(getattr(module, "__file__", None) or "")


def _under_tests(path: str) -> bool:
    """Whether ``path`` is a file of tests/ or of a folder below it."""
    return bool(path) and os.path.abspath(path).startswith(TESTS_DIR + os.sep)


def _fixture_defs(item):
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return []
    return [d for name in item.fixturenames for d in info.name2fixturedefs.get(name, ())]


_reaches: dict[tuple, _Reach] = {}


def _reach_of(objs) -> _Reach:
    """The reach of ``objs``, walked once per collection (a parametrized test's items, and the
    tests of a module with its module's fixtures, ask for the same one again and again)."""
    key = tuple(objs)
    reach = _reaches.get(key)
    if reach is None:
        reach = _reaches[key] = _Reach()
        for obj in objs:
            reach.add(obj)
    return reach


def _classify(item) -> tuple[set[str], bool]:
    """The item's tier markers, and whether it shares a module-wide broker (a fixture of module
    scope or wider that starts one): such tests are kept on one xdist worker."""
    defs = _fixture_defs(item)
    reach = _reach_of([getattr(item, "function", None)] + [d.func for d in defs])
    tiers = set()
    if reach.starts_broker():
        tiers.add("broker")
    if reach.runs_spark():
        tiers.add("spark")
    if reach.timeboxed():
        tiers.add("timeboxed")
    if reach.drives_browser():
        tiers.add("browser")
    shared = any(d.scope in ("module", "package", "session") and _reach_of([d.func]).starts_broker()
                 for d in defs)
    return tiers, shared


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Tier markers and xdist groups; the modules with Spark, then the timeboxed ones, then the
    other broker tests run first (longest work first, so that no worker is left with it at the
    end of a parallel run); each module's tests stay together and in order."""
    classes = {item.nodeid: _classify(item) for item in items}
    on_spark = {item.nodeid for item in items
                if "spark_session" in getattr(item, "fixturenames", ())}
    spark_modules = {getattr(item, "module", None) for item in items if item.nodeid in on_spark}
    xdist = config.pluginmanager.hasplugin("xdist")
    for item in items:
        tiers, shared = classes[item.nodeid]
        for name in sorted(tiers):
            item.add_marker(getattr(pytest.mark, name))
        if not xdist:
            continue
        if item.nodeid in on_spark or (shared and item.module in spark_modules):
            item.add_marker(pytest.mark.xdist_group("spark"))  # one Spark session per run
        elif shared:
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))

    def rank(tiers: set[str]) -> int:
        for i, name in enumerate(("spark", "timeboxed", "browser", "broker")):
            if name in tiers:
                return i
        return 4

    module_rank: dict[object, int] = {}
    first: dict[object, int] = {}
    for i, item in enumerate(items):
        key = getattr(item, "module", None)
        module_rank[key] = min(module_rank.get(key, 4), rank(classes[item.nodeid][0]))
        first.setdefault(key, i)
    order = {id(item): i for i, item in enumerate(items)}
    items.sort(key=lambda it: (module_rank[getattr(it, "module", None)],
                               first[getattr(it, "module", None)], order[id(it)]))


# A brook process or Spark started by a test that is not marked for it fails the test.
_launched: list[set[str]] = []
_real_popen_init = subprocess.Popen.__init__


def _kinds(args) -> set[str]:
    tokens = [args] if isinstance(args, (str, bytes, os.PathLike)) else list(args)
    tokens = [os.fsdecode(t) for t in tokens]
    kinds = set()
    for i, token in enumerate(tokens):
        module = tokens[i - 1] == "-m" if i else False
        if os.path.basename(token) == "brook" or (module and token.split(".")[0] == "brook"):
            kinds.add("broker")
        if "spark-submit" in os.path.basename(token) or (module and "spark" in token):
            kinds.add("spark")
    return kinds


def _popen_init(self, args, *more, **kw):
    kinds = _kinds(args)
    if kinds:
        _launched.append(kinds)
    return _real_popen_init(self, args, *more, **kw)


subprocess.Popen.__init__ = _popen_init


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _launched.clear()
    yield


def _unmarked_launches(item) -> list[str]:
    marked = {m.name for m in item.iter_markers() if m.name in TIER_MARKERS}
    return sorted({k for kinds in _launched for k in kinds} - marked)
