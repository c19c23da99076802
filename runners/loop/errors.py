"""Failures that end a turn, each carrying the RunnerFrame error code Brain expects.

RunnerFailure
├── BrainFailure     "brain_error": unknown model, unsupported reasoning effort, disk or
│                    protocol failures: the session fails
└── ProviderFailure  "provider_error": the provider rejected the request or broke the stream
"""

from __future__ import annotations

__all__ = ["BrainFailure", "ProviderFailure", "RunnerFailure"]


class RunnerFailure(Exception):
    code = "brain_error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class BrainFailure(RunnerFailure):
    code = "brain_error"


class ProviderFailure(RunnerFailure):
    code = "provider_error"
