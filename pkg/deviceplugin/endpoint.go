package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/vgpu-project/vgpu/pkg/alloc"
	"github.com/vgpu-project/vgpu/pkg/ledger"
)

// endpoint is one resource's device plugin: a gRPC server on its socket
// in the kubelet's plugin directory, serving the profile's vGPUs.
type endpoint struct {
	pluginapi.UnimplementedDevicePluginServer

	m        *Manager
	resource string
	profile  string
	socket   string

	server *grpc.Server
	served chan struct{} // closed when Serve returns
	// regCancel ends the registration in flight (Run's goroutine sets it).
	regCancel context.CancelFunc

	mu      sync.Mutex
	devices []*pluginapi.Device // the list as last computed, sorted by id
	wake    chan struct{}       // closed and replaced at each change of devices
	closed  bool
}

func newEndpoint(m *Manager, resource, profile string) *endpoint {
	return &endpoint{m: m, resource: resource, profile: profile, socket: filepath.Join(m.dir, socketName(resource)),
		wake: make(chan struct{})}
}

// errOtherServer: a live process serves the endpoint's socket already.
var errOtherServer = errors.New("another process serves this device plugin socket")

// listen takes the endpoint's socket and serves on it. A socket file left
// by an earlier vgpud (nothing answers on it) is replaced; one something
// answers on belongs to a second vgpud (or another plugin) and is left.
func (ep *endpoint) listen() error {
	if _, err := os.Lstat(ep.socket); err == nil {
		c, err := net.DialTimeout("unix", ep.socket, time.Second)
		if err == nil {
			c.Close()
			return fmt.Errorf("serve %s on %s: %w (a second vgpud?); this vgpud does not take it over", ep.resource, ep.socket, errOtherServer)
		}
		if err := os.Remove(ep.socket); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("serve %s: remove the stale socket %s: %w", ep.resource, ep.socket, err)
		}
	}
	ln, err := net.Listen("unix", ep.socket)
	if err != nil {
		return fmt.Errorf("serve %s on %s: %w", ep.resource, ep.socket, err)
	}
	ep.server = grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(ep.server, ep)
	ep.served = make(chan struct{})
	go func() {
		defer close(ep.served)
		_ = ep.server.Serve(ln)
	}()
	return nil
}

// stop ends the server and its streams. With withdraw the streams first
// send an empty list, so the kubelet drops the resource's capacity at
// once; without (vgpud stopping, to come back), the kubelet marks the
// devices unhealthy when the stream ends and keeps them a while for the
// plugin to return. Closing the listener unlinks the socket.
func (ep *endpoint) stop(withdraw bool) {
	ep.cancelRegister()
	ep.mu.Lock()
	if withdraw {
		ep.devices = []*pluginapi.Device{}
	}
	ep.closed = true
	close(ep.wake)
	ep.wake = make(chan struct{})
	ep.mu.Unlock()
	ep.shutdown()
}

// cancelRegister ends the endpoint's registration in flight, if any.
func (ep *endpoint) cancelRegister() {
	if ep.regCancel != nil {
		ep.regCancel()
		ep.regCancel = nil
	}
}

// shutdown lets the streams send what they have, then ends the server.
func (ep *endpoint) shutdown() {
	if ep.server == nil {
		return
	}
	done := make(chan struct{})
	go func() {
		ep.server.GracefulStop()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Second): // a kubelet not reading: cut it off
		ep.server.Stop()
		<-done
	}
	<-ep.served
	ep.server = nil
}

// reopen serves again on a fresh socket: the kubelet restarted and removed
// the old one.
func (ep *endpoint) reopen() error {
	ep.mu.Lock()
	ep.closed = true
	close(ep.wake)
	ep.wake = make(chan struct{})
	ep.mu.Unlock()
	ep.shutdown()
	ep.mu.Lock()
	ep.closed = false
	ep.mu.Unlock()
	return ep.listen()
}

// setDevices replaces the device list and wakes the streams when it changed.
func (ep *endpoint) setDevices(devs []*pluginapi.Device) bool {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if slices.EqualFunc(ep.devices, devs, sameDevice) && ep.devices != nil {
		return false
	}
	ep.devices = devs
	close(ep.wake)
	ep.wake = make(chan struct{})
	return true
}

// sameDevice: a and b would read the same to the kubelet. The lists are
// compared after every change, a thousand devices each: no allocation.
func sameDevice(a, b *pluginapi.Device) bool {
	if a.ID != b.ID || a.Health != b.Health || (a.Topology == nil) != (b.Topology == nil) {
		return false
	}
	if a.Topology == nil {
		return true
	}
	return slices.EqualFunc(a.Topology.Nodes, b.Topology.Nodes, func(x, y *pluginapi.NUMANode) bool { return x.ID == y.ID })
}

// GetDevicePluginOptions: vgpud prefers devices (GetPreferredAllocation)
// and needs no PreStartContainer.
func (ep *endpoint) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}, nil
}

// ListAndWatch sends the device list now and after each change, until the
// kubelet goes or the endpoint stops.
func (ep *endpoint) ListAndWatch(_ *pluginapi.Empty, s pluginapi.DevicePlugin_ListAndWatchServer) error {
	for {
		ep.mu.Lock()
		devs, wake, closed := ep.devices, ep.wake, ep.closed
		ep.mu.Unlock()
		if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
			return err
		}
		if closed {
			return nil
		}
		select {
		case <-s.Context().Done():
			return nil
		case <-wake:
		}
	}
}

// GetPreferredAllocation prefers NUMA-local vGPUs of the least-loaded GPUs,
// by the allocator's rules. It holds nothing.
func (ep *endpoint) GetPreferredAllocation(ctx context.Context, r *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, c := range r.ContainerRequests {
		ids, err := ep.m.engine.PreferPod(ctx, ep.profile, c.AvailableDeviceIDs, c.MustIncludeDeviceIDs, int(c.AllocationSize))
		if err != nil {
			ep.m.log.Warn("kubelet: cannot prefer vGPUs; it chooses itself", "resource", ep.resource, "err", err)
			return nil, status.Errorf(codes.Internal, "prefer %d of %s: %v", c.AllocationSize, ep.resource, err)
		}
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids})
	}
	return resp, nil
}

// Allocate claims the vGPUs the kubelet picked for each container, makes
// them ready and answers with what KubeVirt's virt-launcher reads: the
// ids in MDEV_PCI_RESOURCE_<NAME> or PCI_RESOURCE_<NAME>, and the VFIO
// device nodes. One container's failure frees what the others got:
// the kubelet fails the whole pod.
func (ep *endpoint) Allocate(ctx context.Context, r *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	var claims []string
	fail := func(err error) (*pluginapi.AllocateResponse, error) {
		for _, c := range claims {
			if _, ferr := ep.m.engine.Unreserve(context.WithoutCancel(ctx), c, ""); ferr != nil {
				ep.m.log.Error("kubelet: cannot free a claim of a failed allocation; the next PodResources check frees it",
					"resource", ep.resource, "claim", c, "err", ferr)
			}
		}
		return nil, err
	}
	for _, c := range r.ContainerRequests {
		if len(c.DevicesIds) == 0 {
			resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{})
			continue
		}
		claim := uuid.NewString()
		req := alloc.Request{Profile: ep.profile, Count: len(c.DevicesIds), DomainUUID: claim,
			DomainName: "kubelet allocation of " + ep.resource, Pod: &ledger.Pod{Resource: ep.resource}}
		g, err := ep.m.engine.ClaimPod(ctx, req, c.DevicesIds)
		if err != nil {
			ep.m.log.Warn("kubelet: allocation refused", "resource", ep.resource, "devices", c.DevicesIds, "err", err)
			return fail(status.Errorf(allocCode(err), "allocate %v of %s: %v", c.DevicesIds, ep.resource, err))
		}
		claims = append(claims, claim)
		mdev := false
		ids := make([]string, len(c.DevicesIds))
		for i, id := range c.DevicesIds {
			canon, _ := alloc.VGPUID(id)
			ids[i] = canon
			mdev = mdev || isUUID(canon)
		}
		cr := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{EnvName(ep.resource, mdev): strings.Join(ids, ",")}}
		for _, n := range g.DeviceNodes {
			cr.Devices = append(cr.Devices, &pluginapi.DeviceSpec{HostPath: n, ContainerPath: n, Permissions: "mrw"})
		}
		resp.ContainerResponses = append(resp.ContainerResponses, cr)
		ep.m.log.Info("kubelet: allocated", "resource", ep.resource, "claim", claim, "vgpus", ids)
	}
	return resp, nil
}

// allocCode maps the engine's refusals to gRPC codes.
func allocCode(err error) codes.Code {
	switch {
	case errors.Is(err, alloc.ErrNoSuchVGPU), errors.Is(err, alloc.ErrInvalid):
		return codes.InvalidArgument
	case errors.Is(err, alloc.ErrConflict), errors.Is(err, alloc.ErrNoCapacity):
		return codes.FailedPrecondition
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return codes.Canceled
	case errors.Is(err, syscall.EBUSY):
		return codes.Unavailable
	}
	return codes.Internal
}

// PreStartContainer is not asked for (GetDevicePluginOptions).
func (ep *endpoint) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

func isUUID(s string) bool { _, err := uuid.Parse(s); return err == nil && len(s) == 36 }
