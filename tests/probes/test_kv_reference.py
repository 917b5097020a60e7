"""NIXL's own rate between the engines' devices (`doctor --kv-path`'s record), which the smoke
verdict sets its KV figure against: kept typed and bounded, never read through a link, and
named in the verdict's KV row as a share of the probe's rate."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from generator.paths import Workspace
from generator.planner import make_plan
from generator.probes.kv_reference import (
    KV_REFERENCE_DIR,
    read_reference,
    reference_from,
    write_reference,
)
from generator.probes.kv_speed import kv_speed_row
from generator.stack import load_spec
from tests.probes.test_kv_speed import requests

GIB = 1 << 30


def probe(pair: str, *, read: float | None, write: float | None, **more: Any) -> dict[str, Any]:
    """One pair's result as `doctor --kv-path --json` lists it (the probe's JSON line)."""
    result = {"pair": pair, "ok": True, "correct": True, "bytes": GIB, "block_kib": 0}
    result |= {"read_gib_s_median": read, "write_gib_s_median": write, "transport": "cuda_ipc"}
    return result | more


def test_the_record_keeps_the_pairs_that_moved_correct_data(tmp_path: Path) -> None:
    results = [
        probe("prefill-0 -> decode-0", read=0.49, write=1073.0),
        probe("prefill-1 -> decode-0", read=0.5, write=900.0, correct=False),  # wrong data
        probe("prefill-2 -> decode-0", read=None, write=None, ok=False, bytes=None),
    ]
    reference = reference_from("xpyd-1gpu", "local", "process", results)
    assert reference is not None
    assert [pair.pair for pair in reference.pairs] == ["prefill-0 -> decode-0"]
    write_reference(tmp_path, reference)
    assert read_reference(tmp_path, "xpyd-1gpu") == reference
    found = reference.rate("write")
    assert found is not None
    assert found[1] == 1073.0
    assert reference_from("xpyd-1gpu", "local", "process", results[1:]) is None


def test_a_record_that_is_a_link_or_unreadable_or_another_stacks_is_left_out(
    tmp_path: Path,
) -> None:
    folder = tmp_path / KV_REFERENCE_DIR
    folder.mkdir(parents=True)
    reference = reference_from("xpyd-1gpu", "local", "process", [probe("p", read=1, write=2)])
    assert reference is not None
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(reference.model_dump_json())
    (folder / "xpyd-1gpu.json").symlink_to(elsewhere)
    assert read_reference(tmp_path, "xpyd-1gpu") is None  # a link is not followed
    (folder / "xpyd-1gpu.json").unlink()
    (folder / "xpyd-1gpu.json").write_text('{"stack": "xpyd-1gpu", "pairs": []}')
    assert read_reference(tmp_path, "xpyd-1gpu") is None  # no pair: not a record
    (folder / "xpyd-1gpu.json").write_text("x" * (1 << 17))
    assert read_reference(tmp_path, "xpyd-1gpu") is None  # past its bound
    other = json.loads(reference.model_dump_json()) | {"stack": "xpyd"}
    (folder / "xpyd-1gpu.json").write_text(json.dumps(other))
    assert read_reference(tmp_path, "xpyd-1gpu") is None  # renamed from another stack's
    assert read_reference(tmp_path, "cpu-1p1d") is None  # none at all


@pytest.mark.parametrize(
    ("stack", "operation"), [("xpyd-1gpu", "write"), ("xpyd-mp", "read")]
)  # nixl-mp pushing (the prefiller writes) and pulling (the decoder reads)
def test_the_verdict_names_its_share_of_the_probes_rate(
    workspace: Workspace, stack: str, operation: str
) -> None:
    plan = make_plan(load_spec(workspace.stack_file(stack)))
    reference = reference_from(
        stack, "local", "process", [probe("prefill-0 -> decode-0", read=400.0, write=1000.0)]
    )
    row = kv_speed_row(plan, requests(120, 250), "cuda_ipc", reference)
    rate = {"read": 400.0, "write": 1000.0}[operation]
    assert f"best {250 / rate:.0%} of NIXL alone's {rate:.1f} GiB/s" in row.observed
    assert f"1024 MiB {operation.upper()}s in one descriptor over cuda_ipc" in row.observed
    assert row.passed is True  # a figure: the judgement stays the transport's and floor's
    plain = kv_speed_row(plan, requests(120, 250), "cuda_ipc")
    assert "NIXL alone" not in plain.observed
    blocks = reference_from(
        stack, "local", "process", [probe("p", read=80.0, write=85.0, block_kib=256)]
    )
    described = kv_speed_row(plan, requests(120), "cuda_ipc", blocks).observed
    assert "in 256 KiB descriptors" in described
