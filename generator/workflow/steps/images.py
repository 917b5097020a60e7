"""Compose's tasks before anything starts: the wheels the images install, the image builds on
this machine's engine, and shipping images to the hosts' own engines."""

from __future__ import annotations

import time
from collections.abc import Callable

from generator.owned import append_descriptor, remove_file
from generator.plan import Plan
from generator.services.model import ImageRef
from generator.workflow.context import RunContext
from generator.workflow.engines import host_endpoint
from generator.workflow.hosts import HostStack
from generator.workflow.runtimes.docker_host import docker_host
from generator.workflow.steps.prepare import every
from generator.workflow.task import SkipTask

__all__ = [
    "build_engine_images",
    "build_router_image",
    "fetch_wheels",
    "needs_shipping",
    "ship_images_to",
]


def fetch_wheels(context: RunContext) -> str:
    from generator.wheelhouse import fill_wheelhouse

    return fill_wheelhouse(context.plan, context.workspace, every(context, "wheels"))


def _images_of(context: RunContext, roles: set[str]) -> dict[str, tuple[HostStack, str]]:
    """Each image tag of these roles, with one (host, service) whose build section makes it."""
    found: dict[str, tuple[HostStack, str]] = {}
    for stack in context.hosts.values():
        for service in stack.services.services:
            if service.role in roles and service.image.tag not in found:
                found[service.image.tag] = (stack, service.name)
    return found


def _build(context: RunContext, roles: set[str], log_name: str) -> str:
    """Builds run on this machine's engine, whatever host the services go to (then shipped):
    the build cache and the base images are here."""
    from generator.docker import image_exists

    images = _images_of(context, roles)
    if not context.options.rebuild and all(image_exists(tag) for tag in images):
        raise SkipTask(f"present: {', '.join(images)}")  # tags hash their inputs
    log_path = context.record.logs_dir / log_name
    remove_file(context.run_dir, log_path)  # written anew, never through a link
    descriptor = append_descriptor(context.run_dir, log_path)
    started = time.monotonic()
    progress = every(context, f"building {', '.join(sorted(roles))}")
    with open(descriptor, "w", encoding="utf-8") as log:

        def on_line(line: str) -> None:
            log.write(line + "\n")
            progress(line)

        for stack in {id(s): s for s, _ in images.values()}.values():
            services = [name for s, name in images.values() if s is stack]
            builder = docker_host(stack, "an image build").builder
            assert builder is not None  # every compose host has one
            builder.build(services, on_line)
    return f"{time.monotonic() - started:.0f} s, log {log_path.relative_to(context.run_dir)}"


def build_engine_images(context: RunContext) -> str:
    # One service per image is enough: the tag is shared; the roles share their base stages,
    # which the build cache makes once.
    return _build(context, {"prefill", "decode", "lmcache"}, "build-engines.log")


def build_router_image(context: RunContext) -> str:
    # And observe's Prometheus on cpu (Debian's package): small, and made with the router's base.
    return _build(context, {"router", "prometheus"}, "build-router.log")


def needs_shipping(plan: Plan, host: str) -> bool:
    """Images are built on this machine's engine: only other engines need a copy."""
    return not host_endpoint(plan.host(host)).is_local


def _pulled_by_host(image: ImageRef) -> bool:
    return image.build is None and image.pull_policy == "missing"


def ship_images_to(host: str) -> Callable[[RunContext], str]:
    def ship(context: RunContext) -> str:
        from generator.docker import LOCAL, transfer_images

        stack = docker_host(context.hosts[host], "shipping images")
        # Not the images a host pulls itself (observe's, from their registries, pinned).
        services = stack.services.services
        tags = sorted({s.image.tag for s in services if not _pulled_by_host(s.image)})
        report = transfer_images(tags, LOCAL, stack.endpoint, every(context, host))
        if not report.sent:
            raise SkipTask(f"already on {stack.endpoint.label}")
        size = f"{report.bytes_sent >> 20} MiB in {report.seconds:.0f} s"
        return f"{len(report.sent)} of {len(tags)} image(s), {size}"

    return ship
