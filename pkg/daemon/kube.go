package daemon

import (
	"context"
	"path/filepath"
	"sync"

	"github.com/vgpu-project/vgpu/pkg/config"
	"github.com/vgpu-project/vgpu/pkg/engine"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
	"github.com/vgpu-project/vgpu/pkg/uevent"
)

// kubeFront runs the kubelet's device plugin while the config in force
// turns it on (kubernetes.device-plugin). Off, nothing of it runs: no
// goroutine, no socket, no gRPC server.
type kubeFront struct {
	mu     sync.Mutex
	cfg    config.Kubernetes
	cancel context.CancelFunc
	done   chan struct{}
}

// applyKube makes the device plugin follow cfg: started, restarted with
// new settings, or stopped.
func (d *Daemon) applyKube(cfg config.Kubernetes) {
	k := &d.kube
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.cancel != nil && k.cfg == cfg {
		return
	}
	if k.cancel != nil {
		k.cancel()
		<-k.done
		k.cancel = nil
		d.log.Info("device plugin stopped", "dir", k.cfg.DevicePluginDir)
	}
	k.cfg = cfg
	if !cfg.DevicePlugin {
		return
	}
	if d.opts.DevicePlugin == nil {
		d.log.Error("cannot serve the kubelet: this program has no device plugin (vgpud has)")
		return
	}
	m, err := d.opts.DevicePlugin(engine.PluginOptions{Engine: d.engine, Config: cfg, Logger: d.log,
		Grace: d.opts.CollectGrace, PodResourcesEvery: d.opts.PodResourcesEvery})
	if err != nil {
		d.log.Error("cannot serve the kubelet", "err", err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	d.watchKernel(ctx, &wg)
	k.cancel, k.done = cancel, make(chan struct{})
	done := k.done
	wg.Add(1)
	go func() {
		defer wg.Done()
		m.Run(ctx)
	}()
	go func() {
		wg.Wait()
		close(done)
	}()
}

// stopKube stops the device plugin, if it runs.
func (d *Daemon) stopKube() {
	d.applyKube(config.Kubernetes{})
}

// watchKernel tells the engine of device events from outside vgpud (a
// GPU off the bus), so the kubelet hears of them at once: from
// Options.KernelEvents when given, else from the kernel's uevent socket
// when vgpud manages the real host (sysfs root "/").
func (d *Daemon) watchKernel(ctx context.Context, wg *sync.WaitGroup) {
	forward := func(events <-chan struct{}) {
		defer wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case <-events:
				d.engine.HostChanged()
			}
		}
	}
	if d.opts.KernelEvents != nil {
		wg.Add(1)
		go forward(d.opts.KernelEvents)
		return
	}
	if host, ok := d.engine.FS().(sysfs.OS); !ok || filepath.Clean(host.Root) != "/" {
		return // a simulated host: the kernel's events are not about it
	}
	l, err := uevent.Listen()
	if err != nil {
		d.log.Warn("cannot hear the kernel's device events; a GPU gone from the bus reaches the kubelet at the next change", "err", err)
		return
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer l.Close()
		err := l.Run(ctx, func(uevent.Event) { d.engine.HostChanged() }, "pci", "mdev")
		if err != nil {
			d.log.Warn("stopped hearing the kernel's device events", "err", err)
		}
	}()
}
