"""The process's GPU turns (repens.training.turns): threads share, a capture runs alone.

Each test runs real threads against one :class:`Turns` and bounds every wait, so a deadlock
fails the test instead of hanging it."""

import threading
import time

import pytest

from repens.training.turns import Turns

WAIT = 10.0  # seconds: far more than any of these tests needs; reaching it is a deadlock


def _start(target, *args) -> threading.Thread:
    thread = threading.Thread(target=target, args=args, daemon=True)
    thread.start()
    return thread


def _join(*threads: threading.Thread) -> None:
    for thread in threads:
        thread.join(WAIT)
        assert not thread.is_alive(), "a thread is still waiting for its turn"


def test_shared_turns_go_side_by_side_and_nest():
    turns, inside, both = Turns(), threading.Barrier(2, timeout=WAIT), []

    def work():
        with turns.shared(), turns.shared():  # nested: counted once
            inside.wait()  # both threads are inside at once, or this times out
            both.append(turns.sharing())
            inside.wait()  # neither leaves before both have looked

    _join(_start(work), _start(work))
    assert both == [2, 2] and turns.sharing() == 0


def test_an_exclusive_turn_waits_for_the_shared_ones_and_blocks_new_ones():
    turns, events = Turns(), []
    holding, let_go = threading.Event(), threading.Event()

    def reader():
        with turns.shared():
            holding.set()
            let_go.wait(WAIT)
            events.append("reader out")

    def writer():
        with turns.exclusive():
            events.append("capture")
            assert turns.held_exclusively() and turns.sharing() == 0

    def late_reader():
        with turns.shared():
            events.append("late reader in")

    first = _start(reader)
    assert holding.wait(WAIT)
    capture = _start(writer)
    _wait_for(lambda: turns._waiting == 1)
    late = _start(late_reader)
    time.sleep(0.05)
    assert events == []  # the capture waits for the reader; the late reader waits for the capture
    let_go.set()
    _join(first, capture, late)
    assert events == ["reader out", "capture", "late reader in"]


def test_a_pause_lets_a_waiting_capture_in_and_takes_the_turn_back():
    turns, events = Turns(), []
    stepping, stop = threading.Event(), threading.Event()

    def loop():
        with turns.shared():
            stepping.set()
            while not stop.is_set():
                events.append("step")
                turns.pause()
            assert turns.sharing() == 1  # its turn is back

    def capture():
        with turns.exclusive():
            events.append("capture")
            assert turns.sharing() == 0

    worker = _start(loop)
    assert stepping.wait(WAIT)
    _join(_start(capture))
    _wait_for(lambda: events[-1] == "step")  # the loop steps on after the capture
    stop.set()
    _join(worker)
    assert events.count("capture") == 1


def test_threads_that_capture_inside_their_shared_turns_take_the_exclusive_turn_one_at_a_time():
    """The stacks' case: each thread holds a shared turn and captures inside it. Without
    letting its own turn go first, two such threads would wait on each other for ever."""
    turns, lock = Turns(), threading.Lock()
    under_way, most, done = [0], [0], []
    start = threading.Barrier(4, timeout=WAIT)

    def stack(k: int):
        with turns.shared():
            start.wait()
            for _ in range(20):
                turns.pause()
                with turns.exclusive():
                    with lock:
                        under_way[0] += 1
                        most[0] = max(most[0], under_way[0])
                    assert turns.sharing() == 0 and turns.held_exclusively()
                    time.sleep(0.001)
                    with lock:
                        under_way[0] -= 1
                assert turns.sharing() >= 1  # its shared turn is back
            done.append(k)

    _join(*[_start(stack, k) for k in range(4)])
    assert sorted(done) == [0, 1, 2, 3] and most == [1] and turns.sharing() == 0


def test_a_thread_without_a_turn_never_waits_and_an_exclusive_turn_is_not_taken_twice():
    turns, done = Turns(), []

    def alone():
        turns.pause()  # no turn held, nothing waits: returns at once
        with turns.exclusive():
            turns.pause()
            with turns.shared():  # alone already: takes nothing, waits for nothing
                assert turns.sharing() == 0
            with pytest.raises(RuntimeError, match="exclusive turn already"):
                with turns.exclusive():
                    pass
        with turns.shared():
            assert turns.sharing() == 1
        done.append(True)

    _join(_start(alone))  # on a thread: a wait that never ends fails the test instead of hanging it
    assert done == [True] and turns.sharing() == 0 and not turns.held_exclusively()


def _wait_for(condition) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.001)
