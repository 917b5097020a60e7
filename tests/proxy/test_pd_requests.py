"""Issue 17, items 2, 4, 5, 6 (requests): every field that changes the decoder's request is
checked before the prefill (a request vLLM would refuse gets 400 in OpenAI's shape, and no
engine sees it); what vLLM accepts is derived for the decoder so that it is accepted there
too; a decoder refusal after the KV push drains that KV; clients cannot set what only the
proxy may set (engine request ids, kv_transfer_params)."""

from __future__ import annotations

import json
import re
from typing import Any

import aiohttp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from generator.proxy.errors import ProxyError
from generator.proxy.validation import MAX_TOKEN_COUNT, RequestFacts, check_request
from tests.proxy.fakes import FakeBackend
from tests.proxy.harness import (
    assert_openai_error,
    eventually,
    nixl_config,
    nothing_held,
    post,
    serve,
    serve_lmcache_pd,
)

pytestmark = pytest.mark.anyio

PROMPT: dict[str, Any] = {"model": "m", "prompt": "x"}
CHAT: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "x"}]}

# Each of these is refused by vLLM 0.32's protocol models or sampling params.
REFUSED: list[tuple[dict[str, Any], str]] = [
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_tokens": -5}, "max_tokens"),
    ({"max_tokens": 1e20}, "max_tokens"),
    ({"max_tokens": 10**30}, "max_tokens"),
    ({"max_tokens": "٣"}, "max_tokens"),  # a non-ASCII digit
    ({"max_tokens": 5, "min_tokens": 6}, "min_tokens"),
    ({"min_tokens": -1}, "min_tokens"),
    ({"stream_options": {"include_usage": True}}, "stream_options"),
    ({"stream": False, "stream_options": {}}, "stream_options"),
    ({"n": 2}, "n"),
    ({"n": 0}, "n"),
    ({"best_of": 3}, "best_of"),
]


@pytest.mark.parametrize(("fields", "param"), REFUSED)
@pytest.mark.parametrize("base", [PROMPT, CHAT], ids=["completions", "chat"])
async def test_a_request_vllm_would_refuse_never_reaches_an_engine(
    backends: list[FakeBackend], fields: dict[str, Any], param: str, base: dict[str, Any]
) -> None:
    p0, _, d0, _ = backends
    server = await serve_lmcache_pd(p0, d0)
    path = "/v1/chat/completions" if base is CHAT else "/v1/completions"
    status, _, raw = await post(server, path, base | fields)
    error = assert_openai_error(status, raw, 400)
    assert error["param"] == param
    assert p0.seen == []
    assert d0.seen == []
    await server.close()


async def test_min_tokens_equal_to_max_tokens_is_derived_for_the_decoder(
    backends: list[FakeBackend],
) -> None:
    p0, _, d0, _ = backends
    server = await serve_lmcache_pd(p0, d0)
    counts = {"max_tokens": 4, "min_tokens": 4}
    status, _, _ = await post(server, "/v1/completions", PROMPT | counts)
    assert status == 200
    assert "min_tokens" not in p0.seen[0]  # one token: any min_tokens above 1 is refused
    assert (d0.seen[0]["max_tokens"], d0.seen[0]["min_tokens"]) == (3, 3)
    await server.close()


async def test_stream_options_with_stream_reach_only_the_decoder(
    backends: list[FakeBackend],
) -> None:
    p0, _, d0, _ = backends
    server = await serve_lmcache_pd(p0, d0)
    options = {"stream": True, "stream_options": {"include_usage": True}, "max_tokens": 4}
    status, _, _ = await post(server, "/v1/completions", PROMPT | options)
    assert status == 200
    assert "stream_options" not in p0.seen[0]
    assert d0.seen[0]["stream_options"] == {"include_usage": True}
    await server.close()


@pytest.mark.parametrize("stream", [False, True])
async def test_a_decoder_refusal_after_the_kv_push_drains_that_kv(
    backends: list[FakeBackend], stream: bool
) -> None:
    """A refusal only the decoder knows of (this stand-in refuses prompt + max_tokens past
    its context; vLLM 0.32 clamps that one, but refuses others after the prefill)."""
    p0, _, d0, _ = backends
    d0.max_model_len = 100
    proxy_server = await serve_lmcache_pd(p0, d0)
    body = PROMPT | {"max_tokens": 99, "stream": stream, "temperature": 0.5}
    status, _, raw = await post(proxy_server, "/v1/completions", body)
    assert_openai_error(status, raw, 400)
    await eventually(lambda: len(d0.seen) == 2)
    refused, drain = d0.seen
    assert refused["max_tokens"] == 98
    # Nothing of the client's but the model: the decoder accepts it whatever was refused.
    assert drain == {"model": "m", "prompt": [1, 2, 3, 7], "max_tokens": 1, "stream": False}
    status, _, _ = await post(proxy_server, "/v1/completions", PROMPT | {"max_tokens": 5})
    assert status == 200
    await proxy_server.close()


async def test_engines_get_the_proxys_request_id_and_no_kv_params_from_vllm_xargs(
    backends: list[FakeBackend],
) -> None:
    p0, _, d0, _ = backends
    server = await serve_lmcache_pd(p0, d0)
    evil = {"kv_transfer_params": {"do_remote_prefill": True, "remote_host": "203.0.113.9"}}
    body = PROMPT | {"max_tokens": 5, "vllm_xargs": evil | {"keep": 1}, "request_id": "shared"}
    ids = []
    for _ in range(2):  # two clients that send the same id
        status, headers, _ = await post(server, "/v1/completions", body, {"X-Request-Id": "same"})
        assert (status, headers["X-Request-Id"]) == (200, "same")
    for sent, seen_headers in zip([*p0.seen, *d0.seen], [*p0.headers, *d0.headers], strict=True):
        assert sent["vllm_xargs"] == {"keep": 1}
        assert "request_id" not in sent
        ids.append(seen_headers["x-request-id"])
    assert all(re.fullmatch("[0-9a-f]{32}", i) for i in ids)
    assert ids[0] != ids[1]  # the two requests' prefills
    assert (ids[0], ids[1]) == (ids[2], ids[3])  # each one's prefill and decode
    await server.close()


async def test_max_tokens_past_the_decoders_context_is_refused_before_the_prefill(
    backends: list[FakeBackend],
) -> None:
    p0, _, d0, _ = backends
    d0.max_model_len = 2048  # read from its /v1/models, as vLLM's model card says it
    server = await serve_lmcache_pd(p0, d0)
    status, _, raw = await post(server, "/v1/completions", PROMPT | {"max_tokens": 10**6})
    error = assert_openai_error(status, raw, 400)
    assert "max_model_len=2048" in error["message"]
    assert p0.seen == []
    status, _, _ = await post(server, "/v1/completions", PROMPT | {"max_tokens": 2000})
    assert status == 200
    await server.close()


async def test_a_prompt_that_fills_the_context_is_answered_by_the_decoder_alone(
    backends: list[FakeBackend],
) -> None:
    """vLLM alone makes one token when prompt + 1 fills max_model_len; through P/D the KV of
    such a prompt could never be read whole (its last chunk stays in the decoder's buffer), so
    the decoder, once the prefiller's /tokenize says the prompt is 3 tokens, answers alone."""
    p0, _, d0, _ = backends
    d0.max_model_len = 4
    server = await serve_lmcache_pd(p0, d0)
    status, headers, raw = await post(server, "/v1/completions", PROMPT | {"max_tokens": 3})
    assert status == 200, raw
    assert json.loads(raw)["choices"][0]["text"] == "d0"  # the decoder's own answer
    assert headers["X-Xpyd-Decode"] == "d0"
    assert "X-Xpyd-Prefill" not in headers
    assert p0.tokenized == [{"model": "m", "prompt": "x"}]
    assert p0.seen == []  # no prefill, no KV push
    (alone,) = d0.seen
    assert "kv_transfer_params" not in alone
    assert alone["max_tokens"] == 1  # the room the context leaves, as vLLM clamps it
    await server.close()


async def test_without_a_tokenizer_a_full_context_falls_back_to_the_drain(
    backends: list[FakeBackend],
) -> None:
    """An engine that cannot count the prompt: the P/D path, then the prefiller's token is the
    answer and the drain is cut to fit (the stand-in prefiller's prompt is 3 tokens)."""
    p0, _, d0, _ = backends
    p0.tokenize_count = None
    d0.max_model_len = 4
    server = await serve_lmcache_pd(p0, d0)
    status, _, raw = await post(server, "/v1/completions", PROMPT | {"max_tokens": 3})
    assert status == 200, raw
    answer = json.loads(raw)
    assert answer["choices"][0]["text"] == "F"
    assert answer["usage"]["completion_tokens"] == 1
    await eventually(lambda: len(d0.seen) == 1)
    assert d0.seen[0]["prompt"] == [1, 2, 3]
    assert d0.seen[0]["max_tokens"] == 1
    await server.close()


@pytest.mark.parametrize(
    ("prompt", "pd"),
    [
        (list(range(96)), True),  # 96 + 1 < 100: the decoder has room
        (list(range(98)), True),
        (list(range(99)), False),  # 99 + 1 fills the context
        ("short text", True),  # at most 10 + 16 tokens: not counted
    ],
)
async def test_only_a_prompt_that_may_fill_the_context_is_counted(
    backends: list[FakeBackend], prompt: object, pd: bool
) -> None:
    p0, _, d0, _ = backends
    d0.max_model_len = 100
    server = await serve_lmcache_pd(p0, d0)
    status, _, raw = await post(server, "/v1/completions", PROMPT | {"prompt": prompt})
    assert status == 200, raw
    assert p0.tokenized == []  # token ids are counted by the proxy, short text bounded
    assert len(p0.seen) == (1 if pd else 0)  # the prefill, with its KV push
    (decoded,) = d0.seen
    assert ("kv_transfer_params" in decoded) is False
    assert (decoded["prompt"] == [1, 2, 3, 7]) is pd  # after a prefill: its ids + first token
    await server.close()


async def test_without_max_tokens_the_decoder_gets_vllms_default_of_the_clients_endpoint(
    backends: list[FakeBackend],
) -> None:
    """The decoder is asked on /v1/completions (default 16): a chat request without a limit
    would be cut to 17 tokens; vLLM's chat default is the rest of the context."""
    p0, _, d0, _ = backends
    d0.max_model_len = 100
    server = await serve_lmcache_pd(p0, d0)
    assert (await post(server, "/v1/completions", PROMPT))[0] == 200
    assert (await post(server, "/v1/chat/completions", CHAT))[0] == 200
    completion, chat = d0.seen
    assert completion["max_tokens"] == 15  # 16 with the prefiller's token
    assert chat["max_tokens"] == 100 - 4  # the context less prompt (3) and first token
    await server.close()


@pytest.mark.parametrize("depth", [255, 600, 1024])
async def test_json_nested_deeper_than_orjson_writes_is_a_400(
    backends: list[FakeBackend], depth: int
) -> None:
    p0, _, d0, _ = backends
    _, server = await serve(nixl_config([p0], [d0]))
    raw_body = '{"model": "m", "prompt": "x", "extra": ' + "[" * depth + "]" * depth + "}"
    async with (
        aiohttp.ClientSession() as client,
        client.post(
            server.make_url("/v1/completions"),
            data=raw_body,
            headers={"Content-Type": "application/json"},
        ) as reply,
    ):
        assert_openai_error(reply.status, await reply.read(), 400)
    assert p0.seen == []
    await server.close()


# ---- the checks themselves, over open-ended inputs --------------------------------------------

COUNTS = st.one_of(
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False),
    st.text(max_size=25),
    st.none(),
    st.booleans(),
)


BODIES = st.fixed_dictionaries(
    {
        "max_tokens": COUNTS,
        "min_tokens": COUNTS,
        "n": COUNTS,
        "stream": st.one_of(st.booleans(), st.none(), st.sampled_from(["true", "no", "x", 2])),
        "stream_options": st.sampled_from([None, {}, {"include_usage": True}]),
    }
)


def checked(body: dict[str, Any], *, chat: bool) -> RequestFacts | ProxyError:
    try:
        return check_request(body, chat=chat, pd_first_token=True)
    except ProxyError as error:
        return error


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(body=BODIES, chat=st.booleans())
def test_checked_requests_give_the_decoder_valid_counts(body: dict[str, Any], chat: bool) -> None:
    """Whatever the fields, the check refuses with a 400 naming one of them, or the request's
    counts are ones the decoder accepts after the prefiller's one token: max_tokens - 1 >= 0
    and min_tokens - 1 <= max_tokens - 1, all within 32 bits."""
    facts = checked(body, chat=chat)
    if isinstance(facts, ProxyError):
        assert facts.status == 400
        assert facts.param in body
        return
    assert facts.max_tokens is None or 1 <= facts.max_tokens <= MAX_TOKEN_COUNT
    assert 0 <= facts.min_tokens <= (facts.max_tokens or MAX_TOKEN_COUNT)
    assert body["stream_options"] is None or facts.stream
    assert body["n"] is None or float(str(body["n"]).strip()) == 1


async def test_nothing_is_held_after_refusals(backends: list[FakeBackend]) -> None:
    p0, _, d0, _ = backends
    proxy, server = await serve(nixl_config([p0], [d0]))
    for fields, _ in REFUSED[:8]:
        await post(server, "/v1/completions", PROMPT | fields)
    assert nothing_held(proxy)
    await server.close()
