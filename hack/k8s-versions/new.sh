#!/usr/bin/env bash
# Make the Go module that builds another Kubernetes version's control plane and kubectl (the
# oldest and the newest minor the operator supports, docs/local-cluster.md): hack/k8s-versions/<version>/
# requires k8s.io/kubernetes at <version>, replaces each staging module with its published tag
# (as hack/k8s-tools does for the test bed's own version), and go mod tidy writes go.sum.
# Usage: hack/k8s-versions/new.sh v1.30.14
set -euo pipefail
. "$(dirname "$0")/../lib/common.sh"
version=${1:?usage: hack/k8s-versions/new.sh vMAJOR.MINOR.PATCH}
dir="$HACK_DIR/k8s-versions/$version"
export GOTOOLCHAIN=local GOFLAGS=-mod=mod
mkdir -p "$dir"
log "reading k8s.io/kubernetes $version's staging modules"
source_dir=$(cd "$dir" && go mod download -json "k8s.io/kubernetes@$version" | python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')
staging_tag="v0.${version#v1.}"
{
  echo "// Builds Kubernetes $version's control plane and kubectl: hack/k8s-versions/new.sh wrote this;"
  echo "// hack/build-k8s.sh builds it (K8S_VERSION=$version)."
  echo "module example.invalid/trainer-operator/k8s-versions"
  echo
  echo "go 1.24.0"
  echo
  echo "require k8s.io/kubernetes $version"
  echo
  echo "replace ("
  grep -E '^\s*k8s.io/[a-z0-9-]+ => ./staging/' "$source_dir/go.mod" | awk -v tag="$staging_tag" '{print "\t" $1 " => " $1 " " tag}'
  echo ")"
} >"$dir/go.mod"
cat >"$dir/tools.go" <<'GO'
//go:build tools

// Package tools pins the main packages hack/build-k8s.sh builds for this version, so that
// `go mod tidy` keeps their dependencies in go.mod and go.sum.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
GO
log "go mod tidy (downloads the modules)"
(cd "$dir" && go mod tidy)
log "wrote $dir"
