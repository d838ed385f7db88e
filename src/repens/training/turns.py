"""A process's GPU work in turns: threads side by side, a CUDA graph capture alone.

Several stacks train in one process, a thread each (:mod:`repens.experiments.streams`). A
capture is begun in CUDA's ``thread_local`` mode, which forbids the unsafe calls (a
synchronisation, a free) to the capturing thread only, yet some of what another thread does
on first use still reaches every stream of the context: loading a kernel lazily may
synchronise the context (CUDA's lazy loading), a cuBLAS handle is made with its workspace,
the allocator may free cached blocks. One capture (hyper-DE's) was invalidated while the
other eight threads of its process ran their first, eager steps (H200, 2026-11-29); which
call of theirs did it is not known. Here no other thread of the process makes a CUDA call
while one captures, whatever that call would be:

* each stack's thread holds a *shared* turn for all its GPU work (:meth:`Turns.shared`);
* its training loop offers its turn between two steps (:meth:`Turns.pause`): only when a
  capture waits does it let go, and it takes it back after;
* a capture takes the *exclusive* turn (:meth:`Turns.exclusive`): it waits until every other
  thread has let go, and a thread that wants a turn meanwhile waits for the capture (a
  waiting capture goes first, so a stream of steps cannot starve it); the capturing thread's
  own shared turn is let go while it waits and taken back after, so two threads that capture
  cannot wait on each other.

A thread that holds no turn (one job in a process, the tests) never waits for one, and a
pause costs one attribute read when no capture waits.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["Turns", "GPU_TURNS"]


class Turns:
    """Shared turns for threads' GPU work, an exclusive one for a capture (module docstring)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._sharing = 0  # threads holding a shared turn
        self._owner: int | None = None  # the thread holding the exclusive turn
        self._waiting = 0  # threads waiting for the exclusive turn
        self._local = threading.local()

    # a thread's own depths (nested turns count once)
    def _depth(self) -> int:
        return getattr(self._local, "depth", 0)

    def _take_shared(self) -> None:
        with self._cond:
            while self._owner is not None or self._waiting:
                self._cond.wait()
            self._sharing += 1

    def _let_go(self) -> None:
        with self._cond:
            self._sharing -= 1
            if self._sharing == 0:
                self._cond.notify_all()

    @contextmanager
    def shared(self) -> Iterator[None]:
        """Inside, this thread's GPU work goes on beside the others' but never beside a capture
        (inside this thread's own exclusive turn it is alone already: nothing to take)."""
        depth = self._depth()
        take = depth == 0 and self._owner != threading.get_ident()
        if take:
            self._take_shared()
        self._local.depth = depth + 1
        try:
            yield
        finally:
            self._local.depth = depth
            if take:
                self._let_go()

    def pause(self) -> None:
        """Between two steps: if a capture waits, let it run before going on."""
        if self._waiting and self._depth() and self._owner != threading.get_ident():
            self._let_go()
            self._take_shared()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """Inside, no other thread holds a turn: what runs here is the process's only GPU work
        on the host. Nested in this thread's shared turn, that turn is let go first and taken
        back after."""
        me = threading.get_ident()
        if self._owner == me:
            raise RuntimeError("Turns.exclusive: this thread holds the exclusive turn already")
        depth = self._depth()
        if depth:
            self._let_go()
        try:
            with self._cond:
                self._waiting += 1
                try:
                    while self._owner is not None or self._sharing:
                        self._cond.wait()
                finally:
                    self._waiting -= 1
                    self._cond.notify_all()  # a wait that ended by an error lets the others on
                self._owner = me
        except BaseException:
            if depth:
                self._take_shared()
            raise
        try:
            yield
        finally:
            with self._cond:
                self._owner = None
                self._cond.notify_all()
            if depth:
                self._take_shared()

    def held_exclusively(self) -> bool:
        """Whether this thread holds the exclusive turn."""
        return self._owner == threading.get_ident()

    def sharing(self) -> int:
        """How many threads hold a shared turn now."""
        with self._cond:
            return self._sharing


#: the process's turns: captures (:class:`repens.training.step_graph.CudaGraphBackend`) take
#: the exclusive one, each stack's thread (:mod:`repens.experiments.streams`) a shared one
GPU_TURNS = Turns()
