"""The slurm runtime's steps in containers (pyxis): what each step's srun is given, checked
against pyxis's own option rules. No enroot or pyxis runs here, so ``pyxis_accepts`` below is a
STAND-IN: the option table and the value rules of pyxis's args.c (NVIDIA/pyxis, read
2026-12-07), applied to the srun command the runtime builds. A real cluster has not run it."""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

from generator.errors import SpecError
from generator.paths import Workspace
from generator.planner import make_plan
from generator.render import render_stack
from generator.runtimes.process_commands import Images, Pythons, ServiceCommands
from generator.runtimes.pyxis import PyxisContainer
from generator.runtimes.slurm_launcher import SrunLauncher
from generator.serializers.process import ProcessService
from generator.spec import Isolation
from generator.stack import parse_spec
from generator.supervise import __file__ as SUPERVISOR
from tests.runtimes.test_slurm_units import refusal, slurm_spec

ENGINE_IMAGE = "nvcr.io#lab/xpyd-engine-gpu:0.32.0"
ROUTER_IMAGE = "/shared/images/xpyd-router.sqsh"
CONTAINER = {
    "engine_image": ENGINE_IMAGE,
    "router_image": ROUTER_IMAGE,
    "router_python": "/opt/venv/bin/python",
    "mounts": ["/scratch/hf:/scratch/hf", "/data:/data:ro+rprivate"],
}

# pyxis's options: name -> takes a value (args.c's spank_opts table).
_PYXIS_OPTIONS = {
    "container-image": True,
    "container-mounts": True,
    "container-workdir": True,
    "container-name": True,
    "container-save": True,
    "container-mount-home": False,
    "no-container-mount-home": False,
    "container-remap-root": False,
    "no-container-remap-root": False,
    "container-entrypoint": False,
    "no-container-entrypoint": False,
    "container-entrypoint-log": False,
    "container-writable": False,
    "container-readonly": False,
    "container-env": True,
}


def pyxis_accepts(srun: list[str]) -> dict[str, str]:
    """STAND-IN for pyxis's option parsing (args.c): every --container-* option of the srun
    command known and well formed, each value-taking one given once; its values."""
    found: dict[str, str] = {}
    for arg in srun:
        if not arg.startswith("--") or "container" not in arg:
            continue
        name, has_value, value = arg[2:].partition("=")
        assert name in _PYXIS_OPTIONS, f"pyxis has no --{name}"
        assert _PYXIS_OPTIONS[name] == bool(has_value), f"--{name}: value given or missing"
        assert name not in found, f"pyxis: --{name} specified multiple times"
        found[name] = value
    assert "container-mount-home" not in found or "no-container-mount-home" not in found
    for mount in found.get("container-mounts", "").split(","):
        source, _, rest = mount.partition(":")
        target, _, flags = rest.partition(":")
        # add_mount: a source is a path ("./" first), "tmpfs" or "umount"; a target a path.
        assert source[:1] in ("/", ".") or source in ("tmpfs", "umount"), mount
        assert (target or source)[:1] in ("/", "."), mount
        assert "," not in flags, mount  # "," ends the mount: flags are joined by "+"
    for name in found.get("container-env", "").split(",") if "container-env" in found else []:
        assert name, "pyxis: --container-env: invalid format (an empty name)"
    assert found.get("container-image", "x"), "pyxis: --container-image: argument required"
    if "container-name" in found:
        name, _, flag = found["container-name"].partition(":")
        assert name, "pyxis: --container-name: empty name"
        assert flag in ("", "auto", "create", "exec", "no_exec"), f"--container-name flag {flag}"
    return found


def service_project(service: str) -> str:
    """The bound test stack's project of each service (the prefiller and its LMCache server on
    host a, the rest on b)."""
    return "xpyd-t-a" if "prefill" in service else "xpyd-t-b"


def _bound_spec(**slurm: Any) -> dict[str, Any]:
    data = slurm_spec(slurm={"job_id": 7, **slurm})
    for host, address in zip(data["hosts"], ("10.9.0.1", "10.9.0.2"), strict=True):
        host["address"] = address
    return data


def _steps(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> dict[str, tuple[ProcessService, list[str]]]:
    """Each service's srun command, as the slurm runtime builds it for the bound job."""
    monkeypatch.setenv("HF_TOKEN", "hf_test_value")
    plan = make_plan(parse_spec(_bound_spec(container=CONTAINER), source="t"))
    rendered = render_stack(plan, workspace)
    pythons = Pythons(Path("python3"), Path("/opt/venv/bin/python"))
    images = Images(ENGINE_IMAGE, ROUTER_IMAGE)
    steps = {}
    for project in rendered.processes:
        pyxis = PyxisContainer.for_checkout(workspace.root, tuple(CONTAINER["mounts"]))
        launcher = SrunLauncher(7, f"node-{project.host}", 2, project.name, container=pyxis)
        state = workspace.root / project.state
        commands = ServiceCommands(
            project, workspace.root, pythons, Isolation.PLAIN, state, False, images
        )
        for service in project.services:
            env = commands.environment(service) | {"XPYD_SERVICE": service.name}
            argv = commands.argv(service, service.command)
            image = commands.image_of(service)
            name = f"{project.name}:{service.name}"  # as the runtime names a service's step
            steps[service.name] = (
                service,
                launcher.step_command(argv, env, workspace.root, name, image, named=True),
            )
    return steps


def test_every_step_runs_in_its_interpreters_image_with_options_pyxis_takes(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    steps = _steps(workspace, monkeypatch)
    assert set(steps) >= {"prefill-0", "decode-0", "router"}
    root = str(workspace.root)
    for name, (service, srun) in steps.items():
        options = pyxis_accepts(srun)
        wanted = ROUTER_IMAGE if service.interpreter == "router" else ENGINE_IMAGE
        assert options["container-image"] == wanted, name
        mounts = options["container-mounts"].split(",")
        # The checkout at its own path: the supervisor, the configs, the state and the logs.
        assert mounts[0] == f"{root}:{root}", name
        assert SUPERVISOR.startswith(root + "/")
        assert set(CONTAINER["mounts"]) <= set(mounts)
        assert options["container-workdir"] == root
        assert "no-container-mount-home" in options
        # Named after its service: imported once per node, a restart starts from it.
        assert options["container-name"] == f"{service_project(name)}-{name}", name
        # The command follows srun's options: the image's own Python, no host path to one.
        command = srun[srun.index(f"--container-workdir={root}") :]
        assert not any(".cache/env" in part for part in command), name


def test_a_services_check_reuses_its_container_and_a_pythons_check_imports_its_own(
    workspace: Workspace, tmp_path: Path
) -> None:
    pyxis = PyxisContainer.for_checkout(workspace.root, ())
    launcher = SrunLauncher(7, "n1", 2, "xpyd-t-b", container=pyxis)
    service_env = {"XPYD_SERVICE": "decode-0"}
    health = launcher.check_command(["python3", "-c", "pass"], service_env, tmp_path, ENGINE_IMAGE)
    options = pyxis_accepts(health)
    assert options["container-name"] == "xpyd-t-b-decode-0:no_exec"
    assert "--gres=gpu:2" not in health  # a check needs no GPU
    probe = launcher.check_command(["python3", "-c", "pass"], {}, tmp_path, ROUTER_IMAGE)
    assert "container-name" not in pyxis_accepts(probe)
    oneoff = launcher.step_command(
        ["python3", "-V"], service_env, tmp_path, "xpyd-t-b:oneoff", ENGINE_IMAGE
    )
    assert "container-name" not in pyxis_accepts(oneoff)  # removed after its step


def test_a_steps_own_variables_win_over_the_images(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pyxis keeps an image's value where both set one, unless the name is in --container-env:
    every variable the step sets itself is listed there, PATH (the image's tools) never."""
    steps = _steps(workspace, monkeypatch)
    service, srun = steps["decode-0"]
    names = pyxis_accepts(srun)["container-env"].split(",")
    assert set(service.env) - set(os.environ) <= set(names)
    assert {"XPYD_SERVICE", "HF_TOKEN"} <= set(names) or "HF_TOKEN" in os.environ
    assert "PATH" not in names
    assert not any("hf_test_value" in arg for arg in srun)  # names, never a secret's value


def test_a_gpu_step_gets_the_plans_gpus_back_inside_the_step(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """slurmstepd sets CUDA_VISIBLE_DEVICES to every GPU of the step (--gres=gpu:2); the plan's
    choice is put back by `env` right before the command, in the container too."""
    steps = _steps(workspace, monkeypatch)
    for name in ("prefill-0", "decode-0"):
        service, srun = steps[name]
        chosen = service.env.get("CUDA_VISIBLE_DEVICES")
        assert chosen is not None, name
        assert "--gres=gpu:2" in srun
        at = srun.index("env")
        assert srun[at + 1] == f"CUDA_VISIBLE_DEVICES={chosen}", name
        assert at > srun.index(f"--container-image={ENGINE_IMAGE}")


def test_without_containers_a_step_has_no_pyxis_option_and_asking_for_an_image_is_a_bug(
    tmp_path: Path,
) -> None:
    launcher = SrunLauncher(7, "n1", 0, "xpyd-t-a")
    srun = launcher.step_command(["python3", "-V"], {}, tmp_path, "x", None)
    assert not [arg for arg in srun if arg.startswith(("--container", "--no-container"))]
    with pytest.raises(TypeError, match="without containers"):
        launcher.step_command(["python3", "-V"], {}, tmp_path, "x", "img")


@pytest.mark.parametrize(
    ("container", "extra", "said"),
    [
        (
            {"engine_image": "docker.io/vllm/vllm-openai:v0.32.0"},
            {},
            "set the registry off with #: docker.io#vllm/vllm-openai:v0.32.0",
        ),
        ({"mounts": ["data:/data"]}, {}, "slurm.container.mounts[0]: is not a pyxis mount"),
        ({"mounts": ["/a:/b,/c:/d"]}, {}, "slurm.container.mounts[0]: is not a pyxis mount"),
        ({"engine_python": "python3 -u"}, {}, "slurm.container.engine_python: is not a command"),
        ({}, {"process": {"python": "/opt/py/bin/python"}}, "process.python: is a Python on the"),
        ({}, {"model": {"id": "m", "source": "synthetic"}}, "model.source: synthetic makes"),
        ({}, {"observe": {"enabled": True, "grafana": False}}, "observe.enabled: Prometheus runs"),
    ],
)
def test_container_settings_a_cluster_cannot_run_are_refused(
    container: dict[str, Any], extra: dict[str, Any], said: str
) -> None:
    settings = {"engine_image": ENGINE_IMAGE, "router_image": ROUTER_IMAGE} | container
    data = slurm_spec(slurm={"container": settings}) | extra
    assert said in refusal(data)


def test_the_job_script_names_the_images_and_mounts(workspace: Workspace) -> None:
    plan = make_plan(parse_spec(slurm_spec(slurm={"container": CONTAINER}), source="t"))
    script = render_stack(plan, workspace).files[PurePosixPath("compose/t/job.sbatch")]
    assert "pyxis and enroot" in script
    assert f"#   engines, LMCache servers, the benchmark: {ENGINE_IMAGE} (python3)" in script
    assert f"#   the router: {ROUTER_IMAGE} (/opt/venv/bin/python)" in script
    assert "#   mounted: /data:/data:ro+rprivate" in script
    plain = make_plan(parse_spec(slurm_spec(), source="t"))
    assert (
        "pyxis" not in render_stack(plain, workspace).files[PurePosixPath("compose/t/job.sbatch")]
    )


def test_refused_mounts_would_fail_in_pyxis_too() -> None:
    """The spec's rule and the stand-in agree on what pyxis rejects."""
    with pytest.raises(AssertionError):
        pyxis_accepts(["srun", "--container-mounts=data:/data"])
    with pytest.raises(AssertionError):
        pyxis_accepts(["srun", "--container-image=a", "--container-image=b"])
    with pytest.raises(AssertionError):
        pyxis_accepts(["srun", "--container-image=a", "--container-name=x:reuse"])
    with pytest.raises(SpecError):
        parse_spec(
            slurm_spec(slurm={"container": {**CONTAINER, "mounts": ["data:/data"]}}), source="t"
        )
