"""The host config file (reference-configuration): strict decoding, defaults, ranges, env checks.

One module per section (tokens, harnesses, tools, limits, persistence), the whole in model.py,
the credentials it names (read from the environment) in environment.py. Imports no Django, so
`manage.py` can read `data_dir` before settings load.
"""

from __future__ import annotations

from .approvals import APPROVAL_KINDS, ApprovalRule, ToolKindName
from .base import MAX_CONFIG_BYTES, ConfigError
from .cluster import ClusterConfig, FleetSecret, check_cluster
from .cors import CorsConfig
from .environment import Secrets, load_config_and_secrets, resolve_secrets
from .environments import ENVIRONMENT_KINDS, ENVIRONMENT_NAME, ComponentLimitsConfig, EnvironmentConfig, EnvironmentKind
from .harnesses import Harness, Provider
from .limits import Limits
from .model import HostConfig, examine_host_config, load_host_config, parse_host_config
from .model_credentials import MAX_REFERENCE_CHARS, REFERENCE_NAME, ModelCredentialConfig
from .persistence import Persistence
from .tokens import MAX_KEY_ID_CHARS, CredentialKeys, TokenGrant
from .tools import TOOL_NAME, TOOL_TRANSPORTS, ToolBindingConfig

__all__ = [
    "APPROVAL_KINDS",
    "ApprovalRule",
    "ToolKindName",
    "MAX_CONFIG_BYTES",
    "MAX_KEY_ID_CHARS",
    "MAX_REFERENCE_CHARS",
    "REFERENCE_NAME",
    "TOOL_NAME",
    "TOOL_TRANSPORTS",
    "ConfigError",
    "ComponentLimitsConfig",
    "ENVIRONMENT_KINDS",
    "ENVIRONMENT_NAME",
    "EnvironmentConfig",
    "EnvironmentKind",
    "ClusterConfig",
    "CorsConfig",
    "CredentialKeys",
    "FleetSecret",
    "Harness",
    "HostConfig",
    "Limits",
    "ModelCredentialConfig",
    "Persistence",
    "Provider",
    "Secrets",
    "TokenGrant",
    "check_cluster",
    "ToolBindingConfig",
    "examine_host_config",
    "load_config_and_secrets",
    "load_host_config",
    "parse_host_config",
    "resolve_secrets",
]
