"""Error classes in the runtime: permanent errors become one Event, temporary ones a backoff retry."""

import asyncio
from typing import Any, cast

import httpx2
import kopf
import pytest
from lightkube import ApiError
from prometheus_client import REGISTRY

from tests.factories import trainer_body
from trainerop_common.admission import Request, Verdict
from trainerop_common.conditions import Desired
from trainerop_common.config import ControllerConfig, WebhookConfig
from trainerop_common.kube import URGENT, Kube
from trainerop_common.outcome import Outcome, StatusSection
from trainerop_common.runtime import Body, PermanentError, Runtime
from trainerop_common.workqueue import Backoff, key_of

BODY = trainer_body("t", "ns")


class FailingController:
    name = "test"
    section = StatusSection(("test",), ("Tested",))

    def __init__(self, error: BaseException | None, outcome: Outcome | None = None) -> None:
        self.error = error
        self.outcome = outcome or Outcome()
        self.calls = 0

    async def reconcile(self, body: Body) -> Outcome:
        self.calls += 1
        if self.error is not None:
            raise self.error
        return self.outcome

    def register(self, registry: kopf.OperatorRegistry, runtime: Runtime) -> None:
        """Nothing to watch."""


def runtime_with(controller: FailingController, kube: Any = None) -> tuple[Runtime, list[tuple[str, str, str]]]:
    events: list[tuple[str, str, str]] = []
    rt = Runtime(
        ControllerConfig(controller="test"),
        cast(Kube, kube),
        post_event=lambda body, type_, reason, message: events.append((type_, reason, message)),
    )
    rt.registry_for(controller)
    rt.queue.seen(BODY)  # as the watch would have seen it
    return rt, events


def api_error(code: int) -> ApiError:
    request = httpx2.Request("GET", "https://k8s/x")
    response = httpx2.Response(code, json={"kind": "Status", "code": code, "message": "boom"}, request=request)
    return ApiError(request=request, response=response)


async def test_permanent_error_posts_one_warning_per_generation_and_is_not_retried() -> None:
    controller = FailingController(PermanentError("ProfileNotFound", "create it; API_TOKEN=abc"))
    rt, events = runtime_with(controller)
    await rt.reconcile(BODY)
    await rt.reconcile(BODY)  # a resync of the same generation: no second Event
    assert events == [("Warning", "ProfileNotFound", "create it; API_TOKEN=***")]
    assert not rt.has_pending_retry(("ns", "t"))
    await rt.reconcile(rt.queue.seen({**BODY, "metadata": {**BODY["metadata"], "generation": 2}}))
    assert len(events) == 2


async def test_an_object_that_does_not_match_the_models_is_a_permanent_error() -> None:
    from trainerop_common.api import Trainer

    class Parsing(FailingController):
        async def reconcile(self, body: Body) -> Outcome:
            Trainer.model_validate(body)
            return Outcome()

    rt, events = runtime_with(Parsing(None))
    await rt.reconcile(rt.queue.seen({**BODY, "spec": {"epochs": "many"}}))
    ((type_, reason, message),) = events
    assert (type_, reason) == ("Warning", "InvalidSpec")
    assert "spec.epochs" in message
    assert not rt.has_pending_retry(("ns", "t"))


@pytest.mark.parametrize("error", [api_error(500), api_error(409), OSError("connection reset"), RuntimeError("bug")])
async def test_other_errors_are_retried_with_backoff(error: BaseException) -> None:
    rt, events = runtime_with(FailingController(error))
    await rt.reconcile(BODY)
    assert events == []
    assert rt.has_pending_retry(("ns", "t"))


def test_backoff_doubles_up_to_a_cap_and_resets() -> None:
    b = Backoff(base=1, cap=8)
    key = ("ns", "t")
    assert [b.next_delay(key) for _ in range(6)] == [1, 2, 4, 8, 8, 8]
    b.reset(key)
    assert b.next_delay(key) == 1


async def test_success_clears_the_backoff() -> None:
    controller = FailingController(OSError("down"))
    rt, _ = runtime_with(controller)
    await rt.reconcile(BODY)
    controller.error = None
    await rt.reconcile(BODY)
    assert controller.calls == 2
    assert rt.queue.backoff.failures == {}


async def test_a_trainer_deleted_meanwhile_is_not_reconciled() -> None:
    controller = FailingController(None)
    rt, _ = runtime_with(controller)
    rt.queue.forget(BODY)
    await rt.reconcile(BODY)
    assert controller.calls == 0


async def test_a_deleted_trainer_leaves_no_timer_behind() -> None:
    rt, _ = runtime_with(FailingController(None))
    rt.requeue_after(("ns", "t"), 300)  # a TTL or stall deadline
    assert rt.queue.depth == 1
    rt.queue.forget(BODY)
    assert rt.queue.depth == 0


async def test_a_sooner_requeue_is_not_pushed_back_by_a_later_one() -> None:
    rt, _ = runtime_with(FailingController(None))
    key = ("ns", "t")
    rt.requeue_after(key, 1)
    first = rt.queue._timers[key].when()
    rt.requeue_after(key, 30)
    assert rt.queue._timers[key].when() == first
    rt.requeue([key])
    assert rt.queue._timers[key].when() < first


async def test_a_coalescing_requeue_waits_unless_something_needs_the_object_sooner() -> None:
    rt, _ = runtime_with(FailingController(None))
    key = ("ns", "t")
    rt.requeue([key], within=0.5)  # a pod only progressed: its siblings' events may follow
    coalesced = rt.queue._timers[key].when()
    rt.requeue([key], within=0.5)  # another such event does not push it back
    assert rt.queue._timers[key].when() == coalesced
    rt.requeue([key])  # a failure or deletion: at once
    assert rt.queue._timers[key].when() < coalesced


async def test_events_do_not_pre_empt_an_error_backoff() -> None:
    rt, _ = runtime_with(FailingController(OSError("refused")))
    key = ("ns", "t")
    await rt.reconcile(BODY)
    backoff_due = rt.queue._timers[key].when()
    rt.requeue([key])
    assert rt.queue._timers[key].when() == backoff_due


async def test_cache_groups_by_index_and_drops_deleted_objects() -> None:
    from trainerop_common.cache import ObjectCache
    from trainerop_common.objects import Keep

    def pod(name: str, trainer: str, uid: str) -> dict[str, Any]:
        return {"metadata": {"namespace": "ns", "name": name, "uid": uid, "labels": {"trainer-name": trainer}}}

    async def lister(keep: Keep) -> list[dict[str, Any]]:
        return [keep(o) for o in (pod("a-0", "a", "1"), pod("b-0", "b", "2"), pod("gone", "a", "3"))]

    cache = ObjectCache(lister, "", "v1", "pods", index=lambda o: o["metadata"]["labels"]["trainer-name"])
    cache._gone.add((("ns", "gone"), "3"))
    assert [o["metadata"]["name"] for o in await cache.grouped("a")] == ["a-0"]
    cache._drop(("ns", "a-0"))
    assert await cache.grouped("a") == []
    assert [o["metadata"]["name"] for o in await cache.grouped("b")] == ["b-0"]


async def test_an_event_is_posted_with_the_controllers_own_client() -> None:
    """kopf.event needs kopf's context vars, which no reconcile has (a timer's crashed with it)."""
    created: list[dict[str, Any]] = []

    class Recorder:
        async def create_core(self, body: dict[str, Any]) -> bool:
            created.append(body)
            return True

    rt = Runtime(ControllerConfig(controller="trainer", pod_name="trainer-0"), cast(Kube, Recorder()))
    rt.event(BODY, "Normal", "TTLExpired", "deleting; API_TOKEN=abc")
    for task in list(rt.tasks._tasks):
        await task
    (event,) = created
    assert (event["kind"], event["type"], event["reason"]) == ("Event", "Normal", "TTLExpired")
    assert event["message"] == "deleting; API_TOKEN=***"
    assert event["involvedObject"]["name"] == "t"
    assert event["reportingInstance"] == "trainer-0"


# -- admission checks served through kopf ------------------------------------------------------


def admission_handler(rt: Runtime, check: Any, mutating: bool = False) -> Any:
    registry = kopf.OperatorRegistry()
    rt.admit(registry, "check-it", check, mutating=mutating)
    (handler,) = registry._webhooks.get_all_handlers()  # kopf keeps no public accessor
    assert handler.id == "check-it"  # the path deploy/'s webhook configurations name
    return handler.fn


def test_checks_are_registered_only_when_webhooks_are_served() -> None:
    async def check(_: Any) -> Any:
        raise AssertionError("not called")

    rt = Runtime(ControllerConfig(controller="quota"), cast(Kube, None))
    registry = kopf.OperatorRegistry()
    rt.admit(registry, "check-it", check)
    assert not registry._webhooks.get_all_handlers()
    assert rt.admission_checks == 0


def test_a_refusal_is_a_422_with_every_problem_and_a_mutation_sets_spec_fields() -> None:
    seen: list[Request] = []

    async def refuse(request: Request) -> Verdict:
        seen.append(request)
        return Verdict(problems=("spec.a: wrong", "spec.b: wrong too"), warnings=("look",))

    async def default(request: Request) -> Verdict:
        return Verdict(spec={"profile": "team"}, warnings=("defaulted",))

    rt = Runtime(ControllerConfig(controller="profile", webhook=WebhookConfig(webhook_port=9443)), cast(Kube, None))
    body = kopf.Body(cast(kopf.RawBody, trainer_body("t", "ns")))
    warnings: list[str] = []
    with pytest.raises(kopf.AdmissionError) as refused:
        asyncio.run(
            admission_handler(rt, refuse)(
                body=body, old=None, operation="CREATE", warnings=warnings, patch=kopf.Patch()
            )
        )
    assert (str(refused.value), refused.value.code) == ("spec.a: wrong; spec.b: wrong too", 422)
    assert warnings == ["look"]
    assert (seen[0].namespace, seen[0].name, seen[0].old_spec) == ("ns", "t", None)

    patch = kopf.Patch()
    asyncio.run(admission_handler(rt, default, mutating=True)(body=body, operation="CREATE", warnings=[], patch=patch))
    assert patch == {"spec": {"profile": "team"}}
    assert rt.admission_checks == 2
    for outcome in ("refused", "mutated"):
        labels = {"controller": "profile", "webhook": "check-it", "outcome": outcome}
        assert REGISTRY.get_sample_value("operator_admission_reviews_total", labels) == 1


# -- what a reconcile concludes, applied the same way for every controller -------------------------


class StatusApi:
    """Stands in for the API server's status apply: records each body, answers a version or fails."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.applied: list[dict[str, Any]] = []
        self.error = error

    async def apply_status(
        self, info: Any, namespace: str | None, name: str, body: dict[str, Any], manager: str
    ) -> str:
        if self.error is not None:
            raise self.error
        self.applied.append(body)
        return str(10 + len(self.applied))


CHANGED = Outcome(
    status={"test": {"ok": True}},
    conditions=(Desired.true("Tested", "Fine"),),
    events=(("Normal", "Always", "posted"),),
    on_change=(("Warning", "Problem", "fix it"),),
)


@pytest.mark.parametrize(
    ("live_status", "writes", "events"),
    [
        ({}, 1, [("Normal", "Always", "posted"), ("Warning", "Problem", "fix it")]),
        # The live object already says it: no request, and no Event about a change.
        (
            {
                "test": {"ok": True},
                "conditions": [
                    {
                        "type": "Tested",
                        "status": "True",
                        "reason": "Fine",
                        "message": "",
                        "lastTransitionTime": "2026-01-01T00:00:00Z",
                        "observedGeneration": 1,
                    }
                ],
            },
            0,
            [("Normal", "Always", "posted")],
        ),
    ],
)
async def test_an_outcome_writes_only_what_changed_and_says_why_once(
    live_status: dict[str, Any], writes: int, events: list[tuple[str, str, str]]
) -> None:
    api = StatusApi()
    rt, posted = runtime_with(FailingController(None, CHANGED), api)
    await rt.reconcile(rt.queue.seen({**BODY, "status": live_status}))
    assert len(api.applied) == writes
    assert posted == events
    if writes:
        assert api.applied[0]["status"]["test"] == {"ok": True}
        assert [c["type"] for c in api.applied[0]["status"]["conditions"]] == ["Tested"]


async def test_a_trainer_deleted_before_its_status_is_written_is_not_retried() -> None:
    rt, posted = runtime_with(FailingController(None, CHANGED), StatusApi(api_error(404)))
    await rt.reconcile(BODY)
    assert not rt.has_pending_retry(("ns", "t"))
    assert posted == [("Normal", "Always", "posted")]  # nothing was written: no Event about a change
    # Gone: forgotten, not resynced again and again (its DELETED event may never come).
    assert ("ns", "t") not in rt.trainers


async def test_a_deleted_trainer_leaves_nothing_in_the_status_writer() -> None:
    """The version of its last write was kept per Trainer for good: 5000 Trainers created and
    deleted left 5000 entries in each controller."""
    api = StatusApi()
    rt, _ = runtime_with(FailingController(None, CHANGED), api)
    await rt.reconcile(BODY)
    assert rt.writer is not None
    assert rt.writer.is_stale(trainer_body("t", "ns", resource_version="5"))  # older than our write (11)
    api.error = api_error(404)  # deleted meanwhile: the next write finds it gone
    await rt.reconcile(rt.queue.seen({**BODY, "metadata": {**BODY["metadata"], "resourceVersion": "12"}}))
    assert not rt.writer.is_stale(trainer_body("t", "ns", resource_version="5"))


async def test_an_urgent_outcome_writes_and_works_ahead_of_the_rate_limits_queue() -> None:
    """The status counting a failure and the deletion after it are sent as urgent requests."""
    seen: list[tuple[str, bool]] = []

    class UrgencyApi(StatusApi):
        async def apply_status(self, *args: Any) -> str:
            seen.append(("status", URGENT.get()))
            return await super().apply_status(*args)

    async def after() -> None:
        seen.append(("after", URGENT.get()))

    for urgent in (True, False):
        rt, _ = runtime_with(
            FailingController(None, Outcome(status={"test": {"n": 1}}, after=after, urgent=urgent)), UrgencyApi()
        )
        await rt.reconcile(BODY)
        assert seen == [("status", urgent), ("after", urgent)]
        seen.clear()
    assert not URGENT.get()  # only inside


async def test_an_outcome_with_refused_work_is_retried_with_backoff_and_a_requeue_is_kept() -> None:
    rt, _ = runtime_with(FailingController(None, Outcome(retry=True)))
    await rt.reconcile(BODY)
    assert rt.queue.backoff.failures == {("ns", "t"): 1}
    rt2, _ = runtime_with(FailingController(None, Outcome(requeue_after=30)))
    await rt2.reconcile(BODY)
    assert rt2.has_pending_retry(("ns", "t"))
    assert rt2.queue.backoff.failures == {}


# -- the runtime's trigger (one job over all objects) and periodic jobs ------------------------------


async def test_pokes_before_a_run_starts_coalesce_into_one_run() -> None:
    runs: list[int] = []

    async def job() -> float | None:
        runs.append(len(runs))
        return None

    rt, _ = runtime_with(FailingController(None))
    trigger = rt.trigger(job, "planning")
    for _ in range(5):
        trigger.poke()
    for _ in range(3):
        await asyncio.sleep(0)
    assert runs == [0]


async def test_with_rest_the_next_run_waits_its_share_and_the_pokes_meanwhile_make_one_run() -> None:
    loop = asyncio.get_running_loop()
    runs: list[tuple[float, float]] = []  # (started, ended), loop time
    first, second = asyncio.Event(), asyncio.Event()

    async def job() -> float | None:
        started = loop.time()
        await asyncio.sleep(0.02)
        runs.append((started, loop.time()))
        (first if len(runs) == 1 else second).set()
        return None

    rt, _ = runtime_with(FailingController(None))
    trigger = rt.trigger(job, "planning", rest=5.0)
    trigger.poke()
    await asyncio.wait_for(first.wait(), 5)
    for _ in range(5):  # all within the rest that follows the first run
        trigger.poke()
        await asyncio.sleep(0)
    await asyncio.wait_for(second.wait(), 5)
    await asyncio.sleep(0.05)
    (first_start, first_end), (second_start, _) = runs
    assert len(runs) == 2  # five pokes, one run
    # a lower bound: a slow machine only makes the gap longer
    assert second_start - first_end >= 5.0 * (first_end - first_start) - 0.001


async def test_a_failed_run_is_tried_again_after_a_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    from trainerop_common import workqueue

    monkeypatch.setattr(workqueue, "RETRY_SECONDS", 0.01)
    attempts: list[int] = []
    done = asyncio.Event()

    async def job() -> float | None:
        attempts.append(1)
        if len(attempts) < 3:
            raise RuntimeError("the API server is away")
        done.set()
        return None

    rt, _ = runtime_with(FailingController(None))
    rt.trigger(job, "planning").poke()
    await asyncio.wait_for(done.wait(), 5)
    assert len(attempts) == 3


async def test_a_periodic_job_goes_on_after_a_failure() -> None:
    from trainerop_common.workqueue import periodic

    calls: list[int] = []

    async def job() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("one bad pass")

    task = asyncio.ensure_future(periodic(0.001, job, "test", first=0))
    for _ in range(1000):
        if len(calls) >= 3:
            break
        await asyncio.sleep(0.001)
    task.cancel()
    assert len(calls) >= 3


async def test_what_was_done_is_said_even_when_the_status_write_fails() -> None:
    rt, posted = runtime_with(FailingController(None, CHANGED), StatusApi(api_error(500)))
    await rt.reconcile(BODY)
    assert posted == [("Normal", "Always", "posted")]  # the change's Event waits for a write that happens
    assert rt.has_pending_retry(("ns", "t"))


async def test_work_that_waits_for_the_status_runs_after_the_write_and_says_when_to_look_again() -> None:
    api = StatusApi()
    order: list[str] = []

    async def collect() -> float | None:
        order.append(f"after {len(api.applied)} write(s)")
        return 7.0

    outcome = Outcome(status={"test": {"ok": True}}, after=collect, requeue_after=30)
    rt, _ = runtime_with(FailingController(None, outcome), api)
    await rt.reconcile(BODY)
    assert order == ["after 1 write(s)"]
    when = rt.queue._timers[("ns", "t")].when() - asyncio.get_running_loop().time()
    assert 0 < when <= 7


async def test_a_trainer_gone_before_its_status_write_gets_no_work_after_it() -> None:
    """Data collection waits for the status write; a Trainer deleted meanwhile (404) gets none."""
    ran: list[str] = []

    async def collect() -> float | None:
        ran.append("collect")
        return 7.0

    outcome = Outcome(status={"test": {"ok": True}}, after=collect, requeue_after=30)
    rt, _ = runtime_with(FailingController(None, outcome), StatusApi(api_error(404)))
    await rt.reconcile(BODY)
    assert ran == []
    assert not rt.has_pending_retry(("ns", "t"))


async def test_events_during_a_reconcile_make_one_more_on_the_latest_state() -> None:
    """A burst of watch events for one object while it is reconciled: one reconcile in flight, and
    one more afterwards on the newest body, not one per event."""
    from trainerop_common.workqueue import Tasks, WorkQueue

    release = asyncio.Event()
    seen: list[str] = []

    async def work(body: Body) -> None:
        seen.append(body["metadata"]["resourceVersion"])
        if len(seen) == 1:
            await release.wait()

    queue = WorkQueue(Tasks(), work)
    key = ("ns", "t")

    def event(version: int) -> None:
        queue.seen({"metadata": {"namespace": "ns", "name": "t", "uid": "u", "resourceVersion": str(version)}})

    event(1)
    first = asyncio.create_task(queue.process(key))
    await asyncio.sleep(0)
    for version in range(2, 7):
        event(version)
        await queue.process(key)  # returns at once: marked for one more run
    assert queue.depth == 1
    release.set()
    await first
    assert seen == ["1", "6"]
    assert queue.depth == 0


async def test_with_a_limit_at_most_that_many_reconciles_run_and_the_others_wait_their_turn() -> None:
    """--workers: pokes of five Trainers with a limit of two; two run at a time, each on the
    state it has when its turn comes, and a Trainer deleted while waiting is not reconciled."""
    from trainerop_common.workqueue import Tasks, WorkQueue

    release = asyncio.Event()
    running: list[str] = []
    most = 0
    done: list[str] = []

    async def work(body: Body) -> None:
        nonlocal most
        running.append(body["metadata"]["name"])
        most = max(most, len(running))
        await release.wait()
        running.remove(body["metadata"]["name"])
        done.append(f"{body['metadata']['name']}@{body['metadata']['resourceVersion']}")

    tasks = Tasks()
    queue = WorkQueue(tasks, work, limit=2)
    for name in "abcde":
        queue.poke(key_of(queue.seen(trainer_body(name, "ns", resource_version="1"))))
    for _ in range(5):
        await asyncio.sleep(0)
    assert sorted(running) == ["a", "b"]
    assert queue.depth == 3  # c, d and e wait for a turn
    queue.seen(trainer_body("c", "ns", resource_version="9"))  # a newer state while c waits
    queue.forget(trainer_body("d", "ns"))
    release.set()
    while tasks._tasks:
        await asyncio.gather(*tasks._tasks)
    assert most == 2
    assert sorted(done) == ["a@1", "b@1", "c@9", "e@1"]


async def test_a_trainer_whose_pod_failed_goes_ahead_of_those_waiting_for_a_turn() -> None:
    """--workers 1 and a ramp's reconciles waiting (b, c, d): a Trainer whose pod failed (d, already
    waiting; e, not yet) runs next, in the order they were marked, then the others in theirs; one
    waiting out an error backoff (f) is not started by it."""
    from trainerop_common.workqueue import Tasks, WorkQueue

    release = asyncio.Event()
    order: list[str] = []

    async def work(body: Body) -> None:
        order.append(body["metadata"]["name"])
        if body["metadata"]["name"] == "a":
            await release.wait()

    tasks = Tasks()
    queue = WorkQueue(tasks, work, limit=1)
    for name in "abcdef":
        queue.seen(trainer_body(name, "ns"))
    for name in "abcd":
        queue.poke(("ns", name))
    await asyncio.sleep(0)
    queue.backoff.next_delay(("ns", "f"))
    queue.urgently([("ns", "d"), ("ns", "e"), ("ns", "f"), ("ns", "unknown")])
    await asyncio.sleep(0)
    release.set()
    while tasks._tasks:
        await asyncio.gather(*tasks._tasks)
    assert order == ["a", "d", "e", "b", "c"]


async def test_a_waiter_cancelled_in_line_takes_no_turn_and_a_turn_given_as_it_is_cancelled_passes_on() -> None:
    from trainerop_common.workqueue import Turns

    turns = Turns(1)
    await turns.take(("ns", "a"), urgent=False)
    b = asyncio.ensure_future(turns.take(("ns", "b"), urgent=False))
    c = asyncio.ensure_future(turns.take(("ns", "c"), urgent=True))
    await asyncio.sleep(0)
    c.cancel()  # cancelled while in line
    await asyncio.gather(c, return_exceptions=True)
    turns.give_back()  # a is done: b's turn, which b is cancelled before it runs
    b.cancel()
    await asyncio.gather(b, return_exceptions=True)
    await asyncio.wait_for(turns.take(("ns", "d"), urgent=False), 1)  # the turn came back


async def test_pokes_of_one_moment_start_one_reconcile_on_the_latest_state() -> None:
    """Several events of one Trainer read in one go (one buffered read of the stream): one
    reconcile, of the newest state, not one more after it."""
    from trainerop_common.workqueue import Tasks, WorkQueue

    seen: list[str] = []

    async def work(body: Body) -> None:
        seen.append(body["metadata"]["resourceVersion"])

    tasks = Tasks()
    queue = WorkQueue(tasks, work)
    for version in ("1", "2", "3"):
        queue.poke(key_of(queue.seen(trainer_body("a", "ns", resource_version=version))))
    assert queue.depth == 1
    while tasks._tasks:
        await asyncio.gather(*tasks._tasks)
    assert (seen, queue.depth) == (["3"], 0)


async def test_on_stop_tasks_get_their_grace_and_then_are_cancelled() -> None:
    from trainerop_common.workqueue import Tasks

    ended: list[str] = []

    async def quick() -> None:
        await asyncio.sleep(0.01)
        ended.append("quick")

    async def stuck() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            ended.append("stuck cancelled")
            raise

    tasks = Tasks()
    tasks.spawn(quick())
    tasks.spawn(stuck())
    await tasks.stop(grace=0.05)
    assert (sorted(ended), tasks._tasks) == (["quick", "stuck cancelled"], set())


async def test_a_trainer_event_from_the_stream_starts_its_reconcile_without_waiting_for_it() -> None:
    """The runtime's Trainer handler runs on the watch stream (watch_events): it hands the
    reconcile to the queue and returns; a deletion forgets the Trainer."""
    from trainerop_common import watch_events

    controller = FailingController(None)
    rt = Runtime(ControllerConfig(controller="quota", resync_seconds=0, trim_memory_seconds=0), cast(Kube, None))
    registry = rt.registry_for(controller)
    (handler,) = [h.fn for h in registry._watching.get_all_handlers()]  # kopf keeps no public list
    on_trainer = watch_events.handler_of(handler)
    assert on_trainer is not None
    on_trainer("ADDED", BODY)
    assert controller.calls == 0  # started, not awaited on the stream
    while rt.tasks._tasks:
        await asyncio.gather(*rt.tasks._tasks)
    assert controller.calls == 1
    on_trainer("DELETED", BODY)
    assert rt.trainers == {}
    assert watch_events.route(kopf.OperatorSettings(), registry) == ["trainers.trainer.operator.kubeflow.org"]


class ToldOfDeletions(FailingController):
    """A controller with the optional ``trainer_gone`` hook (the kubeflow controller's)."""

    def __init__(self, outcome: Outcome | None = None) -> None:
        super().__init__(None, outcome)
        self.gone: list[str] = []

    def trainer_gone(self, last: Body) -> None:
        self.gone.append(last["metadata"]["name"])


async def test_a_controller_with_the_hook_is_told_of_each_deleted_trainer_however_it_was_found() -> None:
    from trainerop_common import watch_events

    controller = ToldOfDeletions(CHANGED)
    rt = Runtime(ControllerConfig(controller="test", resync_seconds=0, trim_memory_seconds=0), cast(Kube, None))
    registry = rt.registry_for(controller)
    (handler,) = [h.fn for h in registry._watching.get_all_handlers()]
    on_trainer = watch_events.handler_of(handler)
    assert on_trainer is not None
    for name in ("by-event", "in-gap"):
        rt.queue.seen(trainer_body(name, "ns"))
    on_trainer("DELETED", trainer_body("by-event", "ns"))
    rt._vanished(("ns", "in-gap"))  # what the relist's convergence does
    rt._vanished(("ns", "never-seen"))  # nothing known of it: nothing to tell
    at_write, _ = runtime_with(controller, StatusApi(api_error(404)))  # its status write finds it gone
    await at_write.reconcile(BODY)
    assert controller.gone == ["by-event", "in-gap", "t"]
