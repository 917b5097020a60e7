"""Issue 33 class 8: a host-path model is mounted read-only at model.id, so model.id may not
be on, in or above a folder the engine images need (``/usr/lib`` hid the image's libraries),
nor on one programs write to; the image folders are pinned to the committed Dockerfiles."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from generator.errors import SpecError
from generator.spec.model_mount import IMAGE_SYSTEM_PATHS, IMAGE_WRITTEN_PATHS
from generator.stack import parse_spec
from tests.conftest import spec_dict

ROOT = Path(__file__).resolve().parents[2]


def host_path_model(model_id: str) -> str | None:
    """The spec's problems with a host-path model at ``model_id`` (None: it is valid)."""
    data = spec_dict(model={"id": model_id, "source": "host-path", "host_path": "/srv/llama"})
    try:
        parse_spec(data, source="t.yaml")
    except SpecError as error:
        return str(error)
    return None


@pytest.mark.parametrize(
    ("model_id", "where"),
    [
        ("/usr/lib", "inside /usr"),
        ("/usr", "on /usr"),
        ("/usr/", "on /usr"),
        ("/lib", "on /lib"),
        ("/lib64/m", "inside /lib64"),
        ("/bin", "on /bin"),
        ("/etc/models", "inside /etc"),
        ("/var/lib/models", "inside /var"),
        ("/opt/venv", "on /opt/venv"),
        ("/opt/venv/lib/m", "inside /opt/venv"),
        ("/dev/shm/m", "inside /dev"),
        ("/proc/m", "inside /proc"),
        ("/tmp", "on /tmp"),
    ],
)
def test_a_model_over_a_folder_the_image_needs_is_refused(model_id: str, where: str) -> None:
    message = host_path_model(model_id)
    assert message is not None
    assert f"model.id: a host-path model is mounted read-only at model.id, here {where}, " in (
        message
    )
    assert "fix: mount the model in a folder of its own, e.g. model.id: /models/llama" in message


@pytest.mark.parametrize("model_id", ["/opt", "/opt/xpyd/models", "/etc", "/root", "/root/.cache/"])
def test_a_model_over_the_tools_own_mounts_is_named_once(model_id: str) -> None:
    message = host_path_model(model_id)
    assert message is not None
    assert "1 problem" in message
    assert "model.id: the model would be mounted over /" in message


@pytest.mark.parametrize(
    "model_id", ["/models/llama", "/srv/m", "/mnt/m", "/tmp/llama", "/root/models", "/opt/models"]
)
def test_a_model_in_a_folder_of_its_own_passes(model_id: str) -> None:
    assert host_path_model(model_id) is None


def copied_to(dockerfile: Path) -> list[str]:
    """Where the Dockerfile's COPY instructions write in the image."""
    targets = []
    for line in dockerfile.read_text().splitlines():
        if line.startswith("COPY "):
            rest = line.removeprefix("COPY ").strip()
            words = json.loads(rest) if rest.startswith("[") else shlex.split(rest)
            targets.append(words[-1])
    return targets


def test_every_folder_the_images_are_given_is_listed() -> None:
    dockerfiles = sorted(ROOT.glob("images/*/*.Dockerfile"))
    assert dockerfiles
    folders = IMAGE_SYSTEM_PATHS + IMAGE_WRITTEN_PATHS
    for dockerfile in dockerfiles:
        for target in copied_to(dockerfile):
            assert any(target == f or target.startswith(f + "/") for f in folders), (
                dockerfile,
                target,
            )
