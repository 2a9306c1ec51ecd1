"""Controller configuration from flags, with TRAINEROP_* environment variables as defaults.

Flags are declared as the fields of frozen dataclasses (:func:`flag`): :class:`ControllerConfig`
for what every controller's runtime reads, :class:`WebhookConfig` for the controllers that serve
admission webhooks, and one dataclass per controller for its own flags (e.g.
``trainerop_trainer.config.TrainerConfig``). :func:`parse_args` builds the command line from them;
every flag is documented in docs/controllers.md, and a Kustomize component sets the environment of
its Deployment.
"""

import argparse
import dataclasses
import os
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

from .names import OPERATOR_NAMESPACE

T = TypeVar("T")
ENV_PREFIX = "TRAINEROP_"
WEBHOOK_TLS = ("files", "self-signed")


def flag(default: Any, help: str, *, choices: Sequence[str] = (), name: str = "", **extra: Any) -> Any:
    """A dataclass field that is a command-line flag: ``--<name>`` (default: the field's name with
    dashes), defaulting to ``$TRAINEROP_<FIELD>``, else to ``default``. ``extra``: ``repeatable``
    (the flag may be given several times), ``env_default`` (a function of the environment giving the
    default, for flags set by several variables), ``parse`` (how a string value becomes the field's,
    from a flag or the environment)."""
    return field(default=default, metadata={"help": help, "choices": tuple(choices), "name": name, **extra})


def csv(value: str) -> tuple[str, ...]:
    """``a, b,a`` -> ("a", "b"): sorted, without blanks or repeats."""
    return tuple(sorted({v.strip() for v in value.split(",") if v.strip()}))


def ordered_csv(value: str) -> tuple[str, ...]:
    """``b, a,b`` -> ("b", "a"): in the order given, without blanks or repeats."""
    return tuple(dict.fromkeys(v.strip() for v in value.split(",") if v.strip()))


@dataclass(frozen=True)
class WebhookConfig:
    """The admission webhooks of the controllers that serve them (docs/admission.md)."""

    webhook_address: str = flag("0.0.0.0", "address the admission webhooks (HTTPS) listen on")
    webhook_port: int = flag(0, "port of the admission webhooks (0: not served)")
    webhook_cert_file: str = flag(
        "/etc/trainer-operator/webhook/tls.crt", "the webhooks' serving certificate (PEM); re-read when it changes"
    )
    webhook_key_file: str = flag("/etc/trainer-operator/webhook/tls.key", "the webhooks' private key (PEM)")
    webhook_tls: str = flag(
        "files",
        "files: the certificate files are provided (cert-manager's Secret); self-signed: issue them from this "
        "controller's CA in Secret trainer-operator-<controller>-webhook-ca (made when the Secret is empty), write "
        "them to the files above and put the CA into this controller's webhook configurations",
        choices=WEBHOOK_TLS,
    )
    webhook_client_ca_file: str = flag(
        "",
        "CA of the client certificate the API server presents to webhooks (its AdmissionConfiguration's "
        "kubeConfigFile): a review whose caller holds none of it has no side effect (the audit webhook records "
        "nothing from it); empty: the audit webhook records a review only once the API bears it out (docs/audit.md)",
    )
    webhook_service: str = flag(
        "", "the webhooks' Service, named in self-signed certificates (default: trainer-operator-<controller>-webhook)"
    )
    operator_namespace: str = flag(
        OPERATOR_NAMESPACE, "the namespace the operator runs in (its Service, the CA Secret)"
    )


@dataclass(frozen=True)
class ControllerConfig:
    """What the runtime of every controller reads."""

    controller: str
    pod_name: str = ""  # $POD_NAME (the Downward API), else the host name: kopf's peering identity
    namespaces: tuple[str, ...] = flag(
        (),
        "namespace to watch (repeatable); default: all (env TRAINEROP_NAMESPACES, comma-separated)",
        name="namespace",
        repeatable=True,
    )
    metrics_address: str = flag("0.0.0.0", "address of /metrics, /healthz and /readyz")
    metrics_port: int = flag(8080, "port of /metrics, /healthz and /readyz (0 picks a free port)")
    metrics_cert_file: str = flag(
        "",
        "serve /metrics, /healthz and /readyz over TLS with this certificate (PEM; re-read when it changes); "
        "empty: plain HTTP",
    )
    metrics_key_file: str = flag("", "the private key (PEM) of --metrics-cert-file")
    metrics_client_ca_file: str = flag(
        "",
        "with TLS: /metrics answers only a client presenting a certificate of this CA (Prometheus's); "
        "/healthz and /readyz stay open to the kubelet's probes",
    )
    log_level: str = flag("INFO", "log level", choices=("DEBUG", "INFO", "WARNING", "ERROR"), parse=str.upper)
    qps: float = flag(100.0, "client-side API rate limit (requests a second)")
    burst: int = flag(200, "client-side API rate limit burst")
    workers: int = flag(64, "objects reconciled concurrently (0: no limit)")
    resync_seconds: float = flag(300.0, "every Trainer is reconciled at least this often")
    trim_memory_seconds: float = flag(
        10.0, "give the memory the C allocator holds free back to the system this often (glibc; 0: never)"
    )
    peering: bool = flag(False, "coordinate replicas with kopf peering so only one is active")
    peering_priority: int = flag(
        0, "the live replica with the highest priority works, the others pause (0: a random one at start)"
    )
    peering_lifetime: int = flag(60, "seconds without a heartbeat after which a replica is presumed dead")
    otlp_endpoint: str = flag(
        "",
        "export OpenTelemetry spans over OTLP/HTTP to this base URL (e.g. http://tempo:4318); empty: off unless "
        "OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set",
    )
    trace_sample_ratio: float = flag(1.0, "fraction of traces exported (0 to 1)")
    webhook: WebhookConfig = WebhookConfig()

    def problems(self) -> list[str]:
        out = []
        if not 0 <= self.trace_sample_ratio <= 1:
            out.append("--trace-sample-ratio must be between 0 and 1")
        if self.qps <= 0 or self.burst < 1 or self.workers < 0:
            out.append("--qps must be > 0, --burst at least 1, --workers at least 0 (0: no limit)")
        if bool(self.metrics_cert_file) != bool(self.metrics_key_file):
            out.append("--metrics-cert-file and --metrics-key-file go together (both for TLS, neither for HTTP)")
        if self.metrics_client_ca_file and not self.metrics_cert_file:
            out.append("--metrics-client-ca-file needs --metrics-cert-file and --metrics-key-file (TLS)")
        return out


def _flag_name(f: dataclasses.Field[Any]) -> str:
    return str(f.metadata.get("name") or f.name.replace("_", "-"))


def _convert(kind: Any, text: str, parse: Callable[[str], Any] | None = None) -> Any:
    if parse is not None:
        return parse(text)
    if kind is bool:
        return text.strip().lower() == "true"
    if kind == tuple[str, ...]:
        return csv(text)
    return kind(text)


def _add_flags(parser: argparse.ArgumentParser, cls: type[Any], environ: Mapping[str, str]) -> None:
    """One flag per field of ``cls`` declared with :func:`flag`, its default from the environment."""
    hints = typing.get_type_hints(cls)
    for f in fields(cls):
        if "help" not in f.metadata:
            continue
        kind, variable = hints[f.name], ENV_PREFIX + f.name.upper()
        env_default: Callable[[Mapping[str, str]], str] | None = f.metadata.get("env_default")
        text = env_default(environ) if env_default else environ.get(variable)
        parse = f.metadata.get("parse")
        default = f.default if text is None else _convert(kind, text, parse)
        options: dict[str, Any] = {"default": default, "help": f.metadata["help"], "dest": f.name}
        if kind is bool:
            options["action"] = argparse.BooleanOptionalAction
        elif f.metadata.get("repeatable"):
            options |= {"action": "append", "default": None}
        else:
            options["type"] = (
                (lambda t, k=kind, p=parse: _convert(k, t, p)) if parse or kind == tuple[str, ...] else kind
            )
        if f.metadata["choices"]:
            options["choices"] = list(f.metadata["choices"])
        parser.add_argument(f"--{_flag_name(f)}", **options)


def _build(cls: type[T], parsed: argparse.Namespace, environ: Mapping[str, str], **fixed: Any) -> T:
    values = {f.name: getattr(parsed, f.name) for f in fields(cls) if "help" in f.metadata}  # type: ignore[arg-type]
    for f in fields(cls):  # type: ignore[arg-type]
        if f.metadata.get("repeatable"):
            values[f.name] = tuple(values[f.name] or csv(environ.get(ENV_PREFIX + f.name.upper(), "")))
    return cls(**values, **fixed)


def _choice_problems(config: Any) -> list[str]:
    """argparse judges choices= on flags only; values from the environment are judged here."""
    out = []
    for f in fields(config):
        allowed = f.metadata.get("choices")
        if allowed and getattr(config, f.name) not in allowed:
            value = getattr(config, f.name)
            out.append(f"--{_flag_name(f)} must be one of {', '.join(allowed)} (got {value!r})")
    return out


def parse_args(
    controller: str,
    own: type[T],
    argv: Sequence[str] | None = None,
    webhooks: bool = False,
    environ: Mapping[str, str] | None = None,
) -> tuple[ControllerConfig, T]:
    """The runtime's configuration and the controller's ``own`` flags (a dataclass of :func:`flag`
    fields, which may have a ``problems()`` method); ``webhooks``: the controller serves some."""
    env = os.environ if environ is None else environ
    parser = argparse.ArgumentParser(
        prog=f"trainerop-{controller}", description=f"Trainer Operator {controller} controller"
    )
    groups: list[type[Any]] = [ControllerConfig, *([WebhookConfig] if webhooks else []), own]
    for cls in groups:
        _add_flags(parser, cls, env)
    parsed = parser.parse_args(argv)
    webhook = _build(WebhookConfig, parsed, env) if webhooks else WebhookConfig()
    pod_name = env.get("POD_NAME") or os.uname().nodename
    config = _build(ControllerConfig, parsed, env, controller=controller, pod_name=pod_name, webhook=webhook)
    mine = _build(own, parsed, env)
    problems = [*_choice_problems(config), *_choice_problems(webhook), *_choice_problems(mine), *config.problems()]
    problems += getattr(mine, "problems", list)()
    if problems:
        parser.error("; ".join(problems))
    return config, mine
