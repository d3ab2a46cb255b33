//go:build !cgo

package nvmlstate

import (
	"fmt"

	"github.com/vgpu-project/vgpu/pkg/nvstate"
	"github.com/vgpu-project/vgpu/pkg/pci"
)

// New returns the nvstate.Manager of a build without cgo: NVML is a C library,
// so every call fails with nvstate.ErrUnavailable and says to rebuild.
func New(string) nvstate.Manager { return static{} }

type static struct{}

var _ nvstate.Manager = static{}

func (static) err(gpu pci.Address) error {
	return fmt.Errorf("GPU %s: %w: this build has no cgo and cannot load NVIDIA's NVML (libnvidia-ml.so.1), which MIG-backed vGPU, the vGPU scheduler and mixed-size mode need; build vgpu-nvml with CGO_ENABLED=1 (make build)", gpu, nvstate.ErrUnavailable)
}

func (s static) Mode(gpu pci.Address) (nvstate.Mode, error)            { return nvstate.Mode{}, s.err(gpu) }
func (s static) SetMode(gpu pci.Address, _ bool) error                 { return s.err(gpu) }
func (s static) Instances(gpu pci.Address) ([]nvstate.Instance, error) { return nil, s.err(gpu) }
func (s static) Destroy(gpu pci.Address, _ int) error                  { return s.err(gpu) }
func (s static) VGPUTypes(gpu pci.Address) ([]nvstate.VGPUType, error) { return nil, s.err(gpu) }
func (s static) Sizes(gpu pci.Address) (nvstate.Sizes, error)          { return nvstate.Sizes{}, s.err(gpu) }
func (s static) Scheduler(gpu pci.Address) (nvstate.Sched, error)      { return nvstate.Sched{}, s.err(gpu) }
func (s static) SetScheduler(gpu pci.Address, _ nvstate.Sched) error   { return s.err(gpu) }
func (s static) MixedSize(gpu pci.Address) (bool, error)               { return false, s.err(gpu) }
func (s static) SetMixedSize(gpu pci.Address, _ bool) error            { return s.err(gpu) }
func (s static) Virtualization(gpu pci.Address) (nvstate.Virt, error) {
	return nvstate.Virt{}, s.err(gpu)
}
func (s static) Create(gpu pci.Address, _ int, _ *int) (nvstate.Instance, error) {
	return nvstate.Instance{}, s.err(gpu)
}
