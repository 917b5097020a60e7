"""Issue 17 item 9: a spec's env and extra_args may not set what the tool sets itself, in any
spelling the engines', router's and LMCache server's parsers accept; the tables of owned
settings cover everything the tool renders."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from generator.errors import SpecError
from generator.paths import Workspace
from generator.spec.owned import (
    _LMCACHE_CONFIG_KEYS,
    _LMCACHE_ENV,
    ENGINE_ENV,
    ENGINE_FLAGS,
    LMCACHE_SERVER_FLAGS,
    ROUTER_FLAGS,
    owned_flag,
)
from generator.stack import load_spec, parse_spec
from tests.conftest import spec_dict
from tests.render.test_shipped_stacks import SHIPPED
from tests.services.test_model import deployment_of

# Settings that reach every branch of the env and command builders.
_VARIANTS = ((), ("gpu.access=nvidia-runtime", "hf.offline=true", "networking.ucx_tls=rc"))


def refusal(data: dict[str, Any]) -> str:
    with pytest.raises(SpecError) as caught:
        parse_spec(data, source="t.yaml")
    return str(caught.value)


def _flags(command: tuple[str, ...]) -> set[str]:
    return {part.split("=", 1)[0] for part in command if part.startswith("--")}


@pytest.mark.parametrize("stack", SHIPPED)
@pytest.mark.parametrize("overrides", _VARIANTS)
def test_every_setting_the_tool_renders_is_in_the_owned_tables(
    workspace: Workspace, stack: str, overrides: tuple[str, ...]
) -> None:
    spec = load_spec(workspace.stack_file(stack))
    extra = set(spec.model.extra_args) | set(spec.prefill.extra_args) | set(spec.decode.extra_args)
    users_env = set(spec.prefill.env) | set(spec.decode.env)  # the spec's own, not the tool's
    variant = overrides if spec.profile.value == "gpu" else ()
    for host in deployment_of(workspace, stack, *variant).hosts:
        for service in host.services:
            flags = _flags(service.command)
            if service.role in ("prefill", "decode"):
                assert set(service.environment) - users_env <= set(ENGINE_ENV), service.name
                assert flags - extra <= set(ENGINE_FLAGS), service.name
            elif service.role == "router" and service.command[0] == "vllm-router":
                assert flags - set(spec.router.extra_args) <= set(ROUTER_FLAGS)
            elif service.command[:2] == ("lmcache", "server"):
                assert flags <= set(LMCACHE_SERVER_FLAGS)
            for config in service.configs:
                if config.name.startswith("lmcache-"):
                    assert set(config.data) <= set(_LMCACHE_CONFIG_KEYS)


@pytest.mark.parametrize(
    "arg",
    [
        "--port",
        "--port=7100",
        "--po",
        "--tensor_parallel_size",
        "--tensor-par=2",
        "-tp",
        "-tp=2",
        "-t",
        "--kv-transfer-config.kv_role=kv_both",
        "--kv_transfer_config",
        "--config",
        "--uds",
    ],
)
def test_owned_engine_flags_are_refused_in_every_spelling(arg: str) -> None:
    for where in ("model", "prefill", "decode"):
        section: dict[str, Any] = {"id": "org/model"} if where == "model" else {}
        data = spec_dict(**{where: {**section, "extra_args": [arg, "1"]}})
        message = refusal(data)
        assert f"{where}.extra_args[0]: {arg!r} sets --" in message
        assert "fix: remove it; set it with" in message


def test_an_uppercase_flag_is_not_vllms() -> None:
    # argparse is case-sensitive: --MODEL is no flag of vLLM's, it fails there on its own.
    assert owned_flag("--MODEL", ENGINE_FLAGS, {}) is None


@given(
    flag=st.sampled_from(sorted(ENGINE_FLAGS)),
    cut=st.integers(min_value=0, max_value=30),
    underscores=st.booleans(),
    value=st.one_of(st.none(), st.text("abc019.", max_size=5)),
)
def test_any_abbreviation_or_spelling_of_an_owned_flag_is_caught(
    flag: str, cut: int, underscores: bool, value: str | None
) -> None:
    name = flag[: max(3, len(flag) - cut)]
    if underscores:
        name = "--" + name[2:].replace("-", "_")
    arg = name if value is None else f"{name}={value}"
    assert owned_flag(arg, ENGINE_FLAGS, {}) is not None


@given(st.from_regex(r"--[a-z][a-z-]{0,30}", fullmatch=True))
def test_a_flag_that_no_owned_flag_starts_with_passes(arg: str) -> None:
    owned = any(flag.startswith(arg) for flag in ENGINE_FLAGS)
    assert (owned_flag(arg, ENGINE_FLAGS, {}) is not None) == owned


def test_values_and_flags_the_tool_leaves_alone_pass() -> None:
    data = spec_dict(decode={"extra_args": ["--enforce-eager", "--max-num-seqs=8", "-O3"]})
    assert parse_spec(data, source="t.yaml").decode.extra_args[0] == "--enforce-eager"


@pytest.mark.parametrize(
    ("name", "fix"),
    [
        ("CUDA_VISIBLE_DEVICES", "placement.prefill.gpus or hosts[].gpus"),
        ("VLLM_NIXL_SIDE_CHANNEL_PORT", "ports.nixl_side_channel"),
        ("VLLM_NIXL_SIDE_CHANNEL_HOST", "hosts[].address"),
        ("PYTHONHASHSEED", "KV chunk keys"),
        ("UCX_TLS", "networking.ucx_tls"),
        ("LMCACHE_CONFIG_FILE", "lmcache.*"),
        ("LMCACHE_CHUNK_SIZE", "lmcache.*"),
        ("HF_HOME", "hf.cache_dir"),
    ],
)
def test_owned_env_is_refused_naming_the_field_that_sets_it(name: str, fix: str) -> None:
    message = refusal(spec_dict(prefill={"env": {name: "1"}}))
    assert f"prefill.env.{name}: is set by the tool itself" in message
    assert fix in message


def test_every_owned_env_name_is_refused() -> None:
    env = dict.fromkeys([*ENGINE_ENV, *_LMCACHE_ENV], "1")
    message = refusal(spec_dict(decode={"env": env}))
    assert message.count("is set by the tool itself") == len(env)


def test_env_the_tool_leaves_alone_passes() -> None:
    spec = parse_spec(spec_dict(decode={"env": {"UCX_RNDV_THRESH": "8192"}}), source="t.yaml")
    assert spec.decode.env == {"UCX_RNDV_THRESH": "8192"}


@pytest.mark.parametrize("arg", ["--port=30001", "--port", "--worker-urls", "--prefill"])
def test_owned_router_flags_are_refused(arg: str) -> None:
    message = refusal(spec_dict(router={"kind": "vllm-router", "extra_args": [arg]}))
    assert f"router.extra_args[0]: {arg!r} sets --" in message


@pytest.mark.parametrize("arg", ["--port", "--chunk_size=512", "--l1-size", "--instance-id=x"])
def test_owned_lmcache_server_flags_are_refused(arg: str) -> None:
    message = refusal(spec_dict(lmcache={"server": {"extra_args": [arg]}}))
    assert f"lmcache.server.extra_args[0]: {arg!r} sets --" in message


def test_router_extra_args_with_the_proxy_are_refused_not_dropped() -> None:
    data = spec_dict(router={"kind": "proxy", "extra_args": ["--log-level", "debug"]})
    assert "router.extra_args: the proxy takes no command-line arguments" in refusal(data)
