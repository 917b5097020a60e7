"""How the KV probe reads UCX's protocol tables.

Fixtures (tests/kvprobe/fixtures/), each the UCX log of one real probe run on this project's CPU
machine (nixl-cu12 1.5.1, its bundled UCX 1.23.0), unless marked otherwise:

- ucx_used_cma_loopback.log: two processes, DRAM, default UCX_TLS (UCX_PROTO_INFO=used)
- ucx_used_tcp_forced.log: the same with UCX_TLS=tcp
- ucx_used_tcp_bridge_containers.log: one container per side on a user-defined bridge network
- ucx_info_y_cma_loopback.log: UCX_PROTO_INFO=y (every selection, no counts), an early two-process
  NIXL run on stdout (agents named t and i) before the probe existed
- ucx_used_cuda_ipc_h200.log, ucx_info_y_cuda_ipc_h200.log: captured on 2x H200 (NVLink) with the
  probe (UCX_PROTO_INFO=used) and with two plain NIXL processes (UCX_PROTO_INFO=y)
- ucx_1_20_layout_CONSTRUCTED.log: UCX 1.20's layout after a log in a NIXL issue; see its header
"""

from __future__ import annotations

from pathlib import Path

import pytest

from generator.kvprobe import nixl_kv_probe as probe

FIXTURES = Path(__file__).parent / "fixtures"
MIB_256 = 256 << 20


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


@pytest.mark.parametrize(
    ("name", "transport"),
    [
        ("ucx_used_cma_loopback.log", "cma"),
        ("ucx_used_tcp_forced.log", "tcp"),
        ("ucx_used_tcp_bridge_containers.log", "tcp"),
        ("ucx_info_y_cma_loopback.log", "cma"),
        ("ucx_used_cuda_ipc_h200.log", "cuda_ipc"),
    ],
)
def test_transport_of_each_fixture(name: str, transport: str) -> None:
    found = probe.summarize_transports(fixture(name), MIB_256)
    assert (found.transport, found.transports) == (transport, [transport])
    assert found.by_op == {"write": [transport], "read": [transport]}


def test_used_tables_carry_counts_and_endpoint_kind() -> None:
    tables = probe.parse_proto_tables(fixture("ucx_used_tcp_bridge_containers.log"))
    assert [(t.endpoint_kind, t.rma_op) for t in tables] == [
        ("inter-node", "read"),
        ("inter-node", "write"),
    ]
    assert tables[0].rows == [probe.ProtoRow("0..inf", "software emulation", "tcp/eth0", 6)]


def test_evidence_names_the_lanes_and_their_use() -> None:
    found = probe.summarize_transports(fixture("ucx_used_tcp_forced.log"), MIB_256)
    assert found.evidence == [
        "read intra-node: software emulation tcp/lo x6",
        "write intra-node: zero-copy 52% on tcp/lo and 48% on tcp/eth0 x12",
    ]


def test_selection_tables_skip_loopback_and_active_messages() -> None:
    """UCX_PROTO_INFO=y also lists NIXL's loopback endpoint (self) and the active-message
    protocols, which run over tcp here; only puts and gets to the peer count."""
    text = fixture("ucx_info_y_cma_loopback.log")
    kinds = {t.endpoint_kind for t in probe.parse_proto_tables(text)}
    assert kinds == {"self", "intra-node"}
    assert "tcp/lo" in text
    assert probe.summarize_transports(text, MIB_256).transports == ["cma"]


def test_ucx_1_20_layout_and_the_row_for_the_buffer_size() -> None:
    text = fixture("ucx_1_20_layout_CONSTRUCTED.log")
    (table,) = probe.parse_proto_tables(text)
    assert (table.endpoint_kind, table.rma_op, len(table.rows)) == ("intra-node", "write", 3)
    assert probe.summarize_transports(text, MIB_256).transports == ["rc_mlx5"]
    assert probe.summarize_transports(text, 4096).transports == ["tcp"]


@pytest.mark.parametrize(
    ("config", "shares"),
    [
        ("cma/memory", [("cma", 1.0)]),
        ("52% on tcp/lo and 48% on tcp/eth0", [("tcp", 0.52), ("tcp", 0.48)]),
        ("rc_mlx5/mlx5_0:1 50% on path0 and 50% on path1", [("rc_mlx5", 1.0)]),
        (
            "30% on cuda_ipc/cuda, 40% on rc_mlx5/mlx5_1:1 and 30% on tcp/eth0",
            [("cuda_ipc", 0.3), ("rc_mlx5", 0.4), ("tcp", 0.3)],
        ),
        ("", []),
    ],
)
def test_lane_shares(config: str, shares: list[tuple[str, float]]) -> None:
    found = probe.lane_shares(config)
    assert [name for name, _ in found] == [name for name, _ in shares]
    assert [share for _, share in found] == pytest.approx([share for _, share in shares])


def test_heaviest_transport_leads() -> None:
    mixed = fixture("ucx_1_20_layout_CONSTRUCTED.log").replace(
        "rc_mlx5/mlx5_0:1 50% on path0 and 50% on path1",
        "70% on tcp/eth0 and 30% on rc_mlx5/mlx5_0:1",
    )
    found = probe.summarize_transports(mixed, MIB_256)
    assert (found.transport, found.transports) == ("tcp", ["tcp", "rc_mlx5"])


@pytest.mark.parametrize("text", ["", "UCX  WARN  some warning\n", "| not | a | table |\n"])
def test_nothing_found_is_unknown(text: str) -> None:
    found = probe.summarize_transports(text, MIB_256)
    assert (found.transport, found.transports, found.evidence) == ("unknown", [], [])


def test_only_the_standard_library_at_import() -> None:
    """The probe must import where only torch and nixl exist: neither is loaded up front."""
    source = Path(probe.__file__).read_text()
    top_level = [line for line in source.splitlines() if line.startswith(("import ", "from "))]
    assert not [
        line for line in top_level if "torch" in line or "nixl" in line or "generator" in line
    ]


def test_a_long_lived_logs_kv_memory_picks_the_kv_tables() -> None:
    """UCX_PROTO_INFO=y in an engine's log lists host-memory protocols too (control traffic,
    host-to-GPU writes): on GPUs only the tables for GPU buffers name the KV's transport."""
    text = fixture("ucx_info_y_cuda_ipc_h200.log")
    everything = probe.summarize_transports(text, 512 << 20)
    assert set(everything.transports) > {"cuda_ipc"}  # host tables mix other transports in
    for operation in ("read", "write"):
        kv = probe.summarize_transports(text, 512 << 20, (operation,), local_memory="cuda")
        assert (kv.transport, kv.transports) == ("cuda_ipc", ["cuda_ipc"]), kv.evidence
    host = probe.summarize_transports(
        fixture("ucx_info_y_cma_loopback.log"), MIB_256, ("read",), "host"
    )
    assert host.transport == "cma"
