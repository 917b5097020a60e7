"""Routing policies: the registry, prompt block hashes, prefix-aware choice (with properties
over open-ended prompts and loads), and a policy per side in the running proxy."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from generator.proxy.config import PolicyConfig
from generator.proxy.policies import (
    NO_VIEW,
    POLICIES,
    PrefixAware,
    PrefixAwareOptions,
    RequestView,
    make_policy,
)
from tests.proxy.fakes import FakeBackend
from tests.proxy.harness import nixl_config, post, serve


@dataclass
class Worker:
    name: str
    outstanding: int = 0


def workers(count: int) -> list[Worker]:
    return [Worker(f"w{i}") for i in range(count)]


def tokens(prefix: int, length: int, suffix: int) -> RequestView:
    """A token-id prompt: ``length`` ids drawn from ``prefix``, then a distinct tail."""
    return RequestView([prefix * 1000 + i for i in range(length)] + [10**6 + suffix] * 4, False)


def prefix_aware(**options: Any) -> PrefixAware:
    return PrefixAware(PrefixAwareOptions(block_tokens=4, **options))


# --- the registry ----------------------------------------------------------------------------


def test_every_registered_policy_is_made_from_default_options() -> None:
    for name in POLICIES:
        policy = make_policy(name, {})
        assert policy.choose(workers(2), NO_VIEW).name in {"w0", "w1"}


def test_config_takes_a_name_or_a_name_with_options_and_writes_back_the_same() -> None:
    written = {
        "prefill": "prefix_aware",
        "decode": {"name": "prefix_aware", "options": {"hot_threshold": 2}},
    }
    config = PolicyConfig.model_validate(written)
    assert config.model_dump(mode="json") == written
    assert PolicyConfig().model_dump(mode="json") == {
        "prefill": "round_robin",
        "decode": "round_robin",
    }


@pytest.mark.parametrize(
    ("side", "message"),
    [
        ("cache_aware", "'cache_aware' is not a policy; use one of: round_robin"),
        ({"name": "prefix_aware", "options": {"block_tokens": 0}}, "block_tokens"),
        ({"name": "round_robin", "options": {"block_tokens": 4}}, "round_robin options"),
        ({"name": "prefix_aware", "options": {"hot_threshold": "8"}}, "hot_threshold"),
    ],
)
def test_config_refuses_unknown_names_and_options(side: object, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        PolicyConfig.model_validate({"prefill": side})


# --- block hashes ----------------------------------------------------------------------------


def test_blocks_are_chained_whole_blocks() -> None:
    a = RequestView(list(range(10)), False).block_hashes(4, 4, 100)
    b = RequestView([*range(8), 99, 99, 99], False).block_hashes(4, 4, 100)
    c = RequestView([7, *range(1, 10)], False).block_hashes(4, 4, 100)
    assert len(a) == 2  # the partial third block never counts
    assert a == b
    assert not set(a) & set(c)  # a different first block changes every later hash


def test_text_prompts_hash_in_character_blocks_and_chat_in_message_order() -> None:
    text = RequestView("x" * 40 + "tail", False).block_hashes(2, 4, 100)  # blocks of 8 chars
    assert len(text) == 5
    first = [{"role": "system", "content": "s" * 64}, {"role": "user", "content": "one"}]
    second = [{"role": "system", "content": [{"type": "text", "text": "s" * 64}]}]
    assert (
        RequestView(first, True).block_hashes(4, 4, 100)[:3]
        == RequestView(second, True).block_hashes(4, 4, 100)[:3]
    )


@pytest.mark.parametrize("prompt", [None, 5, [], [[1, [2]]], [1, 2, [3], 4, 5, 6, 7, 8], {"a": 1}])
def test_prompts_without_blocks_give_none_or_stop_early(prompt: object) -> None:
    assert len(RequestView(prompt, False).block_hashes(4, 1, 100)) <= 1


def test_each_block_size_gets_its_own_hashes_from_one_view() -> None:
    """The prefill and decode policies may hash in blocks of different sizes."""
    view = RequestView(list(range(16)), False)
    assert len(view.block_hashes(8, 1, 100)) == 2
    assert len(view.block_hashes(4, 1, 100)) == 4
    view.release()
    assert len(view.block_hashes(8, 1, 100)) == 2  # made before: kept for a retried prefill
    assert view.block_hashes(2, 1, 100) == ()  # the prompt is gone


def test_max_blocks_bounds_the_work() -> None:
    assert len(RequestView(list(range(1000)), False).block_hashes(4, 1, 10)) == 10


# --- prefix-aware choice ---------------------------------------------------------------------


def test_same_prefix_same_worker_different_prefixes_spread() -> None:
    policy, pool = prefix_aware(), workers(2)
    first = policy.choose(pool, tokens(1, 16, 0))
    assert all(policy.choose(pool, tokens(1, 16, n)).name == first.name for n in range(5))
    other = policy.choose(pool, tokens(2, 16, 0))  # no match: the fallback's next in turn
    assert other.name != first.name


def test_a_hot_worker_loses_its_prefix_to_the_least_loaded() -> None:
    policy, pool = prefix_aware(hot_threshold=2), workers(2)
    owner = policy.choose(pool, tokens(1, 16, 0))
    owner.outstanding = 3
    assert policy.choose(pool, tokens(1, 16, 1)).name != owner.name
    owner.outstanding = 2  # least (0) + threshold: not hot yet
    assert policy.choose(pool, tokens(1, 16, 2)).name != owner.name  # now the newer owner


def test_the_longest_match_wins() -> None:
    policy, (w0, w1) = prefix_aware(), workers(2)
    policy.choose([w0], tokens(1, 8, 0))  # w0 holds 2 blocks of prefix 1
    policy.choose([w1], RequestView([1000 + i for i in range(16)], False))  # w1 holds 4
    assert policy.choose([w0, w1], tokens(1, 16, 3)).name == "w1"


prompt_ids = st.lists(st.integers(0, 50), min_size=0, max_size=64)
loads = st.lists(st.integers(0, 20), min_size=1, max_size=5)


@settings(max_examples=200, deadline=None)
@given(prompts=st.lists(prompt_ids, max_size=40), capacity=st.integers(1, 32))
def test_memory_stays_within_capacity(prompts: list[list[int]], capacity: int) -> None:
    policy, pool = prefix_aware(capacity_blocks=capacity), workers(3)
    for prompt in prompts:
        policy.choose(pool, RequestView(prompt, False))
        assert len(policy) <= capacity


@settings(max_examples=200, deadline=None)
@given(
    prompt=prompt_ids.filter(lambda p: len(p) >= 4),
    tails=st.lists(prompt_ids, max_size=8),
    load=loads,
)
def test_same_prefix_same_worker_while_not_hot(
    prompt: list[int], tails: list[list[int]], load: list[int]
) -> None:
    """With loads that never make it hot, every request sharing the first whole block goes
    where the first one went."""
    policy = prefix_aware(hot_threshold=max(load))
    pool = [Worker(f"w{i}", n) for i, n in enumerate(load)]
    whole = prompt[: len(prompt) // 4 * 4]
    first = policy.choose(pool, RequestView(whole, False))
    for tail in tails:
        assert policy.choose(pool, RequestView(whole + tail, False)).name == first.name


@settings(max_examples=200, deadline=None)
@given(
    history=st.lists(st.tuples(prompt_ids, st.integers(0, 4)), max_size=20),
    prompt=prompt_ids,
    load=loads,
    available=st.sets(st.integers(0, 4), min_size=1),
)
def test_never_a_worker_outside_the_candidates(
    history: list[tuple[list[int], int]], prompt: list[int], load: list[int], available: set[int]
) -> None:
    """The pool passes only available workers: whatever the policy learnt from a worker now
    gone, it chooses among those it is given."""
    policy, everyone = prefix_aware(hot_threshold=1), workers(5)
    for past, index in history:
        policy.choose([everyone[index]], RequestView(past, False))
    candidates = [everyone[i] for i in sorted(available)]
    for worker, outstanding in zip(candidates, load, strict=False):
        worker.outstanding = outstanding
    assert policy.choose(candidates, RequestView(prompt, False)) in candidates


# --- in the proxy ----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_proxy_routes_a_shared_prefix_to_one_prefiller_per_side_policy(
    backends: list[FakeBackend],
) -> None:
    p0, p1, d0, d1 = backends
    policy = {
        "prefill": {"name": "prefix_aware", "options": {"block_tokens": 4}},
        "decode": "round_robin",
    }
    _, server = await serve(nixl_config([p0, p1], [d0, d1], policy=policy))
    prefillers, decoders = set(), set()
    for n in range(4):
        body = {"model": "m", "prompt": [*range(32), 100 + n], "max_tokens": 2}
        status, headers, _ = await post(server, "/v1/completions", body)
        assert status == 200
        prefillers.add(headers["X-Xpyd-Prefill"])
        decoders.add(headers["X-Xpyd-Decode"])
    assert len(prefillers) == 1  # one prefix, one prefiller
    assert decoders == {"d0", "d1"}  # the decode side kept round robin
    await server.close()
