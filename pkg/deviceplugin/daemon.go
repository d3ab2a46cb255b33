package deviceplugin

import "github.com/vgpu-project/vgpu/pkg/daemon"

var _ Engine = (*daemon.Engine)(nil)

// ForDaemon is daemon.Options.DevicePlugin: the plugin over vgpud's
// engine. vgpud passes it; the daemon package does not import this one,
// so that programs with an in-process engine (the static vgpuctl) link no
// gRPC.
func ForDaemon(o daemon.PluginOptions) (daemon.Runner, error) {
	m, err := New(Options{Engine: o.Engine, Config: o.Config, Logger: o.Logger,
		Grace: o.Grace, PodResourcesEvery: o.PodResourcesEvery})
	if err != nil {
		return nil, err
	}
	return m, nil
}
