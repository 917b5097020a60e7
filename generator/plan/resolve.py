"""Settings the planner resolves once, so that no reader of the plan works them out again:
the served model name, whether the hub may be reached, where the HF token comes from."""

from __future__ import annotations

from generator.plan.models import HFPlan, ModelPlan, TokenPlan, UcxPlan
from generator.spec import Spec, TokenSource

__all__ = ["resolve_hf", "resolve_model", "resolve_ucx"]


def resolve_model(spec: Spec) -> ModelPlan:
    model = spec.model
    return ModelPlan(
        id=model.id,
        served_name=model.served_name or model.id,
        source=model.source,
        host_path=model.host_path,
        dtype=model.dtype,
        max_model_len=model.max_model_len,
        block_size=model.block_size,
        extra_args=tuple(model.extra_args),
    )


def resolve_hf(spec: Spec) -> HFPlan:
    # A model that is not downloaded must not be looked up on the hub either.
    offline = spec.hf.offline or spec.model.source != "hub"
    return HFPlan(offline=offline, cache_dir=spec.hf.cache_dir, token=_token(spec.hf.token))


def _token(token: TokenSource | None) -> TokenPlan | None:
    if token is None:
        return None
    if token.env:
        return TokenPlan(source="env", name=token.env)
    if token.file:
        return TokenPlan(source="file", name=token.file)
    if token.env_file:
        return TokenPlan(source="env-file", name=token.env_file)
    return None


def resolve_ucx(spec: Spec) -> UcxPlan:
    networking = spec.networking
    return UcxPlan(
        tls=networking.ucx_tls,
        net_devices=networking.ucx_net_devices,
        nixl_idle_delay_us=networking.nixl_idle_delay_us,
    )
