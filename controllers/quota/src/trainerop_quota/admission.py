"""What the quota controller's validating webhook refuses (pure; the adapter is in controller.py).

A Trainer's ``spec.scheduling`` must make sense under the QuotaPolicy that governs its namespace:
a priority class the policy defines, and a preference that leaves some capacity type the policy
budgets for. Under no policy, scheduling has no effect (a warning, not a refusal). Under a policy,
its podTemplateOverrides may not hold resource claims, which the quota cannot count (the plan
holds such a run too: ``capacity.role_requests``).
"""

from trainerop_common.admission import Request, Verdict
from trainerop_common.api.trainer import TrainerSpec
from trainerop_common.topology import role_counts

from .capacity import uncounted_claims
from .model import PolicyInfo, preference


def check_scheduling(request: Request, spec: TrainerSpec, policy: PolicyInfo | None) -> Verdict:
    """The verdict on a Trainer's scheduling and, under a policy, on the resource claims of its
    roles' overrides."""
    verdict = scheduling_verdict(request, spec, policy)
    claims = claim_problems(request, spec) if policy is not None else []
    return Verdict(problems=(*verdict.problems, *claims), warnings=verdict.warnings)


def claim_problems(request: Request, spec: TrainerSpec) -> list[str]:
    """The resource claims in the overrides of the roles the run has, when the request changes them."""
    if not (request.changed("podTemplateOverrides") or request.changed("topology")):
        return []
    return [problem for role, n in role_counts(spec).items() if n for problem in uncounted_claims(spec, role)]


def scheduling_verdict(request: Request, spec: TrainerSpec, policy: PolicyInfo | None) -> Verdict:
    scheduling = spec.scheduling
    if scheduling is None or not request.changed("scheduling"):
        return Verdict()
    if policy is None:
        return Verdict(
            warnings=(
                f"spec.scheduling has no effect: no QuotaPolicy covers namespace {request.namespace!r} "
                "(its runs are admitted at once)",
            )
        )
    problems: list[str] = []
    name = scheduling.priority_class_name
    classes = [c.name for c in policy.spec.priority_classes or ()]
    if name is not None and name not in classes:
        defined = f"it defines {', '.join(repr(c) for c in classes)}" if classes else "it defines none"
        problems.append(
            f"spec.scheduling.priorityClassName: QuotaPolicy {policy.name!r}, which governs namespace "
            f"{request.namespace!r}, has no priority class {name!r} ({defined}); use one of those or leave it unset"
        )
    if scheduling.preference is not None and not preference(policy, spec):
        budgets = [
            k for k, v in (("spot", policy.spec.budgets.spot), ("on-demand", policy.spec.budgets.on_demand)) if v
        ]
        problems.append(
            f"spec.scheduling.preference: {scheduling.preference} leaves no capacity type that QuotaPolicy "
            f"{policy.name!r} budgets for (it has: {', '.join(budgets) or 'none'}), so the run could never be "
            "admitted; choose another preference or leave it unset"
        )
    return Verdict(problems=tuple(problems))
