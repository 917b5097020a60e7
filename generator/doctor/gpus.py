"""The host's NVIDIA GPUs as nvidia-smi reports them: inventory and the link between each pair
(`nvidia-smi topo -m`). The only place doctor runs nvidia-smi."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass

__all__ = [
    "GpuInfo",
    "describe_link",
    "link_between",
    "parse_gpus",
    "parse_topology",
    "query_gpus",
    "topology",
]

_QUERY = "index,name,memory.total,pci.bus_id,uuid,memory.used"
_GPU_LABEL = re.compile(r"^GPU(\d+)$")
# `nvidia-smi topo -m` legend, fastest first: NV# (NVLink, # links), PIX/PXB (PCIe switches),
# PHB (host bridge), NODE (within a NUMA node), SYS (across sockets).
LINK_MEANING = {
    "PIX": "PCIe, one switch",
    "PXB": "PCIe, several switches",
    "PHB": "PCIe host bridge",
    "NODE": "PCIe + host bridges in one NUMA node",
    "SYS": "PCIe + SMP interconnect between NUMA nodes",
}


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    memory_mib: int
    bus_id: str
    uuid: str
    memory_used_mib: int | None = None  # None: not read (an older query's output)


def _nvidia_smi(*args: str) -> str | None:
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        done = subprocess.run(
            ["nvidia-smi", *args], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def query_gpus() -> list[GpuInfo] | None:
    """None when nvidia-smi is missing or fails (no driver)."""
    text = _nvidia_smi(f"--query-gpu={_QUERY}", "--format=csv,noheader,nounits")
    return None if text is None else parse_gpus(text)


def parse_gpus(text: str) -> list[GpuInfo]:
    gpus = []
    for line in text.strip().splitlines():
        index, name, memory, bus_id, uuid, *rest = (part.strip() for part in line.split(","))
        used = int(float(rest[0])) if rest and rest[0].replace(".", "").isdigit() else None
        gpus.append(GpuInfo(int(index), name, int(float(memory)), bus_id, uuid, used))
    return gpus


def topology() -> dict[tuple[int, int], str] | None:
    text = _nvidia_smi("topo", "-m")
    return None if text is None else parse_topology(text)


def parse_topology(text: str) -> dict[tuple[int, int], str]:
    """{(i, j): link} for every GPU pair of the matrix (NICs and affinity columns ignored)."""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in text.splitlines() if line.strip()]
    header = lines[0].split()
    columns = [int(m.group(1)) for name in header if (m := _GPU_LABEL.match(name))]
    links: dict[tuple[int, int], str] = {}
    for line in lines[1:]:
        cells = line.split()
        row = _GPU_LABEL.match(cells[0]) if cells else None
        if row is None:
            continue
        for column, cell in zip(columns, cells[1 : 1 + len(columns)], strict=False):
            links[(int(row.group(1)), column)] = cell
    return links


def link_between(links: dict[tuple[int, int], str], a: int, b: int) -> str:
    return links.get((a, b), "?")


def describe_link(link: str) -> str:
    if link.startswith("NV"):
        return f"NVLink x{link[2:]}" if link[2:].isdigit() else "NVLink"
    return LINK_MEANING.get(link, link)
