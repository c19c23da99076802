"""The input journal on a real PostgreSQL: idempotent records, started marks, what a new owner
re-queues and what it reports lost, and pruning."""

from __future__ import annotations

import secrets
import threading

from channels.db import database_sync_to_async
from django.db import connections

from fleet_app import db
from fleet_app.journal import InputJournal
from fleet_app.lease_token import LeaseToken
from fleet_app.models import JournalEntry, JournalState
from fleet_app.receipts import JournalReceipt


def sid() -> str:
    return secrets.token_hex(16)


def rows(database: str, session_id: str) -> list[tuple[int, str, str]]:
    entries = JournalEntry.objects.using(database).filter(session_id=session_id).order_by("seq")
    return [(entry.seq, entry.input_id, entry.state) for entry in entries]


arows = database_sync_to_async(rows)


async def test_a_resent_key_returns_the_first_input_and_records_nothing(fleet_db: str) -> None:
    # given
    journal = InputJournal(database=fleet_db)
    session = sid()
    first_id, second_id = secrets.token_hex(16), secrets.token_hex(16)
    # when
    first = await journal.record(
        session, input_id=first_id, key="k-1", payload={"text": "hello"}, token=LeaseToken(session, "brain-a", 3)
    )
    again = await journal.record(
        session, input_id=second_id, key="k-1", payload={"text": "hello again"}, token=LeaseToken(session, "brain-a", 4)
    )
    # then
    assert (first.input_id, first.created) == (first_id, True)
    assert (again.seq, again.input_id, again.created) == (first.seq, first_id, False)
    assert await arows(fleet_db, session) == [(first.seq, first_id, "queued")]
    [entry] = (await journal.backlog(session, 0)).requeue
    assert (entry.payload, entry.epoch, entry.key) == ({"text": "hello"}, 3, "k-1")


async def test_keys_are_per_session_and_inputs_without_a_key_are_all_recorded(fleet_db: str) -> None:
    # given
    journal = InputJournal(database=fleet_db)
    one, other = sid(), sid()
    # when
    keyed = [
        await journal.record(
            one, input_id=secrets.token_hex(16), key="k", payload={}, token=LeaseToken(one, "brain-a", 1)
        ),
        await journal.record(
            other, input_id=secrets.token_hex(16), key="k", payload={}, token=LeaseToken(other, "brain-a", 1)
        ),
    ]
    plain = [
        await journal.record(
            one, input_id=secrets.token_hex(16), key=None, payload={}, token=LeaseToken(one, "brain-a", 1)
        )
        for _ in range(2)
    ]
    # then
    assert [item.created for item in keyed + plain] == [True, True, True, True]
    assert len({item.seq for item in keyed + plain}) == 4
    assert [seq for seq, _, _ in await arows(fleet_db, one)] == [keyed[0].seq, plain[0].seq, plain[1].seq]


def test_concurrent_sends_of_one_key_record_one_entry_and_all_answer_its_input(fleet_db: str) -> None:
    # given: six sends of one key race on six connections
    session = sid()
    barrier = threading.Barrier(6)
    results: list[JournalReceipt] = []

    def send(index: int) -> None:
        try:
            barrier.wait()
            results.append(
                db.record_input(
                    session, input_id=f"{index:032x}", key="same", payload={"i": index}, epoch=1, using=fleet_db
                )
            )
        finally:
            connections.close_all()

    threads = [threading.Thread(target=send, args=(index,)) for index in range(6)]
    # when
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # then
    [(seq, input_id, state)] = rows(fleet_db, session)
    assert len(results) == 6
    assert sum(result.created for result in results) == 1
    assert {(result.seq, result.input_id) for result in results} == {(seq, input_id)}
    assert state == "queued"


async def test_a_nul_in_the_key_or_the_message_is_journaled_as_it_was_sent(fleet_db: str) -> None:
    # given: PostgreSQL text refuses NUL and jsonb refuses \u0000; the journal stores bytes
    journal = InputJournal(database=fleet_db)
    session = sid()
    payload = {"text": "before\x00after", "nested": {"n": 2**63 - 1}}
    # when
    first = await journal.record(
        session, input_id=secrets.token_hex(16), key="k\x00", payload=payload, token=LeaseToken(session, "brain-a", 1)
    )
    other = await journal.record(
        session, input_id=secrets.token_hex(16), key="k", payload={}, token=LeaseToken(session, "brain-a", 1)
    )
    again = await journal.record(
        session, input_id=secrets.token_hex(16), key="k\x00", payload={}, token=LeaseToken(session, "brain-a", 1)
    )
    # then
    assert (first.created, other.created, again.created) == (True, True, False)
    assert again.seq == first.seq
    entries = (await journal.backlog(session, 0)).requeue
    assert [(entry.key, entry.payload) for entry in entries] == [("k\x00", payload), ("k", {})]


async def test_the_backlog_requeues_what_never_started_and_reports_started_turns_the_checkpoint_missed(
    fleet_db: str,
) -> None:
    # given: four inputs; the first turn completed and was checkpointed, the second was
    # running when the owner died, the last two were queued
    journal = InputJournal(database=fleet_db)
    session = sid()
    entries = [
        await journal.record(
            session,
            input_id=f"{index:032x}",
            key=None,
            payload={"text": f"m{index}"},
            token=LeaseToken(session, "brain-a", 1),
        )
        for index in range(4)
    ]
    assert await journal.mark_started(session, entries[0].seq)
    assert await journal.mark_started(session, entries[1].seq)
    # when
    backlog = await journal.backlog(session, entries[0].seq)
    # then
    assert [row.input_id for row in backlog.lost] == [entries[1].input_id]
    assert [row.input_id for row in backlog.requeue] == [entries[2].input_id, entries[3].input_id]
    assert [row.payload for row in backlog.requeue] == [{"text": "m2"}, {"text": "m3"}]
    assert {row.state for row in backlog.requeue} == {JournalState.QUEUED}
    assert backlog.lost[0].state is JournalState.STARTED
    assert not backlog.empty
    assert (await journal.backlog(session, entries[3].seq)).empty


async def test_an_entry_is_started_once(fleet_db: str) -> None:
    # given
    journal = InputJournal(database=fleet_db)
    session = sid()
    entry = await journal.record(
        session, input_id=secrets.token_hex(16), key=None, payload={}, token=LeaseToken(session, "brain-a", 1)
    )
    # when
    marks = [await journal.mark_started(session, entry.seq), await journal.mark_started(session, entry.seq)]
    elsewhere = await journal.mark_started(sid(), entry.seq)  # another session's seq: nothing
    # then
    assert marks == [True, False]
    assert elsewhere is False
    assert await arows(fleet_db, session) == [(entry.seq, entry.input_id, "started")]


async def test_pruning_forgets_only_what_the_checkpoint_covers_in_its_session(fleet_db: str) -> None:
    # given
    journal = InputJournal(database=fleet_db)
    session, other = sid(), sid()
    entries = [
        await journal.record(
            session,
            input_id=secrets.token_hex(16),
            key=f"k{index}",
            payload={},
            token=LeaseToken(session, "brain-a", 1),
        )
        for index in range(3)
    ]
    kept = await journal.record(
        other, input_id=secrets.token_hex(16), key=None, payload={}, token=LeaseToken(other, "brain-a", 1)
    )
    # when
    pruned = await journal.prune(session, entries[1].seq)
    # then
    assert pruned == 2
    assert [seq for seq, _, _ in await arows(fleet_db, session)] == [entries[2].seq]
    assert [seq for seq, _, _ in await arows(fleet_db, other)] == [kept.seq]
    assert await journal.mark_started(session, entries[0].seq) is False
    # a pruned key is the event log's to replay (it is in the checkpoint): the journal records anew
    resent = await journal.record(
        session, input_id=secrets.token_hex(16), key="k0", payload={}, token=LeaseToken(session, "brain-a", 2)
    )
    assert resent.created is True


async def test_cancelled_entries_are_reported_apart_and_a_started_one_is_never_cancelled(fleet_db: str) -> None:
    # given: three inputs; the first one's turn started, the two behind it were cancelled
    journal = InputJournal(database=fleet_db)
    session = sid()
    entries = [
        await journal.record(
            session,
            input_id=f"{index:032x}",
            key=None,
            payload={"text": f"m{index}"},
            token=LeaseToken(session, "brain-a", 1),
        )
        for index in range(3)
    ]
    assert await journal.mark_started(session, entries[0].seq)
    # when: the interrupt cancels all three (the started one included, which it cannot)
    cancelled = await journal.cancel(session, [entry.seq for entry in entries])
    elsewhere = await journal.cancel(sid(), [entries[1].seq])  # another session's seq: nothing
    # then
    assert (cancelled, elsewhere) == (2, 0)
    assert [state for _, _, state in await arows(fleet_db, session)] == ["started", "cancelled", "cancelled"]
    backlog = await journal.backlog(session, 0)
    assert [row.input_id for row in backlog.lost] == [entries[0].input_id]
    assert [row.input_id for row in backlog.cancelled] == [entries[1].input_id, entries[2].input_id]
    assert backlog.requeue == ()
    assert await journal.mark_started(session, entries[1].seq) is False  # a cancelled entry never starts
