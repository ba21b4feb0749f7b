"""CancelToken: a one-way flag any thread trips, with the first reason kept."""

from __future__ import annotations

import threading

from agent.cancel import CancelToken
from constrained.decoding import CancelSignal


def test_a_fresh_token_is_clear_with_no_reason() -> None:
    token = CancelToken()
    assert not token.is_set() and token.reason == "" and not token.wait(0)
    assert repr(token) == "CancelToken(clear)"


def test_the_first_reason_wins_and_tripping_again_changes_nothing() -> None:
    token = CancelToken()
    token.cancel("user pressed ^C")
    token.cancel("a later reason")
    assert token.is_set() and token.reason == "user pressed ^C" and token.wait(0)
    assert repr(token) == "CancelToken(set, reason='user pressed ^C')"


def test_a_token_is_the_cancel_signal_every_layer_reads() -> None:
    assert isinstance(CancelToken(), CancelSignal)
    assert not isinstance(threading.Event(), CancelSignal)  # no reason: the decode loop still reads it, the agent not


def test_a_trip_from_another_thread_wakes_a_waiter_with_its_reason() -> None:
    token, woke = CancelToken(), []
    waiter = threading.Thread(target=lambda: woke.append((token.wait(), token.reason)))
    waiter.start()
    token.cancel("deadline")
    waiter.join()
    assert woke == [(True, "deadline")]


def test_concurrent_trips_keep_exactly_one_reason() -> None:
    token = CancelToken()
    start = threading.Barrier(8)

    def trip(i: int) -> None:
        start.wait()
        token.cancel(f"reason {i}")

    threads = [threading.Thread(target=trip, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert token.reason in {f"reason {i}" for i in range(8)}
