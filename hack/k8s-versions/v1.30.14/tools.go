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
