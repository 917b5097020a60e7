"""Two test "hosts" on one machine, each with its own network namespace, address and Docker
engine, reached as a docker context: what multi-host tests bring stacks up on.

::

    root namespace: bridge xpyd-br-SFX 10.231.N.1/24
        ├── veth ── netns xpyd-hosta-SFX: eth0 10.231.N.2/24, lo; dockerd (context xpyd-hosta-SFX)
        └── veth ── netns xpyd-hostb-SFX: eth0 10.231.N.3/24, lo; dockerd (context xpyd-hostb-SFX)

SFX is per run, N a /24 no interface of this machine uses. Each dockerd runs in its namespace
through ``nsenter --net=`` (``ip netns exec`` remounts /sys, and dockerd then fails with
"Devices cgroup isn't mounted"), with its own data root (under /var/lib: the disk Docker's
images live on), exec root, socket, pid file and its own containerd (started here: dockerd
would otherwise share a system containerd where one runs), and no bridge or iptables rules of
its own: containers use ``network_mode: host`` and so live at their host's address.

Every run first writes a record (``/var/lib/xpyd-test-hosts/SFX/record.json``) naming all it
will create; ``remove_hosts`` removes all of that, whatever exists, and ``remove_leftovers``
does it for the records of runs whose process is gone (a crashed or killed earlier run).
``python -m tests.integration.hosts cleanup`` runs it by hand.

Removal ends a host's processes before it deletes anything: dockerd (its pid file), then the
containerd started for it (its own pid file), then whatever is still in its namespace (shims,
containers). A process is ended only when it is proven to be that host's (``host_pids``: in
its namespace, or started with its pid file, containerd config or exec root), never by name;
the namespace and the folders go only once none is left, else the record stays for a retry.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import secrets
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass
from pathlib import Path

from generator.docker import DockerEndpoint, check_reachable
from generator.errors import DockerError

__all__ = [
    "STATE_ROOT",
    "NetnsHost",
    "NetnsHosts",
    "host_pids",
    "missing_tools",
    "remove_hosts",
    "remove_leftovers",
    "running_hosts",
]

STATE_ROOT = Path("/var/lib/xpyd-test-hosts")  # data roots: the disk /var/lib/docker is on
_EXEC_ROOT = Path("/run/xpyd-th")  # short: containerd's socket path lies below it
_SUBNETS = ipaddress.IPv4Network("10.231.0.0/16")  # private, and rarely used by anything else
_START_TIMEOUT_S = 60.0
_STOP_TIMEOUT_S = 30.0
_TOOLS = ("ip", "nsenter", "setsid", "containerd", "dockerd", "docker", "iptables", "umount")
_NETNS_DIR = Path("/var/run/netns")  # where `ip netns add` binds a namespace by its name


@dataclass(frozen=True)
class NetnsHost:
    name: str  # "hosta": what specs and messages call it
    netns: str
    address: str
    context: str
    veth: str  # root end; the other end is eth0 inside the namespace
    state_dir: str  # data root, socket, pid file, log, daemon.json
    exec_root: str

    @property
    def endpoint(self) -> DockerEndpoint:
        return DockerEndpoint(host=self.name, context=self.context)

    @property
    def socket(self) -> Path:
        return Path(self.state_dir) / "docker.sock"

    @property
    def containerd_socket(self) -> Path:
        return Path(self.exec_root) / "containerd.sock"

    @property
    def pidfile(self) -> Path:
        return Path(self.state_dir) / "dockerd.pid"

    @property
    def containerd_pidfile(self) -> Path:
        return Path(self.state_dir) / "containerd.pid"

    @property
    def containerd_config(self) -> Path:
        return Path(self.state_dir) / "containerd.toml"

    @property
    def data_root(self) -> Path:
        return Path(self.state_dir) / "data"

    @property
    def log(self) -> Path:
        return Path(self.state_dir) / "dockerd.log"

    def in_netns(self, *command: str) -> list[str]:
        """``command`` run in this host's network namespace (fine for anything but dockerd)."""
        return ["ip", "netns", "exec", self.netns, *command]


@dataclass(frozen=True)
class NetnsHosts:
    suffix: str
    owner_pid: int  # the process that made them; its death makes them leftovers
    bridge: str
    bridge_address: str  # the root namespace's address on the hosts' network
    prefix_len: int
    hosts: tuple[NetnsHost, ...]

    @property
    def record(self) -> Path:
        return STATE_ROOT / self.suffix / "record.json"

    def host(self, name: str) -> NetnsHost:
        return next(host for host in self.hosts if host.name == name)

    @property
    def a(self) -> NetnsHost:
        return self.hosts[0]

    @property
    def b(self) -> NetnsHost:
        return self.hosts[1]


def missing_tools() -> list[str]:
    """What this machine lacks to make test hosts (root, and the tools in ``_TOOLS``)."""
    from shutil import which

    missing = [tool for tool in _TOOLS if which(tool) is None]
    return missing if os.geteuid() == 0 else ["root", *missing]


@contextmanager
def running_hosts(names: tuple[str, ...] = ("hosta", "hostb")) -> Iterator[NetnsHosts]:
    """Hosts up and answering; everything removed after, even when the body fails."""
    remove_leftovers()
    hosts = _describe(names)
    _write_record(hosts)
    try:
        _create(hosts)
        yield hosts
    finally:
        remove_hosts(hosts)


def _describe(names: tuple[str, ...]) -> NetnsHosts:
    suffix = secrets.token_hex(2)
    network = _free_subnet()
    addresses = [str(address) for address in network.hosts()]
    hosts = tuple(
        NetnsHost(
            name=name,
            netns=f"xpyd-{name}-{suffix}",
            address=addresses[index + 1],
            context=f"xpyd-{name}-{suffix}",
            veth=f"xpv{index}-{suffix}",
            state_dir=str(STATE_ROOT / suffix / name),
            exec_root=str(_EXEC_ROOT / f"{suffix}{index}"),
        )
        for index, name in enumerate(names)
    )
    return NetnsHosts(
        suffix=suffix,
        owner_pid=os.getpid(),
        bridge=f"xpyd-br-{suffix}",
        bridge_address=addresses[0],
        prefix_len=network.prefixlen,
        hosts=hosts,
    )


def _free_subnet() -> ipaddress.IPv4Network:
    """A /24 of 10.231.0.0/16 that no address or route of this machine overlaps (wide
    routes such as a VPN's 10.0.0.0/8 aside: the bridge's own /24 is more specific)."""
    shown = _run(["ip", "-4", "-o", "addr", "show"]) + _run(["ip", "-4", "route", "show"])
    used = [
        ipaddress.ip_network(found, strict=False)
        for found in re.findall(r"\b\d+\.\d+\.\d+\.\d+(?:/\d+)?\b", shown)
    ]
    for network in _SUBNETS.subnets(new_prefix=24):
        if not any(network.overlaps(other) for other in used if other.prefixlen >= 16):
            return network
    raise RuntimeError(f"every /24 of {_SUBNETS} is in use on this machine")


def _write_record(hosts: NetnsHosts) -> None:
    hosts.record.parent.mkdir(parents=True, exist_ok=True)
    hosts.record.write_text(json.dumps(asdict(hosts), indent=2), encoding="utf-8")


def _read_record(path: Path) -> NetnsHosts | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        data["hosts"] = tuple(NetnsHost(**host) for host in data["hosts"])
        return NetnsHosts(**data)
    except (OSError, ValueError, TypeError, KeyError):
        return None


# --- creation -------------------------------------------------------------------------------


def _create(hosts: NetnsHosts) -> None:
    started = time.monotonic()
    _create_bridge(hosts)
    for host in hosts.hosts:
        _create_netns(hosts, host)
        _start_containerd(host)
    for host in hosts.hosts:
        _wait_for_socket(host.containerd_socket, deadline=time.monotonic() + _START_TIMEOUT_S)
        _start_dockerd(host)
    deadline = time.monotonic() + _START_TIMEOUT_S
    for host in hosts.hosts:
        description = f"xpyd test host {host.name} ({host.address})"
        _run(
            [
                "docker",
                "context",
                "create",
                host.context,
                "--description",
                description,
                "--docker",
                f"host=unix://{host.socket}",
            ]
        )
        _wait_answering(host, deadline=deadline)
    print(f"[hosts] {len(hosts.hosts)} hosts up in {time.monotonic() - started:.1f} s", flush=True)


def _create_bridge(hosts: NetnsHosts) -> None:
    _run(["ip", "link", "add", hosts.bridge, "type", "bridge"])
    _run(["ip", "addr", "add", f"{hosts.bridge_address}/{hosts.prefix_len}", "dev", hosts.bridge])
    _run(["ip", "link", "set", hosts.bridge, "up"])
    # Docker makes bridged traffic pass iptables' FORWARD chain (br_netfilter), whose policy it
    # sets to DROP: without this rule hosta and hostb could not reach each other.
    _run(["iptables", "-I", "FORWARD", "1", *_forward_rule(hosts)])


def _forward_rule(hosts: NetnsHosts) -> list[str]:
    return ["-i", hosts.bridge, "-o", hosts.bridge, "-j", "ACCEPT"]


def _create_netns(hosts: NetnsHosts, host: NetnsHost) -> None:
    peer = f"{host.veth}p"
    _run(["ip", "netns", "add", host.netns])
    _run(["ip", "link", "add", host.veth, "type", "veth", "peer", "name", peer])
    _run(["ip", "link", "set", host.veth, "master", hosts.bridge, "up"])
    _run(["ip", "link", "set", peer, "netns", host.netns])
    inside = ["ip", "-n", host.netns]
    _run([*inside, "link", "set", peer, "name", "eth0"])
    _run([*inside, "addr", "add", f"{host.address}/{hosts.prefix_len}", "dev", "eth0"])
    _run([*inside, "link", "set", "eth0", "up"])
    _run([*inside, "link", "set", "lo", "up"])


def _start_containerd(host: NetnsHost) -> None:
    """Its own containerd, in its namespace. dockerd would otherwise use a system containerd
    where one runs (Docker CE, GitHub's runners): shared with the main engine, and starting
    every container's shim, so its host network too, in the root namespace."""
    Path(host.state_dir).mkdir(parents=True, exist_ok=True)
    Path(host.exec_root).mkdir(parents=True, exist_ok=True)
    config = host.containerd_config
    config.write_text(
        "version = 2\n"
        f'root = "{host.data_root}/containerd"\n'
        f'state = "{host.exec_root}/containerd"\n'
        'disabled_plugins = ["io.containerd.grpc.v1.cri"]\n'
        f'[grpc]\n  address = "{host.containerd_socket}"\n',
        encoding="utf-8",
    )
    # containerd writes no pid file: the shell writes its own pid, then becomes containerd.
    record_pid = ["sh", "-c", 'echo $$ > "$0" && exec "$@"', str(host.containerd_pidfile)]
    command = [*_in_netns_detached(host), *record_pid, "containerd", "--config", str(config)]
    with (Path(host.state_dir) / "containerd.log").open("ab") as log:
        subprocess.run(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, check=True)


def _in_netns_detached(host: NetnsHost) -> list[str]:
    """nsenter, not `ip netns exec` (module docstring). setsid --fork: the daemon is no child
    of this process (init reaps it) and in its own session (a Ctrl+C of the test run does not
    reach it; teardown stops it)."""
    return ["nsenter", f"--net=/var/run/netns/{host.netns}", "setsid", "--fork"]


def _wait_for_socket(path: Path, *, deadline: float) -> None:
    while not path.is_socket():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{path} did not appear in {_START_TIMEOUT_S:.0f} s")
        time.sleep(0.1)


def _start_dockerd(host: NetnsHost) -> None:
    state = Path(host.state_dir)
    config = state / "daemon.json"  # its own: a host's /etc/docker/daemon.json may clash
    config.write_text("{}\n", encoding="utf-8")
    options = {
        "--config-file": str(config),
        "--containerd": str(host.containerd_socket),
        "--data-root": str(host.data_root),
        "--exec-root": host.exec_root,
        "--host": f"unix://{host.socket}",
        "--pidfile": str(host.pidfile),
        "--bridge": "none",  # containers use host networking: the namespace's own
        "--iptables": "false",  # the root namespace's rules are the main engine's
        "--ip-masq": "false",
        "--shutdown-timeout": "5",
    }
    command = [*_in_netns_detached(host), "dockerd"]
    command += [f"{name}={value}" for name, value in options.items()]
    with host.log.open("ab") as log:
        subprocess.run(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, check=True)


def _wait_answering(host: NetnsHost, *, deadline: float) -> None:
    while True:
        try:
            check_reachable(host.endpoint, timeout_s=5)
            return
        except DockerError as error:
            if time.monotonic() > deadline:
                tail = host.log.read_text(errors="replace").splitlines()[-15:]
                raise RuntimeError(
                    f"dockerd of {host.name} did not answer in {_START_TIMEOUT_S:.0f} s: "
                    f"{error.message}\n" + "\n".join(tail)
                ) from error
        time.sleep(0.5)


# --- removal --------------------------------------------------------------------------------


def remove_hosts(hosts: NetnsHosts) -> None:
    """Remove everything the record names, whatever exists of it; raises at the end if
    something could not be removed (after trying all of it). A host whose processes outlive
    SIGKILL keeps its namespace and folders, and the record stays: a later run retries."""
    started = time.monotonic()
    problems: list[str] = []
    survivors = False
    for host in hosts.hosts:
        stopped = _stop_processes(host)
        survivors = survivors or bool(stopped)
        problems += stopped or _remove_host(host)
    problems += _attempt(["iptables", "-D", "FORWARD", *_forward_rule(hosts)], "iptables rule")
    problems += _attempt(["ip", "link", "delete", hosts.bridge], "bridge")
    if not survivors:
        problems += _remove_tree(STATE_ROOT / hosts.suffix)
    for parent in (STATE_ROOT, _EXEC_ROOT):
        with suppress(OSError):  # not empty: another run's hosts are still there
            parent.rmdir()
    print(f"[hosts] removed in {time.monotonic() - started:.1f} s", flush=True)
    if problems:
        raise RuntimeError("test hosts not fully removed:\n" + "\n".join(problems))


def _remove_host(host: NetnsHost) -> list[str]:
    """What is left of a host once none of its processes runs."""
    problems = _attempt(["docker", "context", "rm", "--force", host.context], "context")
    problems += _attempt(["ip", "netns", "delete", host.netns], "netns")
    problems += _attempt(["ip", "link", "delete", host.veth], "veth")
    problems += _unmount_below(Path(host.state_dir), Path(host.exec_root))
    problems += _remove_tree(Path(host.exec_root))
    return problems


def _stop_processes(host: NetnsHost) -> list[str]:
    """dockerd first (SIGTERM: it stops its containers; then SIGKILL), then its containerd,
    then anything else of the host (shims, containers); [] once none of them is left."""
    for pidfile in (host.pidfile, host.containerd_pidfile):
        pid = _pid_in(pidfile)
        if pid is not None:
            _end({pid}, host)  # only if it is the host's (a stale pid file names another)
    _end(host_pids(host), host)
    left = host_pids(host)
    if not left:
        return []
    return [f"{host.name}: processes {sorted(left)} did not exit, even after SIGKILL"]


def host_pids(host: NetnsHost) -> set[int]:
    """The processes proven to be ``host``'s: in its network namespace (``ip netns pids``),
    or started with its dockerd pid file, its containerd config or an argument below its exec
    root (containerd's shims; these find a host's daemons after its namespace is gone)."""
    namespace = _namespace_id(host.netns)
    pids = (int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit())
    return {
        pid
        for pid in pids
        if pid > 1
        and pid != os.getpid()
        and (
            (namespace is not None and _namespace_id_of(pid) == namespace)
            or _started_for(_argv(pid), host)
        )
    }


def _namespace_id(netns: str) -> tuple[int, int] | None:
    try:
        found = (_NETNS_DIR / netns).stat()
    except OSError:
        return None
    return found.st_dev, found.st_ino


def _namespace_id_of(pid: int) -> tuple[int, int] | None:
    try:
        found = os.stat(f"/proc/{pid}/ns/net")
    except OSError:
        return None
    return found.st_dev, found.st_ino


def _argv(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return raw.decode(errors="replace").split("\0")


def _started_for(argv: list[str], host: NetnsHost) -> bool:
    if f"--pidfile={host.pidfile}" in argv:  # dockerd, as _start_dockerd starts it
        return True
    if argv[1:3] == ["--config", str(host.containerd_config)]:  # containerd, as started here
        return True
    return any(argument.startswith(f"{host.exec_root}/") for argument in argv)


def _end(pids: set[int], host: NetnsHost) -> None:
    """SIGTERM, up to ``_STOP_TIMEOUT_S`` to exit, then SIGKILL. Through pidfds opened before
    the last ownership check: a pid reused meanwhile can never be signalled."""
    handles = _open_owned(pids, host)
    try:
        for sig, wait_s in ((signal.SIGTERM, _STOP_TIMEOUT_S), (signal.SIGKILL, 5.0)):
            for handle in handles.values():
                with suppress(ProcessLookupError):
                    signal.pidfd_send_signal(handle, sig)
            _wait_exited(handles, wait_s)
            if not handles:
                return
    finally:
        for handle in handles.values():
            os.close(handle)


def _open_owned(pids: set[int], host: NetnsHost) -> dict[int, int]:
    handles: dict[int, int] = {}
    for pid in pids:
        with suppress(ProcessLookupError):
            handles[pid] = os.pidfd_open(pid)
    owned = host_pids(host)  # after opening: a handle now names that very process
    for pid in list(handles):
        if pid not in owned:
            os.close(handles.pop(pid))
    return handles


def _wait_exited(handles: dict[int, int], wait_s: float) -> None:
    """Drops (and closes) the handles of processes that exit within ``wait_s``."""
    deadline = time.monotonic() + wait_s
    while handles and (left_s := deadline - time.monotonic()) > 0:
        poller = select.poll()
        for handle in handles.values():
            poller.register(handle, select.POLLIN)  # readable once the process has exited
        for handle, _ in poller.poll(left_s * 1000):
            pid = next(pid for pid, fd in handles.items() if fd == handle)
            os.close(handles.pop(pid))


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"  # a zombie has exited; its parent (maybe us) has yet to reap it


def _pid_in(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _unmount_below(*roots: Path) -> list[str]:
    """Mounts a killed dockerd left under its roots (overlays, netns files), deepest first:
    deleting the tree through a live mount would reach into what is mounted there."""
    problems = []
    mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    points = [line.split()[4] for line in mounts]
    below = [p for p in points if any(p.startswith(f"{root}/") for root in roots)]
    for point in sorted(set(below), key=len, reverse=True):
        problems += _attempt(["umount", "--lazy", point], f"mount {point}")
    return problems


def _remove_tree(path: Path) -> list[str]:
    if not path.exists():
        return []
    done = subprocess.run(
        ["rm", "-rf", "--one-file-system", str(path)], capture_output=True, text=True, check=False
    )
    return [f"{path}: {done.stderr.strip()}"] if done.returncode != 0 else []


def remove_leftovers() -> None:
    """Remove the hosts of earlier runs whose process is gone (crashed, killed)."""
    if not STATE_ROOT.is_dir():
        return
    for record in sorted(STATE_ROOT.glob("*/record.json")):
        hosts = _read_record(record)
        if hosts is not None and not _alive(hosts.owner_pid):
            print(f"[hosts] removing leftovers of an earlier run ({hosts.suffix})", flush=True)
            remove_hosts(hosts)


# --- commands -------------------------------------------------------------------------------


def _run(command: list[str]) -> str:
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed: {done.stderr.strip()}")
    return done.stdout


def _attempt(command: list[str], what: str) -> list[str]:
    """Run a removal step; absent things are fine, any other failure is reported."""
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    gone = ("Cannot find", "does not exist", "No such file", "not found", "not mounted", "Bad rule")
    if done.returncode == 0 or any(marker in done.stderr for marker in gone):
        return []
    return [f"{what}: {' '.join(command)}: {done.stderr.strip()}"]


if __name__ == "__main__":
    if sys.argv[1:] != ["cleanup"]:
        sys.exit("usage: python -m tests.integration.hosts cleanup")
    remove_leftovers()
