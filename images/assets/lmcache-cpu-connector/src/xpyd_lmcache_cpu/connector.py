"""Copy KV between vLLM CPU's paged KV cache and LMCache memory objects.

The cpu profile's stand-in for LMCache's GPU connectors (VLLMPagedMemGPUConnectorV2
and friends): LMCache 0.5.6 ships none for torch's "cpu" device, so without this
its in-process engine runs "degraded (recompute)" and lmcache-pd sends nothing.

Layouts (vLLM 0.32 CPU_ATTN backend, KV cache layout LBHNC):

* vLLM hands KV connectors one tensor per layer, shaped
  ``[num_blocks, num_kv_heads, block_size, 2 * head_size]``. Those last two dims
  are NOT ``block_size`` rows of ``(K | V)``: the attention kernel views each
  ``(block, head)`` region of ``2 * block_size * head_size`` elements as K
  followed by V, and stores K in an ISA-specific order (``vec``: column-major
  ``[head_size, block_size]``; ``amx``/``vec16``/``neon`` use their own packing),
  V row-major. Treating token ``n`` as row ``n`` of that tensor (the earlier quick
  class) only works for whole blocks; a partial block (a prompt's tail) then
  gets other tokens' bytes. So the placement is asked from vLLM itself, once:
  :func:`probe_placement` writes index-coded tokens with the same op the
  attention layer writes with (``cpu_attn_reshape_and_cache``) and records
  where each element lands.
* LMCache's memory object for a chunk of T tokens is ``KV_2LTD``:
  ``[2 (K, V), num_layers, T, num_kv_heads * head_size]``, heads outer, which
  is the same logical format the GPU connectors produce, so chunks stay
  portable between hosts whatever ISA each one packs K with.

Tokens are addressed by LMCache's slot mapping (``block_id * block_size +
offset``, any block order), so partial last chunks and non-contiguous blocks
need nothing special. MLA and fp8 KV caches are refused (never silently wrong).
"""

from __future__ import annotations

from typing import Any

import torch
from lmcache.v1.gpu_connector.gpu_connectors import GPUConnectorInterface
from lmcache.v1.memory_management import MemoryFormat, MemoryObj
from lmcache.v1.metadata import LMCacheMetadata


def probe_placement(
    block_size: int, head_size: int, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """Where vLLM's CPU attention stores K[n, d] and V[n, d] in a (block, head) region.

    Returns ``(k_pos, v_pos)``, each ``[block_size, head_size]`` int64 offsets
    into the flat region of ``2 * block_size * head_size`` elements.
    """
    # Imported here: vllm._custom_ops needs an initialised vLLM platform.
    from vllm._custom_ops import cpu_attn_reshape_and_cache
    from vllm.v1.attention.backends.cpu_attn import _get_attn_isa

    # Same arguments CPUAttentionMetadataBuilder uses (kv_cache_dtype "auto":
    # the cache dtype is the model dtype), hence the same ISA and packing.
    isa = _get_attn_isa(dtype, block_size, head_size)
    n = block_size * head_size
    region = torch.zeros(1, 1, block_size, 2 * head_size, dtype=dtype)
    k_cache, v_cache = region.view(1, 1, 2 * block_size, head_size).chunk(2, dim=2)
    index = torch.arange(n).view(block_size, 1, head_size)  # token n, head 0, dim d
    stored = torch.zeros(2 * n, dtype=torch.int64)
    # bf16 holds integers < 256 exactly: write the index one base-256 digit per pass.
    scale = 1
    while scale < n:
        region.zero_()
        digit = (index // scale % 256).to(dtype)
        cpu_attn_reshape_and_cache(digit, digit, k_cache, v_cache, torch.arange(block_size), isa)
        stored += region.flatten().to(torch.int64) * scale
        scale *= 256
    positions = []
    for half in (stored[:n], stored[n:]):
        if not torch.equal(half.sort().values, torch.arange(n)):
            raise RuntimeError(f"CPU_ATTN ({isa}) placement is not a per-block permutation")
        pos = torch.empty(n, dtype=torch.int64)
        pos[half] = torch.arange(n)
        positions.append(pos.view(block_size, head_size))
    return positions[0], positions[1] + n


class VLLMPagedMemCPUConnector(GPUConnectorInterface):  # type: ignore[misc]  # lmcache: untyped
    """LMCache connector for vLLM's CPU build (paged KV cache, CPU_ATTN backend)."""

    def __init__(
        self, num_layers: int, num_kv_heads: int, head_size: int, dtype: torch.dtype
    ) -> None:
        self.num_layers = num_layers
        self.num_kv_heads = num_kv_heads
        self.head_size = head_size
        self.dtype = dtype
        self._placement: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    @classmethod
    def from_metadata(cls, metadata: LMCacheMetadata) -> VLLMPagedMemCPUConnector:
        if metadata.use_mla:
            raise NotImplementedError("MLA KV caches are not supported on CPU")
        num_layers, _, _, num_kv_heads, head_size = metadata.kv_shape
        return cls(num_layers, num_kv_heads, head_size, metadata.kv_dtype)

    def get_shape(self, num_tokens: int) -> torch.Size:
        hidden = self.num_kv_heads * self.head_size
        return torch.Size([2, self.num_layers, num_tokens, hidden])

    def _regions(self, kwargs: dict[str, Any]) -> tuple[list[torch.Tensor], int]:
        """Per-layer `[num_blocks, num_kv_heads, 2 * block_size * head_size]` views, block size."""
        kvcaches: list[torch.Tensor] = list(kwargs["kvcaches"])
        if len(kvcaches) != self.num_layers:
            raise ValueError(f"expected {self.num_layers} KV layers, got {len(kvcaches)}")
        num_blocks, heads, block_size, content = kvcaches[0].shape
        expected = (self.num_kv_heads, 2 * self.head_size, self.dtype)
        if (heads, content, kvcaches[0].dtype) != expected:
            raise ValueError(
                f"unsupported vLLM CPU KV cache {tuple(kvcaches[0].shape)} {kvcaches[0].dtype}; "
                f"expected [blocks, {expected[0]}, block_size, {expected[1]}] {expected[2]}"
            )
        # .view (not reshape): fails loudly if a region is not one dense run.
        return [kv.view(num_blocks, heads, -1) for kv in kvcaches], block_size

    def _index(self, slots: torch.Tensor, block_size: int) -> tuple[torch.Tensor, ...]:
        """Advanced-index tuples selecting [tokens, heads, head_size] K and V elements."""
        if block_size not in self._placement:
            self._placement[block_size] = probe_placement(block_size, self.head_size, self.dtype)
        k_pos, v_pos = self._placement[block_size]
        slots = slots.to(device="cpu", dtype=torch.long)
        blocks = (slots // block_size)[:, None, None]
        offsets = slots % block_size
        heads = torch.arange(self.num_kv_heads)[None, :, None]
        return blocks, heads, k_pos[offsets][:, None, :], v_pos[offsets][:, None, :]

    def from_gpu(self, memory_obj: MemoryObj, start: int, end: int, **kwargs: Any) -> None:
        """Store: vLLM paged cache (tokens [start, end) of the slot mapping) -> memory object."""
        assert memory_obj.tensor is not None
        regions, block_size = self._regions(kwargs)
        num_tokens = end - start
        blocks, heads, k_idx, v_idx = self._index(kwargs["slot_mapping"][start:end], block_size)
        out = memory_obj.tensor
        for layer, region in enumerate(regions):
            out[0, layer, :num_tokens] = region[blocks, heads, k_idx].flatten(1)
            out[1, layer, :num_tokens] = region[blocks, heads, v_idx].flatten(1)

    def to_gpu(self, memory_obj: MemoryObj, start: int, end: int, **kwargs: Any) -> None:
        """Retrieve: memory object -> vLLM paged cache (tokens [start, end) of the slot mapping)."""
        assert memory_obj.tensor is not None
        if memory_obj.metadata.fmt != MemoryFormat.KV_2LTD:
            raise ValueError(f"expected a KV_2LTD memory object, got {memory_obj.metadata.fmt}")
        regions, block_size = self._regions(kwargs)
        slots = kwargs["slot_mapping"][start:end].to(device="cpu", dtype=torch.long)
        # Tokens vLLM already holds (its own prefix cache) are left alone, as the
        # GPU connectors do (skip_prefix_n_tokens); -1 slots are never written.
        keep = slots >= 0
        keep[: max(0, kwargs.get("vllm_cached_tokens", 0) - start)] = False
        if not bool(keep.any()):
            return
        blocks, heads, k_idx, v_idx = self._index(slots[keep], block_size)
        shape = (-1, self.num_kv_heads, self.head_size)
        src = memory_obj.tensor[:, :, : end - start][:, :, keep]
        for layer, region in enumerate(regions):
            region[blocks, heads, k_idx] = src[0, layer].view(shape)
            region[blocks, heads, v_idx] = src[1, layer].view(shape)

    def batched_from_gpu(
        self, memory_objs: Any, starts: list[int], ends: list[int], **kwargs: Any
    ) -> None:
        for memory_obj, start, end in zip(memory_objs, starts, ends, strict=True):
            self.from_gpu(memory_obj, start, end, **kwargs)

    def batched_to_gpu(
        self,
        memory_objs: Any = None,
        starts: list[int] | None = None,
        ends: list[int] | None = None,
        **kwargs: Any,
    ) -> None:
        if memory_objs is None or starts is None or ends is None:
            raise ValueError("the CPU connector is not layerwise: pass memory_objs, starts, ends")
        for memory_obj, start, end in zip(memory_objs, starts, ends, strict=True):
            self.to_gpu(memory_obj, start, end, **kwargs)
