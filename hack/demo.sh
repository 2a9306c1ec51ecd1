#!/usr/bin/env bash
# The main job: a local cluster, the operator's CRDs and RBAC, the controllers, and the seed
# README's TrainingProfile and Trainer, with their status. With $KUBECONFIG naming a cluster of
# your own, hack/cluster_demo.py runs instead: the operator from its image (TRAINER_OPERATOR_IMAGE)
# and the seed Trainer sized for that cluster, nothing of the test bed assumed.
#
# The controllers first run here as local processes, each with its own ServiceAccount's token
# (testbed.localdev), for the kwok part; then, on the local cluster and as root, the real node
# comes up, the operator is deployed in the cluster from its image (testbed.deploy) and the JAX
# example trains on real containers (hack/train_demo.py). Stop everything with
#   .venv/bin/python -m testbed.node down && .venv/bin/python -m testbed.cluster down
#
# It sets itself up: before building anything it says what it will install and, as root, installs
# the Debian packages the real node needs (testbed/packages.py lists them) when they are missing.
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"
cd "$REPO_ROOT"

step() { printf '\n==> %s\n' "$*"; }

step "What this machine needs, installed before anything is built"
[[ -n "${KUBECONFIG:-}" ]] || command -v go >/dev/null ||
  die "Go >= 1.26 builds Kubernetes and SeaweedFS: install it (https://go.dev/dl/) and run again"
PY=${PYTHON:-python3}
"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
  || die "Python 3.11 or newer is needed (found $("$PY" --version 2>&1)); set PYTHON=/path/to/python3.11"
# Debian packages: the real node's (it runs on the local cluster, as root), and venv's for .venv.
NEEDED=()
if [[ -n "${KUBECONFIG:-}" ]]; then
  log "the cluster in KUBECONFIG is used: the real node part does not run"
elif [[ $(id -u) != 0 ]]; then
  log "not root: the real node part (a kubelet and containerd) does not run; run hack/demo.sh as root for it"
else
  missing=$("$PY" -m testbed.packages --missing)
  read -r -a NEEDED <<<"$missing"
fi
[[ -x .venv/bin/python ]] || "$PY" -c 'import ensurepip' 2>/dev/null || NEEDED+=(python3-venv)
if [[ ${#NEEDED[@]} -eq 0 ]]; then
  log "no Debian package to install"
elif [[ $(id -u) != 0 ]]; then
  die "$PY cannot create .venv without ensurepip: run \`apt-get install -y ${NEEDED[*]}\` as root, then this again"
else
  command -v apt-get >/dev/null || die "these Debian packages are missing and there is no apt-get: ${NEEDED[*]}"
  log "installing the missing Debian packages: ${NEEDED[*]}"
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${NEEDED[@]}"
fi

step "Python environment (.venv)"
hack/dev-env.sh

if [[ -n "${KUBECONFIG:-}" ]]; then
  # A cluster of your own: nothing of the test bed (hack/cluster_demo.py says what it needs).
  step "Using the cluster in KUBECONFIG=$KUBECONFIG"
  exec .venv/bin/python hack/cluster_demo.py
fi

step "Building Kubernetes $K8S_VERSION, etcd $ETCD_VERSION, kwok $KWOK_VERSION and SeaweedFS (cached after the first run)"
hack/build-k8s.sh
export PATH="$BIN_DIR:$PATH"

step "Local cluster: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok GPU nodes"
.venv/bin/python -m testbed.cluster up
export KUBECONFIG="$RUN_DIR/admin.kubeconfig"

step "Operator: CRDs, namespace, ServiceAccounts, RBAC; controllers as their ServiceAccounts"
.venv/bin/python -m testbed.localdev install
.venv/bin/python -m testbed.localdev start

step "The PVC the seed Trainer checkpoints to (checkpoint.bucket: pvc-backups), on a static local volume"
.venv/bin/python -m testbed.cluster checkpoint-volume --namespace default | kubectl apply -f -

step "Applying the seed README's TrainingProfile and Trainer (unmodified)"
kubectl apply -f examples/seed/trainingprofile.yaml -f examples/seed/trainer.yaml

step "Waiting for every controller to report on the Trainer"
# (no ProfileResolved: this Trainer names no profile, so the profile controller has nothing to say)
for condition in QuotaAdmitted CheckpointReady ImagesVerified; do
  kubectl wait --for=condition=$condition trainer/llama-7b-finetune --timeout=60s
done
kubectl wait --for=jsonpath='{.status.audit.recorded.created}'=true trainer/llama-7b-finetune --timeout=60s
kubectl wait --for=jsonpath='{.status.phase}'=Running trainer/llama-7b-finetune --timeout=120s

step "A Trainer that only names the profile (examples/profiles/trainer.yaml) and the profile's Secret"
kubectl create secret generic mistral-vault --from-literal=api-key=demo-only --dry-run=client -o yaml | kubectl apply -f -
kubectl apply -f examples/profiles/trainer.yaml
kubectl wait --for=condition=ProfileResolved trainer/llama-7b-profiled --timeout=60s
kubectl wait --for=jsonpath='{.status.phase}'=Running trainer/llama-7b-profiled --timeout=120s
echo "status.profile:"
kubectl get trainer llama-7b-profiled -o jsonpath='{.status.profile}' | python3 -m json.tool
echo "what the profile put into pod llama-7b-profiled-worker-0:"
kubectl get pod llama-7b-profiled-worker-0 -o json | python3 -c '
import json, sys
pod = json.load(sys.stdin)["spec"]
container = pod["containers"][0]
print("  nodeSelector:", pod.get("nodeSelector"))
print("  tolerations: ", [t for t in pod.get("tolerations", []) if t.get("key") == "usage"])
print("  env:         ", [e for e in container["env"] if e["name"] == "NCCL_IB_TIMEOUT"])
print("  mounts:      ", [m for m in container.get("volumeMounts", []) if m["name"] == "profile-runtime-secret"])'

step "Checkpoints on S3 (SeaweedFS): two training pods' shards, 3 copies each, verified and committed with a quorum"
.venv/bin/python hack/checkpoint_demo.py
kubectl get checkpoints -l trainer-name=llama-7b-s3
echo "status.checkpoint of trainer/llama-7b-s3 (RESUME_FROM for pods created from now on):"
kubectl get trainer llama-7b-s3 -o jsonpath='{.status.checkpoint.latest}{"  "}{.status.checkpoint.resumeFrom}{"\n"}'

step "Quota: a QuotaPolicy for namespaces labelled team=research (spot first, prices) and an elastic Trainer there"
.venv/bin/python -m testbed.cluster namespace research --label team=research | kubectl apply -f -
.venv/bin/python -m testbed.cluster checkpoint-volume --namespace research | kubectl apply -f -
kubectl apply -f examples/quota/policy.yaml
kubectl apply -n research -f examples/quota/trainer.yaml
kubectl wait -n research --for=condition=QuotaAdmitted trainer/spot-llm --timeout=60s
kubectl wait -n research --for=jsonpath='{.status.phase}'=Running trainer/spot-llm --timeout=120s
kubectl get quotapolicies
echo "status.quota of trainer/spot-llm (where it runs, how many workers, cost against all on-demand):"
kubectl get trainer -n research spot-llm -o jsonpath='{.status.quota}' | python3 -c '
import json, sys
q = json.load(sys.stdin)
print("  capacity:", q["capacityType"], " workers:", q["workers"], " admission:", q["contribution"]["grant"]["id"])
print("  cost per hour:", q["cost"]["perHour"], " all on-demand:", q["cost"]["onDemandPerHour"], " savings:", str(q["cost"]["savingsPercent"]) + "%")'
kubectl get pods -n research -l trainer-name=spot-llm -o wide

step "kubectl get pods -l trainer-name=llama-7b-finetune (the seed README's query; kwok GPU nodes run them)"
kubectl get pods -l trainer-name=llama-7b-finetune -o wide

step "kubectl get trainers,trainingprofiles -o wide"
kubectl get trainers,trainingprofiles -o wide
step "kubectl get auditlogs"
kubectl get auditlogs
step "Status of trainer/llama-7b-finetune (each section written by its own controller)"
kubectl get trainer llama-7b-finetune -o jsonpath='{.status}' | python3 -m json.tool
step "Controllers"
.venv/bin/python -m testbed.localdev status

if [[ $(id -u) != 0 ]]; then
  cat <<MSG

The real node (containerd, runc and the kubelet running real containers) needs root: run this
script as root (it installs the Debian packages the node needs) to train examples/jax/trainer.yaml
on it. Stop everything with
  .venv/bin/python -m testbed.cluster down
MSG
  exit 0
fi

step "The real node real-0: containerd, runc, CNI, the kubelet, kube-proxy, CoreDNS (testbed.node)"
.venv/bin/python -m testbed.node up

step "The operator in the cluster: its image from deploy/Dockerfile, deploy/overlays/dev (the local controllers stop)"
.venv/bin/python -m testbed.localdev stop
.venv/bin/python -m testbed.deploy up

step "Training examples/jax/trainer.yaml on real-0: JAX on CPU across 3 pods, a checkpoint per epoch; worker 1 is killed after epoch 4"
.venv/bin/python hack/train_demo.py

step "Kubeflow v1 jobs unchanged: upstream's PyTorchJob (Master + Worker, DDP over gloo) and TFJob (2 Workers, MultiWorkerMirroredStrategy) on real-0"
.venv/bin/python hack/kubeflow_demo.py

cat <<MSG

To look around:
  export KUBECONFIG=$KUBECONFIG PATH=$BIN_DIR:\$PATH
  kubectl get trainer-operator -A         # every object of the operator's category
  kubectl get trainers,checkpoints,pods -n jax-demo
  kubectl get pytorchjobs,tfjobs,trainers,pods -n kubeflow-demo
  kubectl logs -n jax-demo jax-spirals-worker-0
  kubectl get pods -n trainer-operator-system -o wide
Stop everything:  .venv/bin/python -m testbed.node down && .venv/bin/python -m testbed.cluster down
MSG
