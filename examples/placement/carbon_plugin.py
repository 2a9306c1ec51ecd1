"""An example placement plugin: the quota controller's sidecar that puts each replica on the node
with the lowest value of a node label that has room for it — a carbon intensity (gCO2/kWh), a
price, a temperature (docs/placement-plugins.md).

    python carbon_plugin.py --listen localhost:50051 [--label example.com/carbon-intensity] [--tls-dir DIR]

Nodes without the label come last. It also recommends the nodes at the lowest value as a preferred
node affinity, so the quota controller's packing leans to them for replicas it places itself.
"""

import argparse
import asyncio
import logging
from collections.abc import Mapping

import grpc

from trainerop_placement.channel import serve
from trainerop_placement.v1 import placement_pb2 as pb
from trainerop_placement.v1 import placement_pb2_grpc

LABEL = "example.com/carbon-intensity"
log = logging.getLogger("carbon-plugin")


def label_value(node: pb.CandidateNode, label: str) -> float:
    try:
        return float(node.labels[label])
    except (KeyError, ValueError):
        return float("inf")


def holds(free: Mapping[str, float], requests: Mapping[str, float]) -> bool:
    return all(free.get(name, 0.0) >= amount for name, amount in requests.items() if amount > 0)


def suggest(context: pb.WorkerContext, label: str) -> pb.PlacementHint:
    """Each replica, in the order given (ring order), on the lowest-valued node that holds it."""
    nodes = sorted(context.cluster_load.nodes, key=lambda n: (label_value(n, label), n.name))
    free = {n.name: dict(n.free) for n in nodes}
    chosen = []
    for replica in context.replicas:
        fit = next(
            (
                n
                for n in nodes
                if all(n.labels.get(k) == v for k, v in replica.node_selector.items())
                and holds(free[n.name], replica.requests)
            ),
            None,
        )
        if fit is None:
            continue  # left to the built-in placement
        for name, amount in replica.requests.items():
            free[fit.name][name] = free[fit.name].get(name, 0.0) - amount
        chosen.append(pb.ReplicaNode(role=replica.role, index=replica.index, node=fit.name))
    lowest = [n for n in nodes if label_value(n, label) == label_value(nodes[0], label)] if nodes else []
    preferred = []
    if lowest and lowest[0].labels.get(label):
        requirement = pb.LabelRequirement(key=label, operator="In", values=[lowest[0].labels[label]])
        preferred.append(pb.PreferredTerm(weight=100, match_expressions=[requirement]))
    reason = f"lowest {label} first: {len(chosen)} of {len(context.replicas)} replicas placed"
    return pb.PlacementHint(replicas=chosen, preferred=preferred, reason=reason)


class CarbonPlugin(placement_pb2_grpc.PlacementSchedulerServicer):
    def __init__(self, label: str = LABEL) -> None:
        self.label = label

    async def SuggestPlacement(  # noqa: N802 - the gRPC method's name
        self, request: pb.WorkerContext, context: grpc.aio.ServicerContext[pb.WorkerContext, pb.PlacementHint]
    ) -> pb.PlacementHint:
        hint = suggest(request, self.label)
        log.info("%s/%s: %s", request.trainer.namespace, request.trainer.name, hint.reason)
        return hint


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--listen", default="localhost:50051", help="host:port to serve on")
    parser.add_argument("--label", default=LABEL, help="the node label whose lowest value wins")
    parser.add_argument("--tls-dir", default="", help="mutual TLS: ca.crt, tls.crt, tls.key; empty: plaintext")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    server, port = await serve(CarbonPlugin(args.label), args.listen, args.tls_dir)
    log.info("serving PlacementScheduler on port %d (lowest %s first)", port, args.label)
    await server.wait_for_termination()


if __name__ == "__main__":
    asyncio.run(main())
