"""What the stack's live Prometheus says about what observe rendered: every target up, every
rule evaluated without error, every dashboard query answered with data, and the alerts that
fire now. The rules and panels are the rendered ones (rules.py, panels.py), asked for as
Grafana would ask (its variables at "All", its rate interval at a minute)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any
from urllib.parse import urlencode

from generator.errors import StackError
from generator.observe.panels import dashboard_rows
from generator.observe.rules import recording_rules
from generator.observe.targets import scrape_targets
from generator.plan import Plan
from generator.plan.traces import lmcache_pushes_metrics
from generator.probes.http import ProbeClient
from generator.runtimes.kinds import runtime_kind

__all__ = [
    "MISSING",
    "Answer",
    "ObserveReport",
    "Prometheus",
    "QueryAnswer",
    "as_grafana_asks",
    "asked_queries",
    "check_prometheus",
    "planned_targets",
    "prometheus_url",
    "span_senders",
    "unscraped_targets",
]

MISSING = "missing"  # a planned target Prometheus does not list
_MAX_SPANS_BYTES = 1 << 20  # the receiver's /spans: at most 1000 counts, ~100 KB
_UNSCRAPED = (MISSING, "unknown")  # "unknown": listed, its first scrape still to come

# Grafana's variables at "All" (regex .*) and its rate interval (4 scrapes at 5 s, rounded up).
_GRAFANA_DEFAULTS = {
    "$engine": ".*",
    "$role": ".*",
    "$host": ".*",
    "$__rate_interval": "1m",
}


class Answer(StrEnum):
    DATA = "data"
    EMPTY = "empty"  # parsed and evaluated, no series (yet)
    ERROR = "error"  # Prometheus refused it: the message says why


@dataclass(frozen=True)
class QueryAnswer:
    source: str  # "panel <row> / <title>" or "recording rule <name>"
    expr: str
    answer: Answer
    series: int = 0
    detail: str = ""


@dataclass(frozen=True)
class ObserveReport:
    targets: dict[str, str]  # "job service" -> Prometheus's health (up, down, unknown)
    rules: dict[str, str]  # rule name -> Prometheus's health (ok, err, unknown)
    rule_errors: dict[str, str]  # rule name -> its last error
    firing: tuple[str, ...]  # alerts firing now
    pending: tuple[str, ...]  # alerts whose condition holds, not yet for their `for:`
    queries: tuple[QueryAnswer, ...]
    # Our OTLP receiver's spans by sender (observe.traces where it takes them; else empty):
    # every engine, and every traced LMCache server, is expected among them.
    spans: dict[str, int] = field(default_factory=dict)

    @property
    def silent(self) -> list[str]:
        """Expected senders no span came from."""
        return sorted(name for name, count in self.spans.items() if count == 0)

    def as_dict(self) -> dict[str, Any]:
        return {
            "spans": self.spans,
            "targets": self.targets,
            "rules": self.rules,
            "rule_errors": self.rule_errors,
            "firing": list(self.firing),
            "pending": list(self.pending),
            "queries": [q.__dict__ | {"answer": q.answer.value} for q in self.queries],
        }


def prometheus_url(plan: Plan) -> str:
    if plan.observe is None:
        raise StackError(
            f"{plan.stack} is not observed: it has no Prometheus",
            hint="bring it up with --set observe.enabled=true (or observe: {enabled: true})",
        )
    return _observe_url(plan, plan.observe.prometheus_port)


def _observe_url(plan: Plan, port: int) -> str:
    """observe's services listen alike (services/observe.py): where one of them is asked."""
    observe = plan.observe
    assert observe is not None  # the callers check
    # With host networking and observe.publish off it listens on its host's loopback only:
    # reached from that host alone (a multi-host stack's first host: run observe there); on
    # a node a login node drives (Slurm), on the node's address.
    outside = runtime_kind(plan.runtime).hosts_elsewhere
    loopback = plan.network == "host" and not observe.public and not outside
    address = "127.0.0.1" if loopback else plan.reach_address(observe.host)
    return f"http://{address}:{port}"


def check_prometheus(plan: Plan, *, timeout_s: float = 10.0) -> ObserveReport:
    url = prometheus_url(plan)
    with ProbeClient(plan.stack, timeout_s=timeout_s) as client:
        prometheus = Prometheus(client, url)
        # A planned target Prometheus does not list (yet: it learns them seconds after it
        # starts) is no pass: it is reported as missing.
        missing = dict.fromkeys(planned_targets(plan), MISSING)
        targets = missing | _targets(prometheus)
        rules, errors = _rules(prometheus)
        firing, pending = _alerts(prometheus)
        queries = tuple(_ask(prometheus, source, expr) for source, expr in asked_queries(plan))
        spans = _spans(plan, client)
    return ObserveReport(targets, rules, errors, firing, pending, queries, spans)


def span_senders(plan: Plan) -> list[str]:
    """Who sends spans to our receiver: every engine (OTEL_SERVICE_NAME is its name) and, where
    they trace, every LMCache server of an engine; none where the Collector takes them."""
    if plan.observe is None or plan.observe.receiver_http_port is None:
        return []
    senders = [engine.name for engine in plan.engines]
    if lmcache_pushes_metrics(plan):
        # A follower's server (an engine over several hosts) only stores its rank's chunks:
        # the requests it would trace go to its leader's.
        leaders = set(senders)
        senders += [s.service for s in plan.sidecars if s.engine in leaders]
    return senders


def _spans(plan: Plan, client: ProbeClient) -> dict[str, int]:
    senders = span_senders(plan)
    if not senders:
        return {}
    assert plan.observe is not None  # span_senders says so
    assert plan.observe.receiver_http_port is not None
    url = _observe_url(plan, plan.observe.receiver_http_port) + "/spans"
    answer = client.answer(url)
    if answer is None:
        raise StackError(
            f"the OTLP receiver at {url} does not answer",
            hint=f"python -m generator logs {plan.stack} otlp-receiver",
        )
    if len(answer.text) > _MAX_SPANS_BYTES:
        raise StackError(
            f"the OTLP receiver's /spans at {url} is over {_MAX_SPANS_BYTES} bytes",
            hint="it keeps at most 1000 (sender, span name) counts: is that our receiver?",
        )
    body = answer.json()
    received = body.get("senders", {}) if isinstance(body, dict) else {}
    counts = {
        name: entry.get("spans", 0) if isinstance(entry, dict) else 0
        for name, entry in received.items()
        if isinstance(name, str)
    }
    return {name: int(counts.get(name, 0)) for name in senders}


def planned_targets(plan: Plan) -> list[str]:
    """Each page the plan has Prometheus scrape, named as ``observe`` reports targets."""
    return [f"{page.part} {page.service}" for page in scrape_targets(plan)]


def unscraped_targets(plan: Plan, *, timeout_s: float = 10.0) -> list[str]:
    """The planned targets Prometheus has not scraped once yet (not listed, or ``unknown``);
    a target whose scrape failed was scraped (``down``)."""
    with ProbeClient(plan.stack, timeout_s=timeout_s) as client:
        seen = _targets(Prometheus(client, prometheus_url(plan)))
    return [name for name in planned_targets(plan) if seen.get(name, MISSING) in _UNSCRAPED]


def asked_queries(plan: Plan) -> list[tuple[str, str]]:
    asked = [(f"recording rule {r.record}", r.record) for r in recording_rules(plan)]
    for row in dashboard_rows(plan):
        for panel in row.panels:
            for query, legend in panel.queries:
                asked.append((f"panel {row.title} / {panel.title} ({legend})", query.expr))
    return asked


def as_grafana_asks(expr: str) -> str:
    for variable, value in _GRAFANA_DEFAULTS.items():
        expr = expr.replace(variable, value)
    return expr


def _ask(prometheus: Prometheus, source: str, expr: str) -> QueryAnswer:
    asked = as_grafana_asks(expr)
    body = prometheus.get("/api/v1/query", {"query": asked})
    if body.get("status") != "success":
        return QueryAnswer(source, asked, Answer.ERROR, detail=str(body.get("error", body)))
    result = body.get("data", {}).get("result", [])
    answer = Answer.DATA if result else Answer.EMPTY
    return QueryAnswer(source, asked, answer, series=len(result))


def _targets(prometheus: Prometheus) -> dict[str, str]:
    active = _data(prometheus, "/api/v1/targets").get("activeTargets", [])
    return {
        f"{t['labels'].get('job', '?')} {t['labels'].get('service', t.get('scrapeUrl', '?'))}": t[
            "health"
        ]
        for t in active
    }


def _rules(prometheus: Prometheus) -> tuple[dict[str, str], dict[str, str]]:
    groups = _data(prometheus, "/api/v1/rules").get("groups", [])
    rules = [rule for group in groups for rule in group.get("rules", [])]
    health = {rule["name"]: rule.get("health", "unknown") for rule in rules}
    errors = {rule["name"]: rule["lastError"] for rule in rules if rule.get("lastError")}
    return health, errors


def _alerts(prometheus: Prometheus) -> tuple[tuple[str, ...], tuple[str, ...]]:
    alerts = _data(prometheus, "/api/v1/alerts").get("alerts", [])

    def named(state: str) -> tuple[str, ...]:
        return tuple(sorted({a["labels"]["alertname"] for a in alerts if a["state"] == state}))

    return named("firing"), named("pending")


def _data(prometheus: Prometheus, path: str) -> dict[str, Any]:
    body = prometheus.get(path, {})
    if body.get("status") != "success":
        raise StackError(
            f"Prometheus answered {path} with {body.get('error', body)}",
            hint="read its log: python -m generator logs STACK prometheus",
        )
    data: dict[str, Any] = body.get("data", {})
    return data


@dataclass(frozen=True)
class Prometheus:
    """GETs of a Prometheus's HTTP API, through the probes' one HTTP adapter."""

    client: ProbeClient
    url: str

    def get(self, path: str, params: dict[str, str]) -> dict[str, Any]:
        where = f"{self.url}{path}" + (f"?{urlencode(params)}" if params else "")
        answer = self.client.answer(where)
        if answer is None:
            loopback = "//127.0.0.1:" in self.url
            raise StackError(
                f"Prometheus at {self.url} does not answer {path}",
                hint="is the stack up with observe on? `python -m generator status STACK`"
                + (
                    "; with observe.publish off it listens on its host's loopback only: run "
                    "this on that host, or publish it (--set observe.publish=true)"
                    if loopback
                    else ""
                ),
            )
        body = answer.json()  # errors (400, 422) come as JSON with status "error"
        return body if isinstance(body, dict) else {"status": "error", "error": answer.text[:200]}
