"""The Modal backend at the SDK's gRPC boundary: a loopback Modal control plane built on Modal's
generated service base. It answers the calls a create
makes up to the sandbox itself; the V2 sandbox and its command router are not faked (see the
README's Cloud sandboxes section)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cloud_sandboxes.modal_fake import TOKEN_ID, TOKEN_SECRET, FakeModal, serve_modal
from toolkits.sandbox.backend import SandboxFailure
from toolkits.sandbox.modal import ModalBackend


@pytest.fixture
def modal_fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeModal]:
    fake = FakeModal()
    with serve_modal(fake) as server_url:
        monkeypatch.setenv("MODAL_SERVER_URL", server_url)  # the SDK's documented server setting
        yield fake


async def test_a_modal_auth_refusal_is_a_failure_that_did_nothing(modal_fake: FakeModal) -> None:
    # when
    with pytest.raises(SandboxFailure) as refused:
        await ModalBackend().create({}, {"tokenId": TOKEN_ID, "tokenSecret": "as-wrong"})
    # then
    assert refused.value.reached is False
    assert "as-wrong" not in str(refused.value)
    assert modal_fake.calls == [] and modal_fake.created == []


async def test_a_modal_create_looks_up_the_spec_app_and_image_with_the_binding_token(modal_fake: FakeModal) -> None:
    # when: the fake stops at the V2 sandbox call, which it does not implement
    with pytest.raises(SandboxFailure) as stopped:
        await ModalBackend().create({}, {"tokenId": TOKEN_ID, "tokenSecret": TOKEN_SECRET})
    # then: everything before it went through with the spec's app and image
    assert modal_fake.calls == ["AppGetOrCreate", "EnvironmentGetOrCreate", "ImageGetOrCreate", "AuthTokenGet"]
    assert modal_fake.requests["AppGetOrCreate"].app_name == "brain-tools"
    assert modal_fake.requests["ImageGetOrCreate"].image.dockerfile_commands == ["FROM python:3.13-slim"]
    assert stopped.value.reached is True  # an unexpected answer to a create is an unknown outcome


async def test_the_modal_app_and_image_come_from_the_binding(modal_fake: FakeModal) -> None:
    settings = {"app": "my-tools", "image": "python:3.12-slim"}
    with pytest.raises(SandboxFailure):
        await ModalBackend().create(settings, {"tokenId": TOKEN_ID, "tokenSecret": TOKEN_SECRET})
    assert modal_fake.requests["AppGetOrCreate"].app_name == "my-tools"
    assert modal_fake.requests["ImageGetOrCreate"].image.dockerfile_commands == ["FROM python:3.12-slim"]


async def test_a_modal_binding_without_its_token_secret_is_refused_naming_it(modal_fake: FakeModal) -> None:
    with pytest.raises(SandboxFailure, match="no credential 'tokenSecret'") as missing:
        await ModalBackend().create({}, {"tokenId": TOKEN_ID})
    assert missing.value.reached is False
    assert modal_fake.calls == []
