"""The colocated topology's verdict: no P/D, so the proof is the opposite of the P/D one.
Requests through the router are answered, every engine computed its prompts itself (no KV
arrived from anywhere), and round robin reached every engine."""

from __future__ import annotations

from generator.plan import Plan
from generator.probes.engine_counters import read_engine_counters
from generator.probes.http import ProbeClient, Transport
from generator.probes.readiness import router_of_plan
from generator.probes.requests import (
    answer_rows,
    chat_stream,
    complete,
    sized_prompt,
)
from generator.probes.verdict import SmokeResult, VerdictRow

__all__ = ["run_colocated_smoke"]

_PROMPT_TOKENS = 256


def run_colocated_smoke(
    plan: Plan, *, nonce: str, timeout_s: float = 180.0, transport: Transport | None = None
) -> SmokeResult:
    router, model = router_of_plan(plan), plan.model.served_name
    with ProbeClient(plan.stack, timeout_s=timeout_s, transport=transport) as client:
        before = read_engine_counters(client, plan)
        prompt = sized_prompt(client, plan, nonce, _PROMPT_TOKENS)
        completion = complete(client, router, model, prompt, {})
        chat = chat_stream(client, router, model, prompt + " chat", {})
        # Round robin reaches every engine once there have been as many requests as engines.
        for extra in range(len(plan.engines) - 2):
            complete(client, router, model, f"{prompt} {extra}", {})
        change = read_engine_counters(client, plan) - before
    served = sorted(name for name, count in change.requests.items() if count > 0)
    rows = [
        *answer_rows(completion, chat.chunks),
        VerdictRow(
            "prompt tokens received as KV (all engines: external_kv_transfer)",
            f"{change.kv_tokens:.0f}",
            "0",
            change.kv_tokens == 0,
        ),
        VerdictRow(
            "prompt tokens computed by the engines (local_compute)",
            f"{change.local_tokens:.0f}",
            "> 0",
            change.local_tokens > 0,
        ),
        VerdictRow(
            "engines that served (round robin)",
            ", ".join(served) or "none",
            f"all {len(plan.engines)}",
            len(served) == len(plan.engines),
        ),
    ]
    return SmokeResult(rows, completion.text, chat.text, completion.prompt_tokens)
