"""Did the decoders load the KV that vLLM counted as arrived? vLLM's external_kv_transfer
counter grows once a connector promises a prompt's tokens; a connector that then skips the
load (LMCache's receiver did, on an H100 with CUDA graphs) leaves the counter as it would be
had the KV arrived. The connector's own line per loaded request (the topology's ``LoadLog``)
is what shows the load happened."""

from __future__ import annotations

from collections.abc import Sequence

from generator.probes.verdict import VerdictRow
from generator.topologies.base import LoadLog

__all__ = ["kv_load_row"]

_EXPECTED = "each smoke request: all its tokens"


def kv_load_row(
    load_log: LoadLog, text: str | None, answers: Sequence[tuple[str, str]]
) -> VerdictRow:
    """``text``: the decoders' logs (None: not readable from where the verdict runs);
    ``answers``: (request, the id its answer came with), one per smoke request."""
    check = f"KV loaded on decode ({load_log.source}'s log)"
    if text is None:
        return VerdictRow(
            check, "not read: the decoders' logs are not reachable", _EXPECTED, None, "info"
        )
    loads = _loads_by_request(load_log, text)
    observed, passed = [], True
    for name, answer_id in answers:
        found = _loads_of(loads, answer_id) if answer_id else []
        if not found:
            observed.append(f"{name}: no load logged")
            passed = False
            continue
        loaded = min(count for count, _ in found)
        required = max(needed for _, needed in found)
        observed.append(f"{name}: {loaded} of {required} tokens")
        passed = passed and all(count == needed > 0 for count, needed in found)
    return VerdictRow(check, "; ".join(observed), _EXPECTED, passed)


def _loads_by_request(load_log: LoadLog, text: str) -> dict[str, list[tuple[int, int]]]:
    """{request id: [(loaded, required) per line]}: a TP rank logs its own line each."""
    loads: dict[str, list[tuple[int, int]]] = {}
    for match in load_log.pattern.finditer(text):
        pair = int(match["loaded"]), int(match["required"])
        loads.setdefault(match["request"], []).append(pair)
    return loads


def _loads_of(loads: dict[str, list[tuple[int, int]]], answer_id: str) -> list[tuple[int, int]]:
    """The answer's id is its kind and the request's id (``cmpl-<id>``, ``chatcmpl-<id>``);
    the decoder's own request id is a kind, that id, then ``-<index>-<suffix>`` (vLLM 0.32),
    and a chat's may be ``cmpl-`` there (our proxy hands the same id to both sides)."""
    wanted = _without_kind(answer_id)
    return [
        pair
        for request, pairs in loads.items()
        if (found := _without_kind(request)) == wanted or found.startswith(wanted + "-")
        for pair in pairs
    ]


def _without_kind(request_id: str) -> str:
    return request_id.split("-", 1)[-1]
