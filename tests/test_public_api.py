"""The public surface of each package is explicit (``__all__``) and pinned here."""

from __future__ import annotations

import importlib

import pytest

PUBLIC = {
    "generator.spec": {
        "Spec",
        "read_spec_file",
        "validate_spec",
        "apply_overrides",
        "Topology",
        "Profile",
        "RouterKind",
    },
    "generator.plan": {
        "Plan",
        "EnginePlan",
        "RouterPlan",
        "HostPlan",
        "Role",
        "ModelPlan",
        "HFPlan",
        "TopologyPlan",
        "EngineKV",
        "SidecarPlan",
    },
    "generator.planner": {"make_plan"},
    "generator.topologies": {"TOPOLOGIES", "TopologyUnit", "topology_of", "topology_unit"},
    "generator.routers": {"ROUTERS", "RouterUnit", "router_of", "router_unit", "router_kind"},
    "generator.datasets": {
        "DATASETS",
        "DatasetUnit",
        "DatasetSettings",
        "DatasetError",
        "dataset_unit",
        "dataset_settings",
    },
    "generator.render": {
        "RenderedStack",
        "render_stack",
        "ImageBuild",
        "ComposeProject",
        "ProcessProject",
    },
    "generator.serializers.process": {
        "ProcessProject",
        "ProcessService",
        "process_projects",
        "map_path",
        "state_dir",
    },
    "generator.runtimes": {"ServiceRuntime", "ServiceState", "OneOffRun"},
    "generator.runtimes.process": {"ProcessStack", "Pythons", "rendered_process_stack"},
    "generator.runtimes.groups": {"spawn", "alive", "stop_group", "group_of"},
    "generator.serializers.process_file": {"MAX_PLAN_BYTES", "load_process_project"},
    "generator.owned": {
        "append_descriptor",
        "check_no_links",
        "owned_dir",
        "read_bounded",
        "read_from",
        "read_tail",
        "remove_file",
        "remove_tree",
        "write_text",
    },
    "generator.stack_lock": {"LOCKS_DIR", "holding"},
    "generator.envs": {"default_pythons", "make_envs", "make_synthetic_model", "model_dir"},
    "generator.cpu_features": {
        "CpuFeatures",
        "cpu_features",
        "request_amx_permission",
        "amx_permitted",
        "install_amx_workaround",
    },
    "generator.services.model": {
        "ConfigFile",
        "Deployment",
        "HostServices",
        "Service",
        "ImageRef",
        "Health",
        "GpuRequest",
        "PublishedPort",
        "NetworkMode",
        "Mount",
    },
    "generator.services.build": {"build_deployment", "image_ref", "project_name"},
    "generator.serializers.compose": {
        "ComposeProject",
        "compose_document",
        "compose_projects",
        "compose_service",
        "compose_text",
        "compose_text_with",
    },
    "generator.docker": {
        "LOCAL",
        "ComposeStack",
        "DockerEndpoint",
        "TransferReport",
        "check_reachable",
        "image_id",
        "transfer_images",
    },
    "generator.bench": {"BenchJob", "BenchReport", "check_fits", "load_points", "run_benchmark"},
    "generator.stack": {"UNIT_RULES", "baseline_spec", "load_spec", "parse_spec"},
    "generator.workflow.engines": {"endpoint_of", "host_endpoint", "host_endpoints"},
    "generator.runtimes.isolation": {
        "ContainerView",
        "PidNamespace",
        "VIEW_FAILED",
        "run_in_view",
        "view_command",
        "view_script",
    },
    "generator.errors": {
        "XpydError",
        "SpecError",
        "SpecIssue",
        "PlanError",
        "RenderError",
        "DriftError",
        "DockerError",
        "StackError",
    },
}


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_public_names(module: str) -> None:
    exported = set(importlib.import_module(module).__all__)
    assert PUBLIC[module] <= exported
    for name in exported:
        assert hasattr(importlib.import_module(module), name)


PURE = (
    "generator.spec, generator.stack, generator.limits, generator.plan, generator.planner, "
    "generator.topologies, "
    "generator.routers, generator.datasets, generator.services.build, generator.services.model, "
    "generator.serializers.compose, generator.serializers.process, generator.render, "
    "generator.render.writer"
)


@pytest.mark.parametrize("first", ["generator.spec", "generator.services.build"])
def test_spec_plan_services_serializers_render_never_import_docker_workflow_or_cli(
    first: str,
) -> None:
    """Data flows one way: spec -> plan -> services -> serializers/render never reach for
    Docker, the workflow, the CLI or the console. Checked in a fresh interpreter (other tests
    import those modules); importing the service model first also proves it has no cycle with
    render."""
    import subprocess
    import sys

    probe = (
        f"import sys, {first}, {PURE}; "
        "print(sorted(m for m in sys.modules if m.startswith(('python_on_whales', "
        "'generator.workflow', 'generator.docker', 'generator.cli', 'generator.console', "
        "'httpx'))))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"
