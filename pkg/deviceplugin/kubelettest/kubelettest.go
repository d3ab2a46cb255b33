package kubelettest

import (
	"context"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// DefaultPatience bounds each Wait: a liveness bound on a loaded machine,
// not a timing assertion.
const DefaultPatience = 30 * time.Second

// Kubelet is a fake kubelet's device manager and PodResources.
type Kubelet struct {
	pluginapi.UnimplementedRegistrationServer
	podresv1.UnimplementedPodResourcesListerServer

	// Patience bounds Wait (DefaultPatience when 0).
	Patience time.Duration

	t       testing.TB
	dir     string
	podSock string

	mu       sync.Mutex
	reg      *grpc.Server
	pr       *grpc.Server
	gen      int    // starts of the registration server
	refuse   string // Register answers this error when set
	listErr  bool
	state    State
	clients  map[string]pluginapi.DevicePluginClient
	conns    []*grpc.ClientConn
	pods     []*podresv1.PodResources
	changed  chan struct{} // closed and replaced at each event
	regGen   map[string]int
	stopping bool
}

// State is what the kubelet has seen, for Wait's conditions.
type State struct {
	// Registered counts each resource's registrations; Current says
	// whether it registered with the registration server running now.
	Registered map[string]int
	Current    map[string]bool
	// Endpoints is each resource's socket name in the directory.
	Endpoints map[string]string
	// Lists is each resource's last device list.
	Lists map[string][]*pluginapi.Device
	// StreamEnds counts each resource's ListAndWatch streams that ended.
	StreamEnds map[string]int
}

// New returns a kubelet whose device-plugin directory is dir and whose
// PodResources socket is podSock; Start starts it. The test's Cleanup
// stops it.
func New(t testing.TB, dir, podSock string) *Kubelet {
	k := &Kubelet{t: t, dir: dir, podSock: podSock, clients: map[string]pluginapi.DevicePluginClient{}, regGen: map[string]int{},
		changed: make(chan struct{}), state: State{Registered: map[string]int{}, Endpoints: map[string]string{},
			Lists: map[string][]*pluginapi.Device{}, StreamEnds: map[string]int{}}}
	t.Cleanup(k.Stop)
	return k
}

// Dir is the device-plugin directory; PodSocket the PodResources socket.
func (k *Kubelet) Dir() string       { return k.dir }
func (k *Kubelet) PodSocket() string { return k.podSock }

// Start serves kubelet.sock (and PodResources) as the kubelet does when it
// starts: it first removes every socket in the directory.
func (k *Kubelet) Start() {
	k.t.Helper()
	k.StartBound()()
}

// StartBound starts as Start does but leaves kubelet.sock bound and not
// yet listening, as the kubelet's net.Listen has it between bind() (which
// creates the file) and listen(): connects are refused until the returned
// listen is called.
func (k *Kubelet) StartBound() (listen func()) {
	k.t.Helper()
	if err := os.MkdirAll(k.dir, 0o750); err != nil {
		k.t.Fatal(err)
	}
	ents, _ := os.ReadDir(k.dir)
	for _, e := range ents {
		p := filepath.Join(k.dir, e.Name())
		if fi, err := os.Stat(p); err == nil && fi.Mode()&os.ModeSocket != 0 {
			_ = os.Remove(p)
		}
	}
	k.mu.Lock()
	k.stopping = false
	k.gen++ // what registered before is not current from here on
	if k.pr == nil {
		_ = os.Remove(k.podSock)
		ln, err := net.Listen("unix", k.podSock)
		if err != nil {
			k.mu.Unlock()
			k.t.Fatal(err)
		}
		// The goroutine serves its own server: Stop clears k.pr under
		// the lock while it may still be starting.
		pr := grpc.NewServer()
		podresv1.RegisterPodResourcesListerServer(pr, k)
		k.pr = pr
		go func() { _ = pr.Serve(ln) }()
	}
	k.mu.Unlock()
	sock := filepath.Join(k.dir, "kubelet.sock")
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		k.t.Fatalf("socket for %s: %v", sock, err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: sock}); err != nil {
		unix.Close(fd)
		k.t.Fatalf("bind %s: %v", sock, err)
	}
	return func() {
		k.t.Helper()
		f := os.NewFile(uintptr(fd), sock)
		defer f.Close()
		if err := unix.Listen(fd, unix.SOMAXCONN); err != nil {
			k.t.Fatalf("listen %s: %v", sock, err)
		}
		ln, err := net.FileListener(f)
		if err != nil {
			k.t.Fatalf("listener on %s: %v", sock, err)
		}
		k.mu.Lock()
		defer k.mu.Unlock()
		reg := grpc.NewServer()
		pluginapi.RegisterRegistrationServer(reg, k)
		k.reg = reg
		go func() { _ = reg.Serve(ln) }()
	}
}

// RestartBound restarts as Restart does, leaving kubelet.sock bound and
// not yet listening until the returned listen is called (StartBound).
func (k *Kubelet) RestartBound() (listen func()) {
	k.t.Helper()
	k.stopReg()
	return k.StartBound()
}

// Restart stops the registration server and the plugins' connections and
// starts again, removing the plugins' sockets, as a restarted kubelet does.
func (k *Kubelet) Restart() {
	k.t.Helper()
	k.stopReg()
	k.Start()
}

func (k *Kubelet) stopReg() {
	k.mu.Lock()
	reg, conns := k.reg, k.conns
	k.reg, k.conns = nil, nil
	k.clients = map[string]pluginapi.DevicePluginClient{}
	k.stopping = true
	k.mu.Unlock()
	if reg != nil {
		reg.Stop()
	}
	for _, c := range conns {
		_ = c.Close()
	}
}

// Stop stops everything.
func (k *Kubelet) Stop() {
	k.stopReg()
	k.mu.Lock()
	pr := k.pr
	k.pr = nil
	k.mu.Unlock()
	if pr != nil {
		pr.Stop()
	}
}

// Refuse makes Register answer msg as an error ("" accepts again).
func (k *Kubelet) Refuse(msg string) {
	k.mu.Lock()
	k.refuse = msg
	k.mu.Unlock()
}

// FailList makes PodResources' List fail (or answer again).
func (k *Kubelet) FailList(fail bool) {
	k.mu.Lock()
	k.listErr = fail
	k.mu.Unlock()
}

func (k *Kubelet) notify() {
	close(k.changed)
	k.changed = make(chan struct{})
}

// Register is the kubelet's: it connects to the plugin before answering.
func (k *Kubelet) Register(ctx context.Context, r *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
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
	if k.stopping || k.gen != gen { // stopped meanwhile: as a kubelet gone, it never answers
		k.mu.Unlock()
		conn.Close()
		return nil, fmt.Errorf("kubelet stopping")
	}
	k.state.Registered[r.ResourceName]++
	k.regGen[r.ResourceName] = gen
	k.state.Endpoints[r.ResourceName] = r.Endpoint
	k.clients[r.ResourceName] = c
	k.conns = append(k.conns, conn)
	k.notify()
	k.mu.Unlock()
	go func() {
		for {
			resp, err := stream.Recv()
			k.mu.Lock()
			if err != nil {
				k.state.StreamEnds[r.ResourceName]++
				k.notify()
				k.mu.Unlock()
				return
			}
			k.state.Lists[r.ResourceName] = resp.Devices
			k.notify()
			k.mu.Unlock()
		}
	}()
	return &pluginapi.Empty{}, nil
}

// List is the kubelet's PodResources List: the pods SetPod put there.
func (k *Kubelet) List(context.Context, *podresv1.ListPodResourcesRequest) (*podresv1.ListPodResourcesResponse, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.listErr {
		return nil, fmt.Errorf("the kubelet is busy")
	}
	return &podresv1.ListPodResourcesResponse{PodResources: slices.Clone(k.pods)}, nil
}

// SetPod makes PodResources list pod ns/name's container holding ids under
// resource; no ids: the pod is gone.
func (k *Kubelet) SetPod(ns, name, container, resource string, ids ...string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.pods = slices.DeleteFunc(k.pods, func(p *podresv1.PodResources) bool { return p.Namespace == ns && p.Name == name })
	if len(ids) == 0 {
		return
	}
	k.pods = append(k.pods, &podresv1.PodResources{Namespace: ns, Name: name, Containers: []*podresv1.ContainerResources{{
		Name: container, Devices: []*podresv1.ContainerDevices{{ResourceName: resource, DeviceIds: ids}}}}})
}

// snapshot copies the state; k.mu is held.
func (k *Kubelet) snapshot() State {
	s := State{Registered: maps.Clone(k.state.Registered), Current: map[string]bool{}, Endpoints: maps.Clone(k.state.Endpoints),
		Lists: maps.Clone(k.state.Lists), StreamEnds: maps.Clone(k.state.StreamEnds)}
	for r, g := range k.regGen {
		s.Current[r] = g == k.gen && !k.stopping
	}
	return s
}

// State is what the kubelet has seen so far.
func (k *Kubelet) State() State {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.snapshot()
}

// Wait waits until cond holds of the kubelet's state, failing the test
// after Patience.
func (k *Kubelet) Wait(what string, cond func(State) bool) {
	k.t.Helper()
	patience := k.Patience
	if patience == 0 {
		patience = DefaultPatience
	}
	deadline := time.After(patience)
	for {
		k.mu.Lock()
		s, ch := k.snapshot(), k.changed
		k.mu.Unlock()
		if cond(s) {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			k.t.Fatalf("%s: not within %s; registered %v, lists %s", what, patience, s.Registered, Describe(s.Lists))
		}
	}
}

// WaitList waits until resource's list satisfies cond (id -> health).
func (k *Kubelet) WaitList(resource, what string, cond func(map[string]string) bool) {
	k.t.Helper()
	k.Wait(resource+": "+what, func(s State) bool { return cond(Health(s.Lists[resource])) })
}

// Health maps each device of a list to its health.
func Health(ds []*pluginapi.Device) map[string]string {
	out := map[string]string{}
	for _, d := range ds {
		out[d.ID] = d.Health
	}
	return out
}

// AllHealthy says a list is exactly want, every device healthy.
func AllHealthy(want []string) func(map[string]string) bool {
	want = slices.Sorted(slices.Values(want))
	return func(got map[string]string) bool {
		if !slices.Equal(slices.Sorted(maps.Keys(got)), want) {
			return false
		}
		for _, h := range got {
			if h != pluginapi.Healthy {
				return false
			}
		}
		return true
	}
}

// Describe prints lists as "resource: id(health,numa) ..." lines.
func Describe(lists map[string][]*pluginapi.Device) string {
	var b strings.Builder
	for _, r := range slices.Sorted(maps.Keys(lists)) {
		parts := make([]string, len(lists[r]))
		for i, d := range lists[r] {
			numa := "-"
			if d.Topology != nil && len(d.Topology.Nodes) > 0 {
				numa = fmt.Sprint(d.Topology.Nodes[0].ID)
			}
			parts[i] = fmt.Sprintf("%s(%s,%s)", d.ID, d.Health, numa)
		}
		fmt.Fprintf(&b, "\n  %s: %s", r, strings.Join(parts, " "))
	}
	return b.String()
}

// Client is the kubelet's connection to resource's plugin.
func (k *Kubelet) Client(resource string) pluginapi.DevicePluginClient {
	k.t.Helper()
	k.mu.Lock()
	defer k.mu.Unlock()
	c, ok := k.clients[resource]
	if !ok {
		k.t.Fatalf("%s is not registered", resource)
	}
	return c
}

// Allocate is the kubelet's Allocate for one container.
func (k *Kubelet) Allocate(resource string, ids ...string) (*pluginapi.ContainerAllocateResponse, error) {
	k.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), DefaultPatience)
	defer cancel()
	resp, err := k.Client(resource).Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}})
	if err != nil {
		return nil, err
	}
	if len(resp.ContainerResponses) != 1 {
		k.t.Fatalf("Allocate answered %d containers, want 1", len(resp.ContainerResponses))
	}
	return resp.ContainerResponses[0], nil
}
