"""Fenced session leases on a real PostgreSQL: two LeaseManagers are two instances of a fleet."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from datetime import datetime

import pytest
from channels.db import database_sync_to_async
from django.conf import settings
from django.db import OperationalError, connections

from fleet_app import db
from fleet_app.leases import LeaseManager, margin_seconds
from fleet_app.models import SessionLease
from tests.fixtures.server import free_port
from tests.fleet.conftest import add_database, drop_database

WAIT_SECONDS = 15.0  # bounded waits for a real expiry; never an assertion on how long it took


class Clock:
    """A monotonic clock the test moves, for the local rule (the database keeps real time)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def sid() -> str:
    return secrets.token_hex(16)


def manager(database: str, name: str, *, lease_seconds: float = 30.0, clock: Clock | None = None) -> LeaseManager:
    return LeaseManager(
        instance=name,
        url=f"http://{name}.fleet.test:8080",
        lease_seconds=lease_seconds,
        database=database,
        clock=clock if clock is not None else time.monotonic,
    )


def lease_row(database: str, session_id: str) -> tuple[str, int, datetime]:
    row = SessionLease.objects.using(database).get(session_id=session_id)
    return row.owner, row.epoch, row.expires_at


alease_row = database_sync_to_async(lease_row)


async def until(check: Callable[[], Awaitable[object]]) -> object:
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        result = await check()
        if result:
            return result
        await asyncio.sleep(0.05)
    raise AssertionError("condition not reached")


async def test_a_lease_held_by_one_instance_is_refused_to_the_other(fleet_db: str) -> None:
    # given
    a, b = manager(fleet_db, "a"), manager(fleet_db, "b")
    assert await a.join() and await b.join()
    session = sid()
    # when
    first = await a.acquire(session)
    second = await b.acquire(session)
    # then
    assert (first, second) == (1, None)
    assert (a.held_epoch(session), b.held_epoch(session)) == (1, None)
    assert (a.is_writable(session), b.is_writable(session)) == (True, False)
    assert await b.owner_of(session) == db.LeaseOwner("a", "http://a.fleet.test:8080", 1, a.incarnation)
    assert (await alease_row(fleet_db, session))[:2] == ("a", 1)


def test_concurrent_acquires_on_separate_connections_give_exactly_one_owner(fleet_db: str) -> None:
    # given: eight instances, each on a connection of its own, start together
    session = sid()
    barrier = threading.Barrier(8)
    results: dict[str, int | None] = {}

    def contend(name: str) -> None:
        try:
            barrier.wait()
            results[name] = db.acquire_lease(
                session, owner=name, incarnation=f"{name}-process", lease_seconds=30, using=fleet_db
            )
        finally:
            connections.close_all()

    threads = [threading.Thread(target=contend, args=(f"i{index}",)) for index in range(8)]
    # when
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # then
    winners = {name: epoch for name, epoch in results.items() if epoch is not None}
    assert len(results) == 8
    assert list(winners.values()) == [1]
    assert lease_row(fleet_db, session)[:2] == (next(iter(winners)), 1)


async def test_the_same_owner_keeps_its_epoch_and_every_change_of_owner_increments_it(fleet_db: str) -> None:
    # given
    a, b = manager(fleet_db, "a"), manager(fleet_db, "b")
    session = sid()
    # when
    epochs = [await a.acquire(session), await a.acquire(session)]
    await a.release(session)
    epochs += [await a.acquire(session)]  # taken again after a release: a new tenure
    await a.release(session)
    epochs += [await b.acquire(session), await b.acquire(session)]
    # then
    assert epochs == [1, 1, 2, 3, 3]
    assert (await alease_row(fleet_db, session))[:2] == ("b", 3)


async def test_release_lets_the_other_instance_take_the_session_at_once(fleet_db: str) -> None:
    # given: a 30 s lease, far from expiring
    a, b = manager(fleet_db, "a"), manager(fleet_db, "b")
    assert await a.join() and await b.join()
    session = sid()
    await a.acquire(session)
    assert await b.acquire(session) is None
    # when
    released = await a.release(session)
    taken = await b.acquire(session)
    # then
    assert released is True
    assert taken == 2
    assert a.held_epoch(session) is None
    assert await a.owner_of(session) == db.LeaseOwner("b", "http://b.fleet.test:8080", 2, b.incarnation)
    assert await a.release(session) is False  # nothing held any more: no statement can undo b's lease
    assert (await alease_row(fleet_db, session))[:2] == ("b", 2)


async def test_an_expired_lease_goes_to_the_next_instance_and_the_old_owner_cannot_renew_it(fleet_db: str) -> None:
    # given: a holds a 1 s lease and stops renewing (a pause, a partition)
    a, b = manager(fleet_db, "a", lease_seconds=1), manager(fleet_db, "b")
    assert await a.join() and await b.join()
    session, other = sid(), sid()
    assert await a.acquire(session) == 1
    assert await b.acquire(session) is None
    # when: the lease expires and b takes the session
    taken = await until(lambda: b.acquire(session))
    assert await a.acquire(other) == 1  # a lease b never wanted stays a's through the renewal
    renewal = await a.renew()
    # then
    assert taken == 2
    assert renewal.lost == frozenset({session})
    assert renewal.held == frozenset({other})
    assert a.held_epoch(session) is None
    assert a.held() == {other: 1}
    assert await a.acquire(session) is None  # b's lease is live
    assert (await alease_row(fleet_db, session))[:2] == ("b", 2)


async def test_the_local_rule_stops_writes_before_the_lease_can_expire_elsewhere(fleet_db: str) -> None:
    # given: a 10 s lease; the manager's clock is the test's, the database's is real
    clock = Clock()
    a = manager(fleet_db, "a", lease_seconds=10, clock=clock)
    assert await a.join()
    session = sid()
    assert await a.acquire(session) == 1
    margin = margin_seconds(10)
    # when / then: writable until lease_seconds - margin after the acquire was sent
    clock.now += 10 - margin - 0.001
    assert (a.is_writable(session), a.held_epoch(session)) == (True, 1)
    clock.now += 0.001
    assert (a.is_writable(session), a.held_epoch(session)) == (False, None)
    # a renewal at the same epoch proves nobody took it meanwhile: writable again
    renewal = await a.renew()
    assert renewal.held == frozenset({session})
    assert a.held_epoch(session) == 1
    clock.now += 10 - margin - 0.001
    assert a.held_epoch(session) == 1
    clock.now += 0.002
    assert a.held_epoch(session) is None
    assert margin == 2.0


def fleet_database_config(alias: str) -> dict[str, str]:
    keys = ("ENGINE", "NAME", "USER", "HOST", "PORT")
    return {key: str(settings.DATABASES[alias][key]) for key in keys}


@pytest.fixture
def unreachable_db(fleet_db: str) -> Iterator[str]:
    """A database alias whose server is not there: a port nothing listens on."""
    alias = f"{fleet_db}_down"
    add_database(alias, {**fleet_database_config(fleet_db), "PORT": str(free_port())})
    yield alias
    drop_database(alias)


async def test_a_failed_renewal_leaves_the_deadline_to_lapse(fleet_db: str, unreachable_db: str) -> None:
    # given: a holds a lease, then loses its database
    clock = Clock()
    a = manager(fleet_db, "a", lease_seconds=10, clock=clock)
    assert await a.join()
    session = sid()
    await a.acquire(session)
    a.database = unreachable_db
    # when
    clock.now += 5
    with pytest.raises(OperationalError):
        await a.renew()
    # then: the deadline did not move, and the lease is still believed held until it lapses
    assert a.held() == {session: 1}
    clock.now += 10 - margin_seconds(10) - 5 - 0.001
    assert a.held_epoch(session) == 1
    clock.now += 0.001
    assert a.held_epoch(session) is None


async def test_renewal_extends_every_held_lease_in_the_database(fleet_db: str) -> None:
    # given
    a = manager(fleet_db, "a", lease_seconds=30)
    assert await a.join()
    sessions = [sid(), sid(), sid()]
    for session in sessions:
        await a.acquire(session)
    before = {session: (await alease_row(fleet_db, session))[2] for session in sessions}
    # when
    renewal = await a.renew()
    # then
    assert renewal.held == frozenset(sessions)
    assert renewal.lost == frozenset()
    for session in sessions:
        owner, epoch, expires_at = await alease_row(fleet_db, session)
        assert (owner, epoch) == ("a", 1)
        assert expires_at > before[session]


async def test_a_second_process_cannot_join_under_a_live_instance_name(fleet_db: str) -> None:
    # given: instance "a" runs, with a lease
    first = manager(fleet_db, "a")
    assert await first.join()
    session = sid()
    await first.acquire(session)
    second = manager(fleet_db, "a")
    # when
    refused = await second.join()
    await first.leave()
    accepted = await second.join()
    stale = await first.renew()  # the first process, back after it left: its row is the second's
    # then
    assert (refused, accepted) == (False, True)
    assert stale.held == frozenset()
    assert await second.owner_of(session) is None  # leave released it
    assert (await alease_row(fleet_db, session))[:2] == ("", 1)


async def test_a_lease_whose_owner_left_has_no_live_owner(fleet_db: str) -> None:
    # given
    a, b = manager(fleet_db, "a"), manager(fleet_db, "b")
    assert await a.join() and await b.join()
    session = sid()
    await a.acquire(session)
    # when
    await a.leave()
    # then
    assert await b.owner_of(session) is None
    assert await b.acquire(session) == 2
    rows = {row.name: row for row in await db.alist_instances(using=fleet_db)}
    assert (rows["a"].alive, rows["a"].draining, rows["a"].sessions_owned) == (False, True, 0)
    assert (rows["b"].alive, rows["b"].draining, rows["b"].sessions_owned) == (True, False, 1)
    assert rows["b"].url == "http://b.fleet.test:8080"


async def test_a_lease_of_an_instance_that_never_joined_has_no_reachable_owner(fleet_db: str) -> None:
    # given: a lease row whose owner has no instance row (no URL to forward to)
    a, b = manager(fleet_db, "a"), manager(fleet_db, "b")
    session = sid()
    await a.acquire(session)
    # when
    owner = await b.owner_of(session)
    # then
    assert owner is None
    assert await b.acquire(session) is None  # still a's lease: b answers 503 rather than take it


async def test_draining_is_shown_for_the_instance(fleet_db: str) -> None:
    # given
    a = manager(fleet_db, "a")
    assert await a.join()
    # when
    changed = await a.set_draining(True)
    # then
    assert changed is True
    [row] = await db.alist_instances(using=fleet_db)
    assert (row.name, row.alive, row.draining, row.sessions_owned) == ("a", True, True, 0)


async def test_release_all_gives_up_every_lease_in_one_statement(fleet_db: str) -> None:
    # given
    a, b = manager(fleet_db, "a"), manager(fleet_db, "b")
    sessions = [sid(), sid()]
    for session in sessions:
        await a.acquire(session)
    # when
    released = await a.release_all()
    # then
    assert released == set(sessions)
    assert a.held() == {}
    assert [await b.acquire(session) for session in sessions] == [2, 2]


async def test_the_renewal_loop_keeps_leases_and_reports_one_another_instance_took(fleet_db: str) -> None:
    # given: a renews every second; b takes one of its sessions through a release a did not make
    a, b = manager(fleet_db, "a", lease_seconds=3), manager(fleet_db, "b")
    assert await a.join() and await b.join()
    kept, taken = sid(), sid()
    await a.acquire(kept)
    await a.acquire(taken)
    reported: list[frozenset[str]] = []
    loop = asyncio.create_task(a.run_renewals(reported.append))
    try:
        # when
        assert await database_sync_to_async(db.release_lease)(
            taken, owner="a", incarnation=a.incarnation, epoch=1, using=fleet_db
        )
        assert await b.acquire(taken) == 2
        await until(lambda: asyncio.sleep(0, result=bool(reported)))
    finally:
        loop.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await loop
    # then
    assert reported == [frozenset({taken})]
    assert a.held() == {kept: 1}
    assert await b.owner_of(kept) == db.LeaseOwner("a", "http://a.fleet.test:8080", 1, a.incarnation)


def expire(database: str, name: str, *, leases: bool = True) -> None:
    """The instance (and its leases) past their expiry, as if its process had stopped answering."""
    with connections[database].cursor() as cursor:
        cursor.execute("UPDATE fleet_app_instance SET expires_at = now() WHERE name = %s", [name])
        if leases:
            cursor.execute("UPDATE fleet_app_sessionlease SET expires_at = now() WHERE owner = %s", [name])


async def test_a_new_process_under_a_rejoined_name_takes_a_new_epoch_and_the_old_one_renews_nothing(
    fleet_db: str,
) -> None:
    # given: the first process of "a" holds a session, then stops answering past its heartbeat
    old = manager(fleet_db, "a")
    assert await old.join()
    session = sid()
    assert await old.acquire(session) == 1
    await database_sync_to_async(expire)(fleet_db, "a")
    # when a new process joins under the same name and takes the session
    new = manager(fleet_db, "a")
    assert await new.join()
    taken = await new.acquire(session)
    # then it holds it at a new epoch, and the old process, running again, keeps nothing
    assert taken == 2
    renewal = await old.renew()
    assert (renewal.held, renewal.lost, old.joined) == (frozenset(), frozenset({session}), False)
    assert await old.release(session) is False
    assert await old.acquire(session) is None  # the new process's live lease
    assert await new.owner_of(session) == db.LeaseOwner("a", "http://a.fleet.test:8080", 2, new.incarnation)
    assert (await new.renew()).held == frozenset({session})


async def test_a_new_process_waits_for_a_lease_the_old_process_of_its_name_still_holds(fleet_db: str) -> None:
    # given: the old process's instance row expired, one of its leases (taken later) not yet
    old = manager(fleet_db, "a")
    assert await old.join()
    session = sid()
    assert await old.acquire(session) == 1
    await database_sync_to_async(expire)(fleet_db, "a", leases=False)
    new = manager(fleet_db, "a")
    assert await new.join()
    # when
    refused = await new.acquire(session)
    # then: no shared epoch, no owner to forward to until the old lease expires
    assert refused is None
    assert await new.owner_of(session) is None
    await database_sync_to_async(expire)(fleet_db, "a")
    assert await new.acquire(session) == 2


async def test_a_lease_straight_from_a_former_process_of_the_name_says_which_epoch_it_held(fleet_db: str) -> None:
    # given: "a" crashed holding one session; "b" took another of its sessions meanwhile
    old = manager(fleet_db, "a")
    assert await old.join()
    mine, moved = sid(), sid()
    assert await old.acquire(mine) == 1 and await old.acquire(moved) == 1
    await database_sync_to_async(expire)(fleet_db, "a")
    other = manager(fleet_db, "b")
    assert await other.join() and await other.acquire(moved) == 2
    await other.release(moved)
    # when a new process of "a" takes both
    new = manager(fleet_db, "a")
    assert await new.join()
    epochs = (await new.acquire(mine), await new.acquire(moved), await new.acquire(mine))
    # then: its data directory's copy of `mine` (epoch 1) is the freshest; of `moved` it is not
    assert epochs == (2, 3, 2)
    assert (new.own_name_epoch(mine), new.own_name_epoch(moved)) == (1, None)
