"""Run brook's benchmarks and rewrite docs/benchmarks.md.

    .venv/bin/python benchmarks/run_all.py                 # every benchmarks/bench_*.py (make bench)
    .venv/bin/python benchmarks/run_all.py bench_storage   # one module (or several)

A benchmark module is any `benchmarks/bench_<name>.py` exposing:

    TITLE = "Storage engine"            # optional: section heading (default: the module name)
    DESCRIPTION = "..."                 # optional: markdown printed above the table
    def run() -> list[...]: ...         # required

`run()` returns a list of results, each a dict or an object with these attributes:

    name        what was measured ("append, MB/s")                       required
    value       brook's figure                                           required
    unit        unit of `value` and `peer_value` ("MB/s", "ms")          required
    peer        what brook is compared with ("os.write", "Tansu")        optional
    peer_value  the peer's figure, measured in the same process run      optional
    ratio       brook relative to the peer; by default value/peer_value,
                or peer_value/value when higher_is_better is False      optional
    higher_is_better                                        default True
    command     how to reproduce this figure alone                       optional
    notes       free text (rounds, parameters)                           optional

Each module's section of docs/benchmarks.md sits between markers, so running one module
rewrites only its section (and the header); sections of other modules are kept as they
were, with the date and machine line of the run that produced them.
"""

from __future__ import annotations

import datetime as _dt
import importlib.util
import os
import platform
import re
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
DOC = REPO / "docs" / "benchmarks.md"

START = "<!-- bench:{name}:start -->"
END = "<!-- bench:{name}:end -->"
_SECTION = re.compile(r"<!-- bench:(?P<name>[\w.-]+):start -->\n.*?<!-- bench:(?P=name):end -->\n?", re.S)


@dataclass
class Result:
    """The normalised form of whatever a module's run() returned."""

    name: str
    value: float
    unit: str
    peer: str | None = None
    peer_value: float | None = None
    ratio: float | None = None
    higher_is_better: bool = True
    command: str | None = None
    notes: str = ""

    @classmethod
    def of(cls, raw: Any) -> "Result":
        get = raw.get if isinstance(raw, dict) else (lambda k, d=None: getattr(raw, k, d))
        r = cls(
            name=str(get("name")),
            value=float(get("value")),
            unit=str(get("unit", "")),
            peer=get("peer"),
            peer_value=None if get("peer_value") is None else float(get("peer_value")),
            ratio=None if get("ratio") is None else float(get("ratio")),
            higher_is_better=bool(get("higher_is_better", True)),
            command=get("command"),
            notes=str(get("notes", "") or ""),
        )
        if r.ratio is None and r.peer_value:
            if r.higher_is_better:
                r.ratio = r.value / r.peer_value
            elif r.value:
                r.ratio = r.peer_value / r.value
        return r


# ---------------------------------------------------------------- machine description


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return ""


def cpu_model() -> str:
    for line in _read("/proc/cpuinfo").splitlines():
        if line.startswith(("model name", "Model", "cpu model")):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def memory() -> str:
    for line in _read("/proc/meminfo").splitlines():
        if line.startswith("MemTotal:"):
            kib = int(line.split()[1])
            return f"{kib / 1024 / 1024:.1f} GiB"
    return "unknown"


def disk(path: Path) -> str:
    """File system and block device holding `path`: cheap, from /proc/mounts and /sys."""
    fs, device = "?", "?"
    best = ""
    for line in _read("/proc/mounts").splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        mnt = parts[1]
        if (str(path) == mnt or str(path).startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
            best, device, fs = mnt, parts[0], parts[2]
    info = f"{fs} on {device}"
    try:
        st = os.stat(path)
        sys_dev = os.path.realpath(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}")
        queue = os.path.join(sys_dev, "queue")
        if not os.path.isdir(queue):  # a partition: the queue is its parent's
            queue = os.path.join(os.path.dirname(sys_dev), "queue")
        rot = _read(os.path.join(queue, "rotational"))
        block = os.path.dirname(queue)
        driver = os.path.basename(os.path.realpath(os.path.join(block, "device", "driver")))
        model = _read(os.path.join(block, "device", "model"))
        details = [d for d in (model, driver if driver != "driver" else "",
                               {"0": "non-rotational", "1": "reports rotational"}.get(rot, "")) if d]
        if details:
            info += f" ({', '.join(details)})"
    except OSError:
        pass
    return info


def machine() -> dict[str, str]:
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count() or 0
    return {
        "CPU": cpu_model(),
        "Cores": f"{os.cpu_count()} logical ({usable} usable by this process)",
        "Memory": memory(),
        "Python": f"{platform.python_implementation()} {platform.python_version()}",
        "Kernel": f"{platform.system()} {platform.release()}",
        "Disk": disk(REPO),
    }


def machine_line(m: dict[str, str]) -> str:
    return f"{m['CPU']}, {m['Cores'].split()[0]} cores, {m['Memory']}, {m['Python']}, {m['Kernel']}"


# ---------------------------------------------------------------- running


def discover() -> list[str]:
    return sorted(p.stem for p in BENCH_DIR.glob("bench_*.py"))


def load(name: str):
    path = BENCH_DIR / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def run_module(name: str, m: dict[str, str]) -> tuple[str, bool]:
    """Run one module; return its markdown section and whether it succeeded."""
    print(f"== {name}", flush=True)
    started = _dt.datetime.now().astimezone()
    t0 = time.perf_counter()
    title, description, results, error = name, "", [], None
    try:
        module = load(name)
        title = getattr(module, "TITLE", name)
        description = getattr(module, "DESCRIPTION", "").strip()
        results = [Result.of(r) for r in module.run()]
    except Exception:  # a broken benchmark must not hide the others
        error = traceback.format_exc()
        print(error, file=sys.stderr, flush=True)
    elapsed = time.perf_counter() - t0
    for r in results:
        ratio = f"  ratio {r.ratio:.2f}" if r.ratio is not None else ""
        peer = f"  {r.peer} {_fmt(r.peer_value)}" if r.peer_value is not None else ""
        print(f"   {r.name:<44} {_fmt(r.value):>12} {r.unit}{peer}{ratio}", flush=True)
    print(f"   ({elapsed:.1f} s)", flush=True)
    return render_section(name, title, description, results, error, started, elapsed, m), error is None


def _fmt(x: float | None) -> str:
    if x is None:
        return "–"
    if x == 0:
        return "0"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.3g}"


def render_section(name, title, description, results, error, started, elapsed, m) -> str:
    out = [START.format(name=name), f"## {title}", ""]
    out.append(f"`{name}` — run {started:%Y-%m-%d %H:%M %Z} in {elapsed:.1f} s on {machine_line(m)}.")
    out.append("")
    if description:
        out += [description, ""]
    if results:
        out.append("| Measurement | brook | Peer | Peer figure | Ratio | Unit |")
        out.append("|---|---:|---|---:|---:|---|")
        for r in results:
            ratio = f"**{r.ratio:.2f}**" if r.ratio is not None else "–"
            out.append(f"| {r.name} | {_fmt(r.value)} | {r.peer or '–'} | {_fmt(r.peer_value)} "
                       f"| {ratio} | {r.unit} |")
        out.append("")
        ratio_kinds = {r.higher_is_better for r in results if r.ratio is not None}
        if ratio_kinds:
            times = ", peer ÷ brook for times" if False in ratio_kinds else ""
            out.append(f"Ratio: brook ÷ peer for throughputs{times}; above 1 means brook is faster.")
            out.append("")
        notes = [(r.name, r.notes) for r in results if r.notes]
        if notes:
            out += ["Notes:", ""]
            out += [f"- *{n}*: {text}" for n, text in notes]
            out.append("")
        commands = list(dict.fromkeys(r.command for r in results if r.command))
        if commands:
            out += ["Reproduce this section alone:", "", "```sh"] + commands + ["```", ""]
    if error:
        out += ["**The benchmark failed:**", "", "```", error.rstrip(), "```", ""]
    out.append(END.format(name=name))
    return "\n".join(out) + "\n"


def render_header(m: dict[str, str], now: _dt.datetime) -> str:
    lines = [
        "# Benchmarks",
        "",
        "Generated by `benchmarks/run_all.py`; do not edit by hand. Reproduce with:",
        "",
        "```sh",
        "make bench                                           # every benchmark",
        ".venv/bin/python benchmarks/run_all.py bench_storage  # one module",
        "```",
        "",
        "Every ratio compares brook with a peer measured in the same process run, on the",
        "same machine, with the same data; absolute figures depend on the machine, ratios",
        "much less.",
        "",
        f"Last run: {now:%Y-%m-%d %H:%M %Z}, on:",
        "",
        "| | |",
        "|---|---|",
    ]
    lines += [f"| {k} | {v} |" for k, v in m.items()]
    lines.append("")
    return "\n".join(lines) + "\n"


def write_doc(header: str, sections: dict[str, str]) -> None:
    """Rewrite the header and the given sections; keep other modules' sections as they were."""
    old = DOC.read_text(encoding="utf-8") if DOC.exists() else ""
    kept = {mo.group("name"): mo.group(0).rstrip("\n") + "\n" for mo in _SECTION.finditer(old)}
    kept.update(sections)
    available = set(discover())
    order = sorted(kept, key=lambda n: (n not in available, n))
    body = "\n".join(kept[n] for n in order if n in available or n in sections)
    DOC.parent.mkdir(parents=True, exist_ok=True)
    tmp = DOC.with_suffix(".md.tmp")
    tmp.write_text(header + "\n" + body, encoding="utf-8")
    os.replace(tmp, DOC)


def main(argv: list[str]) -> int:
    available = discover()
    wanted = [a.removesuffix(".py").rsplit("/", 1)[-1] for a in argv] or available
    unknown = [w for w in wanted if w not in available]
    if unknown:
        print(f"unknown benchmark module(s): {', '.join(unknown)}; have: {', '.join(available)}",
              file=sys.stderr)
        return 2
    sys.path.insert(0, str(BENCH_DIR))
    m = machine()
    print(f"machine: {machine_line(m)}; disk: {m['Disk']}", flush=True)
    sections, ok = {}, True
    for name in wanted:
        sections[name], good = run_module(name, m)
        ok &= good
    write_doc(render_header(m, _dt.datetime.now().astimezone()), sections)
    print(f"wrote {DOC.relative_to(REPO)}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
