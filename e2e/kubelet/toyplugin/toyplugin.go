// Package toyplugin is a small kubelet device plugin that the rigs of this
// module (dmharness, kubeletrig) are proven with before vgpud's: it serves
// one resource with a fixed set of device IDs, registers with the kubelet
// socket in a device-plugin directory, registers again whenever the kubelet
// re-creates that socket or removes the plugin's own (a kubelet restart
// does both), and answers Allocate with the variable KubeVirt reads for an
// mdev resource, MDEV_PCI_RESOURCE_<NAME>=<ids>. It keeps what it was asked
// so that tests can tell what the kubelet did.
package toyplugin

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

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	api "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Config says what the plugin serves and where.
type Config struct {
	// Dir is the kubelet's device-plugin directory: kubelet.sock is there,
	// and the plugin's socket goes there too.
	Dir string
	// Resource is the extended resource name, <domain>/<name>.
	Resource string
	// Devices are the device IDs offered, all healthy.
	Devices []string
	// Socket is the plugin's socket file name in Dir; "" derives one from
	// Resource.
	Socket string
}

// EnvName is the variable KubeVirt's virt-launcher reads an mdev
// resource's UUIDs from: MDEV_PCI_RESOURCE_ and the resource name upper
// cased with "/" and "." as "_" (kubevirt pkg/util ResourceNameToEnvVar).
func EnvName(resource string) string {
	return "MDEV_PCI_RESOURCE_" + strings.NewReplacer("/", "_", ".", "_").Replace(strings.ToUpper(resource))
}

// Plugin is a running toy device plugin.
type Plugin struct {
	api.UnimplementedDevicePluginServer
	cfg Config

	mu        sync.Mutex
	devices   []*api.Device
	watchers  []chan struct{} // one per ListAndWatch stream, poked on SetDevices
	allocs    [][]string      // device IDs of each container request, in order
	registers int             // successful Register calls
	lastErr   error           // the last registration's failure, for Wait's message
	srv       *grpc.Server
	kubelet   fileID // the kubelet.sock registered with; zero before
	serving   fileID // the plugin's own socket

	stop chan struct{}
	done chan struct{}
}

// Start serves the plugin on its socket and registers it with the kubelet
// as soon as the kubelet's socket answers, then keeps it registered until
// Stop.
func Start(cfg Config) (*Plugin, error) {
	if cfg.Dir == "" || cfg.Resource == "" {
		return nil, errors.New("toyplugin: Dir and Resource are required")
	}
	if cfg.Socket == "" {
		cfg.Socket = strings.NewReplacer("/", "_", ".", "_").Replace(cfg.Resource) + ".sock"
	}
	p := &Plugin{cfg: cfg, stop: make(chan struct{}), done: make(chan struct{})}
	p.setDevices(cfg.Devices)
	if err := p.serve(); err != nil {
		return nil, err
	}
	go p.keepRegistered()
	return p, nil
}

// Socket is the path of the plugin's socket.
func (p *Plugin) Socket() string { return filepath.Join(p.cfg.Dir, p.cfg.Socket) }

// Resource is the resource name the plugin serves.
func (p *Plugin) Resource() string { return p.cfg.Resource }

// serve listens on the plugin's socket, replacing a stale one.
func (p *Plugin) serve() error {
	sock := p.Socket()
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("toyplugin: remove stale socket %s: %w", sock, err)
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		return fmt.Errorf("toyplugin: listen on %s: %w", sock, err)
	}
	ino, err := identify(sock)
	if err != nil {
		l.Close()
		return err
	}
	g := grpc.NewServer()
	api.RegisterDevicePluginServer(g, p)
	go func() { _ = g.Serve(l) }()
	p.mu.Lock()
	p.srv, p.serving, p.kubelet = g, ino, fileID{}
	p.mu.Unlock()
	return nil
}

// fileID tells a re-created file from the one before: a freed inode
// number may be reused at once, its change time not.
type fileID struct{ ino, ctime int64 }

func identify(path string) (fileID, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileID{}, fmt.Errorf("toyplugin: stat %s: %w", path, err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return fileID{int64(st.Ino), st.Ctim.Nano()}, nil
}

// keepRegistered registers the plugin, and again whenever the kubelet's
// socket is a new one or the plugin's own socket is gone (the kubelet
// removes plugin sockets from the directory when it starts), serving a
// fresh socket first in the latter case. A poll every 20 ms is what
// device plugins commonly do with fsnotify; it keeps this package small.
func (p *Plugin) keepRegistered() {
	defer close(p.done)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		p.mu.Lock()
		registeredWith, serving := p.kubelet, p.serving
		p.mu.Unlock()
		if own, err := identify(p.Socket()); err != nil || own != serving {
			p.mu.Lock()
			p.srv.Stop()
			p.mu.Unlock()
			if err := p.serve(); err != nil {
				p.setErr(err)
			}
			registeredWith = fileID{}
		}
		if k, err := identify(filepath.Join(p.cfg.Dir, "kubelet.sock")); err == nil && k != registeredWith {
			if err := p.register(); err != nil {
				p.setErr(err)
			} else {
				p.mu.Lock()
				p.kubelet, p.registers, p.lastErr = k, p.registers+1, nil
				p.mu.Unlock()
			}
		}
		select {
		case <-p.stop:
			return
		case <-tick.C:
		}
	}
}

func (p *Plugin) setErr(err error) {
	p.mu.Lock()
	p.lastErr = err
	p.mu.Unlock()
}

func (p *Plugin) register() error {
	kubelet := filepath.Join(p.cfg.Dir, "kubelet.sock")
	cc, err := grpc.NewClient("unix://"+kubelet, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("toyplugin: dial %s: %w", kubelet, err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = api.NewRegistrationClient(cc).Register(ctx, &api.RegisterRequest{
		Version: api.Version, Endpoint: p.cfg.Socket, ResourceName: p.cfg.Resource,
		Options: &api.DevicePluginOptions{},
	})
	if err != nil {
		return fmt.Errorf("toyplugin: register %s with %s: %w", p.cfg.Resource, kubelet, err)
	}
	return nil
}

// Registrations is how many times the plugin has registered.
func (p *Plugin) Registrations() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.registers
}

// WaitRegistrations waits until the plugin has registered n times in all.
func (p *Plugin) WaitRegistrations(n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		p.mu.Lock()
		got, last := p.registers, p.lastErr
		p.mu.Unlock()
		if got >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("toyplugin: %s registered %d times, not %d, within %v (last error: %v)", p.cfg.Resource, got, n, timeout, last)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Stop stops serving and removes the plugin's socket, as a plugin that
// exits does; the kubelet sees the ListAndWatch stream end.
func (p *Plugin) Stop() {
	select {
	case <-p.stop:
		return
	default:
	}
	close(p.stop)
	<-p.done
	p.mu.Lock()
	p.srv.Stop()
	p.mu.Unlock()
	_ = os.Remove(p.Socket())
}

func (p *Plugin) setDevices(ids []string) {
	devs := make([]*api.Device, 0, len(ids))
	for _, id := range ids {
		devs = append(devs, &api.Device{ID: id, Health: api.Healthy})
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.devices = devs
	for _, w := range p.watchers {
		select {
		case w <- struct{}{}:
		default: // one pending poke is enough: the stream sends the latest list
		}
	}
}

// SetDevices replaces the device IDs offered; open ListAndWatch streams
// send the new list.
func (p *Plugin) SetDevices(ids []string) { p.setDevices(ids) }

// Allocations returns the device IDs of every container request Allocate
// received, in order.
func (p *Plugin) Allocations() [][]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.allocs)
}

// GetDevicePluginOptions says the plugin needs no PreStartContainer and
// has no preferred allocation.
func (p *Plugin) GetDevicePluginOptions(context.Context, *api.Empty) (*api.DevicePluginOptions, error) {
	return &api.DevicePluginOptions{}, nil
}

// ListAndWatch sends the device list, and again on every SetDevices.
func (p *Plugin) ListAndWatch(_ *api.Empty, s api.DevicePlugin_ListAndWatchServer) error {
	poke := make(chan struct{}, 1)
	p.mu.Lock()
	p.watchers = append(p.watchers, poke)
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.watchers = slices.DeleteFunc(p.watchers, func(c chan struct{}) bool { return c == poke })
		p.mu.Unlock()
	}()
	for {
		p.mu.Lock()
		devs := slices.Clone(p.devices)
		p.mu.Unlock()
		if err := s.Send(&api.ListAndWatchResponse{Devices: devs}); err != nil {
			return err
		}
		select {
		case <-s.Context().Done():
			return nil
		case <-p.stop:
			return nil
		case <-poke:
		}
	}
}

// Allocate answers each container request with EnvName(resource) set to
// its device IDs, comma separated; an ID the plugin does not offer is an
// InvalidArgument error and nothing is recorded.
func (p *Plugin) Allocate(_ context.Context, r *api.AllocateRequest) (*api.AllocateResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	known := map[string]bool{}
	for _, d := range p.devices {
		known[d.ID] = true
	}
	resp := &api.AllocateResponse{}
	for _, c := range r.ContainerRequests {
		for _, id := range c.DevicesIds {
			if !known[id] {
				return nil, status.Errorf(codes.InvalidArgument, "toyplugin: %s offers no device %q", p.cfg.Resource, id)
			}
		}
	}
	for _, c := range r.ContainerRequests {
		ids := slices.Sorted(slices.Values(c.DevicesIds))
		p.allocs = append(p.allocs, ids)
		resp.ContainerResponses = append(resp.ContainerResponses, &api.ContainerAllocateResponse{
			Envs: map[string]string{EnvName(p.cfg.Resource): strings.Join(ids, ",")},
		})
	}
	return resp, nil
}
