"""Unit test of VLLMPagedMemCPUConnector against vLLM's own CPU cache writer (run inside the cpu image).

Ground truth is vLLM: random K/V are written into paged caches with
cpu_attn_reshape_and_cache (the op the CPU attention layer uses). The connector
must (1) store exactly those K/V into LMCache's KV_2LTD memory objects, and
(2) retrieve them into another cache, at other slots, byte-identical to what
vLLM itself would have written there. Covers partial chunks, non-contiguous
and shuffled blocks, vllm_cached_tokens (prefix skip), and -1 slots.
Also checks the factory registration (plugin) and the documented 'vec' layout.
"""

# ruff: noqa: E402 - LMCache must be imported after register(), as vLLM's plugin loader does
from __future__ import annotations

import sys
from types import SimpleNamespace

import torch
from xpyd_lmcache_cpu.plugin import register

register()  # what vLLM's plugin loader does; LMCache is imported after this on purpose

from lmcache.utils import EngineType
from lmcache.v1.config import LMCacheEngineConfig
from lmcache.v1.gpu_connector import CreateGPUConnector
from lmcache.v1.memory_management import MemoryFormat
from lmcache.v1.metadata import LMCacheMetadata
from vllm._custom_ops import cpu_attn_reshape_and_cache
from vllm.v1.attention.backends.cpu_attn import _get_attn_isa
from xpyd_lmcache_cpu.connector import VLLMPagedMemCPUConnector, probe_placement

L, H, D, BS, NB, DT = 2, 2, 32, 128, 64, torch.bfloat16
ISA = _get_attn_isa(DT, BS, D)
failed: list[str] = []


def check(name: str, ok: bool) -> None:
    if not ok:
        failed.append(name)
    print(f"{'PASS' if ok else 'FAIL'} {name}")


def vllm_write(
    caches: list[torch.Tensor], k: torch.Tensor, v: torch.Tensor, slots: torch.Tensor
) -> None:
    """k, v: [L, T, H, D]; write like the attention layer does."""
    for layer, cache in enumerate(caches):
        kc, vc = cache.view(NB, H, 2 * BS, D).chunk(2, dim=2)
        cpu_attn_reshape_and_cache(k[layer].contiguous(), v[layer].contiguous(), kc, vc, slots, ISA)


def new_caches() -> list[torch.Tensor]:
    return [torch.zeros(NB, H, BS, 2 * D, dtype=DT) for _ in range(L)]


def slots_for(blocks: list[int], n: int) -> torch.Tensor:
    b = torch.tensor(blocks)
    return (b[:, None] * BS + torch.arange(BS)[None, :]).flatten()[:n]


meta = LMCacheMetadata(
    model_name="tiny",
    world_size=1,
    local_world_size=1,
    worker_id=0,
    local_worker_id=0,
    kv_dtype=DT,
    kv_shape=(L, 2, 256, H, D),
)
conn = CreateGPUConnector(LMCacheEngineConfig.from_defaults(chunk_size=256), meta, EngineType.VLLM)
check("factory returns the CPU connector", isinstance(conn, VLLMPagedMemCPUConnector))

k_pos, v_pos = probe_placement(BS, D, DT)
n_idx, d_idx = torch.meshgrid(torch.arange(BS), torch.arange(D), indexing="ij")
print("ISA:", ISA)
if ISA == "vec":  # vLLM csrc/cpu/cpu_attn_vec.hpp: K column-major [D, BS], V row-major [BS, D]
    check("probe == documented vec layout (K)", torch.equal(k_pos, d_idx * BS + n_idx))
    check("probe == documented vec layout (V)", torch.equal(v_pos, BS * D + n_idx * D + d_idx))
check("naive (K|V) rows would be wrong", not torch.equal(k_pos, n_idx * 2 * D + d_idx))

torch.manual_seed(0)
naive_results: dict[int, bool] = {}
for n_tokens in (1, 2, 17, 127, 128, 129, 255, 256, 257, 300, 511, 512, 513, 700, 1000, 1500, 1900):
    # Source request: shuffled, non-contiguous blocks. Destination: other blocks.
    n_blk = (n_tokens + BS - 1) // BS
    perm = torch.randperm(NB).tolist()
    src_blocks, dst_blocks = perm[:n_blk], perm[n_blk : 2 * n_blk]
    if 2 * n_blk > NB:
        src_blocks, dst_blocks = perm[:n_blk], perm[NB - n_blk :]
    src_slots, dst_slots = slots_for(src_blocks, n_tokens), slots_for(dst_blocks, n_tokens)
    k = torch.randn(L, n_tokens, H, D).to(DT)
    v = torch.randn(L, n_tokens, H, D).to(DT)
    src = new_caches()
    vllm_write(src, k, v, src_slots)
    expect = new_caches()
    vllm_write(expect, k, v, dst_slots)
    got = new_caches()
    ok_store = ok_load = True
    for start in range(0, n_tokens, 256):  # LMCache chunks: full ones, then the partial last one
        end = min(start + 256, n_tokens)
        obj = SimpleNamespace(
            tensor=torch.empty(conn.get_shape(end - start), dtype=DT),
            metadata=SimpleNamespace(fmt=MemoryFormat.KV_2LTD),
        )
        conn.batched_from_gpu([obj], [start], [end], kvcaches=src, slot_mapping=src_slots)
        want = torch.stack([k[:, start:end], v[:, start:end]]).flatten(3)  # [2, L, T, H*D]
        ok_store &= torch.equal(obj.tensor, want)
        conn.batched_to_gpu([obj], [start], [end], kvcaches=got, slot_mapping=dst_slots)
    ok_load = all(torch.equal(a, b) for a, b in zip(got, expect, strict=True))
    check(
        f"{n_tokens:5d} tokens: store == vLLM-written K/V, retrieve == vLLM's own write",
        ok_store and ok_load,
    )
    # The earlier quick class's reading: token n = row n of [blocks, H, BS, 2D], K = [:D], V = [D:].
    naive = new_caches()
    for layer in range(L):
        sb, so = src_slots // BS, src_slots % BS
        db, do = dst_slots // BS, dst_slots % BS
        naive[layer][db, :, do, :] = src[layer][sb, :, so, :]
    naive_exact = all(torch.equal(a, b) for a, b in zip(naive, expect, strict=True))
    print(f"      naive (K|V)-rows copy exact: {naive_exact}")
    naive_results[n_tokens] = naive_exact

check(
    "naive copy is exact exactly when the prompt fills whole blocks",
    all(ok == (n % BS == 0) for n, ok in naive_results.items()),
)

# vllm_cached_tokens: tokens vLLM already holds are not overwritten; -1 slots are skipped.
n = 300
slots = slots_for([5, 9, 3], n)
k = torch.randn(L, n, H, D).to(DT)
v = torch.randn(L, n, H, D).to(DT)
src = new_caches()
vllm_write(src, k, v, slots)
obj = SimpleNamespace(
    tensor=torch.empty(conn.get_shape(n - 256), dtype=DT),
    metadata=SimpleNamespace(fmt=MemoryFormat.KV_2LTD),
)
conn.from_gpu(obj, 256, n, kvcaches=src, slot_mapping=slots)
dst = new_caches()
sentinel = torch.full((L, n, H, D), 7.0).to(DT)
vllm_write(dst, sentinel, sentinel, slots)
conn.to_gpu(obj, 256, n, kvcaches=dst, slot_mapping=slots, vllm_cached_tokens=270)
expect = new_caches()
vllm_write(expect, sentinel, sentinel, slots)
keep = torch.arange(n) >= 270
vllm_write(expect, k[:, keep], v[:, keep], slots[keep])
check(
    "vllm_cached_tokens=270: tokens 256..269 untouched, 270..299 loaded",
    all(torch.equal(a, b) for a, b in zip(dst, expect, strict=True)),
)
slots_neg = slots.clone()
slots_neg[256:260] = -1
dst2 = new_caches()
conn.to_gpu(obj, 256, n, kvcaches=dst2, slot_mapping=slots_neg)
expect2 = new_caches()
vllm_write(expect2, k[:, 260:], v[:, 260:], slots[260:])
check("-1 slots are skipped", all(torch.equal(a, b) for a, b in zip(dst2, expect2, strict=True)))

print("FAILURES:", len(failed))
sys.exit(1 if failed else 0)
