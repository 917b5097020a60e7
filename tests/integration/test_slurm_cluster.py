"""The test Slurm cluster (tests/integration/slurm_cluster.py), for real: two nodes, jobs
across them, GPU requests judged by slurmctld, and a teardown that leaves nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.integration.slurm_cluster import (
    WORK_ROOT,
    NodeResources,
    SlurmCluster,
    SlurmClusterError,
    Tracking,
    remove_leftovers,
)
from tests.integration.slurm_teardown import (
    NETNS_DIR,
    ClusterRecord,
    process_alive,
    read_record,
    start_ticks,
)

pytestmark = pytest.mark.slurm

ROOT = Path(__file__).resolve().parents[2]


def sbatch(cluster: SlurmCluster, script: Path, *options: str) -> str:
    """Submits ``script``, waits for the job to end; what it printed (stdout and stderr)."""
    output = script.with_suffix(".out")
    done = cluster.run(
        "sbatch", "--wait", f"--output={output}", *options, str(script), timeout_s=60, check=False
    )
    printed = output.read_text() if output.exists() else ""
    assert done.returncode == 0, f"{done.stderr}\n{printed}"
    return printed


def test_both_nodes_come_up_idle_in_seconds(slurm_cluster: SlurmCluster) -> None:
    partition = slurm_cluster.run("sinfo", "--noheader", "--format=%P %a %D %T %N").stdout
    assert partition.split() == [f"{slurm_cluster.partition}*", "up", "2", "idle", "n[1-2]"]
    assert slurm_cluster.startup_s is not None
    print(f"start-up {slurm_cluster.startup_s:.1f} s")
    assert slurm_cluster.startup_s < 20


def test_srun_runs_a_task_on_each_node_at_its_own_address(slurm_cluster: SlurmCluster) -> None:
    shown = "echo $(hostname) $(ip -4 -o addr show eth0 | awk '{print $4}')"
    lines = slurm_cluster.run("srun", "-N2", "sh", "-c", shown).stdout.splitlines()
    expected = [f"{node.name} {node.address}/24" for node in slurm_cluster.nodes]
    assert sorted(lines) == expected == ["n1 10.232.0.11/24", "n2 10.232.0.12/24"]


def test_a_step_reaches_a_server_on_the_other_node_by_its_name(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    (tmp_path / "token.txt").write_text("served by the other node\n")
    client = tmp_path / "client.py"
    client.write_text(
        textwrap.dedent(
            """
            import socket, sys, time, urllib.request
            deadline = time.monotonic() + 30
            while True:
                try:
                    body = urllib.request.urlopen(sys.argv[1], timeout=2).read().decode()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
            print(f"{socket.gethostname()} got: {body.strip()}")
            """
        )
    )
    script = tmp_path / "job.sh"
    script.write_text(
        textwrap.dedent(
            f"""\
            #!/bin/bash
            nodes=($(scontrol show hostnames "$SLURM_JOB_NODELIST"))
            client=${{nodes[0]}} server=${{nodes[1]}}
            srun -N1 -n1 -w "$server" --exact --mem=200 \\
                {sys.executable} -m http.server 8199 --bind 0.0.0.0 --directory {tmp_path} &
            server_step=$!
            srun -N1 -n1 -w "$client" --exact --mem=200 \\
                {sys.executable} {client} "http://$server:8199/token.txt"
            fetched=$?
            kill $server_step; wait $server_step
            exit $fetched
            """
        )
    )
    output = sbatch(slurm_cluster, script, "-N2", "--ntasks-per-node=1", "--mem=500")
    assert "n1 got: served by the other node" in output


def test_a_heterogeneous_job_runs_a_component_on_each_node(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    script = tmp_path / "het.sh"
    script.write_text(
        textwrap.dedent(
            """\
            #!/bin/bash
            #SBATCH -N1 -n1 --mem=200 -w n1
            #SBATCH hetjob
            #SBATCH -N1 -n1 --mem=200 -w n2
            srun --het-group=0 sh -c 'echo "component 0 on $(hostname)"' : \\
                 --het-group=1 sh -c 'echo "component 1 on $(hostname)"'
            """
        )
    )
    started = time.monotonic()
    lines = sorted(sbatch(slurm_cluster, script).splitlines())
    assert lines == ["component 0 on n1", "component 1 on n2"]
    assert time.monotonic() - started < 15  # the backfill scheduler starts it (bf_interval=1)


@pytest.mark.parametrize(
    ("request_options", "accepted"),
    [
        (["--gres=gpu:h100:2", "-N2"], True),
        (["--gpus=h100:4", "-N2"], True),
        (["--gpus=h100:5", "-N2"], False),
        (["--gres=gpu:a100:1"], False),
        (["--cpus-per-task=3"], False),
        (["--mem=5000"], False),
    ],
)
def test_slurmctld_judges_requests_against_the_nodes(
    slurm_cluster: SlurmCluster, request_options: list[str], accepted: bool
) -> None:
    done = slurm_cluster.run(
        "sbatch", "--test-only", *request_options, "--wrap", "true", check=False
    )
    if accepted:
        assert done.returncode == 0, done.stderr
        assert "to start at" in done.stderr
    else:
        assert done.returncode == 1
        assert "Requested node configuration is not available" in done.stderr


def test_a_step_may_open_only_the_gpu_it_was_given(slurm_cluster: SlurmCluster) -> None:
    devices = slurm_cluster.work_dir / "dev"
    probe = textwrap.dedent(
        f"""
        import errno, os
        print(os.environ["CUDA_VISIBLE_DEVICES"])
        for index in range(2):
            try:
                os.close(os.open(f"{devices}/nvidia{{index}}", os.O_RDWR))
                print("OPENED")
            except OSError as error:
                print(errno.errorcode[error.errno])
        """
    )
    done = slurm_cluster.run("srun", "-N1", "--gres=gpu:h100:1", sys.executable, "-c", probe)
    visible, *opened = done.stdout.split()
    assert visible == "0"
    # Without NVIDIA's driver nothing answers behind a fake GPU (ENXIO); with it, the real one
    # opens. The devices cgroup denies the GPU not given (EPERM).
    given = "OPENED" if Path("/proc/driver/nvidia").exists() else "ENXIO"
    confined = slurm_cluster.layout.tracking is Tracking.CGROUP
    assert sorted(opened) == sorted([given, "EPERM" if confined else given])


def test_a_second_cluster_of_bigger_nodes_runs_beside_the_first_and_leaves_nothing(
    slurm_cluster: SlurmCluster,
) -> None:
    # The first cluster has a job running on n1 all along: same node names, job ids and
    # addresses in the second must not touch it, nor its teardown.
    first_job = _start_sleeping_job(slurm_cluster)
    big = NodeResources(cpus=8, memory_mb=64000, gpus=8, gpu_type="a100")
    cluster = SlurmCluster((big, big))
    try:
        cluster.start()
        _assert_fits_big_nodes(cluster)
        # Steps that ignore SIGTERM on both nodes: the teardown must find and SIGKILL them.
        stubborn = "srun sh -c \"trap '' TERM; sleep 600\""
        cluster.run("sbatch", "-N2", "--output=/dev/null", "--wrap", stubborn)
        running = _wait_for_steps(cluster)
        record = cluster.record
        namespaces = {name: os.stat(NETNS_DIR / name).st_ino for name in record.netns}
    finally:
        cluster.stop()
    print(f"start-up {cluster.startup_s:.1f} s, teardown {cluster.teardown_s:.1f} s")
    _assert_nothing_left(record, running, namespaces)
    try:
        assert _job_state(slurm_cluster, first_job) == "RUNNING"
        assert _runs(_ip_netns_pids(slurm_cluster.node("n1").netns), "sleep")
    finally:
        slurm_cluster.run("scancel", first_job)


def _start_sleeping_job(cluster: SlurmCluster) -> str:
    job = cluster.run(
        "sbatch",
        "--parsable",
        "-w",
        "n1",
        "--mem=100",
        "--output=/dev/null",
        "--wrap",
        "srun sleep 300",
    ).stdout.strip()
    deadline = time.monotonic() + 30
    while not _runs(_ip_netns_pids(cluster.node("n1").netns), "sleep"):
        assert time.monotonic() < deadline, f"job {job}: {_job_state(cluster, job)}"
        time.sleep(0.2)
    return job


def _job_state(cluster: SlurmCluster, job: str) -> str:
    return cluster.run("squeue", "--noheader", f"--jobs={job}", "--format=%T").stdout.strip()


def _assert_fits_big_nodes(cluster: SlurmCluster) -> None:
    fits = ["-N2", "--gpus-per-node=a100:8", "--cpus-per-task=8", "--mem=60000"]
    assert (
        cluster.run("sbatch", "--test-only", *fits, "--wrap", "true", check=False).returncode == 0
    )
    too_big = ["-N2", "--gpus-per-node=a100:9"]
    assert cluster.run("sbatch", "--test-only", *too_big, "--wrap", "true", check=False).returncode


def _wait_for_steps(cluster: SlurmCluster) -> dict[int, int]:
    """Until a sleep runs in each node's namespace (``ip netns pids``); every process in the
    cluster's namespaces then, pid -> start ticks."""
    deadline = time.monotonic() + 30
    while True:
        listed = {name: _ip_netns_pids(name) for name in cluster.record.netns}
        sleeping = [node for node in cluster.nodes if _runs(listed[node.netns], "sleep")]
        if len(sleeping) == len(cluster.nodes):
            return {
                pid: ticks
                for pids in listed.values()
                for pid in pids
                if (ticks := start_ticks(pid))
            }
        if time.monotonic() > deadline:
            raise SlurmClusterError(f"the steps did not start: {listed}")
        time.sleep(0.2)


def _ip_netns_pids(name: str) -> set[int]:
    done = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True, check=True)
    return {int(pid) for pid in done.stdout.split()}


def _runs(pids: set[int], command: str) -> bool:
    names = set()
    for pid in pids:
        try:
            names.add(Path(f"/proc/{pid}/comm").read_text().strip())
        except OSError:
            continue
    return command in names


def _assert_nothing_left(
    record: ClusterRecord, running: dict[int, int], namespaces: dict[str, int]
) -> None:
    assert [
        daemon for daemon in record.daemons if process_alive(daemon.pid, daemon.start_ticks)
    ] == []
    assert [pid for pid, ticks in running.items() if process_alive(pid, ticks)] == []
    in_namespaces = [
        pid
        for pid in (int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit())
        if _netns_inode(pid) in namespaces.values()
    ]
    assert in_namespaces == []
    assert [name for name in record.netns if (NETNS_DIR / name).exists()] == []
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    assert record.cluster_id not in listed.stdout
    assert [path for path in record.cgroup_dirs if os.path.exists(path)] == []
    assert not Path(record.work_dir).exists()


def _netns_inode(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


def test_the_linuxproc_fallback_runs_steps_and_leaves_nothing(
    slurm_cluster: SlurmCluster,
) -> None:
    # What a machine without cgroup v1 gets (choose_tracking); it runs here too.
    cluster = SlurmCluster(tracking=Tracking.LINUXPROC)
    try:
        cluster.start()
        assert cluster.record.cgroup_dirs == ()
        lines = cluster.run("srun", "-N2", "sh", "-c", "hostname; cat /proc/self/cgroup").stdout
        assert sorted(line for line in lines.split() if line.startswith("n")) == ["n1", "n2"]
        assert "slurm_n" not in lines  # no cgroup of Slurm's: steps stay where slurmd is
    finally:
        cluster.stop()
    _assert_nothing_left(cluster.record, {}, {})


def test_a_start_that_fails_removes_what_it_made_and_stop_stays_safe(tmp_path: Path) -> None:
    # munged (user munge) cannot reach a socket below a folder only root may enter: the
    # failure the work root's permissions are there to prevent, after the network and the
    # cgroups were made.
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o700)
    cluster = SlurmCluster(work_root=locked / "slurm")
    try:
        # Which of the two it is depends on how fast munged gives up (a race CI met).
        with pytest.raises(
            SlurmClusterError, match=r"munged (did not open|exited at once)"
        ) as raised:
            cluster.start()
        message = str(raised.value)
        assert "munged: Error" in message  # its log's last lines come with it
        # A daemon gone before it could be recorded is not in the record: nothing to stop.
        recorded = [] if "exited at once" in message else ["munged"]
        assert [daemon.name for daemon in cluster.record.daemons] == recorded
        _assert_nothing_left(cluster.record, {}, {})
    finally:
        cluster.stop()  # again: nothing to do
    SlurmCluster().stop()  # never started


def test_the_cluster_of_a_run_that_was_killed_is_removed_by_the_next(
    slurm_cluster: SlurmCluster,
) -> None:
    code = (
        "import time\n"
        "from tests.integration.slurm_cluster import SlurmCluster\n"
        "cluster = SlurmCluster()\n"
        "cluster.start()\n"
        "print('WORK', cluster.work_dir, flush=True)\n"
        "time.sleep(600)\n"
    )
    with subprocess.Popen(
        [sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True
    ) as owner:
        try:
            assert owner.stdout is not None
            lines = (line.split() for line in owner.stdout)  # lazily: up to the WORK line only
            work_dir = next(Path(words[1]) for words in lines if words[:1] == ["WORK"])
        finally:
            owner.send_signal(signal.SIGKILL)  # a crash: no teardown runs
    record = read_record(work_dir / "record.json")
    assert record is not None
    assert len(record.daemons) == 4
    assert all(process_alive(daemon.pid, daemon.start_ticks) for daemon in record.daemons)
    assert remove_leftovers() == []
    _assert_nothing_left(record, {}, {})
    assert slurm_cluster.work_dir.parent == WORK_ROOT
    assert slurm_cluster.work_dir.exists()  # a run still going keeps its cluster
