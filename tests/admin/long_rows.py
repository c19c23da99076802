"""Rows with the longest values an operator meets, in every model the admin lists: run with
`manage.py shell -c` on a server's data dir (tests/admin/test_list_widths.py)."""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth.models import Group, User
from django.utils import timezone

from sessions_app.models import ApiToken, Approval, Session, Tenant
from tools_app.models import ApprovalRule, Document, KnowledgeBase, KnowledgeJob, Memory, Task, ToolBinding

now = timezone.now()
LONG_TENANT = "tenant-" + "t" * 57  # 64 characters, a long but ordinary tenant id
WORDS = "a reasonably long sentence of ordinary words that goes on and on " * 8
tenant = Tenant.objects.create(name=LONG_TENANT)
Group.objects.create(name="operators-of-the-" + "g" * 130)
User.objects.create_user("a-very-long-operator-username-for-the-widths-test", email="o" * 40 + "@example.com")
ApiToken.objects.create(
    digest="d" * 64,
    tenant=tenant,
    label="A_VERY_LONG_TOKEN_ENVIRONMENT_VARIABLE_NAME_FOR_THE_WIDTHS_TEST",
    manage=True,
    session="0" * 32,
)
session = Session.objects.create(
    id="f" * 32,
    tenant=tenant,
    harness="a-long-harness-name-" + "h" * 40,
    model="openrouter/" + "m" * 120,
    config={"model": "x"},
    status="interrupted",
    created_at=now,
    updated_at=now,
    checkpoint_id="c" * 32,
    checkpoint_time=now,
)
Approval.objects.create(
    id="a" * 32,
    session=session,
    tenant=LONG_TENANT,
    call_id="b" * 32,
    tool="tool_" + "x" * 59,
    arguments={"text": WORDS},
    status="rejected",
    created_at=now,
    expires_at=now + timedelta(minutes=10),
    decided_by="token:" + "k" * 150,
    decided_at=now,
    reason=WORDS,
)
Memory.objects.create(tenant=LONG_TENANT, space="s" * 64, content=WORDS, session_id="f" * 32, created_at=now)
Task.objects.create(tenant=LONG_TENANT, title=WORDS[:200], description=WORDS, created_at=now, updated_at=now)
base = KnowledgeBase.objects.create(tenant=LONG_TENANT, name="b" * 64, description=WORDS, created_at=now)
document = Document.objects.create(
    base=base, title=WORDS[:300], source="s" * 200 + ".pdf", media_type="application/pdf", size=10**9, created_at=now
)
KnowledgeJob.objects.create(
    base=base,
    tenant=LONG_TENANT,
    source="s" * 200 + ".pdf",
    title=WORDS[:300],
    size=10**9,
    status="failed",
    progress=100,
    stage="extracting text from the pages of the document",
    error=WORDS,
    document=document,
    created_at=now,
    started_at=now,
    finished_at=now,
)
ToolBinding.objects.create(
    name="a" + "_long_tool_name" * 4,
    description=WORDS,
    input_schema={"type": "object"},
    url="https://tools.example.com/" + "path/" * 60 + "lookup",
    tenants=[LONG_TENANT],
    transport="http",
    timeout_seconds=86400,
)
ApprovalRule.objects.create(
    tools=["a" + "_long_tool_name" * 4 + "_*"] * 8,
    kinds=["config", "provider", "runtime"],
    providers=["p" * 64] * 4,
    tenants=[LONG_TENANT] * 4,
    approval_timeout_seconds=86400,
)
