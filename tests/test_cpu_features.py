"""generator/cpu_features.py on this machine's real CPU and kernel (AMD or Intel, AMX or not):
the flags it reads, the AMX permission it asks for, and an AMX tile instruction run in spawned
processes with and without that permission; and the .pth line the cpu engine images install.
(The render imports are deferred: the first tests run with the standard library alone.)"""

from __future__ import annotations

import ctypes
import mmap
import multiprocessing
import signal
import subprocess
import sys
from pathlib import Path

from generator import cpu_features
from generator.paths import Workspace

# ldtilecfg [rdi]; tilezero tmm0; tilerelease; ret. tilezero touches AMX tile data: Linux kills
# a process that runs it without permission (SIGILL), as a CPU without AMX does.
_TILE_CODE = bytes.fromhex("c4e2784907c4e27b49c0c4e27849c0c3")


def proc_flags() -> set[str]:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            return set(line.partition(":")[2].split())
    return set()


def test_vector_flags_are_the_cpus_in_order() -> None:
    features = cpu_features.cpu_features()
    expected = [flag for flag in cpu_features.VECTOR_FLAGS if flag in proc_flags()]
    assert list(features.vector_flags) == expected
    assert features.amx_in_cpu == ("amx_tile" in proc_flags())
    assert features.model  # the model name, or the machine type where /proc has none


def _ask_then_report(ask: bool) -> tuple[bool, bool, bool]:
    before = cpu_features.amx_permitted()
    granted = cpu_features.request_amx_permission() if ask else False
    return before, granted, cpu_features.amx_permitted()


def spawned(function: object, *args: object) -> object:
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(function, args)  # type: ignore[arg-type]


def test_a_fresh_process_lacks_the_permission_and_gets_it_where_amx_exists() -> None:
    features = cpu_features.cpu_features()
    amx = features.amx_in_cpu and features.amx_in_kernel
    assert spawned(_ask_then_report, False) == (False, False, False)
    # Asking is harmless where there is no AMX: it is refused, and nothing changes.
    assert spawned(_ask_then_report, True) == (False, amx, amx)


def _run_tile_instruction(ask: bool) -> None:
    if ask:
        cpu_features.request_amx_permission()
    code = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    code.write(_TILE_CODE)
    config = (ctypes.c_uint8 * 64)()
    config[0], config[16], config[48] = 1, 64, 16  # palette 1; tile 0: 64 bytes x 16 rows
    address = ctypes.addressof(ctypes.c_char.from_buffer(code))
    ctypes.CFUNCTYPE(None, ctypes.c_void_p)(address)(ctypes.addressof(config))


def exit_code_of_tile_instruction(ask: bool) -> int | None:
    process = multiprocessing.get_context("spawn").Process(
        target=_run_tile_instruction, args=(ask,)
    )
    process.start()
    process.join(timeout=60)
    return process.exitcode


def test_an_amx_instruction_needs_the_permission() -> None:
    """The crash vLLM CPU hits on AMX hosts, and the fix, without vLLM."""
    features = cpu_features.cpu_features()
    assert exit_code_of_tile_instruction(ask=False) == -signal.SIGILL
    with_permission = exit_code_of_tile_instruction(ask=True)
    assert with_permission == (0 if features.amx_in_kernel else -signal.SIGILL)


def test_the_installed_pth_asks_in_every_new_process(tmp_path: Path) -> None:
    """What `cpu_features.py --install` puts into a site-packages folder (the cpu images' build
    runs it): a fresh interpreter that reads that folder has the permission where AMX exists."""
    pth = cpu_features.install_amx_workaround(tmp_path)
    assert pth.read_text() == cpu_features.PTH_LINE
    probe = "import site, sys; site.addsitedir(sys.argv[1]); import xpyd_cpu_features as f;"
    probe += "print(f.amx_permitted())"
    done = subprocess.run(
        [sys.executable, "-c", probe, str(tmp_path)], capture_output=True, text=True, check=True
    )
    features = cpu_features.cpu_features()
    assert done.stdout.strip() == str(features.amx_in_cpu and features.amx_in_kernel)
    assert done.stderr == ""  # a .pth that fails prints its traceback here


def test_the_cpu_engine_base_installs_it(workspace: Workspace) -> None:
    from generator.planner import make_plan
    from generator.render.images import CPU_FEATURES, plan_images
    from generator.stack import load_spec

    plan = make_plan(load_spec(workspace.stack_file("cpu-1p1d")))
    prefill = next(image for image in plan_images(plan, workspace) if image.role == "prefill")
    assert f'COPY ["{CPU_FEATURES}", "/tmp/xpyd_cpu_features.py"]' in prefill.text
    assert "RUN python3 /tmp/xpyd_cpu_features.py --install" in prefill.text
    # before the build checks, which prove it in a spawned process
    assert prefill.text.index("--install") < prefill.text.index("--amx-permission")


def test_no_gpu_engine_image_carries_the_workaround(workspace: Workspace) -> None:
    from generator.planner import make_plan
    from generator.render.images import plan_images
    from generator.stack import load_spec

    plan = make_plan(load_spec(workspace.stack_file("xpyd")))
    assert not any("xpyd-amx-permission" in image.text for image in plan_images(plan, workspace))
