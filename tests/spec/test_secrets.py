"""Issue 17 item 10: credentials other than the HF token are refused wherever a spec holds
them (env values, env names that say so, flags that pass one, any value shaped like a known
key), never echoed; engines take them through <role>.secret_env, which the rendered files
name but never fill."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from generator.errors import SpecError, StackError
from generator.paths import Workspace
from generator.planner import make_plan
from generator.render import render_stack
from generator.runtimes.process_commands import _passed_env
from generator.serializers.process_file import load_process_project
from generator.spec.secret_shapes import names_a_secret
from generator.stack import load_spec, parse_spec
from tests.conftest import spec_dict

ROOT = Path(__file__).resolve().parents[2]
OPENAI = "sk-" + "A1b2C3d4E5f6" * 3
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
AWS_ID = "AKIA" + "IOSFODNN7EXAMPLE"
GITHUB = "ghp_" + "a1B2c3D4e5" * 4


def refusal(data: dict[str, Any], *overrides: str) -> str:
    with pytest.raises(SpecError) as caught:
        parse_spec(data, source="t.yaml", overrides=overrides)
    return str(caught.value)


@pytest.mark.parametrize(
    ("env", "field"),
    [
        ({"OPENAI_API_KEY": "anything-at-all"}, "prefill.env.OPENAI_API_KEY"),
        ({"AWS_SECRET_ACCESS_KEY": AWS_SECRET}, "prefill.env.AWS_SECRET_ACCESS_KEY"),
        ({"AWS_SESSION_TOKEN": "FwoGZXIvYXdzE"}, "prefill.env.AWS_SESSION_TOKEN"),
        ({"DB_PASSWORD": "hunter2"}, "prefill.env.DB_PASSWORD"),
        ({"SOMETHING": OPENAI}, "prefill.env.SOMETHING"),
        ({"SOMETHING": f"Bearer {GITHUB}"}, "prefill.env.SOMETHING"),
        ({"AWS_ACCESS_KEY_ID": AWS_ID}, "prefill.env.AWS_ACCESS_KEY_ID"),
    ],
)
def test_credentials_in_env_are_refused_and_never_echoed(env: dict[str, str], field: str) -> None:
    message = refusal(spec_dict(prefill={"env": env}))
    assert f"{field}: " in message
    assert "secret_env" in message
    assert all(value not in message for value in env.values())


@pytest.mark.parametrize(
    ("args", "index"),
    [
        (["--api-key", OPENAI], 0),
        (["--api-key=plain-words"], 0),
        (["--enforce-eager", "--api_key", "abc-secret-value"], 1),
        (["--hf-token", "my-hf-secret-value"], 0),
        (["--hf-overrides", f'{{"key": "{OPENAI}"}}'], 1),
    ],
)
def test_credentials_in_args_are_refused_and_never_echoed(args: list[str], index: int) -> None:
    for where in ("decode", "router", "model"):
        section: dict[str, Any] = {"id": "org/model"} if where == "model" else {}
        message = refusal(spec_dict(**{where: {**section, "extra_args": args}}))
        assert f"{where}.extra_args[{index}]: " in message
        assert all(arg not in message for arg in args if not arg.startswith("--"))


def test_a_credential_passed_with_set_is_refused() -> None:
    message = refusal(spec_dict(), f"decode.env={{VLLM_API_KEY: {OPENAI}}}")
    assert "decode.env.VLLM_API_KEY" in message
    assert OPENAI not in message


@pytest.mark.parametrize(
    "env",
    [
        {"HF_HUB_DISABLE_IMPLICIT_TOKEN": "1"},
        {"TOKENIZERS_PARALLELISM": "false"},
        {"VLLM_MAX_TOKENS_PER_STEP": "4096"},
    ],
)
def test_switches_and_look_alike_names_pass(env: dict[str, str]) -> None:
    assert parse_spec(spec_dict(prefill={"env": env}), source="t.yaml").prefill.env == env


def test_flags_that_carry_no_credential_pass() -> None:
    args = ["--max-num-batched-tokens", "512", "--return-tokens-as-token-ids", "--tokenizer", "x"]
    spec = parse_spec(spec_dict(decode={"extra_args": args}), source="t.yaml")
    assert spec.decode.extra_args == args


@given(
    prefix=st.from_regex(r"[A-Z][A-Z0-9]{0,8}_", fullmatch=True),
    ending=st.sampled_from(["API_KEY", "SECRET", "TOKEN", "PASSWORD", "SECRET_ACCESS_KEY"]),
)
def test_any_name_ending_in_a_credential_word_names_a_secret(prefix: str, ending: str) -> None:
    assert names_a_secret(prefix + ending)
    assert names_a_secret("--" + (prefix + ending).lower().replace("_", "-"))


@given(st.from_regex(r"[A-Za-z0-9]{16,40}", fullmatch=True))
def test_any_sk_key_is_refused_wherever_it_sits(body: str) -> None:
    message = refusal(spec_dict(description=f"ours: sk-{body}"))
    assert "description: contains what looks like a credential" in message
    assert body not in message


def test_secret_env_names_the_variable_and_never_holds_it() -> None:
    workspace = Workspace(ROOT)
    name = "AWS_SECRET_ACCESS_KEY"
    spec = load_spec(workspace.stack_file("cpu-1p1d"), [f"prefill.secret_env=[{name}]"])
    plan = make_plan(spec)
    assert plan.prefill[0].secret_env == ("AWS_SECRET_ACCESS_KEY",)
    assert "AWS_SECRET_ACCESS_KEY" in plan.model_dump_json()
    rendered = render_stack(plan, workspace)
    compose = next(t for p, t in rendered.files.items() if p.name == "compose.yaml")
    assert f"{name}: ${{{name}:?set {name} in the shell that runs up}}" in compose
    assert compose.count("${AWS_SECRET_ACCESS_KEY") == 1  # the prefiller only


def test_an_engine_api_key_is_refused_until_the_routers_send_one() -> None:
    """Wherever it is given: no fix may point to another place that is refused too."""
    for override, field in (
        ("decode.secret_env=[VLLM_API_KEY]", "decode.secret_env[0]"),
        ("decode.env={VLLM_API_KEY: anything-at-all}", "decode.env.VLLM_API_KEY"),
        ('decode.extra_args=["--api_key", "abc-secret-value"]', "decode.extra_args[0]"),
    ):
        message = refusal(spec_dict(), override)
        assert f"{field}: an engine API key is not supported yet" in message
        assert "fix: remove it; keep the engines' ports off untrusted networks" in message
        assert "abc-secret-value" not in message
        assert "anything-at-all" not in message


def test_secret_env_reaches_the_process_runtime_from_the_callers_shell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workspace = Workspace(ROOT)
    overrides = ["runtime=process", "decode.secret_env=[MY_SERVICE_API_KEY]"]
    plan = make_plan(load_spec(workspace.stack_file("cpu-1p1d"), overrides))
    (project,) = render_stack(plan, workspace).processes
    path = tmp_path / project.plan_file
    path.parent.mkdir(parents=True)
    path.write_text(project.text)
    decode = load_process_project(path, tmp_path).service("decode-0")
    assert decode.passed_env == ("MY_SERVICE_API_KEY",)
    monkeypatch.delenv("MY_SERVICE_API_KEY", raising=False)
    with pytest.raises(StackError, match="takes MY_SERVICE_API_KEY from the environment"):
        _passed_env(decode)
    monkeypatch.setenv("MY_SERVICE_API_KEY", "from-the-shell")
    assert _passed_env(decode) == {"MY_SERVICE_API_KEY": "from-the-shell"}
    assert "from-the-shell" not in project.text
    assert os.environ["MY_SERVICE_API_KEY"] == "from-the-shell"


@pytest.mark.parametrize(
    ("secret_env", "expected"),
    [
        (["A_KEY", "A_KEY"], "prefill.secret_env[1]: lists A_KEY twice"),
        (["CUDA_VISIBLE_DEVICES"], "is set by the tool itself"),
        (["HF_TOKEN"], "fix: use hf.token"),
    ],
)
def test_secret_env_conflicts_are_refused(secret_env: list[str], expected: str) -> None:
    assert expected in refusal(spec_dict(prefill={"secret_env": secret_env}))


def test_secret_env_and_env_of_one_name_are_refused() -> None:
    data = spec_dict(prefill={"secret_env": ["MY_KEY"], "env": {"MY_KEY": "x"}})
    assert "lists MY_KEY and in prefill.env" in refusal(data)
