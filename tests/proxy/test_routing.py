"""Pure selection logic and the seed-compatible flags."""

from __future__ import annotations

import argparse

import pytest

from generator.proxy.config import BackendConfig
from generator.proxy.policies import make_policy
from generator.proxy.routing import NoBackend, Pool, SessionTable
from generator.proxy.seed_flags import add_seed_flags, config_from_seed_flags


def pool(policy: str = "round_robin", count: int = 3) -> Pool[BackendConfig]:
    configs = [BackendConfig(name=f"b{i}", url=f"http://h:{8000 + i}") for i in range(count)]
    now = [100.0]
    result: Pool[BackendConfig] = Pool.of(configs, make_policy(policy, {}), eject_s=10.0)
    result.clock = lambda: now[0]
    return result


def test_round_robin_cycles() -> None:
    p = pool()
    assert [p.pick().name for _ in range(6)] == ["b0", "b1", "b2", "b0", "b1", "b2"]


def test_least_outstanding_prefers_the_idle() -> None:
    p = pool("least_outstanding")
    p.backends[0].outstanding, p.backends[1].outstanding, p.backends[2].outstanding = 3, 1, 2
    assert {p.pick().name for _ in range(4)} == {"b1"}


def test_eject_then_expire_or_readmit() -> None:
    p = pool(count=2)
    p.eject(p.backends[0])
    assert {p.pick().name for _ in range(4)} == {"b1"}
    p.clock = lambda: 111.0  # eject_s later
    assert {p.pick().name for _ in range(4)} == {"b0", "b1"}
    p.health(p.backends[1], ok=False)
    assert {p.pick().name for _ in range(4)} == {"b0"}
    p.health(p.backends[0], ok=False)
    with pytest.raises(NoBackend):
        p.pick()
    p.health(p.backends[1], ok=True)
    assert p.pick().name == "b1"


def test_exclude_and_prefer() -> None:
    p = pool()
    assert p.pick(prefer="b2").name == "b2"
    assert p.pick(exclude=frozenset({"b0", "b1"})).name == "b2"
    p.health(p.backends[2], ok=False)
    assert p.pick(prefer="b2").name in {"b0", "b1"}  # a sticky choice gone unhealthy moves


def test_session_table_is_a_bounded_lru() -> None:
    table = SessionTable(capacity=2)
    table.put("a", ("p0", "d0"))
    table.put("b", ("p1", "d1"))
    assert table.get("a") == ("p0", "d0")  # a is now the most recent
    table.put("c", ("p0", "d1"))
    assert len(table) == 2
    assert table.get("b") is None
    assert table.get("a") == ("p0", "d0")


def seed_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_seed_flags(parser)
    return parser.parse_args(list(argv))


def test_seed_flags_give_disjoint_rank_port_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLIENT_BOUND", "true")
    monkeypatch.setenv("CLIENT_BOUND_KEY", "x-session")
    args = seed_args(
        "--prefiller-host", "p1,p2", "--prefiller-port", "8000",
        "--decoder-host", "d1", "--decoder-port", "8100,8101",
        "--decoder-init-port", "7300,7301", "--decoder-alloc-port", "7400,7401",
        "--proxy-port", "7600",
    )  # fmt: skip
    config = config_from_seed_flags(args)
    assert [p.url for p in config.prefill] == ["http://p1:8000", "http://p2:8000"]
    assert [d.url for d in config.decode] == ["http://d1:8100", "http://d1:8101"]
    assert [d.init_ports for d in config.decode] == [
        [7300, 7301],
        [7302, 7303],
    ]  # seed: [7301, 7302]
    assert [d.alloc_ports for d in config.decode] == [[7400, 7401], [7402, 7403]]
    assert config.prefill[0].tp == 2
    assert config.notify is not None
    assert config.notify.port == 7600
    assert config.notify.bind_host == "0.0.0.0"
    assert config.session_header == "x-session"


def test_seed_flags_explicit_per_decoder_lists_and_bad_lengths() -> None:
    args = seed_args(
        "--prefiller-host", "p", "--prefiller-port", "1", "--decoder-host", "d",
        "--decoder-port", "2,3", "--decoder-init-port", "9000;9100",
        "--decoder-alloc-port", "9001;9101",
    )  # fmt: skip
    assert [d.init_ports for d in config_from_seed_flags(args).decode] == [[9000], [9100]]
    bad = seed_args(
        "--prefiller-host",
        "a,b,c",
        "--prefiller-port",
        "1,2",
        "--decoder-host",
        "d",
        "--decoder-port",
        "2",
        "--protocol",
        "nixl",
    )
    with pytest.raises(SystemExit, match="--prefiller-port has 2 entries for 3 instances"):
        config_from_seed_flags(bad)
