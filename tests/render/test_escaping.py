"""Values are escaped for where they land: `$` doubled in compose files (compose would
interpolate the host's environment), JSON arrays for paths in Dockerfile COPY/RUN, and ARG
defaults that cannot split or expand."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import jinja2
import pytest
import yaml

from generator.errors import RenderError
from generator.paths import Workspace
from generator.planner import make_plan
from generator.render import render_stack
from generator.render.jinja import bind_mount, render_template
from generator.render.writer import write_rendered
from generator.stack import load_spec
from tests.tools import compose_cli

SNEAKY = ["--x=${AWS_SECRET_ACCESS_KEY}", "$HOME", "a$$b", "${X:-default}", "$"]


def test_dollars_reach_the_container_as_written(workspace: Workspace, tmp_path: Path) -> None:
    overrides = [f"decode.extra_args={json.dumps(SNEAKY)}", "decode.env={MY_VAR: '${PATH}'}"]
    spec = load_spec(workspace.stack_file("cpu-1p1d"), overrides)
    write_rendered(render_stack(make_plan(spec), workspace), tmp_path)
    compose_file = tmp_path / "compose/cpu-1p1d/compose.yaml"
    env = {**os.environ, "AWS_SECRET_ACCESS_KEY": "leaked-secret", "X": "leaked-x"}
    result = subprocess.run(
        [*compose_cli(), "-f", str(compose_file), "config", "--format", "json"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    assert "leaked" not in result.stdout
    assert "variable is not set" not in result.stderr
    decode = json.loads(result.stdout)["services"]["decode-0"]
    # `config` prints the model back as compose text, so `$` comes out doubled again.
    assert [arg.replace("$$", "$") for arg in decode["command"][-5:]] == SNEAKY
    assert decode["environment"]["MY_VAR"].replace("$$", "$") == "${PATH}"


def test_strings_a_yaml_12_reader_would_take_for_numbers_stay_strings(
    workspace: Workspace, tmp_path: Path
) -> None:
    """PyYAML writes "09" bare (not an octal in YAML 1.1); compose reads it as a float."""
    numbers = ["09", "1e5", "2024-1-2", "+inf", "0o17", "1_000", ".5", "TRUE", "0:9", "0x1F",
               "-0.5e-3", ".nan", "null", "~", "2024-01-02T03:04:05"]  # fmt: skip
    assert "- 09\n" in yaml.safe_dump(numbers)  # why dump_yaml quotes: PyYAML leaves it bare
    spec = load_spec(
        workspace.stack_file("cpu-1p1d"),
        [f"decode.extra_args={json.dumps(numbers)}", "decode.env={MY_VAR: '08'}"],
    )
    write_rendered(render_stack(make_plan(spec), workspace), tmp_path)
    compose_file = tmp_path / "compose/cpu-1p1d/compose.yaml"
    result = subprocess.run(
        [*compose_cli(), "-f", str(compose_file), "config", "--format", "json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    decode = json.loads(result.stdout)["services"]["decode-0"]
    assert decode["command"][-len(numbers) :] == numbers
    assert decode["environment"]["MY_VAR"] == "08"


def test_spec_paths_in_dockerfiles_are_json_arrays(workspace: Workspace) -> None:
    overrides = ["images.pip.extra_ca_file=certs/proxy.pem", "images.pip.wheelhouse=wheel+house"]
    spec = load_spec(workspace.stack_file("cpu-1p1d"), overrides)
    rendered = render_stack(make_plan(spec), workspace)
    text = next(image.text for image in rendered.images if image.role == "prefill")
    # The wheelhouse is mounted for the venv's step (the spec allows only plain characters).
    assert "--mount=type=bind,source=images/wheel+house,target=/tmp/wheelhouse" in text
    assert 'COPY ["images/certs/proxy.pem", "/usr/local/share/ca-certificates/' in text
    assert 'RUN ["python3", "/opt/xpyd/make_tiny_model.py", "/opt/xpyd/models/tiny-llama"]' in text


@pytest.mark.parametrize("value", ["debian bookworm", "x\nRUN id", "$EVIL", 'a"b', "a\\b"])
def test_arg_defaults_refuse_what_docker_would_split_or_expand(
    workspace: Workspace, value: str
) -> None:
    """The spec's types refuse these first; the template refuses them on its own too."""
    from generator.versions import load_versions

    context = {
        "base_image": value,
        "versions": load_versions().packages,
        "pip": load_spec(workspace.stack_file("xpyd")).images.pip,
        "lock": "images/locks/router.txt",
    }
    with pytest.raises(RenderError, match="cannot be an ARG default"):
        render_template(workspace.templates_dir, "router.Dockerfile.j2", **context)


@pytest.mark.parametrize("path", ["wheel house", "a,b", "x=y", "$HOME", ""])
def test_a_build_mount_refuses_what_would_end_or_split_its_flag(path: str) -> None:
    with pytest.raises(jinja2.TemplateRuntimeError, match="cannot be a build mount's path"):
        bind_mount(path, "/tmp/x")
    assert bind_mount("images/wheel+house", "/tmp/wheelhouse") == (
        "--mount=type=bind,source=images/wheel+house,target=/tmp/wheelhouse"
    )
