// Package dmharness runs the kubelet's own device manager
// (k8s.io/kubernetes/pkg/kubelet/cm/devicemanager, v1.34) in the test
// process, with the kubelet's own PodResources v1 server beside it, on a
// private directory laid out as /var/lib/kubelet is:
//
//	<Root>/device-plugins/kubelet.sock      the registration socket; plugins put theirs here
//	<Root>/device-plugins/kubelet_internal_checkpoint
//	<Root>/pod-resources/kubelet.sock       the PodResources API
//
// A test plays the rest of the kubelet: it admits pods (Admit calls the
// manager's Allocate for each container, as the kubelet's admission does,
// and GetDeviceRunContainerOptions, as the runtime manager does before it
// creates a container), deletes them (they leave the active pods, and the
// next allocation or PodResources List frees their devices, as in the
// kubelet), and restarts the kubelet (Restart: a new manager on the same
// directory reads the checkpoint, and the pods still running are admitted
// again before the sources are ready, as after a real kubelet restart).
//
// Nothing here needs root or a fixed path, so harnesses run side by side.
package dmharness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"
	_ "unsafe" // go:linkname, for the constructor that takes a socket path

	cadvisorapi "github.com/google/cadvisor/info/v1"
	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/kubernetes/pkg/kubelet/apis/podresources"
	"k8s.io/kubernetes/pkg/kubelet/cm/containermap"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
)

// newManagerImpl is the device manager's constructor with the
// registration socket as an argument: NewManagerImpl passes it
// /var/lib/kubelet/device-plugins/kubelet.sock, and the package's own
// tests (manager_test.go) call this one with a temp socket, as we do.
//
//go:linkname newManagerImpl k8s.io/kubernetes/pkg/kubelet/cm/devicemanager.newManagerImpl
func newManagerImpl(socketPath string, topology []cadvisorapi.Node, topologyAffinityStore topologymanager.Store) (*devicemanager.ManagerImpl, error)

// Harness is one kubelet's device manager and PodResources server.
type Harness struct {
	// Root is the kubelet's root directory (see the package comment).
	Root string

	t testing.TB

	mu     sync.Mutex
	pods   map[types.UID]*v1.Pod // admitted and not deleted, in admission order by seq
	seq    map[types.UID]int
	next   int
	ready  bool // the config sources are ready (false while Restart re-admits)
	m      *devicemanager.ManagerImpl
	podres *grpc.Server
}

// Start starts a device manager and a PodResources server on a fresh
// directory. Cleanup stops them and fails the test if either cannot stop.
func Start(t testing.TB) *Harness {
	t.Helper()
	// Unix socket paths are limited to 107 bytes: t.TempDir's carry the
	// test's name, plugin sockets their resource's.
	root, err := os.MkdirTemp("", "dm-")
	if err != nil {
		t.Fatalf("dmharness: create the kubelet's root: %v", err)
	}
	h := &Harness{Root: root, t: t, pods: map[types.UID]*v1.Pod{}, seq: map[types.UID]int{}, ready: true}
	t.Cleanup(func() {
		h.stop()
		if err := os.RemoveAll(root); err != nil {
			t.Errorf("dmharness: remove %s: %v", root, err)
		}
	})
	if err := h.start(); err != nil {
		t.Fatal(err)
	}
	return h
}

// PluginDir is the device-plugin directory: the registration socket and
// the plugins' sockets.
func (h *Harness) PluginDir() string { return filepath.Join(h.Root, "device-plugins") }

// PodResourcesSocket is the PodResources API's socket.
func (h *Harness) PodResourcesSocket() string {
	return filepath.Join(h.Root, "pod-resources", "kubelet.sock")
}

// start creates a manager on the directory and starts it with the pods
// admitted so far as running containers, then serves PodResources.
func (h *Harness) start() error {
	m, err := newManagerImpl(filepath.Join(h.PluginDir(), "kubelet.sock"), nil, topologymanager.NewFakeManager())
	if err != nil {
		return fmt.Errorf("dmharness: create the device manager on %s: %w", h.PluginDir(), err)
	}
	containers := containermap.NewContainerMap()
	running := sets.New[string]()
	h.mu.Lock()
	for _, p := range h.pods {
		for _, c := range allContainers(p) {
			id := containerID(p, c.Name)
			containers.Add(string(p.UID), c.Name, id)
			running.Insert(id)
		}
	}
	h.m = m
	h.mu.Unlock()
	if err := m.Start(h.activePods, sources{h}, containers, running); err != nil {
		return fmt.Errorf("dmharness: start the device manager on %s: %w", h.PluginDir(), err)
	}
	return h.servePodResources(m)
}

// servePodResources serves the kubelet's PodResources v1 server over m,
// as the kubelet's server.ListenAndServePodResources does (which exits the
// process on error, and cannot be stopped).
func (h *Harness) servePodResources(m *devicemanager.ManagerImpl) error {
	sock := h.PodResourcesSocket()
	if err := os.MkdirAll(filepath.Dir(sock), 0o750); err != nil {
		return fmt.Errorf("dmharness: create %s: %w", filepath.Dir(sock), err)
	}
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("dmharness: remove the last PodResources socket %s: %w", sock, err)
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		return fmt.Errorf("dmharness: listen on %s: %w", sock, err)
	}
	g := grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(g, podresources.NewV1PodResourcesServer(context.Background(),
		podresources.PodResourcesProviders{Pods: podsProvider{h}, Devices: devicesProvider{m},
			Cpus: noCPUs{}, Memory: noMemory{}, DynamicResources: noDynamic{}}))
	go func() { _ = g.Serve(l) }()
	h.mu.Lock()
	h.podres = g
	h.mu.Unlock()
	return nil
}

func (h *Harness) stop() {
	h.mu.Lock()
	m, g := h.m, h.podres
	h.m, h.podres = nil, nil
	h.mu.Unlock()
	if g != nil {
		g.Stop()
	}
	if m != nil {
		if err := m.Stop(); err != nil {
			h.t.Errorf("dmharness: stop the device manager: %v", err)
		}
	}
}

// Manager is the running device manager, for what the helpers here do
// not cover.
func (h *Harness) Manager() *devicemanager.ManagerImpl {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.m
}

// Restart stops the device manager and the PodResources server, as a
// kubelet that exits does, and starts new ones on the same directory: the
// manager reads its checkpoint and removes the plugins' sockets (plugins
// must register again), and every pod still admitted is admitted again
// while the sources are not yet ready, as the kubelet re-admits the pods
// it finds running. It fails the test if a pod's admission fails.
func (h *Harness) Restart() {
	h.t.Helper()
	h.stop()
	h.mu.Lock()
	h.ready = false
	h.mu.Unlock()
	if err := h.start(); err != nil {
		h.t.Fatal(err)
	}
	for _, p := range h.Pods() {
		if err := h.allocate(p); err != nil {
			h.t.Fatalf("dmharness: admit pod %s again after the restart: %v", p.Name, err)
		}
	}
	h.mu.Lock()
	h.ready = true
	h.mu.Unlock()
}

// Pods returns the admitted pods not deleted, in admission order.
func (h *Harness) Pods() []*v1.Pod {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*v1.Pod, 0, len(h.pods))
	for _, p := range h.pods {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return h.seq[out[i].UID] < h.seq[out[j].UID] })
	return out
}

// NewPod returns a pod with one container, "ctr", whose limits (and so
// requests: extended resources cannot be overcommitted) ask for count of
// each resource.
func NewPod(name string, limits map[string]int64) *v1.Pod {
	rl := v1.ResourceList{}
	for r, n := range limits {
		rl[v1.ResourceName(r)] = *resource.NewQuantity(n, resource.DecimalSI)
	}
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "ctr", Image: "none",
			Resources: v1.ResourceRequirements{Limits: rl, Requests: rl}}}},
	}
}

// Admit admits pod as the kubelet does: the device manager allocates for
// each container (its Allocate, which calls the plugins' Allocate), then
// gives each container's run options (GetDeviceRunContainerOptions: the
// plugins' env, devices and mounts), which it returns by container name.
// A pod that fails is not admitted.
func (h *Harness) Admit(pod *v1.Pod) (map[string]*devicemanager.DeviceRunContainerOptions, error) {
	h.mu.Lock()
	if _, dup := h.pods[pod.UID]; dup {
		h.mu.Unlock()
		return nil, fmt.Errorf("dmharness: pod %s (%s) is already admitted", pod.Name, pod.UID)
	}
	// The kubelet counts the pod active from admission on: Allocate's
	// sweep must not free what it allocates for it.
	h.pods[pod.UID], h.seq[pod.UID] = pod, h.next
	h.next++
	h.mu.Unlock()
	err := h.allocate(pod)
	var opts map[string]*devicemanager.DeviceRunContainerOptions
	if err == nil {
		opts, err = h.runOptions(pod)
	}
	if err != nil {
		h.mu.Lock()
		delete(h.pods, pod.UID)
		delete(h.seq, pod.UID)
		h.mu.Unlock()
		return nil, err
	}
	return opts, nil
}

// allocate is the admission's part: the manager's Allocate for each
// container, init containers first.
func (h *Harness) allocate(pod *v1.Pod) error {
	m := h.Manager()
	for _, c := range allContainers(pod) {
		if err := m.Allocate(pod, &c); err != nil {
			return fmt.Errorf("dmharness: allocate for pod %s container %s: %w", pod.Name, c.Name, err)
		}
	}
	return nil
}

// runOptions is the runtime manager's part, before it creates each
// container; the kubelet does not ask again for a running container.
func (h *Harness) runOptions(pod *v1.Pod) (map[string]*devicemanager.DeviceRunContainerOptions, error) {
	m := h.Manager()
	out := map[string]*devicemanager.DeviceRunContainerOptions{}
	for _, c := range allContainers(pod) {
		o, err := m.GetDeviceRunContainerOptions(pod, &c)
		if err != nil {
			return nil, fmt.Errorf("dmharness: run options of pod %s container %s: %w", pod.Name, c.Name, err)
		}
		out[c.Name] = o
	}
	return out, nil
}

// Delete makes pod leave the active pods, as the kubelet does once its
// containers are gone; the manager frees its devices at its next sweep
// (an allocation, or a PodResources List).
func (h *Harness) Delete(pod *v1.Pod) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.pods, pod.UID)
	delete(h.seq, pod.UID)
}

// Devices returns the device IDs the manager holds for the pod's
// container, of resource, sorted.
func (h *Harness) Devices(pod *v1.Pod, container, resource string) []string {
	return sorted(h.Manager().GetDevices(string(pod.UID), container)[resource])
}

// Allocatable returns the healthy device IDs of resource the manager
// knows, sorted.
func (h *Harness) Allocatable(resource string) []string {
	return sorted(h.Manager().GetAllocatableDevices()[resource])
}

func sorted[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// WaitAllocatable waits until the manager offers exactly ids (sorted) as
// resource's healthy devices, and fails the test if it does not within
// timeout.
func (h *Harness) WaitAllocatable(resource string, ids []string, timeout time.Duration) {
	h.t.Helper()
	want := slices.Sorted(slices.Values(ids))
	deadline := time.Now().Add(timeout)
	for {
		got := h.Allocatable(resource)
		if slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("dmharness: %s's healthy devices are %v, not %v, after %v", resource, got, want, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (h *Harness) activePods() []*v1.Pod { return h.Pods() }

func allContainers(p *v1.Pod) []v1.Container {
	return append(slices.Clone(p.Spec.InitContainers), p.Spec.Containers...)
}

func containerID(p *v1.Pod, name string) string { return string(p.UID) + "/" + name }

// sources is the kubelet's config.SourcesReady: not ready while Restart
// admits the running pods again.
type sources struct{ h *Harness }

func (sources) AddSource(string) {}
func (s sources) AllReady() bool {
	s.h.mu.Lock()
	defer s.h.mu.Unlock()
	return s.h.ready
}

// podsProvider gives PodResources the admitted pods: active and known are
// the same here, as a deleted pod's containers are gone at once.
type podsProvider struct{ h *Harness }

func (p podsProvider) GetActivePods() []*v1.Pod { return p.h.Pods() }
func (p podsProvider) GetPods() []*v1.Pod       { return p.h.Pods() }
func (p podsProvider) GetPodByName(namespace, name string) (*v1.Pod, bool) {
	for _, pod := range p.h.Pods() {
		if pod.Namespace == namespace && pod.Name == name {
			return pod, true
		}
	}
	return nil, false
}

// devicesProvider is what the kubelet's container manager gives
// PodResources over its device manager (pkg/kubelet/cm/container_manager.go,
// containerDevicesFromResourceDeviceInstances, unexported: copied).
type devicesProvider struct{ m *devicemanager.ManagerImpl }

func (d devicesProvider) UpdateAllocatedDevices() { d.m.UpdateAllocatedDevices() }
func (d devicesProvider) GetDevices(podUID, container string) []*podresourcesv1.ContainerDevices {
	return containerDevices(d.m.GetDevices(podUID, container))
}
func (d devicesProvider) GetAllocatableDevices() []*podresourcesv1.ContainerDevices {
	return containerDevices(d.m.GetAllocatableDevices())
}

func containerDevices(devs devicemanager.ResourceDeviceInstances) []*podresourcesv1.ContainerDevices {
	var out []*podresourcesv1.ContainerDevices
	for name, byID := range devs {
		for id, dev := range byID {
			topo := dev.GetTopology()
			if topo == nil {
				out = append(out, &podresourcesv1.ContainerDevices{ResourceName: name, DeviceIds: []string{id}})
				continue
			}
			for _, n := range topo.GetNodes() {
				out = append(out, &podresourcesv1.ContainerDevices{ResourceName: name, DeviceIds: []string{id},
					Topology: &podresourcesv1.TopologyInfo{Nodes: []*podresourcesv1.NUMANode{{ID: n.GetID()}}}})
			}
		}
	}
	return out
}

// The harness has no CPU, memory or DRA managers: PodResources reports none.
type (
	noCPUs    struct{}
	noMemory  struct{}
	noDynamic struct{}
)

func (noCPUs) GetCPUs(string, string) []int64                               { return nil }
func (noCPUs) GetAllocatableCPUs() []int64                                  { return nil }
func (noMemory) GetMemory(string, string) []*podresourcesv1.ContainerMemory { return nil }
func (noMemory) GetAllocatableMemory() []*podresourcesv1.ContainerMemory    { return nil }
func (noDynamic) GetDynamicResources(*v1.Pod, *v1.Container) []*podresourcesv1.DynamicResource {
	return nil
}

// Env returns the container's environment from its run options.
func Env(o *devicemanager.DeviceRunContainerOptions) map[string]string {
	env := map[string]string{}
	if o == nil {
		return env
	}
	for _, e := range o.Envs {
		env[e.Name] = e.Value
	}
	return env
}
