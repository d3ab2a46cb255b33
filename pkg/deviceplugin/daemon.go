package deviceplugin

import "github.com/vgpu-project/vgpu/pkg/engine"

var _ Engine = (*engine.Engine)(nil)

// ForDaemon is daemon.Options.DevicePlugin: the plugin over vgpud's
// engine. cmd/vgpud passes it: the two front doors, the HTTP API
// (pkg/daemon) and this one, import the engine and not each other.
func ForDaemon(o engine.PluginOptions) (engine.Runner, error) {
	m, err := New(Options{Engine: o.Engine, Config: o.Config, Logger: o.Logger,
		Grace: o.Grace, PodResourcesEvery: o.PodResourcesEvery})
	if err != nil {
		return nil, err
	}
	return m, nil
}
