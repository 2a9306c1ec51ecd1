"""Tamper evidence for the audit trail (pure; docs/audit.md): seals and their verification.

Every ``--seal-seconds`` the audit controller writes, per namespace with records not yet sealed,
a **seal**: an AuditLog (action ``Sealed``) listing each new record's hash — over its name, uid,
creation time and spec, so a record deleted and written again under its name no longer matches —
and the previous seal's name and hash, so the seals form a chain. Retention's own record lists
what it deleted (``deletedRecords``). :func:`verify` reports the first broken link: a sealed
record gone without retention saying so, one whose content no longer matches, a seal missing
from the chain, or a record older than the newest seal that no seal lists (written in later).
Records written since the newest seal are not yet covered; the log forwarder's copy covers them.
"""

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence, Set
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from trainerop_common.api import GROUP, VERSION
from trainerop_common.clock import parse_time

from .record import about_uid, audit_record, derived_audit_id, job_creation, operator_user, who_asked

SEAL_RECORDS = 5000  # record hashes per seal (an AuditLog stays well below the API's object size limit)
# A record this much older than a seal's reading of the trail must be in a seal: younger ones may
# not have reached the controller's cache yet and go into the next.
SEAL_GRACE = timedelta(seconds=60)
# A sealed record this old about a Trainer that no longer exists (or about none) is no longer held
# by the controller: nothing reads it again (decisions read a live Trainer's records, seals the
# unsealed ones), and the trail it stays in grows with every Trainer ever run. Younger ones may be
# about a Trainer the controller's watch has not delivered yet (the webhook records a creation first).
FORGET_AFTER = timedelta(minutes=5)


IDENTITY = ("namespace", "name", "uid", "creationTimestamp")
HASH = "trainerop.hash"  # a held record's hash, computed from the whole record (no AuditLog field)


def record_hash(record: Mapping[str, Any]) -> str:
    """sha256 of what identifies a record and what it says (its name, uid, creation time, spec)."""
    meta = record.get("metadata") or {}
    identity = {k: meta.get(k) for k in IDENTITY}
    text = json.dumps({"metadata": identity, "spec": record.get("spec")}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def hash_of(record: Mapping[str, Any]) -> str:
    """The record's hash: the one computed when it was held, else from the record itself."""
    return str(record.get(HASH) or record_hash(record))


def held(record: dict[str, Any]) -> dict[str, Any]:
    """What the audit controller keeps of an AuditLog: what the decisions and seals read — its
    identity, the object it is about, when, its action, for a Kubeflow job's creation the user and
    how they were known — and its hash. The whole trail stays in the cluster (until retention);
    held whole, the trails of a benchmark's first 1500 Trainers took 47 MiB more."""
    if is_seal(record):
        return held_seal(record)
    meta, spec = record.get("metadata") or {}, record.get("spec") or {}
    kept = {k: spec[k] for k in ("stageTimestamp", "time", "action") if k in spec}
    if seals := [n for n in spec.get("deletedRecords") or () if sequence_of(n) is not None]:
        kept["deletedRecords"] = seals  # the seals retention deleted: the chain goes on from them
    if ref := spec.get("objectRef"):
        kept["objectRef"] = {"uid": ref.get("uid"), "resource": ref.get("resource")}
    if trainer := spec.get("trainer"):
        kept["trainer"] = {"uid": trainer.get("uid")}
    if job_creation(record):  # the Trainer made for the job names its creator (decide.creation_on_behalf)
        kept |= who_asked(spec)
    return {"metadata": {k: meta[k] for k in IDENTITY if k in meta}, "spec": kept, HASH: record_hash(record)}


def held_seal(seal: dict[str, Any]) -> dict[str, Any]:
    """What the controller keeps of a seal: its identity, place in the chain and hash (the next
    seal chains to it) and the names of the records it lists, not their hashes (the next seal
    skips those records, ``forgettable`` lets them go)."""
    meta, spec = seal.get("metadata") or {}, seal.get("spec") or {}
    link = spec.get("seal") or {}
    kept = {"sequence": link.get("sequence"), "records": list(link.get("records") or ())}
    return {
        "metadata": {k: meta[k] for k in IDENTITY if k in meta},
        "spec": {"action": spec.get("action"), "stageTimestamp": spec.get("stageTimestamp"), "seal": kept},
        HASH: record_hash(seal),
    }


def trimmed_seals(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The held seals among ``records`` that list records no longer held, each listing only those
    still held: what a seal lists matters to the controller only while the record is held (a record
    let go comes back only with a relist, which brings its seal back whole). A seal's names would
    otherwise be held for every record ever sealed."""
    here = {(r["metadata"].get("namespace"), r["metadata"].get("name")) for r in records if not is_seal(r)}
    out = []
    for seal in seals_of(records):
        listed = seal["spec"]["seal"]["records"]
        namespace = seal["metadata"].get("namespace")
        still = [name for name in listed if (namespace, name) in here]
        if len(still) < len(listed):
            out.append({**seal, "spec": {**seal["spec"], "seal": {**seal["spec"]["seal"], "records": still}}})
    return out


def is_seal(record: Mapping[str, Any]) -> bool:
    return (record.get("spec") or {}).get("action") == "Sealed"


def seals_of(records: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The seals among ``records``, in chain order."""
    return sorted((r for r in records if is_seal(r)), key=lambda r: int(r["spec"]["seal"]["sequence"]))


def forgettable(records: Iterable[Mapping[str, Any]], live: Set[str], now: datetime) -> list[Mapping[str, Any]]:
    """The records among ``records`` the controller need not hold any more: listed by a seal of
    their namespace, older than FORGET_AFTER, and about no object of ``live`` (uids: the Trainers,
    and the Kubeflow jobs they were made for, whose creation records name their creators). Seals
    stay (the next seal chains to the newest and skips what any of them lists; ``trimmed_seals``
    then lists only what is still held)."""
    seals = [r for r in records if is_seal(r)]
    sealed = {(s["metadata"].get("namespace"), n) for s in seals for n in s["spec"]["seal"]["records"]}
    return [
        r
        for r in records
        if (r["metadata"].get("namespace"), r["metadata"].get("name")) in sealed
        and about_uid(r) not in live
        and _older_than(r, now - FORGET_AFTER)
    ]


def _older_than(record: Mapping[str, Any], when: datetime) -> bool:
    created = record["metadata"].get("creationTimestamp")
    return bool(created) and parse_time(str(created)) <= when


SEAL_PREFIX = "audit-seal-"


def seal_name(sequence: int) -> str:
    return f"{SEAL_PREFIX}{sequence:08d}"


def sequence_of(name: str) -> int | None:
    """The sequence a seal's name gives (None: not a seal's name)."""
    digits = name.removeprefix(SEAL_PREFIX)
    return int(digits) if digits != name and digits.isdigit() else None


def pruned_names(records: Iterable[Mapping[str, Any]]) -> set[str]:
    """The names retention's records say it deleted."""
    return {n for r in records for n in (r.get("spec") or {}).get("deletedRecords") or ()}


def chain_head(
    chain: Sequence[Mapping[str, Any]], records: Sequence[Mapping[str, Any]]
) -> tuple[int, Mapping[str, Any] | None, str | None]:
    """(the newest sequence, the newest seal if it is still there, the newest seal's name) of one
    namespace's ``chain`` (its seals in order) and ``records``. A seal retention deleted counts (its
    record names it): the next seal follows it, never takes its name again. (0, None, None) before
    the first seal."""
    newest_pruned = max((s for n in pruned_names(records) if (s := sequence_of(n)) is not None), default=0)
    last = chain[-1] if chain else None
    newest_held = int(last["spec"]["seal"]["sequence"]) if last else 0
    if newest_pruned > newest_held:
        return newest_pruned, None, seal_name(newest_pruned)
    return newest_held, last, last["metadata"]["name"] if last else None


def next_seal(namespace: str, records: Sequence[Mapping[str, Any]], now: str) -> dict[str, Any] | None:
    """The seal of the records of ``namespace`` that no seal lists yet (the oldest first, at most
    SEAL_RECORDS), chained to the newest seal; None when every record is sealed."""
    mine = [r for r in records if r["metadata"].get("namespace") == namespace]
    chain = seals_of(mine)
    sealed = {name for s in chain for name in s["spec"]["seal"]["records"]} | {s["metadata"]["name"] for s in chain}
    new = sorted(
        (r for r in mine if r["metadata"]["name"] not in sealed and r["metadata"].get("uid")),
        key=lambda r: (str(r["metadata"].get("creationTimestamp", "")), r["metadata"]["name"]),
    )[:SEAL_RECORDS]
    if not new:
        return None
    newest, last, previous = chain_head(chain, mine)
    sequence = newest + 1
    record = audit_record(
        name=seal_name(sequence),
        namespace=namespace,
        audit_id=derived_audit_id("seal", namespace, str(sequence)),
        stage="ResponseComplete",
        verb="create",
        user=operator_user("audit"),
        object_ref={"resource": "auditlogs", "namespace": namespace, "apiGroup": GROUP, "apiVersion": VERSION},
        received=now,
        stamp=now,
        action="Sealed",
        reason="Sealed",
        message=f"seals {len(new)} audit record(s); verify the trail with `python -m trainerop_audit.verify`",
    )
    record["spec"]["seal"] = {
        "sequence": sequence,
        "previous": previous,
        "previousHash": hash_of(last) if last else None,  # a pruned seal's hash is gone with it
        "records": {r["metadata"]["name"]: hash_of(r) for r in new},
    }
    record["spec"]["seal"] = {k: v for k, v in record["spec"]["seal"].items() if v is not None}
    return record


@dataclass(frozen=True)
class Verdict:
    namespace: str
    records: int
    seals: int
    unsealed: int  # written since the newest seal: not covered yet
    broken: str | None  # the first broken link, or None

    def line(self) -> str:
        where = self.namespace or "(cluster)"
        if self.broken:
            return f"{where}: BROKEN: {self.broken}"
        return f"{where}: intact: {self.records} records, {self.seals} seals, {self.unsealed} not sealed yet"


def _link_problem(before: Mapping[str, Any] | None, seal: Mapping[str, Any], pruned: set[str]) -> str | None:
    """What is wrong with ``seal``'s link to the seal ``before`` it (None: the oldest left)."""
    name, link = seal["metadata"]["name"], seal["spec"]["seal"]
    previous = link.get("previous")
    if before is None:
        return (
            f"seal {name} follows {previous}, which is gone and was not pruned"
            if previous and previous not in pruned
            else None
        )
    if previous != before["metadata"]["name"] or link.get("previousHash") != record_hash(before):
        return f"seal {name} does not follow seal {before['metadata']['name']} (changed or replaced)"
    return None


def _sealed_problem(seal: Mapping[str, Any], by_name: Mapping[str, Mapping[str, Any]], pruned: set[str]) -> str | None:
    """The first record ``seal`` lists that is gone (not pruned) or no longer what was sealed."""
    for name, digest in sorted(seal["spec"]["seal"]["records"].items()):
        found = by_name.get(name)
        if found is None and name not in pruned:
            return f"record {name}, sealed by {seal['metadata']['name']}, is gone and was not pruned"
        if found is not None and record_hash(found) != digest:
            return f"record {name} no longer matches its hash in {seal['metadata']['name']} (changed or recreated)"
    return None


def _late_problem(chain: Sequence[Mapping[str, Any]], late: Sequence[Mapping[str, Any]]) -> str | None:
    """A record no seal lists though it is older than the newest seal's reading of the trail."""
    newest = chain[-1]
    read = parse_time(str(newest["spec"]["stageTimestamp"]))
    for r in late:
        created = r["metadata"].get("creationTimestamp")
        if created and parse_time(str(created)) < read - SEAL_GRACE:
            name = newest["metadata"]["name"]
            return f"record {r['metadata']['name']} predates seal {name} but no seal lists it (written in later)"
    return None


def _first_problem(mine: Sequence[Mapping[str, Any]]) -> tuple[str | None, int]:
    """(the first broken link, records no seal covers yet)."""
    by_name = {r["metadata"]["name"]: r for r in mine}
    pruned = pruned_names(mine)
    chain = seals_of(mine)
    for before, seal in zip([None, *chain], chain, strict=False):
        problem = _link_problem(before, seal, pruned) or _sealed_problem(seal, by_name, pruned)
        if problem:
            return problem, 0
    sealed = {n for s in chain for n in s["spec"]["seal"]["records"]} | {s["metadata"]["name"] for s in chain}
    late = [r for r in mine if r["metadata"]["name"] not in sealed]
    return (_late_problem(chain, late) if chain else None), len(late)


def verify(records: Sequence[Mapping[str, Any]]) -> list[Verdict]:
    """The verdict on each namespace's trail."""
    by_namespace: dict[str, list[Mapping[str, Any]]] = {}
    for r in records:
        by_namespace.setdefault(str(r["metadata"].get("namespace", "")), []).append(r)
    out = []
    for namespace, mine in sorted(by_namespace.items()):
        broken, unsealed = _first_problem(mine)
        out.append(Verdict(namespace, len(mine), len(seals_of(mine)), unsealed, broken))
    return out
