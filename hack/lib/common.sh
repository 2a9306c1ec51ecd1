# Shared settings for hack/ scripts. Source it; do not run it.
# shellcheck shell=bash

HACK_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
REPO_ROOT=$(cd "$HACK_DIR/.." && pwd)

# The test bed's Kubernetes (hack/k8s-tools). TRAINER_OPERATOR_K8S_VERSION names another one that
# has a module in hack/k8s-versions (the oldest and the newest supported minor, docs/local-cluster.md):
# its control plane and kubectl, with this etcd and kwok.
K8S_DEFAULT_VERSION=v1.34.4
K8S_VERSION=${TRAINER_OPERATOR_K8S_VERSION:-$K8S_DEFAULT_VERSION}
if [[ "$K8S_VERSION" == "$K8S_DEFAULT_VERSION" ]]; then
  K8S_MODULE_DIR=$HACK_DIR/k8s-tools
else
  K8S_MODULE_DIR=$HACK_DIR/k8s-versions/$K8S_VERSION
fi
ETCD_VERSION=v3.6.4
KWOK_VERSION=v0.7.0
# SeaweedFS: the S3-compatible server checkpoint tests write to (a pseudo-version: it has no tags
# on the module proxy).
SEAWEEDFS_VERSION=v0.0.0-20261109003541-7506e5f91cd6

# Binaries live outside the repository, keyed by what they were built from.
CACHE_ROOT=${TRAINER_OPERATOR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/trainer-operator}
k8s_cache_key() {
  local sum
  sum=$( (cat "$K8S_MODULE_DIR/go.sum" "$K8S_MODULE_DIR/go.mod"; echo "$KWOK_VERSION") | sha256sum | cut -c1-12)
  echo "k8s-$K8S_VERSION-etcd-$ETCD_VERSION-kwok-$KWOK_VERSION-$sum"
}
BIN_DIR=${TRAINER_OPERATOR_BIN:-$CACHE_ROOT/$(k8s_cache_key)/bin}
S3_BIN_DIR=${TRAINER_OPERATOR_S3_BIN:-$CACHE_ROOT/seaweedfs-$SEAWEEDFS_VERSION/bin}

# Where a local cluster keeps its state (certificates, etcd data, logs, pids).
RUN_DIR=${TRAINER_OPERATOR_RUN_DIR:-$CACHE_ROOT/cluster}

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }
