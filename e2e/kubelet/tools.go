//go:build tools

// The kubelet binary kubeletrig builds comes from this module's
// requirements, so that go.sum pins it as it pins the rest.
package tools

import _ "k8s.io/kubernetes/cmd/kubelet"
