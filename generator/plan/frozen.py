"""The base of every plan model: unknown fields are errors, instances never change."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["Frozen"]


class Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
