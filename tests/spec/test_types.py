"""Every spec string is typed for what it is: good values pass, values that would inject a
line, a shell word, a path outside the checkout or a compose variable are refused."""

from __future__ import annotations

from typing import Any

import pytest

from generator.errors import SpecError
from generator.stack import parse_spec
from tests.conftest import spec_dict

# (override, a value that must pass, values that must be refused)
FIELDS: list[tuple[str, str, list[str]]] = [
    ("name", "my-stack", ["My_Stack", "a/b", "-x", "x" * 40, "a\nb"]),
    ("model.id", "meta-llama/Llama-3.1-8B", ["a b", "a/b/c", "../x", "x\n", "org/..", "a;rm"]),
    ("model.served_name", "llama-3.1", ["a b", "x\ny", "", "$(id)"]),
    ("model.extra_args", "['--seed', '1', 'a b', '${X}']", ['["a\\nb"]', "['']", '["\\x1b[2J"]']),
    ("decode.env", "{MY_VAR: 'a b ${X}'}", ["{'1X': v}", "{'A-B': v}", '{A: "x\\ny"}']),
    ("hosts.0.address", "gpu-node-3.cluster.local", ["::1", "a b", "-x", "a..b", "h\n"]),
    ("hosts.0.name", "h", ["H", "h_1", "h\n"]),
    ("router.session_header", "x-session-id", ["x y", "x:y", "x\ny", ""]),
    ("router.policy", "round_robin", ["round_robin\n"]),
    ("router.extra_args", "['--log-level', 'debug']", ['["x\\u2028y"]']),
    ("networking.ucx_tls", "^tcp", ["tcp rc", "tcp;id", "TCP"]),
    ("networking.ucx_net_devices", "mlx5_0:1,mlx5_1:1", ["a b", "a,,b", "$X"]),
    ("lmcache.server", "{extra_args: ['--x']}", ['{extra_args: ["\\t"]}']),
    ("images.engine_base", "registry.example:5000/team/vllm:v1.2", ["a b", "A/b", "x:", "x\n"]),
    ("images.router_base", "debian:bookworm-slim", ["debian:bookworm slim", "${X}"]),
    ("images.registry", "registry.example:5000/team", ["x:tag:y", "a//b", "a b"]),
    (
        "images.pip.index_url",
        "https://pypi.example/simple",
        ["ftp://x", "https://u:p@x/s", "https://x/$HOME", "https://x/ a", "https://x/'"],
    ),
    ("images.pip.extra_index_urls", "['https://a.example/simple']", ["['https://a.example/#x']"]),
    (
        "images.pip.extra_ca_file",
        "certs/proxy.pem",
        ["/etc/ssl/x.pem", "../x.pem", "a b", "certs//x"],
    ),
    ("images.pip.wheelhouse", "wheelhouse", ["../..", "/tmp", "a/./b", "w h"]),
    ("hf.cache_dir", "/srv/hf-cache", ["srv/hf", "/srv/a:b", "/srv/../etc", "/a b"]),
    (
        "hf.token",
        "{env: MY_HF_TOKEN}",
        ["{env: 'A B'}", "{file: '../token'}", '{env_file: "a\\nb"}'],
    ),
]


def assignment(field: str, value: str) -> str:
    return f"{field}={value}" if value.startswith(("[", "{")) else f"{field}={value!r}"


@pytest.mark.parametrize(("field", "good", "bad"), FIELDS, ids=[f[0] for f in FIELDS])
def test_each_field_accepts_its_kind_and_refuses_the_rest(
    field: str, good: str, bad: list[str]
) -> None:
    data = spec_dict(hosts=[{"name": "h", "gpus": [0, 1, 2, 3]}])
    parse_spec(data, source="t", overrides=(assignment(field, good),))
    for value in bad:
        with pytest.raises(SpecError) as caught:
            parse_spec(data, source="t", overrides=(assignment(field, value),))
        text = str(caught.value)
        assert field.split(".", maxsplit=1)[0] in text, text
        assert "fix: " in text


def test_versions_are_pep440_in_normal_form() -> None:
    data = spec_dict(profile="cpu", hosts=[{"name": "h", "cpus": [0, 1]}])
    spec = parse_spec(data, source="t", overrides=("images.versions.lmcache='0.5.6rc1'",))
    assert spec.images.versions.lmcache == "0.5.6rc1"
    for value in ("v0.5", "0.5 ", "0.5;id", "latest", "1.0-rc1"):
        with pytest.raises(SpecError, match=r"images\.versions\.lmcache: is not a PEP 440"):
            parse_spec(data, source="t", overrides=(f"images.versions.lmcache={value!r}",))


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        (
            {"model": {"id": "org/m", "source": "host-path", "host_path": "/srv"}},
            "model.id: with model.source: host-path",
        ),
        (
            {"model": {"id": "org/m", "source": "host-path", "host_path": "srv"}},
            "model.host_path: is not an absolute path",
        ),
        ({"description": "line one\nline two"}, "description: contains a line break"),
        ({"description": "a bell\x07"}, "description: contains the control character U+0007"),
        ({"topology": "nixl"}, "topology: Input should be 'lmcache-pd', 'nixl-mp' or 'colocated'"),
    ],
)
def test_cross_field_and_free_text_rules(changes: dict[str, Any], expected: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec(spec_dict(**changes), source="t")
    assert expected in str(caught.value)


def test_refused_values_are_shown_short_and_escaped() -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec(spec_dict(model={"id": "x\x1b[31m" + "y" * 500}), source="t")
    text = str(caught.value)
    assert "\x1b" not in text  # repr'd: the terminal never receives the escape
    assert "y" * 100 not in text
