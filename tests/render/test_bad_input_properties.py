"""Issue 8, properties: random and hostile strings pushed through every spec string field.

Each example is either refused with a SpecError (clean text, no token echoed) or accepted;
an accepted one must render, and render exactly like its "twin" (the same spec with
known-good values in the random fields): the same Dockerfile instructions, the same compose
shape. So a value can change a value, never add a line, an instruction or a key. Then every
accepted variant goes through the real checkers in batches: one `docker compose config` over
all compose projects merged (each value must come back as written: nothing interpolated from
the host), one hadolint run over every distinct Dockerfile. Random YAML text and --set
assignments must end in a SpecError too: no traceback, no hang.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import tempfile
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from generator.errors import PlanError, SpecError
from generator.paths import Workspace
from generator.planner import make_plan
from generator.render import RenderedStack, render_stack
from generator.render.writer import write_rendered
from generator.serializers.yaml_text import dump_yaml
from generator.stack import load_spec, parse_spec
from tests.tools import compose_cli, hadolint

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "hf_" + "Z0y9X8w7V6" * 3
CANARY = "XPYD_CANARY"
FRAGMENTS = [
    "$", "$$", "${", "}", f"${{{CANARY}}}", f"${CANARY}", "${X:-d}", "\n", "\r", "\t", " ", '"',
    "'", "\\", "`", "$(id)", ";", "&&", "|", "#", ":", "=", ",", "/", "../", "..", ".", "-", "_",
    "[red]", "[/]", "\x00", "\x1b[2J", "\u202e", "\u2028", "\x85", "é", "~", "*", "?", "@", "%",
    "{", "[", "]", "--", "a", "Z", "0", "9", "x", "localhost", "https://", "sha256", TOKEN,
]  # fmt: skip
# Pieces most fields accept: mixed with the rest, many variants get through to the renderer.
PLAUSIBLE = [
    "a", "Z", "0", "9", ".", "-", "_", "/", ":", "x", "localhost", "https://", "@", "+", "=", ",",
    "$", "$$", f"${{{CANARY}}}", f"${CANARY}", " ", "[red]", "é", "~", "'", '"', "{", "}", "%",
]  # fmt: skip
_PLAUSIBLE_TEXT = st.lists(st.sampled_from(PLAUSIBLE), min_size=1, max_size=6).map("".join)
HOSTILE = st.one_of(
    _PLAUSIBLE_TEXT,
    _PLAUSIBLE_TEXT,  # twice: half the random values are plausible
    st.lists(st.sampled_from(FRAGMENTS), min_size=0, max_size=6).map("".join),
    st.text(max_size=12),
)


@dataclass(frozen=True)
class Slot:
    path: str  # dotted, list indexes as numbers
    good: str
    is_key: bool = False  # the slot is a key of the mapping at `path`


def set_path(data: dict[str, Any], path: str, value: str, *, is_key: bool = False) -> None:
    *parents, last = path.split(".")
    node: Any = data
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
    if is_key:
        node[last] = {value: "1"}
    elif isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value


CPU_BASE: dict[str, Any] = {
    "name": "p",
    "description": "d",
    "topology": "nixl-mp",
    "profile": "cpu",
    "model": {"id": "/opt/xpyd/models/m", "source": "synthetic", "served_name": "m",
              "extra_args": ["--enforce-eager", "x"]},
    "prefill": {"env": {}, "extra_args": ["x"]},
    "decode": {"env": {"A": "x"}},
    "hosts": [{"name": "local", "address": "127.0.0.1", "cpus": [0, 1],
               "docker": {"context": "node-a"}}],
    "lmcache": {"server": {"extra_args": ["x"]}},
    "router": {"kind": "vllm-router", "host": "local", "policy": "round_robin",
               "extra_args": ["x"]},
    "networking": {"ucx_tls": "tcp", "ucx_net_devices": "all"},
    "images": {"engine_base": "debian:bookworm", "router_base": "debian:bookworm",
               "registry": "xpyd", "versions": {"lmcache": "0.5.6", "nixl": "0.6.1"},
               "pip": {"index_url": "https://pypi.example/simple",
                       "extra_index_urls": ["https://extra.example/simple"],
                       "extra_ca_file": "certs/ca.pem", "wheelhouse": "wheelhouse"}},
    "hf": {"token": {"env_file": "secrets/hf.env"}},
}  # fmt: skip
GPU_BASE: dict[str, Any] = {
    "name": "p",
    "topology": "lmcache-pd",
    "model": {"id": "/models/m", "source": "host-path", "host_path": "/srv/models/m"},
    "prefill": {"extra_args": ["x"]},
    "decode": {"env": {}},
    "hosts": [{"name": "local", "address": "10.0.0.1", "gpus": [0, 1],
               "docker": {"url": "ssh://ops@gpu-a:22"}}],
    "lmcache": {"pd": {"backends": ["UCX"]}},
    "router": {"kind": "proxy", "session_header": "x-session", "extra_args": ["x"]},
    "networking": {"ucx_tls": "cuda_ipc,tcp"},
    "images": {"engine_base": "vllm/vllm-openai:v1", "registry": "registry.example:5000/t"},
    "hf": {"cache_dir": "/srv/hf", "token": {"file": "secrets/token"}},
}  # fmt: skip
SLOTS = {
    "cpu": [
        Slot("name", "p"), Slot("description", "d"), Slot("model.id", "/opt/xpyd/models/m"),
        Slot("model.served_name", "m"), Slot("model.extra_args.1", "x"),
        Slot("prefill.env", "K", is_key=True), Slot("decode.env.A", "x"),
        Slot("prefill.extra_args.0", "x"), Slot("hosts.0.name", "local"),
        Slot("hosts.0.address", "127.0.0.1"), Slot("lmcache.server.extra_args.0", "x"),
        Slot("router.host", "local"), Slot("router.policy", "round_robin"),
        Slot("router.extra_args.0", "x"), Slot("networking.ucx_tls", "tcp"),
        Slot("networking.ucx_net_devices", "all"), Slot("images.engine_base", "debian:bookworm"),
        Slot("images.router_base", "debian:bookworm"), Slot("images.registry", "xpyd"),
        Slot("images.versions.lmcache", "0.5.6"), Slot("images.versions.nixl", "0.6.1"),
        Slot("images.pip.index_url", "https://pypi.example/simple"),
        Slot("images.pip.extra_index_urls.0", "https://extra.example/simple"),
        Slot("images.pip.extra_ca_file", "certs/ca.pem"),
        Slot("images.pip.wheelhouse", "wheelhouse"), Slot("hf.token.env_file", "secrets/hf.env"),
        Slot("topology", "nixl-mp"), Slot("profile", "cpu"), Slot("model.dtype", "auto"),
        Slot("router.kind", "vllm-router"), Slot("lmcache.server.eviction_policy", "LRU"),
        Slot("placement.decode.hosts", "local"), Slot("model.source", "synthetic"),
        Slot("hosts.0.docker.context", "node-a"),
    ],
    "gpu": [
        Slot("model.id", "/models/m"), Slot("model.host_path", "/srv/models/m"),
        Slot("prefill.extra_args.0", "x"), Slot("decode.env", "K", is_key=True),
        Slot("hosts.0.address", "10.0.0.1"), Slot("lmcache.pd.backends.0", "UCX"),
        Slot("router.session_header", "x-session"), Slot("router.extra_args.0", "x"),
        Slot("networking.ucx_tls", "cuda_ipc,tcp"),
        Slot("images.engine_base", "vllm/vllm-openai:v1"),
        Slot("images.registry", "registry.example:5000/t"), Slot("hf.cache_dir", "/srv/hf"),
        Slot("hf.token.file", "secrets/token"), Slot("gpu.access", "cdi"),
        Slot("hosts.0.name", "local"), Slot("router.host", "local"),
        Slot("placement.prefill.hosts", "local"), Slot("lmcache.pd.buffer_device", "cuda"),
        Slot("hosts.0.docker.url", "ssh://ops@gpu-a:22"),
    ],
}  # fmt: skip
BASES = {"cpu": CPU_BASE, "gpu": GPU_BASE}


@st.composite
def variants(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """(variant, twin, the random values used): at least one slot random."""
    base = draw(st.sampled_from(sorted(BASES)))
    variant, twin = copy.deepcopy(BASES[base]), copy.deepcopy(BASES[base])
    slots = SLOTS[base]
    chosen = draw(st.sets(st.sampled_from(slots), min_size=1, max_size=2))
    values = []
    for slot in slots:
        set_path(twin, slot.path, slot.good, is_key=slot.is_key)
        value = draw(HOSTILE) if slot in chosen else slot.good
        values += [value] if slot in chosen else []
        set_path(variant, slot.path, value, is_key=slot.is_key)
    return variant, twin, values


def check_refusal(error: SpecError) -> None:
    text = str(error)
    assert TOKEN not in text
    forbidden = [c for c in text if c != "\n" and unicodedata.category(c) in ("Cc", "Cf", "Zl")]
    assert not forbidden, text
    assert all(issue.field and issue.problem and issue.fix for issue in error.issues)


def instructions(dockerfile: str) -> list[str]:
    joined = dockerfile.replace("\\\n", " ")
    return [
        line.split()[0]
        for line in joined.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]


def shape(value: Any) -> Any:
    if isinstance(value, dict):
        return ("map", tuple(sorted(repr(shape(item)) for item in value.values())))
    if isinstance(value, list):
        return ("list", tuple(shape(item) for item in value))
    return type(value).__name__


def assert_renders_like_twin(variant: RenderedStack, twin: RenderedStack) -> None:
    assert len(variant.files) == len(twin.files)
    for mine, theirs in zip(variant.images, twin.images, strict=True):
        assert instructions(mine.text) == instructions(theirs.text), mine.text
    for mine_p, theirs_p in zip(variant.projects, twin.projects, strict=True):
        assert shape(mine_p.document) == shape(theirs_p.document)
    for path, text in variant.files.items():
        if path.suffix in (".yaml", ".json"):
            yaml.safe_load(text)  # every config file still parses


@dataclass
class Accepted:
    rendered: RenderedStack
    values: list[str]


def test_hostile_strings_in_every_field(workspace: Workspace, tmp_path: Path) -> None:
    accepted: list[Accepted] = []
    outcomes = {"refused": 0, "accepted": 0, "unplaceable": 0}

    @settings(
        max_examples=400,
        deadline=5000,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(variants())
    def one(example: tuple[dict[str, Any], dict[str, Any], list[str]]) -> None:
        data, twin_data, values = example
        try:
            spec = parse_spec(data, source="hypothesis")
            plan = make_plan(spec)
        except SpecError as error:
            check_refusal(error)
            outcomes["refused"] += 1
            return
        except PlanError:
            outcomes["unplaceable"] += 1
            return
        for value in values:  # nothing that could end a line or a word in a config
            assert not any(unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") for c in value)
        rendered = render_stack(plan, workspace)
        twin = render_stack(make_plan(parse_spec(twin_data, source="twin")), workspace)
        assert_renders_like_twin(rendered, twin)
        outcomes["accepted"] += 1
        accepted.append(Accepted(rendered, values))

    one()
    print(outcomes)
    assert outcomes["refused"] > 10
    assert outcomes["accepted"] > 5
    check_with_real_tools(accepted, tmp_path, workspace)


def check_with_real_tools(accepted: list[Accepted], tmp_path: Path, workspace: Workspace) -> None:
    projects: list[tuple[str, Path, dict[str, Any], dict[str, Any]]] = []
    dockerfiles: dict[str, Path] = {}
    for number, item in enumerate(accepted):
        root = tmp_path / f"e{number}"
        write_rendered(item.rendered, root)
        for project in item.rendered.projects:
            text = (root / project.compose_file).read_text()
            projects.append((f"e{number}", root / project.directory, yaml.safe_load(text),
                             project.document))  # fmt: skip
        for image in item.rendered.images:
            dockerfiles.setdefault(image.text, root / image.dockerfile)
    check_compose(projects, tmp_path)
    config = str(workspace.root / ".hadolint.yaml")
    result = subprocess.run(
        [hadolint(), "--config", config, *map(str, dockerfiles.values())],
        capture_output=True,
        text=True,
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def check_compose(
    projects: list[tuple[str, Path, dict[str, Any], dict[str, Any]]], tmp_path: Path
) -> None:
    merged = merge_projects(
        [(prefix, folder, text) for prefix, folder, text, _ in projects], scratch=tmp_path
    )
    path = tmp_path / "merged.yaml"
    # Written as the renderer writes compose text: PyYAML's own dump leaves "09" or "1e5" bare,
    # which compose (YAML 1.2) reads back as a number.
    path.write_text(dump_yaml(merged))
    env = {**os.environ, CANARY: "LEAKED", "X": "LEAKED"}
    result = subprocess.run(
        [*compose_cli(), "-f", str(path), "--profile", "bench", "config", "--format", "json"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "LEAKED" not in result.stdout
    services = json.loads(result.stdout)["services"]
    for prefix, _, _, document in projects:
        for name, service in document["services"].items():
            back = services[f"{prefix}-{name}"]
            assert unescape(back["command"]) == service["command"]
            for key, value in service.get("environment", {}).items():
                assert unescape(back["environment"][key]) == value


def unescape(value: Any) -> Any:
    """`docker compose config` prints compose text: `$` comes back doubled."""
    if isinstance(value, list):
        return [unescape(item) for item in value]
    return value.replace("$$", "$") if isinstance(value, str) else value


def merge_projects(
    projects: list[tuple[str, Path, dict[str, Any]]], *, scratch: Path
) -> dict[str, Any]:
    """Many rendered compose projects as one, names prefixed and relative paths made
    absolute, so that one `docker compose config` checks them all. Token files (which
    compose wants to exist) are made, empty, under ``scratch``."""
    merged: dict[str, Any] = {"name": "xpyd-properties", "services": {}}
    for section in ("volumes", "configs", "secrets"):
        merged[section] = {}
    for prefix, folder, document in projects:
        for name, service in document["services"].items():
            renamed = _renamed(prefix, folder, service, scratch)
            merged["services"][f"{prefix}-{name}"] = renamed
        for name, volume in document.get("volumes", {}).items():
            merged["volumes"][f"{prefix}-{name}"] = {**volume, "name": f"{prefix}-{volume['name']}"}
        for section in ("configs", "secrets"):
            for name, item in document.get(section, {}).items():
                found = (
                    {"file": _existing(folder / item["file"], scratch)} if "file" in item else item
                )
                merged[section][f"{prefix}-{name}"] = found
    return merged


def _existing(path: Path, scratch: Path) -> str:
    path = Path(os.path.normpath(path))
    if not path.is_relative_to(scratch):
        path = scratch / "outside" / path.relative_to("/")
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    return str(path)


def _renamed(prefix: str, folder: Path, service: dict[str, Any], scratch: Path) -> dict[str, Any]:
    service = copy.deepcopy(service)
    if "build" in service:
        service["build"]["context"] = str(folder / service["build"]["context"])
    if "depends_on" in service:
        service["depends_on"] = {f"{prefix}-{k}": v for k, v in service["depends_on"].items()}
    for config in service.get("configs", []):
        config["source"] = f"{prefix}-{config['source']}"
    if "secrets" in service:
        service["secrets"] = [f"{prefix}-{name}" for name in service["secrets"]]
    if "env_file" in service:
        service["env_file"] = [_existing(folder / name, scratch) for name in service["env_file"]]
    volumes = service.get("volumes", [])
    service["volumes"] = [
        f"{prefix}-{v}" if isinstance(v, str) and not v.startswith("/") else v for v in volumes
    ]
    return service


# --- whole files and --set assignments ----------------------------------------------------

# A deadline well above the ~1 ms an example takes: what a hang would cross, not a busy host.
QUICK = settings(
    max_examples=200,
    deadline=5000,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

YAML_PIECES = [
    b"name: t\n", b"topology: nixl-mp\n", b"model: {id: o/m}\n", b"&a ", b"*a", b"<<: *a\n",
    b"[", b"]", b"{", b"}", b"- ", b"  ", b"\n", b": ", b"9" * 5000, b"!!binary aGk=",
    b"!!python/object:os.system", b"2024-13-45", b"\xef\xbb\xbf", b"\xff\xfe", b"\x00",
    b"\xff", b"\xe9", b"prefill:\n  count: ", b"hosts: [{name: h}]\n", b"? ", b"%YAML 1.1\n",
    b"--- ", b"...", b"'", b'"', b"#", b"|\n", b">\n", b"!!set {a}", b"~", b"\x1b[31m",
]  # fmt: skip


@QUICK
@given(st.lists(st.sampled_from(YAML_PIECES), max_size=25).map(b"".join))
def test_random_yaml_files_end_in_a_spec_error(content: bytes) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "random.yaml"
        path.write_bytes(content)
        try:
            load_spec(path)
        except SpecError as error:
            check_refusal(error)
        except PlanError:
            pass


@QUICK
@given(
    st.lists(
        st.tuples(
            st.lists(st.sampled_from(["hosts", "0", "9", "gpus", "decode", "env", "", "x"]),
                     min_size=1, max_size=5).map(".".join),
            st.sampled_from(["", "=", "==", "=["]),
            HOSTILE,
        ).map("".join),
        min_size=1,
        max_size=3,
    )
)  # fmt: skip
def test_random_set_assignments_end_in_a_spec_error(assignments: list[str]) -> None:
    base = copy.deepcopy(CPU_BASE)
    try:
        parse_spec(base, source="t", overrides=assignments)
    except SpecError as error:
        check_refusal(error)


@pytest.fixture(scope="module", autouse=True)
def _quiet_checkers() -> None:
    """The batch checks need the real tools: say so up front rather than after the run."""
    compose_cli()
    hadolint()
