"""Sessions with storage tools, created the way each client version can: the 2.3.0 client's
declarations (`AwsS3(...)`, `ManagedTool("storage_read")`) or, under 2.0.0, the same lowered
wire body."""

from __future__ import annotations

from typing import Any

MODEL = "openai/gpt-4.1-mini"


def create_with_aws_s3(client: Any, options: dict[str, str], *, operations: list[str] | None = None) -> Any:
    """A `loop` session binding `aws_s3` with `options` (bucket, region, endpoint, prefix,
    access_key_id, secret_access_key, session_token)."""
    import brain

    if hasattr(brain, "AwsS3"):
        declared = brain.AwsS3(**options, **({"operations": operations} if operations is not None else {}))
        return client.create(harness="loop", model=brain.Model(MODEL), tools=[declared])
    parameters = {key: options[key] for key in ("bucket", "region", "endpoint", "prefix") if key in options}
    secrets = {"access_key_id": "accessKeyId", "secret_access_key": "secretAccessKey", "session_token": "sessionToken"}
    credential = {wire: options[key] for key, wire in secrets.items() if key in options}
    binding = {
        "alias": "aws_s3",
        "provider": "aws_s3",
        "operations": operations if operations is not None else ["list", "read"],
        "parameters": parameters,
    }
    body: dict[str, Any] = {"harness": "loop", "config": {"model": MODEL, "tools": [], "bindings": [binding]}}
    if credential:
        body["credentials"] = [{"binding": "aws_s3", "value": credential}]
    return client.create(body)


def create_with_managed_tools(client: Any, names: list[str]) -> Any:
    """A `loop` session enabling host-config tools by name (`ManagedTool(name)` → config.tools)."""
    import brain

    if hasattr(brain, "ManagedTool"):
        return client.create(harness="loop", model=brain.Model(MODEL), tools=[brain.ManagedTool(n) for n in names])
    return client.create({"harness": "loop", "config": {"model": MODEL, "tools": list(names)}})
