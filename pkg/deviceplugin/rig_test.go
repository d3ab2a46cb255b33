package deviceplugin_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/vgpu-project/vgpu/internal/simkernel"
	"github.com/vgpu-project/vgpu/pkg/client"
	"github.com/vgpu-project/vgpu/pkg/daemon"
	"github.com/vgpu-project/vgpu/pkg/ledger"
)

// patience bounds every wait for something that must happen: a liveness
// bound on a loaded machine, not a timing assertion (those are in
// BenchmarkCarveToListAndWatch).
const patience = 30 * time.Second

// fakeKubelet is the kubelet's side of the device-plugin API as the
// kubelet's device manager (k8s.io/kubernetes pkg/kubelet/cm/devicemanager,
// v1.34) drives it: a Registration server on kubelet.sock that, for each
// Register, dials the plugin's socket back, asks GetDevicePluginOptions and
// keeps a ListAndWatch stream; and a PodResources server listing what the
// test says live pods hold. e2e/kubelet runs the kubelet's own code.
type fakeKubelet struct {
	pluginapi.UnimplementedRegistrationServer
	podresv1.UnimplementedPodResourcesListerServer

	t       *testing.T
	dir     string // the device-plugin directory
	podSock string

	mu         sync.Mutex
	reg        *grpc.Server
	pr         *grpc.Server
	refuse     string              // Register answers this error when set
	registered map[string]int      // resource -> registrations
	gen        int                 // starts of the registration server
	regGen     map[string]int      // resource -> gen of its last registration
	endpoints  map[string]string   // resource -> socket name
	lists      map[string][]*pluginapi.Device
	streamEnds map[string]int      // resource -> ListAndWatch streams that ended
	clients    map[string]pluginapi.DevicePluginClient
	conns      []*grpc.ClientConn
	pods       []*podresv1.PodResources
	listErr    bool
	changed    chan struct{} // closed and replaced at each event
}

func newFakeKubelet(t *testing.T, dir, podSock string) *fakeKubelet {
	k := &fakeKubelet{t: t, dir: dir, podSock: podSock, registered: map[string]int{}, regGen: map[string]int{}, endpoints: map[string]string{},
		lists: map[string][]*pluginapi.Device{}, streamEnds: map[string]int{}, clients: map[string]pluginapi.DevicePluginClient{},
		changed: make(chan struct{})}
	t.Cleanup(k.stop)
	return k
}

// start serves kubelet.sock (and PodResources), as the kubelet does when it
// starts: first it removes every socket in the directory.
func (k *fakeKubelet) start() {
	k.t.Helper()
	if err := os.MkdirAll(k.dir, 0o750); err != nil {
		k.t.Fatal(err)
	}
	ents, _ := os.ReadDir(k.dir)
	for _, e := range ents {
		if fi, err := os.Stat(filepath.Join(k.dir, e.Name())); err == nil && fi.Mode()&os.ModeSocket != 0 {
			_ = os.Remove(filepath.Join(k.dir, e.Name()))
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.pr == nil {
		_ = os.Remove(k.podSock)
		ln, err := net.Listen("unix", k.podSock)
		if err != nil {
			k.t.Fatal(err)
		}
		k.pr = grpc.NewServer()
		podresv1.RegisterPodResourcesListerServer(k.pr, k)
		go func() { _ = k.pr.Serve(ln) }()
	}
	ln, err := net.Listen("unix", filepath.Join(k.dir, "kubelet.sock"))
	if err != nil {
		k.t.Fatal(err)
	}
	k.reg = grpc.NewServer()
	k.gen++
	pluginapi.RegisterRegistrationServer(k.reg, k)
	go func() { _ = k.reg.Serve(ln) }()
}

// restart stops the registration server and its plugin connections and
// starts again, removing the plugins' sockets, as a restarted kubelet does.
func (k *fakeKubelet) restart() {
	k.t.Helper()
	k.stopReg()
	k.start()
}

func (k *fakeKubelet) stopReg() {
	k.mu.Lock()
	reg, conns := k.reg, k.conns
	k.reg, k.conns = nil, nil
	k.clients = map[string]pluginapi.DevicePluginClient{}
	k.mu.Unlock()
	if reg != nil {
		reg.Stop()
	}
	for _, c := range conns {
		_ = c.Close()
	}
}

func (k *fakeKubelet) stop() {
	k.stopReg()
	k.mu.Lock()
	pr := k.pr
	k.pr = nil
	k.mu.Unlock()
	if pr != nil {
		pr.Stop()
	}
}

func (k *fakeKubelet) notify() {
	close(k.changed)
	k.changed = make(chan struct{})
}

// Register is the kubelet's: it connects to the plugin before answering.
func (k *fakeKubelet) Register(ctx context.Context, r *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	k.mu.Lock()
	refuse, gen := k.refuse, k.gen
	k.mu.Unlock()
	if refuse != "" {
		return nil, fmt.Errorf("%s", refuse)
	}
	if r.Version != pluginapi.Version {
		return nil, fmt.Errorf("version %s not supported", r.Version)
	}
	conn, err := grpc.NewClient("unix://"+filepath.Join(k.dir, r.Endpoint), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	c := pluginapi.NewDevicePluginClient(conn)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	opts, err := c.GetDevicePluginOptions(cctx, &pluginapi.Empty{})
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("connect to %s: %w", r.Endpoint, err)
	}
	if !opts.GetPreferredAllocationAvailable {
		k.t.Errorf("%s: GetPreferredAllocationAvailable is off", r.ResourceName)
	}
	stream, err := c.ListAndWatch(context.Background(), &pluginapi.Empty{})
	if err != nil {
		conn.Close()
		return nil, err
	}
	k.mu.Lock()
	k.registered[r.ResourceName]++
	k.regGen[r.ResourceName] = gen
	k.endpoints[r.ResourceName] = r.Endpoint
	k.clients[r.ResourceName] = c
	k.conns = append(k.conns, conn)
	k.notify()
	k.mu.Unlock()
	go func() {
		for {
			resp, err := stream.Recv()
			k.mu.Lock()
			if err != nil {
				k.streamEnds[r.ResourceName]++
				k.notify()
				k.mu.Unlock()
				return
			}
			k.lists[r.ResourceName] = resp.Devices
			k.notify()
			k.mu.Unlock()
		}
	}()
	return &pluginapi.Empty{}, nil
}

// List is the kubelet's PodResources List: the pods the test put there.
func (k *fakeKubelet) List(context.Context, *podresv1.ListPodResourcesRequest) (*podresv1.ListPodResourcesResponse, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.listErr {
		return nil, fmt.Errorf("the kubelet is busy")
	}
	return &podresv1.ListPodResourcesResponse{PodResources: slices.Clone(k.pods)}, nil
}

// setPod makes PodResources list a pod holding ids under resource; none:
// the pod is gone.
func (k *fakeKubelet) setPod(ns, name, container, resource string, ids ...string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.pods = slices.DeleteFunc(k.pods, func(p *podresv1.PodResources) bool { return p.Namespace == ns && p.Name == name })
	if len(ids) == 0 {
		return
	}
	k.pods = append(k.pods, &podresv1.PodResources{Namespace: ns, Name: name, Containers: []*podresv1.ContainerResources{{
		Name: container, Devices: []*podresv1.ContainerDevices{{ResourceName: resource, DeviceIds: ids}}}}})
}

// registeredSinceStart reports whether each resource registered with the
// current registration server.
func (k *fakeKubelet) registeredSinceStart(resources ...string) bool {
	for _, r := range resources {
		if k.regGen[r] != k.gen {
			return false
		}
	}
	return true
}

// wait waits until cond holds, reading the kubelet's state under its lock.
func (k *fakeKubelet) wait(what string, cond func() bool) {
	k.t.Helper()
	deadline := time.After(patience)
	for {
		k.mu.Lock()
		ok, ch := cond(), k.changed
		k.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			k.mu.Lock()
			defer k.mu.Unlock()
			k.t.Fatalf("%s: not within %s; registered %v, lists %s", what, patience, k.registered, k.describe())
		}
	}
}

func (k *fakeKubelet) describe() string {
	var b strings.Builder
	for _, r := range slices.Sorted(mapKeys(k.lists)) {
		fmt.Fprintf(&b, "\n  %s: %s", r, devString(k.lists[r]))
	}
	return b.String()
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// devString is "id(health,numa) ...".
func devString(ds []*pluginapi.Device) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		numa := "-"
		if d.Topology != nil && len(d.Topology.Nodes) > 0 {
			numa = fmt.Sprint(d.Topology.Nodes[0].ID)
		}
		parts[i] = fmt.Sprintf("%s(%s,%s)", d.ID, d.Health, numa)
	}
	return strings.Join(parts, " ")
}

// devices is the last list of resource, by id -> health.
func (k *fakeKubelet) devices(resource string) map[string]string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return healthOf(k.lists[resource])
}

func healthOf(ds []*pluginapi.Device) map[string]string {
	out := map[string]string{}
	for _, d := range ds {
		out[d.ID] = d.Health
	}
	return out
}

// waitList waits until resource's list satisfies cond (id -> health).
func (k *fakeKubelet) waitList(resource, what string, cond func(map[string]string) bool) {
	k.t.Helper()
	k.wait(resource+": "+what, func() bool { return cond(healthOf(k.lists[resource])) })
}

func (k *fakeKubelet) client(resource string) pluginapi.DevicePluginClient {
	k.t.Helper()
	k.mu.Lock()
	defer k.mu.Unlock()
	c, ok := k.clients[resource]
	if !ok {
		k.t.Fatalf("%s is not registered", resource)
	}
	return c
}

// allocate is the kubelet's Allocate for one container.
func (k *fakeKubelet) allocate(resource string, ids ...string) (*pluginapi.ContainerAllocateResponse, error) {
	k.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	resp, err := k.client(resource).Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}})
	if err != nil {
		return nil, err
	}
	if len(resp.ContainerResponses) != 1 {
		k.t.Fatalf("Allocate answered %d containers, want 1", len(resp.ContainerResponses))
	}
	return resp.ContainerResponses[0], nil
}

// node is vgpud in process on the fake kernel, serving the fake kubelet.
type node struct {
	t       *testing.T
	k       *simkernel.Kernel
	kube    *fakeKubelet
	dir     string
	cfgPath string
	gpus    string // the config's gpus section
	extra   string // more of the config (kubernetes keys)
	c       *client.Client
	log     *syncBuffer
	events  chan struct{}
	grace   time.Duration
	every   time.Duration

	d      *daemon.Daemon
	cancel context.CancelFunc
	done   chan error
}

const domain = "vgpu.example.org"

// newNode makes a node on examples/hosts/<hostFile> whose config has
// gpus (YAML of the gpus list) and the device plugin on; run starts it.
func newNode(t *testing.T, hostFile, gpus string) *node {
	t.Helper()
	k, err := simkernel.New(loadHost(t, hostFile))
	if err != nil {
		t.Fatal(err)
	}
	return newNodeOn(t, k, gpus)
}

func loadHost(t *testing.T, hostFile string) simkernel.Host {
	t.Helper()
	h, err := simkernel.LoadHost(filepath.Join("..", "..", "examples", "hosts", hostFile))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func newNodeOn(t *testing.T, k *simkernel.Kernel, gpus string) *node {
	t.Helper()
	dir, err := os.MkdirTemp("", "dp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	n := &node{t: t, k: k, dir: dir, cfgPath: filepath.Join(dir, "config.yaml"), gpus: gpus, log: &syncBuffer{},
		events: make(chan struct{}, 1), grace: time.Hour, every: 20 * time.Millisecond}
	n.kube = newFakeKubelet(t, filepath.Join(dir, "dp"), filepath.Join(dir, "podres.sock"))
	return n
}

func (n *node) config() string {
	return "version: v1\ngpus:\n" + n.gpus + "kubernetes:\n  device-plugin: true\n  resource-domain: " + domain +
		"\n  device-plugin-dir: " + n.kube.dir + "\n  pod-resources-socket: " + n.kube.podSock + "\n" + n.extra
}

func (n *node) run() {
	n.t.Helper()
	if err := daemon.WriteConfig(n.cfgPath, []byte(n.config())); err != nil {
		n.t.Fatal(err)
	}
	var w io.Writer = n.log
	if testing.Verbose() {
		w = io.MultiWriter(n.log, os.Stderr)
	}
	socket := filepath.Join(n.dir, "vgpud.sock")
	d, err := daemon.New(daemon.Options{ConfigPath: n.cfgPath, FS: n.k, StateDir: filepath.Join(n.dir, "state"), SocketPath: socket,
		Logger: slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug})),
		LookupGroup: func(string) (int, error) { return os.Getgid(), nil },
		CollectGrace: n.grace, PodResourcesEvery: n.every, KernelEvents: n.events})
	if err != nil {
		n.t.Fatal(err)
	}
	n.d = d
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel, n.done = cancel, make(chan error, 1)
	go func() { n.done <- d.Run(ctx, nil) }()
	n.c = client.New(socket)
	deadline := time.Now().Add(patience)
	for !n.c.Available(context.Background(), time.Second) {
		select {
		case err := <-n.done:
			n.t.Fatalf("vgpud stopped before it served: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			n.t.Fatalf("vgpud did not answer within %s", patience)
		}
		time.Sleep(10 * time.Millisecond)
	}
	n.t.Cleanup(n.stop)
}

func (n *node) stop() {
	if n.cancel == nil {
		return
	}
	n.cancel()
	n.cancel = nil
	n.c.Close()
	select {
	case err := <-n.done:
		if err != nil {
			n.t.Errorf("vgpud stopped with %v", err)
		}
	case <-time.After(patience):
		n.t.Error("vgpud did not stop")
	}
}

func (n *node) restart() {
	n.t.Helper()
	n.stop()
	n.run()
}

// kernelChanged is the kernel's uevent after a change made behind vgpud's
// back, as pkg/uevent hears it on a real host.
func (n *node) kernelChanged() {
	select {
	case n.events <- struct{}{}:
	default:
	}
}

// allocations reads the ledger through vgpud's API.
func (n *node) allocations() []ledgerView {
	n.t.Helper()
	h, err := n.c.Allocations(context.Background())
	if err != nil {
		n.t.Fatal(err)
	}
	out := make([]ledgerView, len(h.Allocations))
	for i, a := range h.Allocations {
		out[i] = ledgerView{VGPU: a.VGPU, State: a.State, Domain: a.DomainName, Claim: a.DomainUUID}
		if a.Pod != nil {
			out[i].Pod = ledger.Pod{Resource: a.Pod.Resource, Namespace: a.Pod.Namespace, Name: a.Pod.Name, Container: a.Pod.Container}
		}
	}
	return out
}

type ledgerView struct {
	VGPU, State, Domain, Claim string
	Pod                        ledger.Pod
}

// waitLog waits until vgpud logged a line containing s.
func (n *node) waitLog(s string) {
	n.t.Helper()
	deadline := time.Now().Add(patience)
	for !strings.Contains(n.log.String(), s) {
		if time.Now().After(deadline) {
			n.t.Fatalf("vgpud did not log %q within %s; log:\n%s", s, patience, n.log.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// logLines counts vgpud's log lines containing each of parts.
func (n *node) logLines(parts ...string) int {
	c := 0
	for _, l := range strings.Split(n.log.String(), "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(l, p)
		}
		if all {
			c++
		}
	}
	return c
}

// logCount counts vgpud's log lines containing s.
func (n *node) logCount(s string) int { return strings.Count(n.log.String(), s) }

// syncBuffer is a log sink the test reads while vgpud writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
