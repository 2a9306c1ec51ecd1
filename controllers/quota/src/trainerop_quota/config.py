"""The quota controller's own flags (docs/controllers.md, docs/quota.md)."""

import re
from dataclasses import dataclass

from trainerop_common.config import flag, ordered_csv
from trainerop_common.nodes import NODE_LOST_SECONDS

UNGOVERNED_MODES = ("AllOrNothing", "AtOnce")
PLUGIN_CHOICES = ("Ask", "Skip")
# NVIDIA GPU feature discovery's NVLink multi-node domain, then the well-known zone label.
TOPOLOGY_LEVELS = ("nvidia.com/gpu.clique", "topology.kubernetes.io/zone")


@dataclass(frozen=True)
class QuotaConfig:
    node_lost_seconds: float = flag(
        NODE_LOST_SECONDS, "renegotiate a run on a node not Ready this long (a deleted node: at once)"
    )
    plan_rest: float = flag(
        3.0,
        "after a plan, wait this many times its duration before the next (events meanwhile coalesce): "
        "planning, which reads every Trainer and pod, takes at most 1/(1+this) of the time",
    )
    topology_levels: tuple[str, ...] = flag(
        TOPOLOGY_LEVELS,
        "node label keys of the interconnect's levels, finest first, comma-separated: a run's pods go into as "
        "few domains of them as hold the run (docs/quota.md#topology)",
        parse=ordered_csv,
    )
    ungoverned: str = flag(
        "AllOrNothing",
        "runs in namespaces no QuotaPolicy covers: AllOrNothing (admitted only when all of a run's pods have a "
        "node, pinned there, as a governed run) or AtOnce (admitted at once; the scheduler binds what fits)",
        choices=UNGOVERNED_MODES,
    )
    kueue: bool = flag(
        False,
        "Kueue admits the Trainers labelled kueue.x-k8s.io/queue-name, through a Workload each (Kueue v0.17 must "
        "run with the Trainer kind among its externalFrameworks; docs/quota.md#kueue)",
    )
    placement_plugin_address: str = flag(
        "",
        "host:port of a PlacementScheduler gRPC plugin (a sidecar: localhost:50051) asked where a run's replicas "
        "go before it is admitted; empty: none (docs/placement-plugins.md)",
    )
    placement_plugin_default: str = flag(
        "Ask",
        "whether the plugin is asked about runs whose profile does not say (its placementPlugin): Ask or Skip",
        choices=PLUGIN_CHOICES,
    )
    placement_plugin_timeout: float = flag(
        1.0, "seconds the plugin has to answer; then the built-in placement is used and an Event says so"
    )
    placement_plugin_tls_dir: str = flag(
        "", "mutual TLS with the plugin: a directory with ca.crt, tls.crt and tls.key; empty: plaintext"
    )
    enable_proactive_scheduling: bool = flag(
        False,
        "proactive mode (experimental): read each node's GPU and memory metrics every --proactive-interval-seconds, "
        "taint a node predicted to degrade so its runs save a checkpoint and move first (docs/quota.md#proactive-mode)",
    )
    proactive_interval_seconds: float = flag(30.0, "how often proactive mode reads the nodes' exporters")
    proactive_exporter_urls: tuple[str, ...] = flag(
        ("http://{address}:9400/metrics", "http://{address}:9100/metrics"),
        "the exporters proactive mode reads for each node, comma-separated URL templates ({address}: the node's "
        "InternalIP, {node}: its name); default the DCGM exporter's and the node exporter's ports",
        parse=ordered_csv,
    )
    proactive_prometheus_url: str = flag(
        "",
        "a Prometheus server whose query API proactive mode reads instead of each node's exporters (e.g. "
        "http://prometheus-k8s.monitoring.svc:9090); empty: the exporters of --proactive-exporter-urls",
    )
    proactive_prometheus_node_label: str = flag(
        "node", "the label that names the node in that server's series of the exporters' metrics"
    )
    proactive_node_labels: tuple[str, ...] = flag(
        (),
        "label=value pairs, comma-separated, that the nodes proactive mode watches carry (empty: every node)",
        parse=ordered_csv,
    )

    def problems(self) -> list[str]:
        out = []
        if self.proactive_interval_seconds <= 0:
            out.append("--proactive-interval-seconds must be more than 0")
        url = self.proactive_prometheus_url
        if url and not url.startswith(("http://", "https://")):
            out.append("--proactive-prometheus-url must be an http:// or https:// URL")
        if not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", self.proactive_prometheus_node_label):
            out.append("--proactive-prometheus-node-label must be a Prometheus label name (letters, digits, _)")
        if any("=" not in pair for pair in self.proactive_node_labels):
            out.append("--proactive-node-labels takes label=value pairs, comma-separated")
        return out
