"""What an admitted run costs at its policy's prices (pure): per hour on its capacity type and all
on-demand, and accrued so far (status.quota.cost)."""

from collections.abc import Mapping
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from trainerop_common.api.quota import CapacityType
from trainerop_common.api.trainer import CostStatus
from trainerop_common.clock import parse_time
from trainerop_common.quantity import format_quantity

from .capacity import Resources
from .model import PolicyInfo, TrainerInfo

GIB = Decimal(2**30)
PER_GIB = ("memory", "ephemeral-storage")


def describe(resources: Mapping[str, Decimal]) -> str:
    def show(name: str, amount: Decimal) -> str:
        return f"{format_quantity(amount / GIB)}Gi {name}" if name in PER_GIB else f"{format_quantity(amount)} {name}"

    return ", ".join(show(n, a) for n, a in sorted(resources.items()) if a > 0 and n != "pods")


def money(amount: Decimal) -> str:
    return str(amount.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))


def hourly(policy: PolicyInfo, kind: CapacityType, reserved: Mapping[str, Decimal]) -> Decimal | None:
    prices = policy.spec.prices
    table = (prices.spot if kind == "spot" else prices.on_demand) if prices else None
    if not table:
        return None
    cost = Decimal(0)
    for name, amount in reserved.items():
        if name in table:
            cost += (amount / GIB if name in PER_GIB else amount) * Decimal(table[name])
    return cost


def cost_section(
    t: TrainerInfo, policy: PolicyInfo, kind: CapacityType | None, reserved: Resources | None, at: str
) -> dict[str, Any] | None:
    """The cost section: what ran so far accrued at the old rate, the new rate from ``at`` (now)."""
    old = t.quota.cost
    accrued, on_demand_accrued = Decimal(0), Decimal(0)
    if old is not None:
        hours = max(Decimal((parse_time(at) - parse_time(old.accrued_at)).total_seconds()) / 3600, Decimal(0))
        accrued = Decimal(old.accrued) + Decimal(old.per_hour) * hours
        on_demand_accrued = Decimal(old.on_demand_accrued) + Decimal(old.on_demand_per_hour) * hours
    rate = hourly(policy, kind, reserved) if kind and reserved is not None else Decimal(0)
    on_demand = hourly(policy, "on-demand", reserved) if reserved is not None else Decimal(0)
    if rate is None or on_demand is None:
        return None
    savings = (100 * (1 - rate / on_demand)).quantize(Decimal(1)) if on_demand > 0 else Decimal(0)
    new = CostStatus(
        per_hour=money(rate),
        on_demand_per_hour=money(on_demand),
        savings_percent=int(min(max(savings, Decimal(0)), Decimal(100))),  # spot dearer than on-demand: 0
        accrued=money(accrued),
        on_demand_accrued=money(on_demand_accrued),
        accrued_at=at,
    )
    if old is not None and (old.per_hour, old.on_demand_per_hour) == (new.per_hour, new.on_demand_per_hour):
        return old.to_k8s()  # same rate: nothing to write
    return new.to_k8s()
