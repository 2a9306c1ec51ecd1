"""The work queue every controller runs on top of kopf's watches (docs/design/work-queue.md).

- :class:`WorkQueue`: reconciles of the objects a controller watches — one at a time per object,
  on the latest state the watch has seen, again when something falls due (a requeue) or after a
  temporary error (capped exponential backoff: 1 s doubling to 5 min).
- :class:`Trigger`: one job over all objects (the quota controller's plan): every poke until it
  starts coalesces into one run; a failed run is retried with backoff.
- :func:`periodic`: a job every so many seconds (resync, audit retention, certificate upkeep).
"""

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("trainerop.workqueue")

Key = tuple[str, str]  # (namespace, name)
Body = Mapping[str, Any]
Work = Callable[[Body], Awaitable[None]]


@dataclass
class Backoff:
    """Capped exponential backoff per key for temporary errors."""

    base: float = 1.0
    cap: float = 300.0
    failures: dict[Any, int] = field(default_factory=dict)

    def next_delay(self, key: Any) -> float:
        n = self.failures.get(key, 0)
        self.failures[key] = n + 1
        return float(min(self.cap, self.base * 2**n))

    def reset(self, key: Any) -> None:
        self.failures.pop(key, None)


def key_of(body: Body) -> Key:
    meta = body.get("metadata", {})
    return (str(meta.get("namespace", "")), str(meta.get("name", "")))


class Tasks:
    """Side tasks (a status write triggered by a watch, a timer's reconcile) that must not block
    the watch; a failure is logged."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    async def stop(self, grace: float) -> None:
        """Let the tasks running finish for up to ``grace`` seconds, then cancel what remains (a
        reconcile cut short is done again by the next start: its status is the record)."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=grace)
        while self._tasks:
            remaining = set(self._tasks)
            for task in remaining:
                task.cancel()
            await asyncio.gather(*remaining, return_exceptions=True)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background task failed: %s", task.exception())


class Turns:
    """At most ``limit`` holders at once (0: no limit); the others wait in line, and a key marked
    urgent (a failed pod's Trainer) goes ahead of every one not urgent, even one already waiting:
    a run's recovery does not wait its turn among a ramp's thousand reconciles."""

    def __init__(self, limit: int) -> None:
        self._free = limit
        self._unlimited = limit <= 0
        self._urgent: OrderedDict[Key, asyncio.Future[None]] = OrderedDict()
        self._ordinary: OrderedDict[Key, asyncio.Future[None]] = OrderedDict()

    async def take(self, key: Key, urgent: bool) -> None:
        """Wait for a turn (one waiter per key: the work queue serialises a key's reconciles)."""
        if self._unlimited:
            return
        if self._free > 0 and not self._urgent and not self._ordinary:
            self._free -= 1
            return
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        (self._urgent if urgent else self._ordinary)[key] = turn
        try:
            await turn
        except asyncio.CancelledError:
            for line in (self._urgent, self._ordinary):
                if line.get(key) is turn:
                    del line[key]
            if turn.done() and not turn.cancelled():  # given a turn as it was cancelled: pass it on
                self.give_back()
            raise

    def promote(self, key: Key) -> None:
        """``key``, if waiting in line, goes ahead of those not urgent."""
        turn = self._ordinary.pop(key, None)
        if turn is not None:
            self._urgent[key] = turn

    def give_back(self) -> None:
        """A holder is done: the next in line (urgent first) takes its turn."""
        if self._unlimited:
            return
        for line in (self._urgent, self._ordinary):
            while line:
                _, turn = line.popitem(last=False)
                if not turn.done():
                    turn.set_result(None)
                    return
        self._free += 1


class WorkQueue:
    """The objects seen, and the reconciles of them: serialised per object, rescheduled by timers."""

    def __init__(self, tasks: Tasks, work: Work, limit: int = 0) -> None:
        self.objects: dict[Key, Body] = {}  # the latest state the watch has seen, by key
        self._tasks = tasks
        self._work = work
        self._turns = Turns(limit)  # at most ``limit`` reconciles at once; the others wait their turn
        self.backoff = Backoff()
        self._timers: dict[Key, asyncio.TimerHandle] = {}
        self._running: set[Key] = set()  # objects being reconciled now, or about to be
        self._dirty: set[Key] = set()  # of those, the ones that changed meanwhile: once more after
        self._waiting: set[Key] = set()  # of those, the ones waiting for a turn (--workers)
        self._urgent: set[Key] = set()  # their next turn goes ahead of the others' (a failed pod)

    @property
    def depth(self) -> int:
        """Reconciles waiting to start: once more after the one running, for a turn, or on a timer."""
        return len(self._dirty | self._waiting) + len(self._timers)

    def seen(self, body: Body) -> Body:
        self.objects[key_of(body)] = body
        return body

    def forget(self, body: Body) -> bool:
        """The object was deleted (unless a newer one of the same name is known); whether it went."""
        key = key_of(body)
        current = self.objects.get(key)
        if current is not None and current["metadata"].get("uid") != body["metadata"].get("uid"):
            return False  # an older object of the same name; the new one stays
        self.drop(key)
        return True

    def drop(self, key: Key) -> None:
        """Forget ``key`` whatever it holds (found gone by a relist)."""
        self.objects.pop(key, None)
        self.backoff.reset(key)
        self._urgent.discard(key)
        timer = self._timers.pop(key, None)
        if timer is not None:  # nothing left to reconcile; the queue depth no longer counts it
            timer.cancel()

    async def process(self, key: Key) -> None:
        """Run the work on the latest state of ``key``. While a reconcile of it runs, any number of
        requests to process it make one more reconcile once it ends (on the state then), not one
        each: one reconcile in flight per object, and a burst of events costs two at most."""
        if key in self._running:
            self._dirty.add(key)
            return
        self._running.add(key)
        await self._drain(key)

    def poke(self, key: Key) -> None:
        """Reconcile ``key`` now, without waiting for it: once more after the reconcile in progress.
        The key counts as running from here on, so pokes of one moment start one reconcile."""
        if key in self._running:
            self._dirty.add(key)
        else:
            self._running.add(key)
            self._tasks.spawn(self._drain(key))

    async def _drain(self, key: Key) -> None:
        """Reconcile ``key`` (marked running by the caller) until no change came meanwhile."""
        try:
            while True:
                self._waiting.add(key)
                await self._turns.take(key, key in self._urgent)  # with --workers, a turn may be waited for
                try:
                    self._waiting.discard(key)
                    self._dirty.discard(key)
                    self._urgent.discard(key)
                    latest = self.objects.get(key)
                    if latest is None:  # deleted meanwhile: nothing to reconcile
                        return
                    await self._work(latest)
                finally:
                    self._turns.give_back()
                if key not in self._dirty:
                    return
        finally:
            self._running.discard(key)
            self._dirty.discard(key)
            self._waiting.discard(key)

    def has_timer(self, key: Key) -> bool:
        return key in self._timers

    def after(self, key: Key, delay: float) -> None:
        """Reconcile ``key`` in ``delay`` seconds, unless one is already due sooner."""
        loop = asyncio.get_running_loop()
        old = self._timers.get(key)
        if old is not None and old.when() <= loop.time() + delay:
            return
        if old is not None:
            old.cancel()

        def fire() -> None:
            self._timers.pop(key, None)
            if key in self.objects:
                self.poke(key)

        self._timers[key] = loop.call_later(delay, fire)

    def retry(self, key: Key) -> float:
        """Reconcile ``key`` again after its next backoff delay (returned)."""
        delay = self.backoff.next_delay(key)
        self.after(key, delay)
        return delay

    def soon(self, keys: Iterable[Key], within: float = 0) -> None:
        """Reconcile these soon (something they depend on changed): in ``within`` seconds unless
        one is due sooner. One waiting out an error backoff keeps waiting: events must not turn a
        failing call into a hot loop."""
        for key in keys:
            if key not in self.backoff.failures:
                self.after(key, within)

    def urgently(self, keys: Iterable[Key]) -> None:
        """Reconcile these now, ahead of every reconcile waiting for a turn that is not urgent (a
        pod of theirs failed or went: the run's recovery). One waiting out an error backoff keeps
        waiting, as with :meth:`soon`."""
        for key in keys:
            if key in self.objects and key not in self.backoff.failures:
                self._urgent.add(key)
                self._turns.promote(key)
                self.poke(key)


RETRY_SECONDS = 5.0
MAX_RETRY_SECONDS = 300.0


class Trigger:
    """A job over every object, run on demand: the pokes that come before it starts coalesce into
    one run; the job returns when it wants to run again (None: only when poked); a failed run is
    retried after 5 s doubling to 5 min. With ``rest``, a run starts no sooner than ``rest`` times
    the last run's duration after it ended: a job whose cost grows with the objects (the quota plan)
    takes at most 1 / (1 + rest) of the time, however fast the pokes come."""

    def __init__(self, tasks: Tasks, job: Callable[[], Awaitable[float | None]], what: str, rest: float = 0.0) -> None:
        self._tasks = tasks
        self._job = job
        self._what = what
        self._rest = rest
        self._rest_until = 0.0  # loop time before which no run starts
        self._lock = asyncio.Lock()
        self._dirty = False  # poked since the last run started
        self._queued = False  # a run is spawned and has not started yet
        self._timer: asyncio.TimerHandle | None = None
        self._backoff = Backoff(RETRY_SECONDS, MAX_RETRY_SECONDS)

    def poke(self, after: float = 0) -> None:
        """Run soon, or in ``after`` seconds (unless a run is due sooner)."""
        loop = asyncio.get_running_loop()
        if after > 0:
            due = loop.time() + after
            if self._timer is not None and self._timer.when() <= due:
                return
            if self._timer is not None:
                self._timer.cancel()
            self._timer = loop.call_at(due, self._fire)
            return
        self._dirty = True
        if not self._queued:
            self._queued = True
            self._tasks.spawn(self._run())

    def _fire(self) -> None:
        self._timer = None
        self.poke()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        async with self._lock:
            if (wait := self._rest_until - loop.time()) > 0:
                await asyncio.sleep(wait)  # pokes meanwhile are this run's
            self._queued = False
            if not self._dirty:
                return
            self._dirty = False
            started = loop.time()
            try:
                again = await self._job()
            except Exception:
                delay = self._backoff.next_delay(self._what)
                log.exception("%s failed; trying again in %.0fs", self._what, delay)
                self.poke(after=delay)
                return
            finally:
                self._rest_until = loop.time() + self._rest * (loop.time() - started)
        self._backoff.reset(self._what)
        if again is not None:
            self.poke(after=max(again, 0.5))


async def periodic(seconds: float, job: Callable[[], Awaitable[Any]], what: str, first: float | None = None) -> None:
    """Run ``job`` every ``seconds`` (the first time after ``first`` seconds, default ``seconds``);
    a failed run is logged and the next one comes as planned."""
    await asyncio.sleep(seconds if first is None else first)
    while True:
        try:
            await job()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s failed; trying again in %.0fs", what, seconds)
        await asyncio.sleep(seconds)
