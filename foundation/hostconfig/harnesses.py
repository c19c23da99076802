"""The host config's harnesses (child-process pools) and model providers."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from .base import FieldProblem, StrictModel, check_url

__all__ = ["Harness", "Provider"]


class Harness(StrictModel):
    command: list[str] = Field(min_length=1)
    max_shared: int = Field(default=8, ge=1, le=1024)
    max_active_turns: int | None = Field(default=None, ge=1)
    max_hosts: int = Field(default=16, ge=1)
    max_starting: int = Field(default=4, ge=1)
    # how a turn's tool calls run: all at once (as the model asked for them), or one at a time
    # in the model's order, each starting when the previous one has its result
    tool_execution: Literal["parallel", "sequential"] = "parallel"
    # whether its runner takes the protocol's `steer` request (the spec's SupportsSteering):
    # without it a `delivery: "steer"` message to its sessions is 422 `unsupported`
    steering: bool = False

    @field_validator("command")
    @classmethod
    def _command(cls, value: list[str]) -> list[str]:
        if not value[0]:
            raise ValueError("command[0] must be non-empty")
        return value

    @model_validator(mode="after")
    def _active_within_shared(self) -> Harness:
        if self.max_active_turns is not None and self.max_active_turns > self.max_shared:
            raise FieldProblem("max_active_turns", "must be between 1 and max_shared")
        return self

    @property
    def active_turns(self) -> int:
        return self.max_active_turns or self.max_shared


class Provider(StrictModel):
    api_key_env: str = Field(min_length=1)
    base_url: str = ""
    api: str = ""

    @field_validator("base_url")
    @classmethod
    def _base_url(cls, value: str) -> str:
        return check_url(value) if value else value
