// Package kubelettest is the kubelet's side of the device-plugin API for
// the tests of vgpud's device plugin, as net/http/httptest is a server's
// client: a Registration server on kubelet.sock that, for each Register,
// dials the plugin's socket back, asks GetDevicePluginOptions and keeps
// its ListAndWatch stream, as the kubelet's device manager
// (k8s.io/kubernetes pkg/kubelet/cm/devicemanager, v1.34) does; and a
// PodResources server listing what the test says live pods hold. It is
// built on the kubelet's own API packages; e2e/kubelet runs the kubelet's
// own code and a real kubelet.
package kubelettest
