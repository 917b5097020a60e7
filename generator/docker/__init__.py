"""The one adapter to Docker: python-on-whales and the docker CLI are used here and nowhere
else, and their failures become ``DockerError`` here.

Every call goes to one engine, a ``DockerEndpoint`` (a host's ``docker context``, an engine
URL, or the local engine): ``endpoint.py`` (which engine, does it answer), ``engine.py``
(facts and images of one engine), ``compose.py`` (one compose project on one engine),
``transfer.py`` (images from one engine to another without a registry).
"""

from generator.docker.compose import ComposeStack, OneOff, ServiceState
from generator.docker.endpoint import LOCAL, DockerEndpoint, check_reachable
from generator.docker.engine import (
    EngineFacts,
    container_publishing,
    docker_available,
    engine_facts,
    ensure_image,
    image_exists,
    image_id,
    require_docker,
)
from generator.docker.transfer import TransferReport, transfer_images

__all__ = [
    "LOCAL",
    "ComposeStack",
    "DockerEndpoint",
    "EngineFacts",
    "OneOff",
    "ServiceState",
    "TransferReport",
    "check_reachable",
    "container_publishing",
    "docker_available",
    "engine_facts",
    "ensure_image",
    "image_exists",
    "image_id",
    "require_docker",
    "transfer_images",
]
