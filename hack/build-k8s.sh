#!/usr/bin/env bash
# Build kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kubectl, etcd and
# kwok, and SeaweedFS's weed (the S3 server of the checkpoint tests), from the Go module proxy at
# pinned versions, into a cache outside the repository. A warm cache makes this a no-op.
# Usage: hack/build-k8s.sh [--print-bin-dir | --print-s3-bin-dir]
set -euo pipefail
. "$(dirname "$0")/lib/common.sh"

if [[ "${1:-}" == "--print-bin-dir" ]]; then echo "$BIN_DIR"; exit 0; fi
if [[ "${1:-}" == "--print-s3-bin-dir" ]]; then echo "$S3_BIN_DIR"; exit 0; fi

[[ -f "$K8S_MODULE_DIR/go.mod" ]] ||
  die "no module builds Kubernetes $K8S_VERSION: make one with hack/k8s-versions/new.sh $K8S_VERSION"
if [[ "$K8S_VERSION" != "$K8S_DEFAULT_VERSION" ]]; then
  # Another version: its control plane and kubectl; etcd, kwok and the real node's kubelet are the
  # test bed's own, built first (by this script, for the default version).
  DEFAULT_BIN_DIR=$(TRAINER_OPERATOR_K8S_VERSION="" TRAINER_OPERATOR_BIN="" "$0" --print-bin-dir)
  TRAINER_OPERATOR_K8S_VERSION="" TRAINER_OPERATOR_BIN="" "$0"
fi

# One build at a time: a second caller (CI's background preparation, a test session) waits for it.
mkdir -p "$CACHE_ROOT"
exec 9>"$CACHE_ROOT/.build-k8s-$K8S_VERSION.lock"
flock -n 9 || { log "waiting for another build of these binaries to finish"; flock 9; }

build_weed() {
  # seaweedfs's go.mod has replace directives, so `go install pkg@version` is refused: build
  # from a copy of the module as the main module.
  [[ -x "$S3_BIN_DIR/weed" ]] && return 0
  command -v go >/dev/null || die "go is not installed; install Go >= 1.26 and run again"
  local t0 dir work
  t0=$(date +%s)
  log "building SeaweedFS weed $SEAWEEDFS_VERSION into $S3_BIN_DIR (about 10 minutes the first time)"
  work=$(mktemp -d)
  dir=$(cd "$work" && GOFLAGS=-mod=mod GOTOOLCHAIN=local go mod download -json "github.com/seaweedfs/seaweedfs@$SEAWEEDFS_VERSION" |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')
  cp -r "$dir/." "$work/"
  chmod -R u+w "$work"
  mkdir -p "$S3_BIN_DIR"
  (cd "$work" && GOTOOLCHAIN=local CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$S3_BIN_DIR/weed.tmp" ./weed)
  mv "$S3_BIN_DIR/weed.tmp" "$S3_BIN_DIR/weed"
  rm -rf "$work"
  log "built weed in $(( $(date +%s) - t0 ))s"
}
[[ "$K8S_VERSION" == "$K8S_DEFAULT_VERSION" ]] && build_weed  # another version's build made it first

K8S_BINS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)
if [[ "$K8S_VERSION" != "$K8S_DEFAULT_VERSION" ]]; then
  K8S_BINS=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
  mkdir -p "$BIN_DIR"
  for b in etcd kwok; do ln -sfn "$DEFAULT_BIN_DIR/$b" "$BIN_DIR/$b"; done
fi
ALL_BINS=("${K8S_BINS[@]}" etcd kwok)

missing=()
for b in "${ALL_BINS[@]}"; do [[ -x "$BIN_DIR/$b" ]] || missing+=("$b"); done
if [[ ${#missing[@]} -eq 0 ]]; then
  log "binaries up to date in $BIN_DIR"
  exit 0
fi

command -v go >/dev/null || die "go is not installed; install Go >= 1.26 (Debian: golang-go from bookworm-backports, or the Go toolchain) and run again"
export GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=0
mkdir -p "$BIN_DIR.tmp"
start=$(date +%s)
log "building ${missing[*]} into $BIN_DIR (first build takes 20-40 minutes on 2 cores; later runs reuse the cache)"

ldflags="-s -w"
minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
  ldflags+=" -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
done

cd "$K8S_MODULE_DIR"
log "downloading modules (go mod download)"
go mod download
for b in "${missing[@]}"; do
  t0=$(date +%s)
  case "$b" in
    etcd) log "building etcd $ETCD_VERSION"
          go build -trimpath -ldflags "-s -w" -o "$BIN_DIR.tmp/etcd" go.etcd.io/etcd/server/v3 ;;
    kwok) log "building kwok $KWOK_VERSION"
          # kwok's go.mod has no replace directives, so a plain install works.
          GOBIN="$BIN_DIR.tmp" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" ;;
    *)    log "building $b $K8S_VERSION"
          go build -trimpath -ldflags "$ldflags" -o "$BIN_DIR.tmp/$b" "k8s.io/kubernetes/cmd/$b" ;;
  esac
  log "built $b in $(( $(date +%s) - t0 ))s"
done
mkdir -p "$BIN_DIR"
for b in "${missing[@]}"; do mv "$BIN_DIR.tmp/$b" "$BIN_DIR/$b"; done
rmdir "$BIN_DIR.tmp" 2>/dev/null || true
log "all binaries built in $(( $(date +%s) - start ))s: $BIN_DIR"
