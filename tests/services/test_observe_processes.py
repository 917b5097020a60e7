"""observe under the process runtime: Prometheus as a process reads the host paths of its
config and rules, keeps its series in the project's state folder, and is asked for readiness by
a Python (the host need not have wget); under compose, the rendered files are unchanged."""

from __future__ import annotations

from generator.observe.files import PROMETHEUS_FILE
from generator.paths import Workspace
from generator.plan.observe import PROMETHEUS_SERVICE
from generator.serializers.process import process_projects
from tests.services.test_model import deployment_of

OBSERVED = ("runtime=process", "observe.enabled=true")


def test_prometheus_runs_from_path_with_its_files_mapped_to_the_host(
    workspace: Workspace,
) -> None:
    (project,) = process_projects(deployment_of(workspace, "cpu-1p1d", *OBSERVED))
    prometheus = project.service(PROMETHEUS_SERVICE)
    config = str(project.directory / PROMETHEUS_FILE)
    data = str(project.state / "prometheus-data")
    assert prometheus.command == (
        "prometheus",
        "--config.file", config,
        "--storage.tsdb.path", data,
        "--web.listen-address=127.0.0.1:9490",
    )  # fmt: skip
    assert prometheus.health[:2] == ("python3", "-c")
    assert "http://127.0.0.1:9490/-/ready" in prometheus.health[2]
    assert prometheus.paths["/etc/prometheus/rules.yml"] == str(
        project.directory / "observe/rules.yml"
    )


def test_the_rules_file_is_named_beside_the_config_for_either_runtime(
    workspace: Workspace,
) -> None:
    """Prometheus reads a relative rule_files entry from its config's folder: /etc/prometheus
    in a container, the rendered folder for a process. An absolute container path would match
    nothing on the host, and a glob matching nothing loads no rule and says nothing."""
    for overrides in (OBSERVED, ("observe.enabled=true",)):
        (host,) = deployment_of(workspace, "cpu-1p1d", *overrides).hosts
        configs = {c.path: c for c in host.configs}
        assert configs[str(PROMETHEUS_FILE)].data["rule_files"] == ["rules.yml"]
        assert "observe/rules.yml" in configs


def test_compose_keeps_prometheus_in_its_container_without_a_volume(
    workspace: Workspace,
) -> None:
    (host,) = deployment_of(workspace, "cpu-1p1d", "observe.enabled=true").hosts
    prometheus = next(s for s in host.services if s.name == PROMETHEUS_SERVICE)
    assert prometheus.mounts == ()
    assert prometheus.health is not None
    assert prometheus.health.command[0] == "wget"
    assert all(volume.key != "prometheus-data" for volume in host.volumes)
    (process_host,) = deployment_of(workspace, "cpu-1p1d", *OBSERVED).hosts
    # The process stack's compose file declares the volume its Prometheus mounts.
    assert any(volume.key == "prometheus-data" for volume in process_host.volumes)


def test_a_gpu_hosts_prometheus_process_is_the_binary_not_the_images_arguments(
    workspace: Workspace,
) -> None:
    """GPU hosts pull upstream's image, whose entrypoint is prometheus: its command there is
    the arguments alone. A process has no entrypoint."""
    (compose_host,) = deployment_of(workspace, "xpyd-1gpu", "runtime=compose", *OBSERVED[1:]).hosts
    pulled = next(s for s in compose_host.services if s.name == PROMETHEUS_SERVICE)
    assert pulled.command[0] == "--config.file"
    (project,) = process_projects(deployment_of(workspace, "xpyd-1gpu", *OBSERVED))
    assert project.service(PROMETHEUS_SERVICE).command[0] == "prometheus"
    assert [s.name for s in project.services if s.role in ("grafana", "otel-collector")] == []
