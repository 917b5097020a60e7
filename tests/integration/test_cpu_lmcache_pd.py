"""The cpu-lmcache-pd stack for real: LMCache's own P/D transfer on vLLM's CPU build, driven
by our proxy (disagg_spec, ZMQ notices, first token from the prefiller), with the CPU KV
connector in the engine images; the connector's own check inside the image; and, last (issue
17), the stack still serving normal requests after attacks on its proxy: hostile messages on
the KV-notice port (class 1) and requests whose decode step vLLM refuses after the KV was
pushed, or would refuse (class 2); and (issue 20) its live Prometheus: every target, rule and
dashboard query answered after a small observed `bench` (its Prometheus plots and a headless
Chromium picture of Prometheus's graph page), the KV-floor alert holding and an engine killed
firing its alert. One stack up for all of it."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from generator.docker import ComposeStack
from tests.integration.conftest import ROOT, cli

pytestmark = pytest.mark.stack
STACK, PROJECT = "cpu-lmcache-pd", "xpyd-cpu-lmcache-pd"
RUN_ID = f"pytest-lmpd-{int(time.time())}"
DECODER = "http://127.0.0.1:7200"
# Issue 20: observed, with a KV floor above any TCP speed, so that its alert must hold.
OBSERVE = ["--set", "observe.enabled=true", "--set", "observe.kv_floor_gib_s=1000"]
PROMETHEUS = "http://127.0.0.1:9490"


@pytest.fixture(scope="module")
def stack_up() -> Iterator[dict[str, Any]]:
    result = cli("up", STACK, *OBSERVE, "--run-id", RUN_ID)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    yield json.loads((ROOT / "runs" / RUN_ID / "run.json").read_text())
    # An idle LMCache P/D engine spins a whole core: never leave it running for later tests.
    cli("down", STACK)
    # `up --set` rendered the observed stack into compose/: the committed files come back.
    assert cli("render", STACK).returncode == 0


def test_verdict_proves_lmcache_moved_the_kv(stack_up: dict[str, Any]) -> None:
    smoke = stack_up["results"]["smoke"]
    assert smoke["passed"] is True
    rows = {row["check"]: row for row in smoke["rows"]}
    # All prompt tokens of both smoke requests came from the prefiller; the decoder computed
    # only the two appended first tokens.
    assert (
        int(rows["prompt tokens from prefill (decode: external_kv_transfer)"]["observed"])
        >= 2 * smoke["prompt_tokens"]
    )
    assert rows["prompt tokens computed on decode (local_compute)"]["observed"] == "2"
    assert rows["router stamps prefill/decode pair"]["passed"] is True
    # LMCache's P/D writes, timed by NIXL's own telemetry exporter on the prefiller.
    speed = rows["KV path speed (NIXL writes, per request)"]
    assert speed["mark"] == "info"
    assert "MiB in" in speed["observed"]
    assert speed["observed"].endswith("over tcp")


def test_engines_use_the_cpu_connector(stack_up: dict[str, Any]) -> None:
    for service in ("prefill-0", "decode-0"):
        logs = cli("logs", STACK, service)
        assert "LMCache on CPU: using xpyd_lmcache_cpu.VLLMPagedMemCPUConnector" in logs.stdout
        assert "degraded mode" not in logs.stdout


def test_proxy_metrics_count_the_kv_notices(stack_up: dict[str, Any]) -> None:
    import httpx

    text = httpx.get("http://127.0.0.1:8100/metrics", timeout=10).text
    assert 'xpyd_proxy_kv_wait_seconds_count{backend="prefill-0"}' in text
    assert 'xpyd_proxy_errors_total{backend="prefill-0",stage="kv_notice_timeout"}' not in text


def test_connector_check_inside_the_image(stack_up: dict[str, Any]) -> None:
    """The connector against vLLM's own CPU cache writer (17 lengths, partial chunks, prefix
    skips, -1 slots, the plugin's registration), run in the decoder's container setup."""
    stack = ComposeStack(ROOT / "compose" / STACK / "compose.yaml", PROJECT)
    output = stack.run_oneoff(
        "decode-0", ["python3", "/opt/xpyd/src/xpyd-lmcache-cpu/tests/check_connector.py"], []
    )
    assert "FAILURES: 0" in output, output[-3000:]
    assert output.count("PASS ") >= 20


LENGTHS = [1, 2, 17, 255, 256, 257, 300, 511, 513, 700, 1000, 1500]


def _wait_for_every_backend_in_rotation(within_s: float = 90.0) -> None:
    """Until the proxy counts every engine healthy: on 2 cores the connector check before this
    (a container of its own) can starve the engines' health answers past the proxy's limit,
    and the proxy rightly takes them out of rotation for a while (CI, 2026-12-06: a 503)."""
    import httpx

    deadline = time.monotonic() + within_s
    lines: list[str] = []
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            text = httpx.get("http://127.0.0.1:8100/metrics", timeout=5).text
            lines = [ln for ln in text.splitlines() if ln.startswith("xpyd_proxy_backend_healthy{")]
            roles = {role for role in ("prefill", "decode") if f'role="{role}"' in " ".join(lines)}
            if roles == {"prefill", "decode"} and all(ln.endswith(" 1.0") for ln in lines):
                return
        time.sleep(1)
    raise AssertionError(f"the proxy still has an engine out of rotation: {lines}")


def test_pd_outputs_equal_a_plain_run_over_prompt_lengths(stack_up: dict[str, Any]) -> None:
    """Greedy outputs through P/D equal the decoder computing the same prompt alone (no
    prefix cache on this stack), across chunk (256) and block (128) edges; and every prompt
    token came from the prefiller."""
    import httpx

    _wait_for_every_backend_in_rotation()
    body = {"model": "tiny-llama", "max_tokens": 16, "temperature": 0, "ignore_eos": True}
    with httpx.Client(timeout=120) as client:
        for length in LENGTHS:
            prompt = [10 + (7 * i + length) % 2000 for i in range(length)]
            before = client.get(f"{DECODER}/metrics").text
            pd = client.post("http://127.0.0.1:8100/v1/completions", json=body | {"prompt": prompt})
            assert pd.status_code == 200, pd.text
            after = client.get(f"{DECODER}/metrics").text
            plain = client.post(f"{DECODER}/v1/completions", json=body | {"prompt": prompt})
            assert plain.status_code == 200, plain.text
            assert pd.json()["choices"][0]["text"] == plain.json()["choices"][0]["text"], length
            moved = _counter(after, "external_kv_transfer") - _counter(
                before, "external_kv_transfer"
            )
            assert moved == length, f"{length} tokens: {moved} came from the prefiller"


def _counter(metrics: str, source: str) -> float:
    prefix = "vllm:prompt_tokens_by_source_total{"
    lines = [
        line
        for line in metrics.splitlines()
        if line.startswith(prefix) and f'source="{source}"' in line
    ]
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines)


# Issue 17: attacks, after every other test of this module.
PROXY = "http://127.0.0.1:8100"
MODEL = "tiny-llama"
LONG_PROMPT = [10 + (7 * i) % 2000 for i in range(1500)]
# KV never read stays in the decoder's 16 MiB receive buffer (the stack's
# lmcache.pd.decode_buffer_bytes); once it is full, no notice comes again and every request
# ends in a 504. 2000 tokens of the tiny model are ~1 MiB of KV, so 24 different prompts
# (LMCache keys KV by content: a repeated prompt allocates nothing) overflow it by half
# unless each is read.
DRAINED_PROMPTS = [[10 + n] + [10 + (11 * i) % 2000 for i in range(1999)] for n in range(24)]
FULL_PROMPTS = [[10 + n] + [10 + (13 * i) % 2000 for i in range(2046)] for n in range(3)]

# Sent to the notice port from inside the router's container (the stack's network, where a
# prefiller sends from). Each used to kill the listener or swell the proxy.
NOTICE_ATTACKS = r"""
import msgpack, time, zmq
nested = "x"
for _ in range(1000):
    nested = [nested]
sock = zmq.Context().socket(zmq.PUSH)
sock.connect("tcp://127.0.0.1:7500")
for payload in [
    msgpack.packb({"type": "ProxyNotif", "req_id": nested}),
    msgpack.packb({"type": "ProxyNotif", "req_id": 7}),
    msgpack.packb(["ProxyNotif", "x"]),
    b"\xc1\x00garbage",
    b"\xdd\xff\xff\xff\xff",
]:
    sock.send(payload)
sock.send(b"\x00" * (64 * 2**20))  # over the size bound: dropped by ZMQ, never read
time.sleep(1)
sock.close(linger=2000)
print("sent")
"""


def normal_requests_work() -> None:
    import httpx

    with httpx.Client(base_url=PROXY, timeout=120) as client:
        done = client.post(
            "/v1/completions",
            json={"model": MODEL, "prompt": LONG_PROMPT, "max_tokens": 8, "temperature": 0},
        )
        assert done.status_code == 200, done.text
        assert done.json()["usage"]["completion_tokens"] == 8
        chat = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
        answer = client.post("/v1/chat/completions", json=chat)
        assert answer.status_code == 200, answer.text
        with client.stream("POST", "/v1/completions", json=chat_free(stream=True)) as events:
            assert events.status_code == 200
            body = "".join(events.iter_text())
        assert body.rstrip().endswith("data: [DONE]"), body[-300:]
        assert client.get("/ready").status_code == 200


def chat_free(*, stream: bool) -> dict[str, Any]:
    return {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 6, "stream": stream}


def test_the_notice_listener_survives_hostile_messages(stack_up: dict[str, Any]) -> None:
    import httpx

    stack = ComposeStack(ROOT / "compose" / STACK / "compose.yaml", PROJECT)
    assert "sent" in stack.execute("router", ["python3", "-c", NOTICE_ATTACKS])
    metrics = httpx.get(f"{PROXY}/metrics", timeout=10).text
    assert 'xpyd_proxy_kv_notices{outcome="rejected"} 5.0' in metrics
    ready = httpx.get(f"{PROXY}/ready", timeout=10).json()
    assert ready["kv_notices_listening"] is True
    normal_requests_work()


REFUSED_BEFORE_PREFILL: list[dict[str, Any]] = [
    {"max_tokens": 0},
    {"max_tokens": -1},
    {"max_tokens": 1e20},
    {"max_tokens": 5, "min_tokens": 6},
    {"stream_options": {"include_usage": True}},  # without stream
    {"n": 2},
]


def test_decoder_refusals_strand_no_kv(stack_up: dict[str, Any]) -> None:
    import httpx

    with httpx.Client(base_url=PROXY, timeout=120) as client:
        for fields in REFUSED_BEFORE_PREFILL:
            reply = client.post("/v1/completions", json=chat_free(stream=False) | fields)
            assert reply.status_code == 400, (fields, reply.text)
            assert reply.json()["error"]["code"] == 400
        # Valid for vLLM: must work through P/D too.
        same = chat_free(stream=False) | {"max_tokens": 4, "min_tokens": 4}
        assert client.post("/v1/completions", json=same).status_code == 200
        # Past max_model_len (2048) before the prompt is counted: refused before the prefill.
        huge = chat_free(stream=False) | {"max_tokens": 10**6}
        assert client.post("/v1/completions", json=huge).status_code == 400
        # Valid for vLLM (it makes one token), but prompt + first token fill the context: the
        # decoder could never read the last chunk of that KV, so it answers alone.
        kv_before = _counter(client.get(f"{DECODER}/metrics").text, "external_kv_transfer")
        for prompt in FULL_PROMPTS:
            reply = client.post("/v1/completions", json={"model": MODEL, "prompt": prompt})
            assert reply.status_code == 200, reply.text
            assert reply.json()["usage"]["completion_tokens"] == 1
            assert reply.headers["X-Xpyd-Decode"] == "decode-0"
            assert "X-Xpyd-Prefill" not in reply.headers
        assert _counter(client.get(f"{DECODER}/metrics").text, "external_kv_transfer") == kv_before
        # The first token ends the answer (a stop token, forced by logit_bias) after the KV
        # was pushed: the proxy makes the decoder read (drain) it.
        for prompt in DRAINED_PROMPTS:
            ends = {"logit_bias": {"1000": 100}, "stop_token_ids": [1000], "max_tokens": 50}
            reply = client.post("/v1/completions", json={"model": MODEL, "prompt": prompt} | ends)
            assert reply.status_code == 200, reply.text
            assert reply.json()["choices"][0]["finish_reason"] == "stop"
        time.sleep(2)  # the drains run in the background
        drained = _counter(client.get(f"{DECODER}/metrics").text, "external_kv_transfer")
    # The decoder read the KV of every prompt, whole.
    assert drained - kv_before == len(DRAINED_PROMPTS) * 2000
    normal_requests_work()
    metrics = httpx.get(f"{PROXY}/metrics", timeout=10).text
    assert "kv_notice_timeout" not in metrics
    assert 'stage="decode_drain"' not in metrics


def observe_report() -> dict[str, Any]:
    result = cli("observe", STACK, *OBSERVE, "--json")
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def alerts(state: str) -> set[tuple[str, str]]:
    import httpx

    body = httpx.get(f"{PROMETHEUS}/api/v1/alerts", timeout=10).json()
    return {
        (a["labels"]["alertname"], a["labels"].get("engine", ""))
        for a in body["data"]["alerts"]
        if a["state"] == state
    }


def wait_for(check: Any, within_s: float, every_s: float = 2.0) -> None:
    deadline = time.monotonic() + within_s
    while not check():
        assert time.monotonic() < deadline, f"not within {within_s} s: {check}"
        time.sleep(every_s)


def test_an_observed_bench_keeps_prometheus_s_view_of_it(stack_up: dict[str, Any]) -> None:
    """A small `bench` on the observed stack (its `up` adopts it and leaves it up): the key
    panels over the load point from Prometheus's range API, plotted, and Prometheus's own
    graph page of the KV speed drawn by headless Chromium, all in the report."""
    import matplotlib.image

    run_id = f"{RUN_ID}-bench"
    result = cli(
        "bench", STACK, *OBSERVE, "--run-id", run_id, "--idle-window-s", "0",
        "--num-prompts", "8", "--input-len", "512", "--output-len", "8", "--max-concurrency", "2",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    folder = ROOT / "runs" / run_id
    report = json.loads((folder / "bench.json").read_text())
    (arm,) = report["arms"]
    panels = {p["title"]: p for p in json.loads((folder / arm["prometheus_file"]).read_text())}
    assert not [p["errors"] for p in panels.values() if p["errors"]]
    assert any(line["points"] for line in panels["TTFT"]["lines"]), panels["TTFT"]
    (kv,) = [p for title, p in panels.items() if title.startswith("KV GiB/s")]
    assert any(value > 0 for line in kv["lines"] for _, value in line["points"]), kv
    assert "prometheus-pd.png" in report["plots"]
    picture = matplotlib.image.imread(folder / arm["prometheus_screenshot"])
    assert picture.shape[:2] == (1000, 1600)
    assert picture.std() > 0.05  # a page was drawn, not a blank window
    assert arm["prometheus_screenshot"] in (folder / "bench.md").read_text()


def test_prometheus_answers_every_rule_and_dashboard_query(stack_up: dict[str, Any]) -> None:
    import httpx

    # KV moved within the rules' 1-minute rate window: a few prompts of ~1000 tokens.
    with httpx.Client(base_url=PROXY, timeout=120) as client:
        for index in range(4):
            prompt = f"observed {index}: " + " ".join(f"word{j}" for j in range(300))
            body = {"model": MODEL, "prompt": prompt, "max_tokens": 4}
            assert client.post("/v1/completions", json=body).status_code == 200
    wait_for(lambda: ("XpydKvPathSlow", "prefill-0") in alerts("pending") | alerts("firing"), 60)
    report = observe_report()
    assert report["targets"] == {
        "vllm prefill-0": "up",
        "vllm decode-0": "up",
        "nixl-telemetry prefill-0": "up",
        "proxy router": "up",
    }
    assert set(report["rules"].values()) == {"ok"}, report["rule_errors"]
    answers = {q["source"]: q["answer"] for q in report["queries"]}
    assert "error" not in answers.values(), [q for q in report["queries"] if q["answer"] == "error"]
    # Every panel and recorded series has data, but the proxy's error counter: it has a series
    # only once an error happened (none may have, by now).
    empty = [source for source, answer in answers.items() if answer == "empty"]
    assert all("Errors by stage" in source for source in empty), empty
    assert len(answers) >= 30


def test_a_killed_engine_fires_its_alert(stack_up: dict[str, Any]) -> None:
    """Last: decode-0 is killed for good (Docker never restarts a container it killed)."""
    import subprocess

    subprocess.run(["docker", "kill", f"{PROJECT}-decode-0-1"], check=True, capture_output=True)
    # One failed scrape makes it pending; 30 s of them (the rule's `for`), firing.
    wait_for(lambda: ("XpydEngineDown", "decode-0") in alerts("firing"), 90)
    assert observe_report()["targets"]["vllm decode-0"] == "down"
