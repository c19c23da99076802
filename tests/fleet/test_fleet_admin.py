"""Operators see the fleet in the admin of real `runbrain` instances on one real PostgreSQL: the
instances page (URL, heartbeat, alive, sessions owned, draining) and a session's owner and epoch,
as they change when the owner stops and another instance takes the session. Without a `cluster`
block the admin shows none of it."""

from __future__ import annotations

import html
import re
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.admin.support import VIEWER, VIEWER_PASSWORD, AdminClient, create_superuser, create_viewer
from tests.fixtures.server import BrainServer, create_session
from tests.fixtures.services import PostgresServer
from tests.fleet.support import fleet_factory

LEASE_SECONDS = 3
INSTANCES = "/admin/fleet/instances/"
SESSIONS = "/admin/sessions_app/session"


@pytest.fixture
def fleet(
    brain_factory: Callable[..., BrainServer], postgres_server: PostgresServer, tmp_path: Path
) -> Callable[[str], BrainServer]:
    """A factory of fleet instances by name, sharing the database, the archive and the tokens."""
    return fleet_factory(
        brain_factory, postgres_server, tmp_path, lease_seconds=LEASE_SECONDS, database_prefix="brain_admin"
    )


def instance_rows(page: str) -> dict[str, dict[str, str]]:
    """Each instance row of the instances page: its cells by class, as text."""
    rows = re.findall(r'<tr class="fleet-instance" data-instance="([^"]+)">(.*?)</tr>', page, re.DOTALL)
    return {
        name: {
            cell: html.unescape(re.sub(r"<[^>]+>", "", text)).strip()
            for cell, text in re.findall(r'<td class="instance-([a-z]+)">(.*?)</td>', body, re.DOTALL)
        }
        for name, body in rows
    }


def fleet_fields(page: str) -> tuple[str, str]:
    """(owner, epoch) as the session page's Fleet fieldset shows them."""
    owner = re.search(r'id="session-fleet-owner">(.*?)</div>', page, re.DOTALL)
    epoch = re.search(r'id="session-fleet-epoch">(.*?)</div>', page, re.DOTALL)
    assert owner is not None and epoch is not None, page[:2000]
    return html.unescape(owner.group(1)).strip(), html.unescape(epoch.group(1)).strip()


def test_the_admin_shows_the_instances_and_each_sessions_owner_and_epoch(
    fleet: Callable[[str], BrainServer],
) -> None:
    # given a session created on A, and an operator of B's admin (one database for the fleet)
    a, b = fleet("brain-a"), fleet("brain-b")
    sid = create_session(a)["id"]
    create_superuser(b)
    with AdminClient(b).login() as admin:
        # when the operator opens the index and the instances page on B
        index = admin.page("/admin/")
        page = admin.page(INSTANCES)
        # then the index links to it, and it lists both instances, A owning the session
        assert f'href="{INSTANCES}"' in index
        rows = instance_rows(page)
        assert {
            name: {k: v for k, v in row.items() if k not in ("heartbeat", "started")} for name, row in rows.items()
        } == {
            "brain-a": {"url": a.url, "alive": "yes", "sessions": "1", "draining": "no"},
            "brain-b": {"url": b.url, "alive": "yes", "sessions": "0", "draining": "no"},
        }
        assert all(re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", row["heartbeat"]) for row in rows.values())
        # and the session's page on B names its owner and epoch
        assert fleet_fields(admin.page(f"{SESSIONS}/{sid}/change/")) == (f"brain-a ({a.url})", "1")
        # when A stops gracefully (it uploads, releases its leases and leaves)
        assert a.stop(signal.SIGTERM) == 0
        rows = instance_rows(admin.page(INSTANCES))
        # then A is gone, owning nothing, and the session has no live owner at epoch 1
        assert (rows["brain-a"]["alive"], rows["brain-a"]["sessions"], rows["brain-a"]["draining"]) == (
            "no",
            "0",
            "yes",
        )
        assert fleet_fields(admin.page(f"{SESSIONS}/{sid}/change/")) == (
            "none live: the next instance to get a request for the session takes it",
            "1 (released)",
        )
        # when B gets a request for the session, it takes it
        with b.client() as client:
            assert client.get(f"/sessions/{sid}").status_code == 200
        # then B owns it at epoch 2
        assert fleet_fields(admin.page(f"{SESSIONS}/{sid}/change/")) == (f"brain-b ({b.url})", "2")
        assert instance_rows(admin.page(INSTANCES))["brain-b"]["sessions"] == "1"


def test_a_staff_user_without_the_instance_view_permission_sees_no_instances(
    fleet: Callable[[str], BrainServer],
) -> None:
    # given a viewer of sessions only
    a = fleet("brain-a")
    create_viewer(a)
    with AdminClient(a).login(VIEWER, VIEWER_PASSWORD) as admin:
        # when
        index = admin.page("/admin/")
        refused = admin.get(INSTANCES)
    # then
    assert INSTANCES not in index
    assert refused.status_code == 403


def test_without_a_cluster_block_the_admin_shows_no_fleet(brain: BrainServer) -> None:
    # given a single server and a session on it
    sid = create_session(brain)["id"]
    create_superuser(brain)
    with AdminClient(brain).login() as admin:
        # when
        index = admin.page("/admin/")
        instances = admin.get(INSTANCES)
        session_page = admin.page(f"{SESSIONS}/{sid}/change/")
    # then no link, no page, no fleet fieldset
    assert INSTANCES not in index
    assert ">Fleet<" not in index
    assert instances.status_code == 404
    assert "session-fleet" not in session_page
    assert "Files on this server" in session_page  # the page itself is the usual one
