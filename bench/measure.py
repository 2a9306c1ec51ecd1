"""What the benchmark suite measures with: timelines from watches (sub-second, time.monotonic when
an event arrives: Kubernetes' own timestamps are whole seconds), the API server's request
counters, controllers' resident memory, a py-spy profile, and the machine it ran on."""

from __future__ import annotations

import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from lightkube import Client
from prometheus_client.parser import text_string_to_metric_families

from bench.setup import percentile
from testbed import cluster as cluster_tool
from testbed import localdev
from tests.harness import Cluster

Obj = dict[str, Any]
CREATORS = 8  # concurrent create requests of the benchmark's own client (operator and ceiling alike)


class Watched:
    """A daemon thread that lists one resource in one namespace, then watches it from the list's
    version, handing each object (a dict; "ADDED" for the listed ones) to ``record``; a dropped
    watch is resumed from a new list (what was recorded stays). The constructor returns once the
    first list is in, so no event after it is missed."""

    def __init__(self, client: Client, resource: Any, namespace: str, record: Callable[[str, Obj], None]) -> None:
        self._record = record
        self._started = threading.Event()
        self._stop = threading.Event()
        threading.Thread(target=self._run, args=(client, resource, namespace), daemon=True).start()
        if not self._started.wait(30):
            raise SystemExit(f"the watch of {resource.__name__} in {namespace} did not start within 30 s")

    def _run(self, client: Client, resource: Any, namespace: str) -> None:
        while not self._stop.is_set():
            try:
                listed = client.list(resource, namespace=namespace, chunk_size=500)
                for obj in listed:
                    self._record("ADDED", obj.to_dict())
                self._started.set()
                # Events after the list are replayed from its version, so none is lost while the watch connects.
                for kind, obj in client.watch(resource, namespace=namespace, resource_version=listed.resourceVersion):
                    self._record(kind, obj.to_dict())
                    if self._stop.is_set():
                        return
            except Exception as err:  # resumed from a new list (objects seen stay seen)
                print(f"watch of {resource.__name__} restarted: {err}", file=sys.stderr)
                time.sleep(1)

    def stop(self) -> None:
        self._stop.set()


class Timeline:
    """When each object of one resource in one namespace was first seen, first seen ``ready``, and
    first seen being deleted."""

    def __init__(self, client: Client, resource: Any, namespace: str, ready: Callable[[Obj], bool]) -> None:
        self.seen: dict[str, float] = {}
        self.ready: dict[str, float] = {}
        self.uids: dict[str, str] = {}
        self.deleting: dict[str, float] = {}  # uid -> when its deletion (or its deletionTimestamp) was first seen
        self._ready = ready
        self._lock = threading.Lock()
        self._watched = Watched(client, resource, namespace, self._record)

    def _record(self, kind: str, obj: Obj) -> None:
        now = time.monotonic()
        meta = obj["metadata"]
        name, uid = meta["name"], meta.get("uid", "")
        with self._lock:
            if kind == "DELETED" or meta.get("deletionTimestamp"):
                self.deleting.setdefault(uid, now)
            if kind == "DELETED":
                return
            if self.uids.get(name) != uid:  # a new object under a name seen before (a replacement)
                self.uids[name] = uid
                self.seen[name] = now
                self.ready.pop(name, None)
            if name not in self.ready and self._ready(obj):
                self.ready[name] = now

    def replaced(self, name: str, old_uid: str, ready: bool = True, timeout: float = 120) -> float:
        """When the object replacing ``old_uid`` under ``name`` was seen (ready)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if self.uids.get(name, old_uid) != old_uid and (not ready or name in self.ready):
                    return (self.ready if ready else self.seen)[name]
            time.sleep(0.02)
        raise SystemExit(f"{name} was not replaced within {timeout:.0f} s")

    def restart_clock(self, names: Iterable[str]) -> None:
        """Forget ``names`` (their replacements will be timed from scratch)."""
        with self._lock:
            for name in names:
                self.seen.pop(name, None)
                self.ready.pop(name, None)
                self.uids.pop(name, None)

    def wait(self, count: int, what: str, ready: bool = True, stall_seconds: float = 180) -> float:
        """The time the ``count``-th object was seen (ready); fails after ``stall_seconds`` without progress."""
        table = self.ready if ready else self.seen
        last, progress_at = -1, time.monotonic()
        while True:
            with self._lock:
                done = len(table)
                latest = max(table.values(), default=0.0)
            if done >= count:
                return latest
            if done != last:
                last, progress_at = done, time.monotonic()
                print(f"  {what}: {done}/{count}", file=sys.stderr, flush=True)
            if time.monotonic() - progress_at > stall_seconds:
                raise Stalled(f"{what}: {done} of {count} after {stall_seconds:.0f} s without progress")
            time.sleep(0.2)

    def stop(self) -> None:
        self._watched.stop()


class Stalled(SystemExit):
    """A wait saw no progress for its stall time. Uncaught, the run ends with its message; a phase
    that can record a peer's stall (bench/kubeflow.py) catches it."""


def in_parallel(call: Callable[[Any], object], items: list[Any], at_once: int = CREATORS) -> float:
    """``call`` on every item, ``at_once`` at a time; the monotonic time it started."""
    t0 = time.monotonic()
    with ThreadPoolExecutor(at_once) as pool:
        list(pool.map(call, items))
    return t0


def create_all(client: Client, objects: list[Any], at_once: int = CREATORS) -> float:
    return in_parallel(client.create, objects, at_once)


def spread(values: list[float]) -> dict[str, float]:
    return {
        "count": len(values),
        "p50": round(percentile(values, 50), 3),
        "p95": round(percentile(values, 95), 3),
        "p99": round(percentile(values, 99), 3),
        "max": round(max(values), 3),
    }


# The API server's own counters.

WRITES = {"POST", "PUT", "PATCH", "DELETE", "APPLY"}
# Writes nobody's controller makes for a Trainer (group, resource, subresource): kwok's pod and
# node status, the scheduler's bindings and events (events.k8s.io), the controller-manager's
# endpoints and volume binding; and lease renewals (PUT: node heartbeats, leader election), while
# lease creations count (the trainer controller's heartbeat Lease per replica); token requests
# (the controller-manager's controllers renew their ServiceAccounts' tokens; no controller of the
# operator asks for one).
NOT_THE_OPERATORS = {
    ("", "serviceaccounts", "token"),
    ("", "pods", "status"),
    ("", "pods", "binding"),
    ("", "nodes", ""),
    ("", "nodes", "status"),
    ("events.k8s.io", "events", ""),
    ("", "endpoints", ""),
    ("discovery.k8s.io", "endpointslices", ""),
    ("", "persistentvolumeclaims", ""),
    ("", "persistentvolumeclaims", "status"),
    ("", "persistentvolumes", ""),
    ("", "persistentvolumes", "status"),
}
Requests = Counter[tuple[str, str, str, str, str]]  # (verb, group, resource, subresource, code)


def api_requests(c: Cluster) -> Requests:
    """apiserver_request_total by (verb, group, resource, subresource, code)."""
    out: Requests = Counter()
    for family in text_string_to_metric_families(c.kubectl("get", "--raw", "/metrics")):
        if family.name != "apiserver_request":
            continue
        for sample in family.samples:
            if sample.name == "apiserver_request_total":
                get = sample.labels.get
                key = (get("verb", ""), get("group", ""), get("resource", ""), get("subresource", ""), get("code", ""))
                out[key] += int(sample.value)
    return out


def writes(before: Requests, after: Requests) -> Counter[str]:
    """Write requests between two snapshots by ``resource[/subresource] VERB``, without the writes
    of kwok, the scheduler, the controller-manager and leases (NOT_THE_OPERATORS)."""
    out: Counter[str] = Counter()
    for (verb, group, resource, sub, _code), value in (after - before).items():
        renewal = resource == "leases" and verb != "POST"
        if verb in WRITES and (group, resource, sub) not in NOT_THE_OPERATORS and not renewal and value:
            out[f"{resource}{'/' + sub if sub else ''} {verb}"] += value
    return out


def conflicts(before: Requests, after: Requests) -> int:
    return sum(v for (verb, _g, _r, _s, code), v in (after - before).items() if code == "409" and verb in WRITES)


# Memory and profiles of the local controller processes.


def resident_mib(c: Cluster) -> dict[str, float]:
    """Each local controller process's resident memory (VmRSS), MiB. Read from /proc, not from its
    /metrics: under load a controller's event loop answers that late."""
    out = {}
    for ctl in c.metrics_ports:
        pid = cluster_tool.running_pid(localdev.state_dir(), f"controller-{ctl}")
        out[ctl] = rss_mib(pid) if pid else 0.0
    return out


CLUSTER_PROCESSES = ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kwok")


def cpu_seconds(c: Cluster) -> dict[str, float]:
    """CPU seconds (user + system) each local process has used so far: the controllers and the
    cluster's own. Two snapshots' difference says where the machine's cores went in between."""
    named = {ctl: cluster_tool.running_pid(localdev.state_dir(), f"controller-{ctl}") for ctl in c.metrics_ports}
    named |= {name: cluster_tool.running_pid(cluster_tool.RUN_DIR, name) for name in CLUSTER_PROCESSES}
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for name, pid in named.items():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        except (OSError, TypeError):
            continue
        out[name] = (int(fields[11]) + int(fields[12])) / tick  # utime, stime (proc(5) fields 14, 15)
    return out


def cpu_used(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    return {name: round(after[name] - before.get(name, 0.0), 1) for name in after}


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


class Profile:
    """py-spy sampling one process from now until ``summary()`` (50 samples a second)."""

    def __init__(self, pid: int, out: Path) -> None:
        self.out = out
        exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        command = [exe, "record", "--pid", str(pid), "--rate", "50", "--nonblocking", "--format", "raw"]
        command += ["--output", str(out)]
        self.proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def summary(self, top: int = 12) -> dict[str, Any]:
        """Where the busy samples were (waiting in select() or an idle worker thread left out): the
        hottest functions by their own time, and the project's and its libraries' functions by time
        including what they call."""
        self.proc.send_signal(signal.SIGINT)  # py-spy writes what it sampled and exits
        _, err = self.proc.communicate(timeout=120)
        if not self.out.exists():
            return {"error": (err or "py-spy failed").strip()[-500:]}
        own: Counter[str] = Counter()
        inclusive: Counter[str] = Counter()
        total = busy = 0
        for line in self.out.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            if not stack or not count.isdigit():
                continue
            n = int(count)
            total += n
            frames = [f.rsplit(":", 1)[0] + ")" if f.endswith(")") else f for f in stack.split(";")]
            if frames[-1].startswith(IDLE):
                continue
            busy += n
            own[frames[-1]] += n
            for frame in set(frames):
                if frame.split(" (", 1)[-1].startswith(OURS) and not frame.startswith(ENTRY):
                    inclusive[frame] += n

        def share(counts: Counter[str]) -> list[dict[str, Any]]:
            return [{"function": f, "percent": round(100 * n / max(busy, 1), 1)} for f, n in counts.most_common(top)]

        return {"samples": total, "busy_samples": busy, "own_time": share(own), "inclusive": share(inclusive)}


# Leaf frames of a thread with nothing to do; the packages whose functions are worth naming.
IDLE = ("EpollSelector.select", "_worker (concurrent/futures/thread.py", "Condition.wait", "Event.wait")
OURS = ("trainerop_", "kopf/", "lightkube/", "httpx/", "httpcore/", "pydantic", "prometheus_client/", "ssl.py", "json/")
ENTRY = ("<module>", "run_entrypoint", "main (trainerop_common/runtime.py", "serve (trainerop_common/runtime.py")


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    mem_kib = next(
        int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal")
    )
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(mem_kib / 2**20, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
    }


def dump(obj: Mapping[str, Any]) -> str:
    return json.dumps(obj, indent=1, sort_keys=False)


# Where the API server's CPU goes, by the handlers a training operator's requests reach (cumulative
# share of the samples, so nested entries overlap: the list is read line by line, not summed).
APISERVER_PARTS = (
    ("custom resources' status writes (the Trainers')", "customresource.(*StatusREST).Update"),
    ("creates of built-in kinds (pods, Services, Events)", "handlers.CreateResource.createHandler"),
    ("creates of custom resources (Trainers, AuditLogs)", "(*crdHandler).serveResource.CreateResource"),
    ("pods' status writes (kwok)", "core/pod/storage.(*StatusREST).Update"),
    ("admission policies (CEL), every policy matching the request", "policy/validating.(*Plugin).Validate"),
    ("admission webhooks: calls", "webhook/validating.(*validatingDispatcher).Dispatch.func1"),
    ("admission webhooks: match conditions", "webhook/matchconditions.(*matcher).Match"),
    ("watches: events encoded and sent", "handlers.(*WatchServer).HandleHTTP"),
    ("etcd's events decoded", "etcd3.(*watchChan).serialProcessEvents"),
    ("lists of built-in kinds", "handlers.ListResource.func1"),
    ("lists of custom resources", "(*crdHandler).serveResource.ListResource"),
    ("gets of custom resources", "(*crdHandler).serveResource.GetResource"),
    ("garbage collection, in the background", "runtime.gcBgMarkWorker"),
    ("garbage collection, assisting allocations", "runtime.gcAssistAlloc"),
)


class ApiServerProfile:
    """The API server's own CPU profile (its /debug/pprof, cluster-admin only) for ``seconds`` from
    now, read by ``go tool pprof`` against the kube-apiserver binary that ran."""

    def __init__(self, c: Cluster, out: Path, seconds: int) -> None:
        self.out, self.seconds, self.error = out, seconds, ""
        path = f"/debug/pprof/profile?seconds={seconds}"
        self.thread = threading.Thread(target=self._fetch, args=(c, path), daemon=True)
        self.thread.start()

    def _fetch(self, c: Cluster, path: str) -> None:
        command = [str(c.kubectl_bin), "--kubeconfig", str(c.kubeconfig), "get", "--raw", path]
        try:
            with self.out.open("wb") as sink:
                done = subprocess.run(command, stdout=sink, stderr=subprocess.PIPE, timeout=self.seconds + 60)
        except (OSError, subprocess.TimeoutExpired) as err:
            self.error = f"the profile was not read: {err}"
            return
        said = done.stderr.decode(errors="replace").strip()[-300:]
        self.error = (said or f"kubectl get --raw exited {done.returncode}") if done.returncode else ""

    def summary(self) -> dict[str, Any]:
        """Each of :data:`APISERVER_PARTS` with its share of the CPU sampled, after the profile is in."""
        self.thread.join(self.seconds + 90)
        go = shutil.which("go") or "/usr/local/go/bin/go"
        if self.error or not self.out.exists() or not Path(go).exists():
            return {"error": self.error or "no profile, or no go command to read it (install Go: docs/development.md)"}
        binary = cluster_tool.bin_dir() / "kube-apiserver"
        command = [go, "tool", "pprof", "-top", "-cum", "-nodecount=5000", str(binary), str(self.out)]
        top = subprocess.run(command, capture_output=True, text=True, timeout=120).stdout
        try:
            return apiserver_parts(top, self.seconds)
        except (ValueError, KeyError) as err:  # a figure of the run is not worth the run
            return {"error": f"go tool pprof's output not understood ({err!r}): {top[:300]}"}


PPROF_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0, "mins": 60.0, "hrs": 3600.0}


def pprof_seconds(text: str) -> float:
    """A duration as pprof prints it ("64.88s", "550ms", "1.2mins"), in seconds."""
    number = text.rstrip("abcdefghijklmnopqrstuvwxyz")
    return round(float(number) * PPROF_UNITS[text[len(number) :]], 3)


def apiserver_parts(top: str, seconds: int) -> dict[str, Any]:
    """``go tool pprof -top -cum`` output folded into :data:`APISERVER_PARTS`: for each, the largest
    entry whose name holds the part's function (Go names a function's closures after it)."""
    total, shares = 0.0, dict[str, float]()
    for line in top.splitlines():
        if line.startswith("Duration:") and "Total samples = " in line:
            total = pprof_seconds(line.split("Total samples = ")[1].split()[0])
        fields = line.split(maxsplit=5)
        if len(fields) < 6 or not fields[4].endswith("%"):
            continue
        name = fields[5]
        for what, function in APISERVER_PARTS:
            if function in name:
                shares[what] = max(shares.get(what, 0.0), float(fields[4].rstrip("%")))
    parts = [{"part": what, "percent": shares[what]} for what, _ in APISERVER_PARTS if what in shares]
    return {"seconds": seconds, "cpu_seconds_sampled": total, "parts": parts}
