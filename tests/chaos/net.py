"""A private network for the nemesis: one Linux network namespace per node (ZooKeeper and each
broker), each joined by a veth pair to a bridge in the root namespace. The test process (the
"control" clients) reaches every node through the bridge's own address and is never cut off,
as Jepsen's control node is not.

Faults are applied inside the nodes' namespaces only, never in the root namespace's firewall:

- a partition drops, with nftables, every packet between two nodes (in both namespaces);
- loss drops a share of a node's packets at random (nftables ``numgen``);
- delay holds a node's outgoing packets (``tc netem``; where the kernel has no netem, a token
  bucket at a low rate slows the link instead, which delays by queueing).

Names carry a tag of the run's own so that parallel runs do not collide; everything is removed
by ``down()``, which tolerates a half-built network.
"""

from __future__ import annotations

import ipaddress
import os
import random
import shutil
import subprocess

BRIDGE_HOST = 1  # the bridge's address in the root namespace: the control clients


def missing_reason() -> str | None:
    """Why namespaces and packet filters cannot be used here, or None."""
    if os.geteuid() != 0:
        return "the nemesis needs root (network namespaces, nftables, tmpfs mounts)"
    for tool, package in (("ip", "iproute2"), ("nft", "nftables"), ("tc", "iproute2")):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (`make tools` installs Debian's {package})"
    probe = f"brookprobe{os.getpid() % 100000}"
    done = subprocess.run(["ip", "netns", "add", probe], capture_output=True)
    if done.returncode != 0:
        return f"`ip netns add` fails here: {done.stderr.decode().strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def run(*args: str, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run(list(args), capture_output=True, text=True, input=input)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed: {done.stderr.strip()}")
    return done


def _free_subnet(rng: random.Random) -> ipaddress.IPv4Network:
    """A /24 in 10.0.0.0/8 that no address or route of the root namespace touches."""
    used = run("ip", "-4", "route", "show", "table", "all").stdout + run("ip", "-4", "addr").stdout
    taken = []
    for word in used.split():
        try:
            taken.append(ipaddress.ip_network(word, strict=False))
        except ValueError:
            continue
    for _ in range(200):
        net = ipaddress.ip_network(f"10.{rng.randrange(100, 250)}.{rng.randrange(1, 255)}.0/24")
        if not any(net.overlaps(t) for t in taken if t.prefixlen > 0):
            return net
    raise RuntimeError("no free 10.x.y.0/24 for the nemesis network")


class Network:
    def __init__(self, nodes: list[str]) -> None:
        rng = random.Random()  # names and addresses only: not part of the run's seed
        self.tag = f"{os.getpid() % 10000:04d}{rng.randrange(36 ** 2):03x}"[-6:]
        self.nodes = list(nodes)
        self.subnet = _free_subnet(rng)
        self.bridge = f"bkbr{self.tag}"
        hosts = list(self.subnet.hosts())
        self.control = str(hosts[BRIDGE_HOST - 1])
        self.addresses = {name: str(hosts[10 + i]) for i, name in enumerate(nodes)}
        self.namespaces = {name: f"brook-{self.tag}-{name}" for name in nodes}
        self.veths = {name: f"bk{self.tag}v{i}" for i, name in enumerate(nodes)}
        # what is in force per node: the nodes it cannot reach, its loss, its delay
        self.blocked: dict[str, set[str]] = {n: set() for n in nodes}
        self.loss: dict[str, float] = {n: 0.0 for n in nodes}
        self.delay: dict[str, int] = {n: 0 for n in nodes}
        self.netem = False

    # -- building and removing -----------------------------------------------------------
    def up(self) -> "Network":
        try:
            run("ip", "link", "add", self.bridge, "type", "bridge")
            run("ip", "addr", "add", f"{self.control}/{self.subnet.prefixlen}", "dev", self.bridge)
            run("ip", "link", "set", self.bridge, "up")
            for name in self.nodes:
                ns, veth = self.namespaces[name], self.veths[name]
                run("ip", "netns", "add", ns)
                run("ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
                run("ip", "link", "set", veth, "master", self.bridge, "up")
                run("ip", "-n", ns, "addr", "add",
                    f"{self.addresses[name]}/{self.subnet.prefixlen}", "dev", "eth0")
                run("ip", "-n", ns, "link", "set", "eth0", "up")
                run("ip", "-n", ns, "link", "set", "lo", "up")
                self._apply_filter(name)
            first = self.namespaces[self.nodes[0]]
            self.netem = run("ip", "netns", "exec", first, "tc", "qdisc", "add", "dev", "lo",
                             "root", "netem", "delay", "1ms", check=False).returncode == 0
            if self.netem:
                run("ip", "netns", "exec", first, "tc", "qdisc", "del", "dev", "lo", "root",
                    check=False)
        except BaseException:
            self.down()
            raise
        return self

    def down(self) -> None:
        for name in self.nodes:
            run("ip", "netns", "del", self.namespaces[name], check=False)  # takes its veth along
            run("ip", "link", "del", self.veths[name], check=False)
        run("ip", "link", "del", self.bridge, check=False)

    def exists(self) -> bool:
        listed = run("ip", "netns", "list", check=False).stdout
        return any(ns in listed for ns in self.namespaces.values())

    # -- running things inside ----------------------------------------------------------
    def prefix(self, name: str) -> list[str]:
        """The command prefix that runs a program in node ``name``'s namespace."""
        return ["ip", "netns", "exec", self.namespaces[name]]

    # -- faults --------------------------------------------------------------------------
    def partition(self, blocked: dict[str, set[str]]) -> None:
        """Cut every pair named (both ways); pairs not named can talk."""
        full = {n: set() for n in self.nodes}
        for a, others in blocked.items():
            for b in others:
                if a != b:
                    full[a].add(b)
                    full[b].add(a)
        for name in self.nodes:
            if full[name] != self.blocked[name]:
                self.blocked[name] = full[name]
                self._apply_filter(name)

    def set_loss(self, name: str, share: float) -> None:
        self.loss[name] = share
        self._apply_filter(name)

    def set_delay(self, name: str, ms: int) -> None:
        """Delay node ``name``'s outgoing packets by about ``ms`` (0: none)."""
        ns = self.namespaces[name]
        run("ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", "eth0", "root", check=False)
        self.delay[name] = ms
        if not ms:
            return
        if self.netem:
            run("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "eth0", "root", "netem",
                "delay", f"{ms}ms", f"{max(1, ms // 4)}ms")
        else:
            # No netem in this kernel: a slow link (about one 1500-byte packet per `ms`),
            # whose queue delays packets by up to a few times `ms`.
            rate_kbit = max(16, 12_000 // ms)
            run("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "eth0", "root", "tbf",
                "rate", f"{rate_kbit}kbit", "burst", "3000", "latency", f"{ms * 4}ms")

    def heal(self) -> None:
        self.partition({})
        for name in self.nodes:
            if self.loss[name]:
                self.set_loss(name, 0.0)
            if self.delay[name]:
                self.set_delay(name, 0)

    def _apply_filter(self, name: str) -> None:
        """Replace node ``name``'s nftables table, in one transaction, with its drop rules."""
        rules = []
        ips = sorted(self.addresses[b] for b in self.blocked[name])
        if ips:
            rules.append(("input", f"ip saddr {{ {', '.join(ips)} }} drop"))
            rules.append(("output", f"ip daddr {{ {', '.join(ips)} }} drop"))
        if self.loss[name]:
            percent = min(100, max(1, round(self.loss[name] * 100)))
            rule = "drop" if percent == 100 else f"numgen random mod 100 < {percent} drop"
            rules.append(("input", f"iifname \"eth0\" {rule}"))
        chains = []
        for hook in ("input", "output"):
            body = "".join(f"    {r}\n" for h, r in rules if h == hook)
            chains.append(f"  chain {hook} {{\n    type filter hook {hook} priority 0; "
                          f"policy accept;\n{body}  }}\n")
        script = ("table inet brookchaos\ndelete table inet brookchaos\n"
                  "table inet brookchaos {\n" + "".join(chains) + "}\n")
        run("ip", "netns", "exec", self.namespaces[name], "nft", "-f", "-", input=script)
