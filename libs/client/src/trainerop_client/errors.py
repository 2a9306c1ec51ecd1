"""Failures said so that a person knows what to do: no cluster, no operator installed, no
permission, a refused spec (with the API server's own words), a Trainer that does not exist."""

from trainerop_sdk.names import GROUP

CRD_NAME = f"trainers.{GROUP}"

NO_RESOURCE = "the server could not find the requested resource"


class TrainerClientError(Exception):
    """What went wrong and what to do about it, in one message (the CLI prints it and exits 1)."""


def no_cluster(err: Exception) -> TrainerClientError:
    return TrainerClientError(
        f"no cluster to talk to ({err}): set KUBECONFIG or ~/.kube/config (kubectl config current-context "
        "shows which cluster kubectl uses), or run inside a pod with a ServiceAccount"
    )


def unreachable(server: str, err: Exception) -> TrainerClientError:
    return TrainerClientError(
        f"cannot reach the cluster at {server}: {err}; check that it is up and that kubectl get nodes works"
    )


def refused(code: int, reason: str, message: str, what: str, namespace: str) -> TrainerClientError:
    """The API server's refusal (its Status's code, reason and message) of ``what``, the request in
    words (``create Trainer llama``, ``list Trainers``)."""
    if code == 404 and message == NO_RESOURCE:
        return TrainerClientError(
            f"{what}: the cluster has no Trainer API (CustomResourceDefinition {CRD_NAME}): install the "
            "Trainer Operator first (kubectl apply -k deploy/overlays/<your overlay>, docs/deploy.md)"
        )
    if code == 404:
        return TrainerClientError(f"{what}: {message} in namespace {namespace} (kubectl get trainers -n {namespace})")
    if code == 403:
        return TrainerClientError(
            f"{what}: forbidden: {message}; ask your platform team for the edit role in namespace {namespace} "
            "(it includes the Trainer Operator's kinds)"
        )
    if code == 409 and reason == "AlreadyExists":
        return TrainerClientError(f"{what}: {message}; pick another name, or delete it first")
    if code in (400, 422):
        return TrainerClientError(f"{what}: the API server refused it: {message}")
    if "failed calling webhook" in message:
        return TrainerClientError(
            f"{what}: the Trainer Operator's admission webhook did not answer ({message}); is the operator "
            "running? (kubectl get pods -n trainer-operator-system)"
        )
    return TrainerClientError(f"{what}: the API server answered {code}: {message}")
