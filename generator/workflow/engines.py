"""Which Docker engine drives each host of a plan (``hosts[].docker``, else the local one)."""

from __future__ import annotations

from generator.docker import DockerEndpoint
from generator.errors import PlanError
from generator.plan import HostPlan, Plan
from generator.spec import DockerAccess
from generator.spec.identity import engine_machine

__all__ = ["endpoint_of", "host_endpoint", "host_endpoints"]


def endpoint_of(host: str, access: DockerAccess | None) -> DockerEndpoint:
    """The engine that ``hosts[].docker`` names for ``host`` (none: the local one)."""
    if access is None:
        return DockerEndpoint(host=host)
    return DockerEndpoint(host=host, context=access.context, url=access.url)


def host_endpoint(host: HostPlan) -> DockerEndpoint:
    return endpoint_of(host.name, host.docker)


def host_endpoints(plan: Plan) -> dict[str, DockerEndpoint]:
    """{host name: its engine}, in plan order. Refuses hosts that share an engine: their
    projects, ports and addresses would all land on one machine while the plan spreads them
    over several (a multi-host stack that only renders needs none of this)."""
    endpoints: dict[str, DockerEndpoint] = {}
    seen: dict[str, str] = {}  # machine -> the first host driven through it
    for index, host in enumerate(plan.hosts):
        endpoint = host_endpoint(host)
        machine = engine_machine(host.docker)  # spellings of one machine compare equal
        if machine in seen:
            via = (
                endpoint.target if machine == endpoint.target else f"{endpoint.target} ({machine})"
            )
            raise PlanError(
                f"hosts[{index}].docker",
                f"host {host.name} would be driven through {via}, like host {seen[machine]}",
                fix=_shared_engine_fix(endpoint),
            )
        seen[machine] = host.name
        endpoints[host.name] = endpoint
    return endpoints


def _shared_engine_fix(endpoint: DockerEndpoint) -> str:
    own = (
        "give each host its own engine: hosts[].docker: {context: NAME} (`docker context "
        "create NAME --docker host=ssh://user@host`) or {url: ssh://user@host}"
    )
    if endpoint.is_local:
        return f"{own}; at most one host may use the local engine (no hosts[].docker)"
    return own
