"""The local test bed: a Kubernetes cluster from upstream binaries (etcd, kube-apiserver,
kube-controller-manager, kube-scheduler, kwok's fake GPU nodes, SeaweedFS as S3), a real node
(containerd, runc, the kubelet, kube-proxy, CoreDNS), images built without a registry, and the
operator run locally (one process per controller) or deployed in the cluster.

Each module is a command (``python -m testbed.cluster up``, ``python -m testbed.node up``, ...) and
a library for the tests and benchmarks (``from testbed import cluster``). The build of the
binaries stays a script, ``hack/build-k8s.sh``; docs/local-cluster.md describes it all.
"""
