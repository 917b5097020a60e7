"""Where a host-path model may be mounted in the engine containers (at ``model.id``, read-only):
not on, in or above a path where the tool mounts its own files (one of the two mounts would be
dropped; checks.py says so), nor on, in or above a folder the image itself needs
(``model.id: /usr/lib`` hid the image's libraries), nor on a folder programs write to."""

from __future__ import annotations

from collections.abc import Iterator

from generator.errors import SpecIssue
from generator.spec.models import Spec

__all__ = [
    "IMAGE_SYSTEM_PATHS",
    "IMAGE_WRITTEN_PATHS",
    "TOOL_CONTAINER_PATHS",
    "model_mount_target",
    "system_overlap",
    "tool_path_overlap",
]

# Where the tool mounts into engine containers (tests/spec/test_paths.py pins it to what
# renders): the HF and vLLM caches, config files, secrets, start locks, the image's own files,
# sysfs.
TOOL_CONTAINER_PATHS = (
    "/root/.cache/huggingface",
    "/root/.cache/vllm",
    "/etc/xpyd",
    "/run/secrets",
    "/run/xpyd",  # the start locks of shared GPUs
    "/opt/xpyd",
    "/sys/devices/system/node",
)

# The OS of every engine image, its Python (the cpu and router images' venv) and the tool's
# files (tests/spec/test_model_mount.py pins the image paths to the rendered Dockerfiles).
IMAGE_SYSTEM_PATHS = (
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/opt/venv",
    "/opt/xpyd",
    "/proc",
    "/run",
    "/sbin",
    "/sys",
    "/usr",
    "/var",
)
# Written at run time (temporary files, the home's configs): a model may lie inside, but a
# read-only one on them breaks whatever writes there.
IMAGE_WRITTEN_PATHS = ("/root", "/tmp")


def tool_path_overlap(path: str) -> str | None:
    """The tool's container path that ``path`` is, lies in, or holds."""
    path = path.rstrip("/")  # "/root/.cache/" holds the caches as "/root/.cache" does
    for taken in TOOL_CONTAINER_PATHS:
        if path == taken or path.startswith(taken + "/") or taken.startswith(path + "/"):
            return taken
    return None


def system_overlap(path: str) -> str | None:
    """How ``path`` meets a folder the image needs: 'on X', 'inside X', 'above X', or None."""
    path = path.rstrip("/") or "/"
    for folder in IMAGE_SYSTEM_PATHS:
        if path == folder:
            return f"on {folder}"
        if path.startswith(folder + "/"):
            return f"inside {folder}"
        if folder.startswith(path + "/"):
            return f"above {folder}"
    return f"on {path}" if path in IMAGE_WRITTEN_PATHS else None


def model_mount_target(spec: Spec) -> Iterator[SpecIssue]:
    model = spec.model
    if model.source != "host-path" or not model.id.startswith("/"):
        return  # no mount, or a relative id: refused on its own
    if tool_path_overlap(model.id) is not None:
        return  # checks.py names the tool's mount it would collide with
    where = system_overlap(model.id)
    if where is not None:
        yield SpecIssue(
            "model.id",
            f"a host-path model is mounted read-only at model.id, here {where}, a folder "
            "the engine images need (it would hide what they keep there)",
            "mount the model in a folder of its own, e.g. model.id: /models/llama",
        )
