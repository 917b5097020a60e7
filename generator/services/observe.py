"""observe's services (spec ``observe``), on the stack's first host: Prometheus, and on GPU
hosts Grafana, each reading its config files (generator/observe/files.py).

They listen where the stack's other ports do: on the host only unless ``observe.publish``
(loopback with host networking; published on 127.0.0.1 from a bridge). Upstream's images
carry no Python, so no supervisor wraps them (``max_restarts`` 0: Docker's "no" policy) and
their health checks are wget's, which both images have."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Final

from generator.observe.files import PROMETHEUS_CONFIG_PATH, observe_configs
from generator.observe.traces import OTEL_CONFIG_PATH, collector_config
from generator.plan import Plan
from generator.plan.files import ConfigFile
from generator.plan.observe import (
    GRAFANA_SERVICE,
    OTEL_SERVICE,
    PROMETHEUS_SERVICE,
    RECEIVER_SERVICE,
    ObservePlan,
)
from generator.plan.traces import RECEIVER_IN_IMAGE, collector_bind
from generator.runtimes.kinds import runtime_kind
from generator.services.model import (
    Health,
    HttpEndpoint,
    ImageRef,
    NamedVolume,
    NetworkMode,
    PublishedPort,
    Service,
)
from generator.services.parts import python_health

__all__ = ["PROMETHEUS_DATA", "observe_services"]

_START_PERIOD_S = 60
_TSDB = "/prometheus"  # the upstream image's data folder (a volume of its own there)
# Where a Prometheus process keeps it: a volume of the project (its state folder).
PROMETHEUS_DATA: Final = "prometheus-data"


def observe_services(plan: Plan, images: Mapping[str, ImageRef]) -> tuple[Service, ...]:
    """``images``: by service name, the image of each observe service."""
    observe = plan.observe
    if observe is None:
        return ()
    configs = observe_configs(plan)
    services = [_prometheus(plan, observe, images[PROMETHEUS_SERVICE])]
    if observe.grafana_port is not None:
        services.append(_grafana(plan, observe, images[GRAFANA_SERVICE]))
    if observe.otel_port is not None and observe.receiver_http_port is not None:
        # Ours runs from the engine image (grpcio and OpenTelemetry's packages come with vLLM).
        services.append(_receiver(plan, observe, images["prefill"]))
    elif observe.otel_port is not None:
        services.append(_collector(plan, observe, images[OTEL_SERVICE]))
        configs[OTEL_SERVICE] = _collector_files(plan, observe)
    return tuple(replace(s, configs=configs.get(s.name, ())) for s in services)


def _listen_address(plan: Plan, observe: ObservePlan) -> str:
    """Inside a bridge container every interface (the host side decides, by publishing); on a
    node a login node drives (Slurm), its own address too, where `observe` asks it."""
    outside = runtime_kind(plan.runtime).hosts_elsewhere
    return "0.0.0.0" if observe.public or plan.network == "bridge" or outside else "127.0.0.1"


def _placed(plan: Plan, observe: ObservePlan, service: Service, port: int) -> Service:
    labels = {
        "org.xpyd.stack": plan.stack,
        "org.xpyd.role": service.role,
        "org.xpyd.instance": service.name,
        "org.xpyd.host": observe.host,
    }
    service = replace(service, hostname=service.name, labels=labels)
    if plan.network == "host":
        return replace(service, network=NetworkMode.HOST)
    published = (PublishedPort(port, public=observe.public),)
    return replace(service, network=NetworkMode.BRIDGE, ports=published)


def _wget_health(port: int, path: str) -> Health:
    url = f"http://127.0.0.1:{port}{path}"
    command = ("wget", "-q", "-O", "/dev/null", url)
    return Health(command, _START_PERIOD_S, endpoints=(HttpEndpoint(port, path),))


def _prometheus(plan: Plan, observe: ObservePlan, image: ImageRef) -> Service:
    port = observe.prometheus_port
    # Paths as arguments of their own: the process runtime maps a container path to its host
    # path only where an argument starts with one.
    command = (
        "prometheus",
        "--config.file", PROMETHEUS_CONFIG_PATH,
        "--storage.tsdb.path", _TSDB,
        f"--web.listen-address={_listen_address(plan, observe)}:{port}",
    )  # fmt: skip
    service = Service(PROMETHEUS_SERVICE, observe.host, "prometheus", image, command)
    service = _placed(plan, observe, service, port)
    if not runtime_kind(plan.runtime).containers:
        # A process: `prometheus` from PATH, its data in the project's state folder, and
        # its readiness asked by a Python (a host need not have wget).
        return replace(
            service,
            mounts=(NamedVolume(PROMETHEUS_DATA, _TSDB),),
            health=python_health(port, "/-/ready", _START_PERIOD_S),
        )
    # The upstream image's entrypoint is prometheus itself: the command is its arguments there.
    if image.build is None:
        service = replace(service, command=command[1:])
    return replace(service, health=_wget_health(port, "/-/ready"))


def _collector_files(plan: Plan, observe: ObservePlan) -> tuple[ConfigFile, ...]:
    if observe.otel_port is None:
        return ()
    data = collector_config(plan, observe.otel_port)
    config = ConfigFile(
        "observe-otel-collector-yaml", "observe/otel-collector.yaml", OTEL_CONFIG_PATH, data
    )
    return (config,)


def _collector(plan: Plan, observe: ObservePlan, image: ImageRef) -> Service:
    """Upstream's image has no shell: no health check (engines retry their exports)."""
    port = observe.otel_port
    assert port is not None  # observe_services adds it only with its port
    command = (f"--config={OTEL_CONFIG_PATH}",)
    service = Service(OTEL_SERVICE, observe.host, "otel-collector", image, command)
    return _placed(plan, observe, service, port)


def _receiver(plan: Plan, observe: ObservePlan, image: ImageRef) -> Service:
    """Our OTLP receiver (generator/observe/otlp_receiver.py): gRPC where the engines and
    LMCache servers send, HTTP (/spans, /metrics) where Prometheus and `observe` ask."""
    grpc_port, http_port = observe.otel_port, observe.receiver_http_port
    assert grpc_port is not None  # observe_services adds it only with both ports
    assert http_port is not None
    command = (
        "python3", RECEIVER_IN_IMAGE,
        "--grpc", f"{collector_bind(plan)}:{grpc_port}",
        "--http", f"{_listen_address(plan, observe)}:{http_port}",
    )  # fmt: skip
    service = Service(RECEIVER_SERVICE, observe.host, "otlp-receiver", image, command)
    # On a bridge the engines send by its name, from inside the network: only HTTP is published.
    service = _placed(plan, observe, service, http_port)
    return replace(service, health=python_health(http_port, "/health", _START_PERIOD_S))


def _grafana(plan: Plan, observe: ObservePlan, image: ImageRef) -> Service:
    port = observe.grafana_port
    assert port is not None  # observe_services adds Grafana only with its port
    env = {
        "GF_SERVER_HTTP_ADDR": _listen_address(plan, observe),
        "GF_SERVER_HTTP_PORT": str(port),
        # Dashboards are read-only (provisioned); viewers need no account.
        "GF_AUTH_ANONYMOUS_ENABLED": "true",
        "GF_AUTH_ANONYMOUS_ORG_ROLE": "Viewer",
        "GF_ANALYTICS_REPORTING_ENABLED": "false",
    }
    service = Service(GRAFANA_SERVICE, observe.host, "grafana", image, ())
    service = _placed(plan, observe, service, port)
    return replace(
        service,
        env=env,
        # The admin's password from the shell that runs `up` (Grafana's default is admin).
        passed_env=("GF_SECURITY_ADMIN_PASSWORD",),
        health=_wget_health(port, "/api/health"),
        depends_on=(),
    )
