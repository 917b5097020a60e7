"""The host CPU's vector ISA and its AMX tile-data permission; the cpu engines' AMX workaround.

Standalone (the standard library only): the cpu engine images install this file into their
venv as ``xpyd_cpu_features.py`` with a ``.pth`` line that calls ``request_amx_permission()``,
so every Python process of that venv asks Linux for AMX at start (engines, the workers vLLM
spawns, ``lmcache server``); doctor imports it from the package to report the host.

Why: vLLM CPU 0.32 picks its AMX attention kernel when the CPU reports AMX
(``vllm/v1/attention/backends/cpu_attn.py``: ``_get_attn_isa`` trusts
``torch.cpu._is_amx_tile_supported()``) but never asks for AMX tile-data permission
(``arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)``), which Linux (>= 5.16) wants before
a process's first tile-data instruction: without it the kernel kills the process with SIGILL.
Only oneDNN inside torch asks, for matrix products of more than 4 tokens, and vLLM's workers
are started with ``spawn`` (an exec, which drops the permission). So a worker whose first
forward pass has 1-4 tokens dies (exit code -4). The request is harmless where the CPU has no
AMX or the kernel refuses it. Drop this once vLLM asks itself (upstream's fix: ``_get_attn_isa``
calling ``torch.cpu._init_amx()`` instead of trusting CPUID).

``python3 xpyd_cpu_features.py`` (or ``python -m generator.cpu_features``) prints the state as
one JSON line; ``PYTHON cpu_features.py --install`` installs the workaround into PYTHON's
site-packages (what the cpu images' build does, and what a venv for bare processes needs).
"""

from __future__ import annotations

# Only what a site hook can afford: this module runs at every interpreter start of an engine
# venv (ctypes ~4 ms); the rest is imported where it is used.
import ctypes
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

__all__ = [
    "CpuFeatures",
    "amx_permitted",
    "cpu_features",
    "install_amx_workaround",
    "request_amx_permission",
]

_SYS_ARCH_PRCTL = 158  # x86-64
_ARCH_GET_XCOMP_SUPP = 0x1021  # the extended states the CPU and kernel support
_ARCH_GET_XCOMP_PERM = 0x1022  # the ones this process may use
_ARCH_REQ_XCOMP_PERM = 0x1023
_XFEATURE_XTILEDATA = 18  # AMX tile data
# What vLLM CPU's kernels are built for, best first (avx512f recommended, avx2 limited).
VECTOR_FLAGS = ("amx_tile", "amx_bf16", "avx512_fp16", "avx512_bf16", "avx512f", "avx2")


def _x86_64_linux() -> bool:
    return sys.platform == "linux" and os.uname().machine == "x86_64"


def _arch_prctl(code: int, argument: int | ctypes.c_uint64) -> bool:
    libc = ctypes.CDLL(None, use_errno=True)
    # syscall() is variadic: pass every argument as a full machine word.
    value = (
        ctypes.byref(argument) if isinstance(argument, ctypes.c_uint64) else ctypes.c_long(argument)
    )
    return int(libc.syscall(ctypes.c_long(_SYS_ARCH_PRCTL), ctypes.c_long(code), value)) == 0


def _xcomp_bitmap(code: int) -> int | None:
    """A bitmap of extended states, or None where the kernel has no such query (< 5.16)."""
    value = ctypes.c_uint64(0)
    return value.value if _arch_prctl(code, value) else None


def request_amx_permission() -> bool:
    """Ask for AMX tile data for this process; True when granted. Never raises: it runs at the
    start of every Python process of an engine venv."""
    try:
        return _x86_64_linux() and _arch_prctl(_ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA)
    except Exception:  # a site hook must not stop Python from starting
        return False


def amx_permitted() -> bool:
    """Whether this process may execute AMX tile-data instructions now."""
    bitmap = _xcomp_bitmap(_ARCH_GET_XCOMP_PERM) if _x86_64_linux() else None
    return bitmap is not None and bool(bitmap >> _XFEATURE_XTILEDATA & 1)


def _cpu_flags() -> frozenset[str]:
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as cpuinfo:
            for line in cpuinfo:  # the first processor's flags are enough
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()


class CpuFeatures:
    """What doctor and the build check report (a plain class: no dataclasses import here)."""

    __slots__ = ("amx_in_cpu", "amx_in_kernel", "amx_permitted", "model", "vector_flags")

    def __init__(
        self,
        *,
        model: str,
        vector_flags: tuple[str, ...],  # of VECTOR_FLAGS, in that order
        amx_in_cpu: bool,  # the CPU (as the kernel shows it) has AMX tiles
        amx_in_kernel: bool,  # the kernel supports AMX tile data (ARCH_GET_XCOMP_SUPP)
        amx_permitted: bool,  # this process may use it (after any request)
    ) -> None:
        self.model, self.vector_flags = model, vector_flags
        self.amx_in_cpu, self.amx_in_kernel, self.amx_permitted = (
            amx_in_cpu,
            amx_in_kernel,
            amx_permitted,
        )

    def as_dict(self) -> dict[str, object]:
        return {name: getattr(self, name) for name in self.__slots__}

    @property
    def amx_usable(self) -> bool:
        return self.amx_in_cpu and self.amx_in_kernel and self.amx_permitted


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return os.uname().machine


def cpu_features() -> CpuFeatures:
    flags = _cpu_flags()
    supported = _xcomp_bitmap(_ARCH_GET_XCOMP_SUPP) if _x86_64_linux() else None
    return CpuFeatures(
        model=_cpu_model(),
        vector_flags=tuple(flag for flag in VECTOR_FLAGS if flag in flags),
        amx_in_cpu="amx_tile" in flags,
        amx_in_kernel=supported is not None and bool(supported >> _XFEATURE_XTILEDATA & 1),
        amx_permitted=amx_permitted(),
    )


INSTALLED_MODULE = "xpyd_cpu_features"
PTH_FILE = "xpyd-amx-permission.pth"
# site runs a .pth line that starts with "import" at every interpreter start, spawned ones too.
PTH_LINE = f"import {INSTALLED_MODULE}; {INSTALLED_MODULE}.request_amx_permission()\n"


def install_amx_workaround(site_packages: Path) -> Path:
    """Copy this module into ``site_packages`` and add the .pth that calls it; the .pth."""
    import shutil

    shutil.copyfile(__file__, site_packages / f"{INSTALLED_MODULE}.py")
    pth = site_packages / PTH_FILE
    pth.write_text(PTH_LINE, encoding="ascii")
    return pth


if __name__ == "__main__":
    import json
    import sysconfig
    from pathlib import Path

    if sys.argv[1:] == ["--install"]:
        print(install_amx_workaround(Path(sysconfig.get_paths()["purelib"])))
    else:
        print(json.dumps(cpu_features().as_dict()))
