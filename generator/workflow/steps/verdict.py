"""Tasks after the stack is up: the smoke verdict, the optional benchmark, teardown."""

from __future__ import annotations

import json
from collections.abc import Collection

from generator.errors import StackError
from generator.workflow.context import RunContext
from generator.workflow.runtimes import remove_hosts
from generator.workflow.task import SkipTask

__all__ = ["bench", "down", "smoke"]

# A GET from inside a container (every image has python3); the URL is an argument, not code.
_GET = [
    "python3",
    "-c",
    "import sys, urllib.request as u; sys.stdout.write(u.urlopen(sys.argv[1], timeout=10).read()"
    ".decode())",
]


def smoke(context: RunContext, *, again: str | None = None, down: Collection[str] = ()) -> str:
    """The smoke verdict; ``again`` names a later one (after a fault, say): its prompt is
    its own, so that no cache holds it from the first. ``down``: services down now (the
    engines they take out are left out of it)."""
    from generator.probes import run_smoke
    from generator.probes.kv_reference import read_reference

    def logs(services: list[str]) -> str:
        return "\n".join(context.host_of(name).runtime.logs(name) for name in services)

    def read_inside(service: str, url: str) -> str:
        return context.host_of(service).runtime.execute(service, [*_GET, url])

    nonce = context.record.run_id + (f"-{again}" if again else "")
    reference = read_reference(context.workspace.root, context.plan.stack)
    result = run_smoke(
        context.plan,
        nonce=nonce,
        read_inside=read_inside,
        logs=logs,
        down=down,
        reference=reference,
    )
    context.record.add_result(f"smoke-{again}" if again else "smoke", result.as_dict())
    context.verdict = result
    if not result.passed:
        failed = [row.check for row in result.rows if row.passed is False]
        raise StackError(
            "smoke verdict FAILED: "
            + "; ".join(failed)
            + " (the stack answered, but not the way its topology must)",
            hint="read the verdict table above and the engine logs (KV Transfer metrics lines)",
        )
    return f"verdict PASS, {result.prompt_tokens}-token prompt"


def bench(context: RunContext) -> str:
    from generator.workflow.bench import run_bench

    summary = run_bench(context)
    context.record.add_result("bench", summary)
    return json.dumps(summary)[:120]


def down(context: RunContext) -> str:
    if not context.options.down and not context.failed():
        raise SkipTask("nothing failed; stack kept (use --down to remove it)")
    remove_hosts(context)
    return f"services removed on {', '.join(context.hosts)}"
