"""Memory on PostgreSQL: a real `runbrain` with BRAIN_DATABASE_URL on a fresh database migrates it
(the text-search index included) and serves `memory_store` / `memory_recall` with PostgreSQL's
full-text search, ranked, per tenant. Calls go through real turns of the instant runner."""

from __future__ import annotations

import json
import secrets
import signal
from collections.abc import Iterator

import psycopg
import pytest

from tests.fixtures.server import BrainServer, make_server
from tests.fixtures.services import PostgresServer
from tests.tools.test_builtin_tools import PROVIDERS, call, provider_tools, session


@pytest.fixture(scope="module")
def database_url(postgres_server: PostgresServer) -> str:
    return postgres_server.create_database(f"brain_memory_{secrets.token_hex(4)}")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, database_url: str) -> Iterator[BrainServer]:
    brain = make_server(tmp_path_factory.mktemp("brain"), tools=provider_tools())
    brain.env["BRAIN_TOOL_PROVIDERS"] = json.dumps(PROVIDERS)
    brain.env["BRAIN_DATABASE_URL"] = database_url
    brain.start()
    yield brain
    brain.stop(signal.SIGKILL)


def test_migrate_creates_the_memory_text_search_index(server: BrainServer, database_url: str) -> None:
    # when
    with psycopg.connect(database_url) as connection:
        rows = connection.execute(
            "SELECT indexdef FROM pg_indexes WHERE tablename = 'tools_app_memory' AND indexname = %s",
            ["tools_app_memory_search"],
        ).fetchall()
    # then
    assert len(rows) == 1
    assert "USING gin (to_tsvector('simple'::regconfig, content))" in rows[0][0]


def test_recall_ranks_memories_by_how_many_query_words_they_match(server: BrainServer) -> None:
    # given
    sid = session(server)
    weak = call(server, sid, "memory_store", {"content": "invoices go out monthly"})
    strong = call(server, sid, "memory_store", {"content": "overdue invoices get a reminder; overdue means 30 days"})
    call(server, sid, "memory_store", {"content": "the office closes at six"})
    # when
    recalled = call(server, sid, "memory_recall", {"query": "Overdue invoices?", "limit": 5})
    # then
    assert recalled["outcome"] == "ok"
    memories = recalled["result"]["structured_content"]["memories"]
    assert [m["id"] for m in memories] == [
        strong["result"]["structured_content"]["id"],
        weak["result"]["structured_content"]["id"],
    ]
    assert memories[0]["content"] == "overdue invoices get a reminder; overdue means 30 days"


def test_a_memory_is_recalled_in_another_session_of_the_tenant_and_never_by_another_tenant(
    server: BrainServer, database_url: str
) -> None:
    # given
    stored = call(server, session(server), "memory_store", {"content": "The customer's favourite colour is teal"})
    # when
    recalled = call(server, session(server), "memory_recall", {"query": "favourite colour"})
    foreign = call(server, session(server, "charlie"), "memory_recall", {"query": "favourite colour teal"}, "charlie")
    # then
    memory_id = stored["result"]["structured_content"]["id"]
    assert [m["id"] for m in recalled["result"]["structured_content"]["memories"]] == [memory_id]
    assert foreign["result"]["structured_content"] == {"memories": []}
    with psycopg.connect(database_url) as connection:
        rows = connection.execute("SELECT tenant, space FROM tools_app_memory WHERE id = %s", [memory_id]).fetchall()
    assert rows == [("acme", "")]


def test_query_words_postgres_would_parse_as_operators_are_plain_words(server: BrainServer) -> None:
    # given
    sid = session(server, "charlie")
    stored = call(server, sid, "memory_store", {"content": "deploys need a change ticket"}, "charlie")
    # when
    recalled = call(server, sid, "memory_recall", {"query": "ticket & | ! <-> :* 'x' (deploys)"}, "charlie")
    nothing = call(server, sid, "memory_recall", {"query": "& | ! ( )"}, "charlie")
    # then
    assert recalled["outcome"] == "ok"
    assert [m["id"] for m in recalled["result"]["structured_content"]["memories"]] == [
        stored["result"]["structured_content"]["id"]
    ]
    assert nothing["outcome"] == "ok"  # no words at all: the newest memories
    assert [m["id"] for m in nothing["result"]["structured_content"]["memories"]][:1] == [
        stored["result"]["structured_content"]["id"]
    ]
