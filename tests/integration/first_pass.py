"""Runs inside the cpu engine image (tests/integration/test_first_pass.py): vLLM's first forward
passes of 1, 2, 3 and 4 tokens, the case that died of SIGILL on CPUs with AMX before the image
asked for AMX tile data (generator/cpu_features.py). Prints one line: RESULT and a JSON object."""

import json
import sys

import torch
import xpyd_cpu_features
from vllm import LLM, SamplingParams
from vllm.v1.attention.backends.cpu_attn import _get_attn_isa


def main(model: str) -> None:
    llm = LLM(
        model=model,
        dtype="bfloat16",
        enforce_eager=True,
        max_model_len=2048,
        kv_cache_memory_bytes=256 << 20,
    )
    config = llm.llm_engine.vllm_config
    head_size = config.model_config.get_head_size()
    isa = _get_attn_isa(torch.bfloat16, config.cache_config.block_size, head_size)
    generated = []
    for length in (1, 2, 3, 4):  # the first of these is the engine's first forward pass
        params = SamplingParams(max_tokens=4, ignore_eos=True, temperature=0.0)
        (output,) = llm.generate([{"prompt_token_ids": list(range(10, 10 + length))}], params)
        generated.append(len(output.outputs[0].token_ids))
    features = xpyd_cpu_features.cpu_features()
    result = {
        "attention_isa": isa,
        "generated": generated,
        "amx_in_cpu": features.amx_in_cpu,
        "amx_permitted": features.amx_permitted,
    }
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":  # where vLLM spawns an engine core, this file is re-imported there
    main(sys.argv[1])
