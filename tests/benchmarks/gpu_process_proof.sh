#!/usr/bin/env bash
# The GPU proof on a host without Docker (process runtime): a one-GPU stack up as processes
# (smoke verdict: KV from external_kv_transfer, none computed on decode, its GiB/s and UCX
# transport), then seed A's benchmark against the colocated baseline on the same GPU.
#
#   tests/benchmarks/gpu_process_proof.sh STACK ENGINE_PY ROUTER_PY MODEL_DIR [up|bench|both]
#   tests/benchmarks/gpu_process_proof.sh STACK ENGINE_PY ROUTER_PY MODEL_DIR fault [FAULT]
#   tests/benchmarks/gpu_process_proof.sh STACK ENGINE_PY ROUTER_PY MODEL_DIR probe
#   tests/benchmarks/gpu_process_proof.sh STACK ENGINE_PY ROUTER_PY MODEL_DIR idle
#   tests/benchmarks/gpu_process_proof.sh STACK ENGINE_PY ROUTER_PY MODEL_DIR blocks
#   tests/benchmarks/gpu_process_proof.sh STACK ENGINE_PY ROUTER_PY MODEL_DIR graphs
#   tests/benchmarks/gpu_process_proof.sh STACK ENGINE_PY ROUTER_PY MODEL_DIR rates
#
# STACK: xpyd-1gpu or xpyd-lmcache-1gpu. ENGINE_PY: a Python with images/locks/engine-gpu.txt
# (`python -m generator env STACK` makes one); ROUTER_PY: one with images/locks/router.txt.
# MODEL_DIR: a model folder on this host. With only a config and a tokenizer in it
# (images/assets/make_tiny_model.py DIR --shape llama-3.1-8b) vLLM makes random weights
# (--load-format dummy): timings with --ignore-eos do not depend on the weights' values.
# Run from the checkout, with the Python that runs `python -m generator` as $PYTHON (default
# python3). As root the engines run in their containers' view (process.isolation: container).
# EAGER=1: engines in eager mode (--enforce-eager) instead of CUDA graphs.
# KV_BYTES: each engine's KV cache size (--kv-cache-memory-bytes, e.g. 12G; xpyd-1gpu gives 12G in
# its spec, KV_BYTES then overrides it): vLLM then measures
# no memory at start, so the engines sharing the GPU start, and restart, together
# (generator/plan/start_order.py) instead of one after another.
# ENGINE_ARGS: more arguments for both engines, a JSON list, e.g. '["-cc.cudagraph_mode=PIECEWISE"]'
# (CUDA graphs for the model's pieces only, attention eager).
# ROUTER_ARGS: more router arguments, a JSON list (router.extra_args), e.g. '["--log-level",
# "debug"]': vllm-router then logs each prefill answer and decode request it passes on.
# ENGINE_ENV: more environment for both engines, a JSON object (prefill.env and decode.env), e.g.
# '{"LMCACHE_LOG_LEVEL": "DEBUG", "UCX_LOG_LEVEL": "info"}': LMCache's and UCX's own logs.
# Prints the verdict table and the benchmark report; exit status 1 when a verdict fails.
# `fault`: a fault drill instead (`bench --fault FAULT`, default kill:decode-0@15, FAULT_S of
# load, default 150: the goal is the stack whole again within 120 s; its `up` gives the verdict
# first), then down.
# `probe`: NIXL alone, two processes on GPU 0 (generator/kvprobe/nixl_kv_probe.py, run with
# ENGINE_PY; STACK, ROUTER_PY and MODEL_DIR unused): 1 GiB WRITEs as one descriptor and as
# 32, 128 and 512 KiB ones, with no UCX worker threads and with vLLM's 4; a JSON line each
# (docs/facts.md, "Two processes on ONE GPU").
# `idle`: NIXL's progress-thread delay (networking.nixl_idle_delay_us), for each of DELAYS
# (default "0 10000"): `up` (the smoke verdict's KV rate), the idle CPU of each service
# (tests/benchmarks/bench_idle.py --project), seed A's benchmark on the stack (P/D only), down.
# `blocks`: the KV block size (vLLM's --block-size), for each of BLOCKS (default "16 64 128"):
# `up` (the smoke verdict's KV rate), seed A's benchmark on the stack (P/D only), down. NIXL
# moves one descriptor per block, layer and K or V, each costing about the same time whatever
# its size (docs/facts.md), so larger blocks should move the same KV faster.
# `graphs`: vLLM's CUDA graph mode (-cc.cudagraph_mode), for each of MODES (default "PIECEWISE
# FULL_AND_PIECEWISE"): `up` (the smoke verdict; its run.json has each engine's time to ready,
# graph capture included), seed A's benchmark on the stack (P/D only), down. Piecewise graphs
# leave attention eager: what that costs the decoder's ITL against vLLM's default.
# `rates`: the KV path's rate against the load: `up`, then seed A's benchmark on the stack (P/D
# only) at each RATE:PROMPTS:SEED of RATES (default "0.2:8:1 1:30:0 0.2:8:2"), one after the
# other on the same engines, then down. At 0.2/s no two requests overlap (one ends in about 2 s),
# at 1/s the next prefill and earlier decodes share the GPU with each transfer; the later 0.2/s
# point meets the KV blocks as the 1/s one left them. The report's "KV descriptors per request"
# says how many neighbouring blocks NIXL merged. Each point its own seed: prompts seen before
# would hit the prefix caches and move less KV.
set -uo pipefail
stack=$1 engine_python=$2 router_python=$3 model=$4 what=${5:-both} fault=${6:-kill:decode-0@15}
# The spec takes absolute paths; -s keeps a venv's python link (resolved, it leaves the venv).
engine_python=$(realpath -s "$engine_python") router_python=$(realpath -s "$router_python")
model=$(realpath -s "$model")
python=${PYTHON:-python3}
# CUDA graphs, as vLLM runs by default and users run it; EAGER=1 measures --enforce-eager.
engine_args=''
[ "${EAGER:-0}" = 1 ] && engine_args='"--enforce-eager", '
[ -n "${KV_BYTES:-}" ] && engine_args="$engine_args\"--kv-cache-memory-bytes\", \"$KV_BYTES\", "
# Each role's own arguments, after the stack's model.extra_args (vLLM: the last one wins).
extra="[$engine_args\"--load-format\", \"dummy\"]"
if [ -n "${ENGINE_ARGS:-}" ]; then
    extra=$("$python" -c 'import json, sys; print(json.dumps(json.loads(sys.argv[1]) + json.loads(sys.argv[2])))' "$extra" "$ENGINE_ARGS") || exit 2
fi
isolation=plain
[ "$(id -u)" = 0 ] && command -v unshare >/dev/null && isolation=container
settings=(
    --runtime process --python "$engine_python"
    --set "process.router_python=$router_python" --set "process.isolation=$isolation"
    --set model.source=host-path --set "model.host_path=$model" --set model.id=/models/model
    --set model.served_name=llama-3.1-8b-shape
    --set "prefill.extra_args=$extra" --set "decode.extra_args=$extra"
    --set 'hf={}'  # a local model: no token, no hub
)
[ -n "${ROUTER_ARGS:-}" ] && settings+=(--set "router.extra_args=$ROUTER_ARGS")
[ -n "${ENGINE_ENV:-}" ] && settings+=(--set "prefill.env=$ENGINE_ENV" --set "decode.env=$ENGINE_ENV")
status=0
# One point of a sweep (blocks, graphs): `up` (the smoke verdict), seed A's benchmark on the
# stack (P/D only), down. $1: the run ids' stem; the rest: the settings.
sweep_point() {
    local id=$1
    shift
    "$python" -m generator up "$stack" "$@" --run-id "$id-up" || status=1
    "$python" -m generator bench "$stack" "$@" --preset seed-xpyd --run-id "$id-bench" || status=1
    "$python" -m generator down "$stack"
}
if [ "$what" = probe ]; then
    probe=generator/kvprobe/nixl_kv_probe.py port=5790
    for threads in 0 4; do
        for block in 0 32 128 512; do
            port=$((port + 1))
            "$engine_python" "$probe" serve --listen "127.0.0.1:$port" --device cuda \
                --size-mib 1024 --timeout-s 120 >/dev/null &
            sleep 1
            "$engine_python" "$probe" run --peer "127.0.0.1:$port" --device cuda --size-mib 1024 \
                --block-kib "$block" --threads "$threads" --timeout-s 120 || status=1
            wait
        done
    done
    exit "$status"
fi
if [ "$what" = idle ]; then
    for delay in ${DELAYS:-0 10000}; do
        with=("${settings[@]}" --set "networking.nixl_idle_delay_us=$delay")
        "$python" -m generator up "$stack" "${with[@]}" --run-id "gpu-idle-$stack-$delay-up" || status=1
        "$python" tests/benchmarks/bench_idle.py --project "xpyd-$stack" --settle-s 20 \
            --window-s "${IDLE_WINDOW_S:-30}" || status=1
        "$python" -m generator bench "$stack" "${with[@]}" --preset seed-xpyd \
            --run-id "gpu-idle-$stack-$delay-bench" || status=1
        "$python" -m generator down "$stack"
    done
    exit "$status"
fi
if [ "$what" = blocks ]; then
    for block in ${BLOCKS:-16 64 128}; do
        sweep_point "gpu-blocks-$stack-$block" "${settings[@]}" --set "model.block_size=$block"
    done
    exit "$status"
fi
if [ "$what" = graphs ]; then
    for mode in ${MODES:-PIECEWISE FULL_AND_PIECEWISE}; do
        args=$("$python" -c 'import json, sys; print(json.dumps(json.loads(sys.argv[1]) + ["-cc.cudagraph_mode=" + sys.argv[2]]))' "$extra" "$mode") || exit 2
        sweep_point "gpu-graphs-$stack-$mode" "${settings[@]}" \
            --set "prefill.extra_args=$args" --set "decode.extra_args=$args"
    done
    exit "$status"
fi
if [ "$what" = rates ]; then
    "$python" -m generator up "$stack" "${settings[@]}" --run-id "gpu-rates-$stack-up" || status=1
    for point in ${RATES:-0.2:8:1 1:30:0 0.2:8:2}; do
        IFS=: read -r rate prompts seed <<<"$point"
        "$python" -m generator bench "$stack" "${settings[@]}" --preset seed-xpyd \
            --request-rate "$rate" --num-prompts "$prompts" --seed "$seed" --idle-window-s 0 \
            --run-id "gpu-rates-$stack-$rate-$prompts-$seed" || status=1
    done
    "$python" -m generator down "$stack"
    exit "$status"
fi
if [ "$what" = fault ]; then
    "$python" -m generator bench "$stack" "${settings[@]}" --fault "$fault" --fault-duration-s "${FAULT_S:-150}" \
        --run-id "gpu-fault-$stack-$(printf %s "$fault" | tr ':@' '--')${KV_BYTES:+-kv$KV_BYTES}" || status=1
    "$python" -m generator down "$stack"
    exit "$status"
fi
if [ "$what" != bench ]; then
    "$python" -m generator up "$stack" "${settings[@]}" --run-id "gpu-proof-$stack-up" || status=1
fi
if [ "$what" != up ] && [ "$status" = 0 ]; then
    "$python" -m generator bench "$stack" "${settings[@]}" --preset seed-xpyd --baseline colocated \
        --run-id "gpu-proof-$stack-bench" --down || status=1
fi
[ "$what" = up ] || "$python" -m generator down "$stack"
exit "$status"
