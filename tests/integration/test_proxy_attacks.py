"""Issue 17: the real cpu-lmcache-pd stack still serves normal requests after the attacks on
its proxy: hostile messages on the KV-notice port (class 1) and requests whose decode step
vLLM refuses after the KV was pushed, or would refuse (class 2). One stack up, attacks,
normal requests, down."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from generator.docker import ComposeStack
from tests.integration.conftest import ROOT, cli

pytestmark = pytest.mark.stack
STACK, PROJECT = "cpu-lmcache-pd", "xpyd-cpu-lmcache-pd"
RUN_ID = f"pytest-attacks-{int(time.time())}"
PROXY = "http://127.0.0.1:8100"
MODEL = "tiny-llama"
# KV never read fills the decoder's 256 MiB receive buffer (TinyLlama: ~22 KB a token), after
# which no notice comes again and every request ends in a 504.
LONG_PROMPT = [10 + (7 * i) % 2000 for i in range(1500)]
FULL_PROMPT = [10 + (11 * i) % 2000 for i in range(2047)]  # max_model_len - 1

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


@pytest.fixture(scope="module")
def stack_up() -> Iterator[None]:
    result = cli("up", STACK, "--run-id", RUN_ID)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    yield
    cli("down", STACK)  # an idle LMCache P/D engine spins a whole core


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


def test_the_notice_listener_survives_hostile_messages(stack_up: None) -> None:
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


def test_decoder_refusals_strand_no_kv(stack_up: None) -> None:
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
        # Valid for vLLM (it makes one token), but prompt + first token fill the context, so
        # the decoder would refuse its part after the KV was pushed: the answer is the
        # prefiller's token and the KV is drained. 2047 tokens are ~46 MB of KV: six never
        # read would fill the decoder's 256 MiB receive buffer.
        full = {"model": MODEL, "prompt": FULL_PROMPT, "max_tokens": 50}
        for _ in range(8):
            reply = client.post("/v1/completions", json=full)
            assert reply.status_code == 200, reply.text
            assert reply.json()["usage"]["completion_tokens"] == 1
    time.sleep(2)  # the drains run in the background
    normal_requests_work()
    metrics = httpx.get(f"{PROXY}/metrics", timeout=10).text
    assert "kv_notice_timeout" not in metrics
    assert 'stage="decode_drain"' not in metrics
