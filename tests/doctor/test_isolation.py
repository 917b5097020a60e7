"""Process mode's container view, built for real with unshare (root) over a fake /dev and /proc.

The fake trees hold regular files where a GPU host has device nodes: a bind mount treats both
alike, so what the view shows, hides and write-protects is the same. The GPU folders' bus ids
deliberately do not follow the minors' order, to show that GPUs are matched by Device Minor.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from generator.runtimes.isolation import (
    VIEW_FAILED,
    ContainerView,
    PidNamespace,
    run_in_view,
    view_command,
    view_script,
)

BUS_BY_MINOR = {0: "0000:3b:00.0", 1: "0000:19:00.0", 2: "0000:5d:00.0"}
HOST_NODES = ["null", "zero", "full", "random", "urandom", "tty", "nvidia0", "nvidia1", "nvidia2"]
HOST_NODES += ["nvidiactl", "nvidia-uvm", "nvidia-modeset"]  # no nvidia-uvm-tools: optional
STANDARD = {"null", "zero", "full", "random", "urandom", "tty", "shm", "pts", "ptmx"}
STANDARD |= {"fd", "stdin", "stdout", "stderr"}


@dataclass(frozen=True)
class FakeHost:
    dev: Path
    proc: Path

    def view(
        self,
        *,
        gpus: tuple[int, ...] = (),
        pid: PidNamespace = PidNamespace.PRIVATE,
        environment: dict[str, str] | None = None,
        infiniband: bool = False,
    ) -> ContainerView:
        return ContainerView(
            gpus=gpus,
            pid=pid,
            environment=environment or {},
            infiniband=infiniband,
            dev_root=self.dev,
            proc_root=self.proc,
        )

    @property
    def gpus(self) -> Path:
        return self.proc / "driver/nvidia/gpus"


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeHost:
    dev, proc = tmp_path / "dev", tmp_path / "proc"
    for name in ("shm", "pts", "infiniband"):
        (dev / name).mkdir(parents=True)
    (dev / "infiniband/uverbs0").write_text("uverbs0")
    for name in HOST_NODES:
        (dev / name).write_text(name)
    for minor, bus in BUS_BY_MINOR.items():
        folder = proc / "driver/nvidia/gpus" / bus
        folder.mkdir(parents=True)
        (folder / "information").write_text(
            f"Model: \t\t NVIDIA H200\nBus Location: \t {bus}\nDevice Minor: \t {minor}\n"
        )
    monkeypatch.setenv("TMPDIR", str(tmp_path / "staging"))
    (tmp_path / "staging").mkdir()
    return FakeHost(dev, proc)


def shell(view: ContainerView, script: str) -> subprocess.CompletedProcess[str]:
    return run_in_view(view, ["sh", "-c", script], timeout_s=30)


# --- the command line (no privileges needed) -----------------------------------------------


def test_private_pid_namespace_forks_a_pid_1_with_its_own_proc() -> None:
    command = view_command(ContainerView(), ["python3", "probe.py", "a b"])
    assert command[: command.index("--")] == [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "--pid",
        "--fork",
        "--kill-child",
        "--mount-proc",
    ]
    assert command[-4:] == ["xpyd-view", "python3", "probe.py", "a b"]  # arguments, not script


def test_host_pid_namespace_keeps_the_hosts() -> None:
    command = view_command(ContainerView(pid=PidNamespace.HOST), ["true"])
    assert command[: command.index("--")] == ["unshare", "--mount", "--propagation", "private"]


@pytest.mark.parametrize(
    "view",
    [
        ContainerView(),
        ContainerView(gpus=(0, 3), environment={"CUDA_VISIBLE_DEVICES": "0,1", "Q": "a 'b' $c"}),
        ContainerView(gpus=(1,), infiniband=True, dev_root=Path("/tmp/a dir/dev")),
    ],
)
def test_script_is_valid_posix_sh(view: ContainerView) -> None:
    checked = subprocess.run(
        ["sh", "-n", "-c", view_script(view)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stderr


@pytest.mark.parametrize(
    ("gpus", "environment"),
    [((-1,), {}), ((1, 1), {}), ((), {"A=B": "x"}), ((), {"": ""})],
)
def test_invalid_views_are_refused(gpus: tuple[int, ...], environment: dict[str, str]) -> None:
    with pytest.raises(ValueError, match=r"gpus must be|not environment variable names"):
        ContainerView(gpus=gpus, environment=environment)


def test_no_command_is_refused() -> None:
    with pytest.raises(ValueError, match="no command"):
        view_command(ContainerView(), [])


# --- the view, built for real ----------------------------------------------------------------

needs_root = pytest.mark.usefixtures("namespaces")


@needs_root
def test_dev_holds_exactly_the_view(host: FakeHost) -> None:
    done = shell(host.view(gpus=(1,)), "ls -A /dev; cat /dev/nvidia1")
    assert done.returncode == 0, done.stderr
    *names, content = done.stdout.split()
    assert set(names) == STANDARD | {"nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-modeset"}
    assert content == "nvidia1"  # the host's node itself, bound


@needs_root
def test_no_gpus_no_nvidia_nodes_and_proc_untouched(host: FakeHost) -> None:
    done = shell(host.view(), f"ls -A /dev; ls {host.gpus}")
    assert done.returncode == 0, done.stderr
    assert set(done.stdout.split()) == STANDARD | set(BUS_BY_MINOR.values())


@needs_root
def test_dev_is_read_only_so_missing_nodes_stay_missing(host: FakeHost) -> None:
    """What the CUDA driver does when a node is missing: mknod it. It must fail."""
    script = "mknod /dev/nvidia0 c 195 0; touch /dev/new; echo shared > /dev/shm/written"
    done = shell(host.view(gpus=(1,)), script)
    assert done.stderr.count("Read-only file system") == 2, done.stderr
    assert (host.dev / "shm/written").read_text() == "shared\n"  # /dev/shm is the host's


@needs_root
def test_proc_shows_only_the_visible_gpus_by_device_minor(host: FakeHost) -> None:
    done = shell(host.view(gpus=(0, 2)), f"ls {host.gpus}; touch {host.gpus}/x")
    assert done.stdout.split() == sorted([BUS_BY_MINOR[0], BUS_BY_MINOR[2]])
    assert "Read-only file system" in done.stderr


@needs_root
def test_private_pid_namespace(host: FakeHost) -> None:
    done = shell(host.view(), "echo $$; readlink /proc/self/ns/pid; ls /proc | grep -c '^[0-9]'")
    pid, namespace, processes = done.stdout.split()
    assert pid == "1"
    assert namespace != os.readlink("/proc/self/ns/pid")
    assert int(processes) <= 3  # sh, ls, grep


@needs_root
def test_host_pid_namespace(host: FakeHost) -> None:
    done = shell(host.view(pid=PidNamespace.HOST), "readlink /proc/self/ns/pid; ls /proc/1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[0] == os.readlink("/proc/self/ns/pid")


@needs_root
def test_environment_reaches_the_command(host: FakeHost) -> None:
    environment = {"CUDA_VISIBLE_DEVICES": "1", "ODD": "a 'b' $c \"d\""}
    done = run_in_view(host.view(environment=environment), ["printenv", *environment], timeout_s=30)
    assert done.stdout.splitlines() == list(environment.values())


@needs_root
def test_infiniband_only_when_asked(host: FakeHost) -> None:
    done = shell(host.view(infiniband=True), "ls /dev/infiniband")
    assert done.stdout.split() == ["uverbs0"]
    assert "infiniband" not in shell(host.view(), "ls -A /dev").stdout


@needs_root
@pytest.mark.parametrize(
    ("gpus", "infiniband", "missing", "message"),
    [
        ((5,), False, None, "{dev}/nvidia5 does not exist"),
        ((1,), False, "dev/nvidia-uvm", "{dev}/nvidia-uvm does not exist"),
        ((1,), True, "dev/infiniband", "{dev}/infiniband does not exist"),
        ((1,), False, f"proc/driver/nvidia/gpus/{BUS_BY_MINOR[1]}", "no GPU with Device Minor 1"),
    ],
)
def test_a_view_that_cannot_be_built_says_why(
    host: FakeHost, gpus: tuple[int, ...], infiniband: bool, missing: str | None, message: str
) -> None:
    if missing is not None:
        path = host.dev.parent / missing
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    done = shell(host.view(gpus=gpus, infiniband=infiniband), "echo ran")
    assert (done.returncode, done.stdout) == (VIEW_FAILED, "")
    assert message.format(dev=host.dev) in done.stderr


@needs_root
def test_the_real_dev_gives_working_devices() -> None:
    done = run_in_view(
        ContainerView(),
        ["sh", "-c", "echo x > /dev/null && head -c 4 /dev/zero | wc -c"],
        timeout_s=30,
    )
    assert (done.returncode, done.stdout.strip()) == (0, "4"), done.stderr


@needs_root
def test_staging_directory_is_removed(host: FakeHost) -> None:
    shell(host.view(gpus=(1,)), "true")
    shell(host.view(gpus=(7,)), "true")  # fails while building
    assert list(Path(os.environ["TMPDIR"]).iterdir()) == []


def sleepers(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker in (entry / "cmdline").read_text():
                found.append(int(entry.name))
        except OSError:
            continue  # it ended while we looked
    return found


@needs_root
@pytest.mark.parametrize("pid", list(PidNamespace))
def test_timeout_ends_everything_the_view_started(host: FakeHost, pid: PidNamespace) -> None:
    marker = "47.125" if pid is PidNamespace.HOST else "47.25"
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        run_in_view(host.view(pid=pid), ["sh", "-c", f"sleep {marker} & wait"], timeout_s=1)
    assert time.monotonic() - started < 10
    deadline = time.monotonic() + 5
    while sleepers(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sleepers(marker) == []


@pytest.fixture
def no_unshare(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))


def test_missing_unshare_is_an_error_with_a_fix(no_unshare: None) -> None:
    from generator.errors import XpydError

    with pytest.raises(XpydError, match="util-linux"):
        run_in_view(ContainerView(), ["true"], timeout_s=5)
