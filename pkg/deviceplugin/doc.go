// Package deviceplugin is vgpud's front door for the kubelet: it serves
// the host's vGPUs through the kubelet's device-plugin API (v1beta1), one
// endpoint per profile carved here (resource <domain>/<profile>, and
// NVIDIA's nvidia.com/<TYPE_NAME> where asked), from the same ledger as
// the libvirt hook, and frees the vGPUs of pods that are gone, which it
// learns from the kubelet's PodResources API. docs/kubevirt.md says how
// KubeVirt consumes them.
package deviceplugin
