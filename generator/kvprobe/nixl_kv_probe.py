"""A real NIXL (UCX) transfer between two processes: GiB/s each way, a data check, and the
UCX transport that actually carried the bytes.

Runs inside the engine image, where only torch, nixl and the standard library exist (it never
imports the xpyd package). One process per role:

    serve --listen HOST:PORT --device cpu|cuda [--size-mib N] [--timeout-s S]
    run   --peer HOST:PORT   --device cpu|cuda [--size-mib N] [--iters N] [--timeout-s S]
          [--block-kib N] [--threads N] [--ucx-log FILE]

``cuda`` is cuda:0, the first GPU of CUDA_VISIBLE_DEVICES. ``serve`` fills its buffer with a
known pattern, registers it with a NIXL agent (UCX backend) and hands its agent metadata and
buffer descriptor to one peer over the TCP rendezvous port; it stays until that peer says done
(or the timeout passes) and then prints one JSON line. ``run`` writes its whole buffer to the
peer and reads it back (one warm-up plus ``--iters`` timed transfers each way), checks the
pattern after both directions, and prints ONE JSON line on stdout. With ``--block-kib N`` each
transfer is a list of N-KiB descriptors, as vLLM's NIXL connector moves KV (one per layer,
K or V, and block: 32 KiB for Llama-3.1-8B's bf16 blocks of 16 tokens), instead of one; with
``--threads N`` the initiator's UCX backend has N worker threads (vLLM's NIXL connector asks
for 4: its ``num_threads``), instead of NIXL's default.
Exit status: 0 when the measurement completed with correct data (slow or not: judging is the
caller's job), 1 on any failure ("ok": false and a one-line "error"), 2 on a usage error. Every
wait ends by ``--timeout-s``.

How the transport is found: ``run`` measures in a child process started with
``UCX_PROTO_INFO=used`` and ``UCX_LOG_FILE`` pointing at a temporary file. When that child
exits, UCX writes one table per protocol it really used, with a use count, e.g.::

    | i intra-node cfg#1                                              |
    | remote memory write by ucp_put*(multi) from host memory to host |
    | Count | Range  | Description |              Config              |
    |     6 | 0..inf | zero-copy   | cma/memory                       |

The parent parses the tables of remote-memory writes (``ucp_put``) and reads (``ucp_get``) on
endpoints to the peer (not ``self``, NIXL's loopback), takes the transport names from the
Config column (``cma/memory`` -> ``cma``, ``cuda_ipc/cuda`` -> ``cuda_ipc``, ``tcp/eth0`` ->
``tcp``, ``rc_mlx5/mlx5_0:1`` -> ``rc_mlx5``) weighted by use count and lane share, and reports
the heaviest as "transport" and all as "transports". Tables from ``UCX_PROTO_INFO=y`` (no Count
column) parse too. Nothing found: "unknown", never a guess. The transport alone is no verdict:
on GPUs that cannot map each other's memory UCX has been seen to report cuda_ipc at TCP speed,
so the caller judges by GiB/s as well.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import math
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

GIB = 1 << 30
MIB = 1 << 20
DEFAULT_SIZE_MIB = {"cuda": 1024, "cpu": 256}
SERVE_SEED = 0x5E7E  # the pattern the serving side holds, and restores before the reads
RUN_SEED = 0x1217  # the pattern the initiator writes
_PATTERN_STEP = 0x9E3779B1  # odd, so neighbouring 8-byte words never repeat
_CHECK_CHUNK = 16 << 20  # int64 words per comparison: bounds the extra memory to 128 MiB
_EXIT_GRACE_S = 30.0  # the measuring child's own teardown (UCX prints its tables then)
_CONNECT_RETRY_S = 0.2


class ProbeError(Exception):
    """An expected failure, reported as the one-line "error" of the JSON report."""


# --- UCX protocol tables (pure: unit-tested with captured text) ---------------------------

_LOG_PREFIX = re.compile(r"^\[[0-9.]+\]\s+\[[^\]]*\]\s*")
_ENDPOINT_KIND = re.compile(r"(\S+)\s+cfg#\d+$")
_RMA_OPS = (("remote memory write by ucp_put", "write"), ("remote memory read by ucp_get", "read"))
_LOCAL_MEMORY = re.compile(r"\b(?:from|into) (cuda/\S+|host memory)")
_LANE = re.compile(r"(?:(\d+)% on )?(?<![\w/])([a-z][a-z0-9_]*)/[^\s,]+")
_SIZE = re.compile(r"^(\d+)([KMGT]?)$")


@dataclass(frozen=True)
class ProtoRow:
    range_text: str
    description: str
    config: str
    count: int | None  # only in UCX_PROTO_INFO=used tables


@dataclass
class ProtoTable:
    header: list[str] = field(default_factory=list)
    rows: list[ProtoRow] = field(default_factory=list)

    @property
    def endpoint_kind(self) -> str:
        """``self`` (NIXL's loopback), ``intra-node`` or ``inter-node``."""
        found = _ENDPOINT_KIND.search(self.header[0]) if self.header else None
        return found.group(1) if found else ""

    @property
    def rma_op(self) -> str | None:
        operation = " ".join(self.header[1:])
        return next((op for prefix, op in _RMA_OPS if operation.startswith(prefix)), None)

    @property
    def local_memory(self) -> str:
        """Where this side's buffer lives: "cuda" or "host" (``... from cuda/GPU0 to ...``)."""
        found = _LOCAL_MEMORY.search(" ".join(self.header[1:]))
        return "cuda" if found and found.group(1).startswith("cuda") else "host"


@dataclass(frozen=True)
class TransportReport:
    transport: str
    transports: list[str]
    by_op: dict[str, list[str]]
    evidence: list[str]


def parse_proto_tables(text: str) -> list[ProtoTable]:
    """Every protocol table in UCX log text, in either header layout (one row of two cells, as
    UCX 1.20 prints, or two rows of one cell, as 1.23 does)."""
    tables: list[ProtoTable] = []
    current: ProtoTable | None = None
    for line in text.splitlines():
        body = _LOG_PREFIX.sub("", line, count=1).strip()
        if len(body) < 2 or body[0] != "|" or body[-1] != "|":
            continue  # borders, other log lines
        cells = [cell.strip() for cell in body[1:-1].split("|")]
        if len(cells) <= 2:
            if current is None or current.rows:
                current = ProtoTable()
                tables.append(current)
            current.header.extend(cells)
        elif current is not None and cells[-1] != "Config":
            count = cells[0] if len(cells) == 4 else ""
            range_text, description, config = cells[-3:]
            number = int(count) if count.isdigit() else None
            current.rows.append(ProtoRow(range_text, description, config, number))
    return tables


def lane_shares(config: str) -> list[tuple[str, float]]:
    """Transport names of one Config cell with their share of the bytes, e.g.
    ``50% on rc_mlx5/mlx5_0:1 and 50% on rc_mlx5/mlx5_1:1`` -> rc_mlx5 twice at 0.5."""
    lanes = [(int(pct) if pct else None, name) for pct, name in _LANE.findall(config)]
    unsplit = [name for pct, name in lanes if pct is None]
    rest = max(0.0, 100.0 - sum(pct for pct, _ in lanes if pct is not None))
    shares = [(name, pct / 100.0) for pct, name in lanes if pct is not None]
    return shares + [(name, rest / 100.0 / len(unsplit)) for name in unsplit]


def _size(text: str) -> float:
    if text == "inf":
        return math.inf
    found = _SIZE.match(text)
    if found is None:
        raise ValueError(text)
    return float(int(found.group(1)) << (10 * "_KMGT".index(found.group(2) or "_")))


def rows_for_size(rows: Sequence[ProtoRow], nbytes: int) -> list[ProtoRow]:
    """The rows whose message-size range holds ``nbytes`` (else the last, largest range)."""
    chosen = []
    for row in rows:
        low, _, high = row.range_text.partition("..")
        try:
            if _size(low) <= nbytes <= _size(high or low):
                chosen.append(row)
        except ValueError:
            continue
    return chosen or list(rows[-1:])


def summarize_transports(
    text: str,
    nbytes: int,
    operations: tuple[str, ...] = ("write", "read"),
    local_memory: str | None = None,
) -> TransportReport:
    """Which transports moved the RMA ``operations`` to the peer, heaviest first. A long-lived
    process's UCX_PROTO_INFO=y log also lists protocols for buffers that are not the KV (e.g.
    host-memory control traffic beside GPU KV): ``local_memory`` ("cuda" or "host") keeps
    only the tables for the KV's own memory."""
    tables = [
        t
        for t in parse_proto_tables(text)
        if t.rma_op in operations
        and t.endpoint_kind != "self"
        and local_memory in (None, t.local_memory)
    ]
    used = [t for t in tables if any(row.count is not None for row in t.rows)]
    weights: dict[str, float] = {}
    by_op: dict[str, list[str]] = {"write": [], "read": []}
    evidence = []
    for table in used or tables:
        op = table.rma_op or ""
        for row in table.rows if used else rows_for_size(table.rows, nbytes):
            times = f" x{row.count}" if row.count is not None else ""
            evidence.append(f"{op} {table.endpoint_kind}: {row.description} {row.config}{times}")
            for name, share in lane_shares(row.config):
                weights[name] = weights.get(name, 0.0) + share * (row.count or 1)
                if name not in by_op[op]:
                    by_op[op].append(name)
    ranked = sorted(weights, key=lambda name: -weights[name])
    return TransportReport(ranked[0] if ranked else "unknown", ranked, by_op, evidence)


# --- rendezvous: newline-delimited JSON over one TCP connection ---------------------------


def remaining_s(deadline: float, what: str) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise ProbeError(f"timed out {what}")
    return left


def split_address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise ProbeError(f"{text!r} is not HOST:PORT")
    return host.strip("[]") or "0.0.0.0", int(port)


class Channel:
    """Every read is bounded by the session's deadline."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock = sock
        self._reader = sock.makefile("rb")
        self._deadline = deadline

    def send(self, message: dict[str, Any]) -> None:
        self._sock.settimeout(remaining_s(self._deadline, "sending to the peer"))
        self._sock.sendall(json.dumps(message).encode() + b"\n")

    def receive(self, what: str) -> dict[str, Any]:
        self._sock.settimeout(remaining_s(self._deadline, what))
        try:
            line = self._reader.readline()
        except TimeoutError as exc:
            raise ProbeError(f"timed out {what}") from exc
        if not line:
            raise ProbeError(f"the peer closed the connection while {what}")
        message: dict[str, Any] = json.loads(line)
        if message.get("op") == "abort":
            raise ProbeError(f"the peer gave up: {message.get('error')}")
        return message

    def close(self) -> None:
        self._reader.close()
        self._sock.close()


def connect(address: str, deadline: float) -> Channel:
    """Retries until the peer listens: the two sides start in either order."""
    host, port = split_address(address)
    while True:
        try:
            sock = socket.create_connection((host, port), timeout=_CONNECT_RETRY_S * 5)
            return Channel(sock, deadline)
        except OSError as exc:
            if time.monotonic() + _CONNECT_RETRY_S >= deadline:
                raise ProbeError(f"peer {address} unreachable: {exc}") from exc
            time.sleep(_CONNECT_RETRY_S)


def accept(address: str, deadline: float) -> Channel:
    host, port = split_address(address)
    with socket.create_server((host, port)) as listener:
        bound = "{}:{}".format(*listener.getsockname()[:2])
        print(f"nixl_kv_probe: waiting for the peer on {bound}", file=sys.stderr, flush=True)
        listener.settimeout(remaining_s(deadline, "waiting for the peer to connect"))
        try:
            sock, _ = listener.accept()
        except TimeoutError as exc:
            raise ProbeError(f"no peer connected to {address}") from exc
    return Channel(sock, deadline)


# --- buffers and the NIXL agent (torch and nixl are imported only here) --------------------


def describe_device(device: str) -> dict[str, Any]:
    """What the caller needs to see which GPU and which PID namespace a side really had."""
    info: dict[str, Any] = {"kind": device, "host": socket.gethostname()}
    try:
        info["pid_namespace"] = os.readlink("/proc/self/ns/pid")
    except OSError:
        info["pid_namespace"] = None
    if device == "cuda":
        import torch

        props: Any = torch.cuda.get_device_properties(0)
        info |= {"name": props.name, "uuid": str(getattr(props, "uuid", "")) or None}
        info["pci_bus_id"] = _pci_bus_id(props)
        info["cuda_visible_devices"] = os.environ.get("CUDA_VISIBLE_DEVICES")
    return info


def _pci_bus_id(props: Any) -> str | None:
    """As /proc/driver/nvidia/gpus names it, e.g. 0000:19:00.0 (older torch lacks the ids)."""
    ids = [getattr(props, key, None) for key in ("pci_domain_id", "pci_bus_id", "pci_device_id")]
    domain, bus, device = (part if isinstance(part, int) else -1 for part in ids)
    return f"{domain:04x}:{bus:02x}:{device:02x}.0" if min(domain, bus, device) >= 0 else None


class Endpoint:
    """One side: a patterned buffer registered with a NIXL agent on the UCX backend."""

    def __init__(self, device: str, nbytes: int, seed: int, role: str, threads: int = 0) -> None:
        import torch

        if device == "cuda" and not torch.cuda.is_available():
            raise ProbeError("--device cuda, but torch sees no CUDA device")
        from nixl._api import nixl_agent, nixl_agent_config

        self.torch: Any = torch
        self.device = device
        # The buffer (and so the CUDA context) exists before the agent, as in vLLM.
        where = torch.device("cuda", 0) if device == "cuda" else torch.device("cpu")
        self.buffer: Any = torch.empty(nbytes, dtype=torch.uint8, device=where)
        self.fill(seed)
        name = f"kvprobe-{role}-{uuid.uuid4().hex[:8]}"
        config = nixl_agent_config(backends=["UCX"], num_threads=threads)
        self.agent: Any = nixl_agent(name, config)
        self.registration: Any = self.agent.register_memory(self.buffer)

    def _words(self, nbytes: int) -> Any:
        return self.buffer[:nbytes].view(self.torch.int64)

    def fill(self, seed: int) -> None:
        words = self._words(self.buffer.numel())
        self.torch.arange(words.numel(), out=words)
        words.mul_(_PATTERN_STEP).add_(seed)
        self._sync()

    def holds(self, seed: int, nbytes: int) -> bool:
        words = self._words(nbytes)
        for start in range(0, words.numel(), _CHECK_CHUNK):
            end = min(start + _CHECK_CHUNK, words.numel())
            expected = self.torch.arange(start, end, dtype=self.torch.int64, device=words.device)
            if not self.torch.equal(words[start:end], expected.mul_(_PATTERN_STEP).add_(seed)):
                return False
        return True

    def _sync(self) -> None:
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    @property
    def mem_type(self) -> str:
        return "VRAM" if self.device == "cuda" else "DRAM"

    def offer(self) -> dict[str, Any]:
        """What the peer needs to reach this buffer."""
        return {
            "agent_metadata": base64.b64encode(self.agent.get_agent_metadata()).decode(),
            "addr": self.buffer.data_ptr(),
            "bytes": self.buffer.numel(),
            "dev_id": max(self.buffer.get_device(), 0),
            "mem_type": self.mem_type,
        }

    def close(self) -> None:
        self.agent.deregister_memory(self.registration)


def timed_transfers(
    side: Endpoint,
    op: str,
    peer: dict[str, Any],
    *,
    nbytes: int,
    block: int,
    iters: int,
    deadline: float,
) -> list[float]:
    """Seconds per transfer of the whole buffer (in descriptors of ``block`` bytes), after one
    untimed warm-up."""
    agent = side.agent
    mine = blocks(side.buffer.data_ptr(), nbytes, block, max(side.buffer.get_device(), 0))
    local = agent.get_xfer_descs(mine, side.mem_type)
    theirs = blocks(peer["addr"], nbytes, block, peer["dev_id"])
    remote = agent.get_xfer_descs(theirs, peer["mem_type"])
    handle = agent.initialize_xfer(op, local, remote, peer["name"])
    try:
        seconds = [_transfer_s(agent, handle, op, deadline) for _ in range(iters + 1)][1:]
    except Exception:
        with contextlib.suppress(Exception):  # a transfer still in flight: report the first error
            agent.release_xfer_handle(handle)
        raise
    agent.release_xfer_handle(handle)
    return seconds


def blocks(addr: int, nbytes: int, block: int, dev_id: int) -> list[tuple[int, int, int]]:
    """(address, length, device) of each descriptor covering ``nbytes`` from ``addr``."""
    return [(addr + at, min(block, nbytes - at), dev_id) for at in range(0, nbytes, block)]


def _transfer_s(agent: Any, handle: Any, op: str, deadline: float) -> float:
    start = time.perf_counter()
    state = agent.transfer(handle)
    while state == "PROC":
        if time.monotonic() > deadline:
            raise ProbeError(f"NIXL {op} did not finish before --timeout-s")
        state = agent.check_xfer_state(handle)
    if state != "DONE":
        raise ProbeError(f"NIXL {op} failed (transfer state {state})")
    return time.perf_counter() - start


def rates(prefix: str, nbytes: int, seconds: list[float]) -> dict[str, Any]:
    gib_s = [nbytes / GIB / s for s in seconds]
    return {
        f"{prefix}_gib_s_best": round(max(gib_s), 3),
        f"{prefix}_gib_s_median": round(statistics.median(gib_s), 3),
        f"{prefix}_s": [round(s, 6) for s in seconds],
    }


# --- roles ---------------------------------------------------------------------------------


def serve(args: argparse.Namespace, report: dict[str, Any]) -> None:
    deadline = time.monotonic() + args.timeout_s
    report["bytes"] = size_bytes(args)
    side = Endpoint(args.device, size_bytes(args), SERVE_SEED, "serve")
    report["device"] = describe_device(args.device)
    channel = accept(args.listen, deadline)
    try:
        _hold(side, channel, report)
    except Exception as exc:
        _abort(channel, exc)
        raise
    finally:
        channel.close()
        side.close()


def _hold(side: Endpoint, channel: Channel, report: dict[str, Any]) -> None:
    """Offer the buffer, check what the peer wrote when asked, stay until it says done."""
    hello = channel.receive("waiting for the peer's hello")
    report["peer_device"] = hello.get("device")
    if hello["bytes"] > report["bytes"]:
        raise ProbeError(
            f"the peer asks for {hello['bytes']} bytes, this side has {report['bytes']}"
        )
    channel.send({"op": "ready", "seed": SERVE_SEED, "device": report["device"], **side.offer()})
    while (message := channel.receive("waiting for the peer's transfers"))["op"] != "done":
        report["correct"] = side.holds(message["seed"], hello["bytes"])
        side.fill(SERVE_SEED)  # the peer reads next, and checks this pattern
        channel.send({"op": "checked", "correct": report["correct"]})
    channel.send({"op": "bye"})
    report["ok"] = True


def measure(args: argparse.Namespace, report: dict[str, Any]) -> None:
    """The initiator's work; runs in the child that ``run`` starts (see the module docstring)."""
    deadline = time.monotonic() + args.timeout_s
    report |= {"bytes": size_bytes(args), "iters": args.iters}
    report |= {"block_kib": args.block_kib, "threads": args.threads}
    side = Endpoint(args.device, size_bytes(args), RUN_SEED, "run", args.threads)
    report["device"] = describe_device(args.device)
    channel = connect(args.peer, deadline)
    try:
        checks = _both_ways(side, channel, report, args=args, deadline=deadline)
    except Exception as exc:
        _abort(channel, exc)
        raise
    finally:
        channel.close()
        side.close()
    report["ok"] = report["correct"] = all(checks.values())
    if not report["ok"]:
        wrong = " and ".join(op for op, correct in checks.items() if not correct)
        report["error"] = f"data check failed after {wrong}"


def _both_ways(
    side: Endpoint,
    channel: Channel,
    report: dict[str, Any],
    *,
    args: argparse.Namespace,
    deadline: float,
) -> dict[str, bool]:
    """WRITE (the peer checks), then READ of the peer's restored pattern (this side checks)."""
    nbytes = report["bytes"]
    channel.send({"op": "hello", "bytes": nbytes, "device": report["device"]})
    peer = channel.receive("waiting for the peer's buffer descriptor")
    report["peer_device"] = peer.get("device")
    peer["name"] = side.agent.add_remote_agent(base64.b64decode(peer["agent_metadata"]))
    block = args.block_kib * 1024 or nbytes
    bounds = {"nbytes": nbytes, "block": block, "iters": args.iters, "deadline": deadline}
    report |= rates("write", nbytes, timed_transfers(side, "WRITE", peer, **bounds))
    channel.send({"op": "check", "seed": RUN_SEED})
    checks = {"WRITE": bool(channel.receive("waiting for the peer's data check")["correct"])}
    report |= rates("read", nbytes, timed_transfers(side, "READ", peer, **bounds))
    checks["READ"] = side.holds(peer["seed"], nbytes)
    channel.send({"op": "done"})
    channel.receive("waiting for the peer's goodbye")
    side.agent.remove_remote_agent(peer["name"])
    return checks


def _abort(channel: Channel, exc: Exception) -> None:
    """Tell the peer why, so it stops waiting now rather than at its timeout."""
    with contextlib.suppress(OSError, ProbeError):  # the peer is gone already
        channel.send({"op": "abort", "error": one_line(exc)})


def one_line(exc: Exception) -> str:
    text = str(exc) if isinstance(exc, ProbeError) else f"{type(exc).__name__}: {exc}"
    return (text.splitlines() or [type(exc).__name__])[0]


def run(args: argparse.Namespace, report: dict[str, Any]) -> None:
    """Measure in a child whose UCX log goes to a file, then read the transport from it."""
    with tempfile.TemporaryDirectory(prefix="nixl-kv-probe-") as tmp:
        result, ucx_log = Path(tmp, "result.json"), Path(tmp, "ucx.log")
        status = _run_child(args, result, ucx_log)
        log_text = ucx_log.read_text(errors="replace") if ucx_log.exists() else ""
        if not result.exists():
            report["error"] = f"the measuring process {status} without a result (see stderr)"
        else:
            report |= json.loads(result.read_text())
    if args.ucx_log:
        Path(args.ucx_log).write_text(log_text)
    if report["ok"] and status != "exited with status 0":
        report["note"] = f"the measuring process {status} after reporting"
    _forward_ucx_messages(log_text)
    found = summarize_transports(log_text, report["bytes"] or 0)
    report |= {"transport": found.transport, "transports": found.transports}
    report |= {"transports_by_op": found.by_op, "transport_evidence": found.evidence}


def _run_child(args: argparse.Namespace, result: Path, ucx_log: Path) -> str:
    """The child's stdout joins our stderr: stdout carries nothing but the JSON line."""
    command = [sys.executable, str(Path(__file__).resolve()), "measure", "--peer", args.peer]
    command += ["--device", args.device, "--size-mib", str(args.size_mib), "--iters"]
    command += [str(args.iters), "--timeout-s", str(args.timeout_s), "--result-file", str(result)]
    command += ["--block-kib", str(args.block_kib), "--threads", str(args.threads)]
    env = {**os.environ, "UCX_PROTO_INFO": "used", "UCX_LOG_FILE": str(ucx_log)}
    limit_s = args.timeout_s + _EXIT_GRACE_S
    try:
        child = subprocess.run(
            command, env=env, stdout=sys.stderr.fileno(), check=False, timeout=limit_s
        )
    except subprocess.TimeoutExpired:
        return f"did not exit within {limit_s:.0f} s"
    return f"exited with status {child.returncode}"


def _forward_ucx_messages(log_text: str) -> None:
    """UCX's own warnings and errors went to the log file: show them, tables aside."""
    for line in log_text.splitlines():
        body = _LOG_PREFIX.sub("", line, count=1).lstrip()
        if body and body[0] not in "|+":
            print(line, file=sys.stderr)


def base_report(role: str) -> dict[str, Any]:
    """Every key the caller may read, present even when the probe failed early."""
    role = "run" if role == "measure" else role
    report: dict[str, Any] = {"ok": False, "role": role, "device": None, "peer_device": None}
    report |= {"bytes": None, "correct": False}
    if role != "serve":  # the initiator measures; the serving side only holds memory
        for direction in ("write", "read"):
            report |= {f"{direction}_gib_s_best": None, f"{direction}_gib_s_median": None}
        report |= {"transport": "unknown", "transports": []}
    return report | {"error": None}


def size_bytes(args: argparse.Namespace) -> int:
    return int(args.size_mib) * MIB


# --- command line --------------------------------------------------------------------------


_MAX_THREADS = 64


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="nixl_kv_probe", description=__doc__.split("\n\n")[0])
    roles = top.add_subparsers(dest="role", required=True)
    serve_p = roles.add_parser("serve", help="hold a buffer for one peer")
    serve_p.add_argument("--listen", required=True, metavar="HOST:PORT")
    run_p = roles.add_parser("run", help="transfer to and from a serving peer, print JSON")
    measure_p = roles.add_parser("measure", help="internal: the child process of run")
    for sub in (run_p, measure_p):
        sub.add_argument("--peer", required=True, metavar="HOST:PORT")
        sub.add_argument("--iters", type=int, default=5, help="timed transfers each way")
        sub.add_argument(
            "--block-kib", type=int, default=0, help="descriptor size (0: one for the buffer)"
        )
        sub.add_argument(
            "--threads", type=int, default=0, help="UCX worker threads (0: NIXL's default)"
        )
    run_p.add_argument("--ucx-log", help="also keep UCX's protocol report in this file")
    measure_p.add_argument("--result-file", required=True)
    for sub in (serve_p, run_p, measure_p):
        sub.add_argument("--device", required=True, choices=["cpu", "cuda"])
        sub.add_argument("--size-mib", type=int, help="default 1024 on cuda, 256 on cpu")
        sub.add_argument("--timeout-s", type=float, default=180.0, help="bound on every wait")
    return top


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    args = parser().parse_args(argv)
    if args.size_mib is None:
        args.size_mib = DEFAULT_SIZE_MIB[args.device]
    if args.size_mib <= 0 or getattr(args, "iters", 1) <= 0 or args.timeout_s <= 0:
        parser().error("--size-mib, --iters and --timeout-s must be positive")
    if not 0 <= getattr(args, "block_kib", 0) <= args.size_mib * 1024:
        parser().error("--block-kib must be from 0 (one descriptor) to the buffer's size")
    if not 0 <= getattr(args, "threads", 0) <= _MAX_THREADS:
        parser().error(f"--threads must be from 0 to {_MAX_THREADS}")
    return args


def _json_stdout() -> Any:
    """Keep fd 1 for the JSON line; native libraries' prints go to stderr instead."""
    sys.stdout.flush()
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    return out


def main(argv: Iterable[str] | None = None) -> int:
    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    out = _json_stdout() if args.role in ("serve", "measure") else sys.stdout
    report = base_report(args.role)
    try:
        {"run": run, "serve": serve, "measure": measure}[args.role](args, report)
    except ProbeError as exc:
        report |= {"ok": False, "error": one_line(exc)}
    except Exception as exc:  # NIXL and torch raise their own types: one line, trace on stderr
        traceback.print_exc()
        report |= {"ok": False, "error": one_line(exc)}
    if args.role == "measure":
        Path(args.result_file).write_text(json.dumps(report))
    else:
        print(json.dumps(report), file=out, flush=True)
    return 0 if report.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
