//go:build tools

// Package tools names the commands hack/build-k8s.sh builds for the oldest supported
// Kubernetes: a control plane for the node simulator (no kubelet, no kube-proxy; the
// suite's kubectl is the current one's, within the version skew kubectl supports).
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
