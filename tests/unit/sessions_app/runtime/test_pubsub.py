"""Live fan-out: per-subscriber bounds by events and by bytes, and the server-wide stream slots."""

from __future__ import annotations

import asyncio

import pytest

from foundation.errors import Overloaded
from sessions_app.runtime.pubsub import EVENT_OVERHEAD_BYTES, Subscriber, SubscriberSlots


def test_each_event_accounts_for_its_data_plus_256_bytes() -> None:
    # then
    assert EVENT_OVERHEAD_BYTES == 256


def test_frames_drain_in_the_order_they_were_offered() -> None:
    # given
    subscriber = Subscriber(max_events=10, max_bytes=1 << 20)
    for index in range(5):
        subscriber.offer(b"frame-%d" % index, 7)

    # when
    frames = subscriber.drain()

    # then
    assert frames == [b"frame-0", b"frame-1", b"frame-2", b"frame-3", b"frame-4"]
    assert subscriber.drain() == []
    assert (subscriber.closed, subscriber.overflowed) == (False, False)


def test_a_subscriber_holds_exactly_max_events() -> None:
    # given
    subscriber = Subscriber(max_events=3, max_bytes=1 << 20)

    # when
    for index in range(3):
        subscriber.offer(b"f%d" % index, 2)

    # then
    assert (subscriber.closed, subscriber.overflowed) == (False, False)
    assert subscriber.drain() == [b"f0", b"f1", b"f2"]


def test_one_event_over_max_events_closes_the_subscriber() -> None:
    # given
    subscriber = Subscriber(max_events=3, max_bytes=1 << 20)
    for index in range(3):
        subscriber.offer(b"f%d" % index, 2)

    # when
    subscriber.offer(b"f3", 2)

    # then
    assert (subscriber.closed, subscriber.overflowed) == (True, True)
    assert subscriber.drain() == [b"f0", b"f1", b"f2"]


def test_a_subscriber_holds_events_up_to_exactly_max_bytes() -> None:
    # given two events of 1792 + 256 = 2048 accounted bytes each
    subscriber = Subscriber(max_events=100, max_bytes=4096)

    # when
    subscriber.offer(b"a", 1792)
    subscriber.offer(b"b", 1792)

    # then
    assert (subscriber.closed, subscriber.overflowed) == (False, False)
    assert subscriber.drain() == [b"a", b"b"]


def test_one_byte_over_max_bytes_closes_the_subscriber() -> None:
    # given 4096 accounted bytes already buffered
    subscriber = Subscriber(max_events=100, max_bytes=4096)
    subscriber.offer(b"a", 1792)
    subscriber.offer(b"b", 1792)

    # when an empty event still costs 256 bytes
    subscriber.offer(b"c", 0)

    # then
    assert (subscriber.closed, subscriber.overflowed) == (True, True)
    assert subscriber.drain() == [b"a", b"b"]


def test_the_overhead_alone_counts_against_max_bytes() -> None:
    # given room for exactly 16 empty events by bytes, with a generous event bound
    subscriber = Subscriber(max_events=1000, max_bytes=16 * EVENT_OVERHEAD_BYTES)
    for _ in range(16):
        subscriber.offer(b"", 0)

    # when
    subscriber.offer(b"", 0)

    # then
    assert (subscriber.closed, subscriber.overflowed) == (True, True)


def test_a_single_event_larger_than_max_bytes_overflows_an_empty_subscriber() -> None:
    # given
    subscriber = Subscriber(max_events=100, max_bytes=4096)

    # when
    subscriber.offer(b"huge", 4096 - EVENT_OVERHEAD_BYTES + 1)

    # then
    assert (subscriber.closed, subscriber.overflowed) == (True, True)
    assert subscriber.drain() == []


def test_draining_frees_room_for_more_events() -> None:
    # given a full subscriber
    subscriber = Subscriber(max_events=2, max_bytes=1 << 20)
    subscriber.offer(b"a", 1)
    subscriber.offer(b"b", 1)
    subscriber.drain()

    # when
    subscriber.offer(b"c", 1)
    subscriber.offer(b"d", 1)

    # then
    assert subscriber.drain() == [b"c", b"d"]
    assert subscriber.overflowed is False


def test_draining_frees_byte_budget_too() -> None:
    # given
    subscriber = Subscriber(max_events=100, max_bytes=4096)
    subscriber.offer(b"a", 4096 - EVENT_OVERHEAD_BYTES)
    subscriber.drain()

    # when
    subscriber.offer(b"b", 4096 - EVENT_OVERHEAD_BYTES)

    # then
    assert subscriber.drain() == [b"b"]
    assert subscriber.overflowed is False


def test_offers_after_close_are_dropped() -> None:
    # given
    subscriber = Subscriber(max_events=10, max_bytes=1 << 20)
    subscriber.close()

    # when
    subscriber.offer(b"late", 4)

    # then
    assert subscriber.drain() == []
    assert (subscriber.closed, subscriber.overflowed) == (True, False)


def test_offers_after_an_overflow_are_dropped() -> None:
    # given
    subscriber = Subscriber(max_events=1, max_bytes=1 << 20)
    subscriber.offer(b"a", 1)
    subscriber.offer(b"b", 1)

    # when
    subscriber.offer(b"c", 1)

    # then
    assert subscriber.drain() == [b"a"]
    assert (subscriber.closed, subscriber.overflowed) == (True, True)


async def test_wait_times_out_with_nothing_buffered() -> None:
    # given
    subscriber = Subscriber(max_events=10, max_bytes=1 << 20)

    # when
    ready = await subscriber.wait(0.01)

    # then
    assert ready is False


async def test_wait_returns_at_once_when_frames_are_buffered() -> None:
    # given
    subscriber = Subscriber(max_events=10, max_bytes=1 << 20)
    subscriber.offer(b"a", 1)

    # when
    ready = await subscriber.wait(0)

    # then
    assert ready is True


async def test_wait_returns_at_once_when_closed() -> None:
    # given
    subscriber = Subscriber(max_events=10, max_bytes=1 << 20)
    subscriber.close()

    # when
    ready = await subscriber.wait(0)

    # then
    assert ready is True


async def test_wait_wakes_when_a_frame_is_offered() -> None:
    # given
    subscriber = Subscriber(max_events=10, max_bytes=1 << 20)
    loop = asyncio.get_running_loop()
    loop.call_later(0.01, subscriber.offer, b"a", 1)

    # when
    ready = await subscriber.wait(5)

    # then
    assert ready is True
    assert subscriber.drain() == [b"a"]


async def test_wait_wakes_when_the_subscriber_overflows() -> None:
    # given
    subscriber = Subscriber(max_events=1, max_bytes=1 << 20)
    subscriber.offer(b"a", 1)
    subscriber.drain()
    loop = asyncio.get_running_loop()
    loop.call_later(0.01, subscriber.offer, b"b", 1 << 20)

    # when
    ready = await subscriber.wait(5)

    # then
    assert ready is True
    assert (subscriber.closed, subscriber.overflowed) == (True, True)


async def test_wait_after_a_drain_waits_again() -> None:
    # given
    subscriber = Subscriber(max_events=10, max_bytes=1 << 20)
    subscriber.offer(b"a", 1)
    subscriber.drain()

    # when
    ready = await subscriber.wait(0.01)

    # then
    assert ready is False


def test_slots_admit_up_to_the_limit() -> None:
    # given
    slots = SubscriberSlots(2)

    # when
    slots.acquire()
    slots.acquire()

    # then
    assert slots.open == 2


def test_slots_raise_overloaded_at_the_limit_and_stay_full() -> None:
    # given
    slots = SubscriberSlots(2)
    slots.acquire()
    slots.acquire()

    # when
    with pytest.raises(Overloaded) as caught:
        slots.acquire()

    # then
    assert (caught.value.code, caught.value.status, caught.value.headers()) == (
        "overloaded",
        429,
        {"Retry-After": "1"},
    )
    assert slots.open == 2


def test_a_released_slot_can_be_acquired_again() -> None:
    # given
    slots = SubscriberSlots(1)
    slots.acquire()

    # when
    slots.release()
    slots.acquire()

    # then
    assert slots.open == 1
