//go:build !cgo

package nvmlmig

import (
	"fmt"

	"github.com/vgpu-project/vgpu/pkg/mig"
	"github.com/vgpu-project/vgpu/pkg/pci"
)

// New returns the mig.Manager of a build without cgo: NVML is a C library,
// so every call fails with mig.ErrUnavailable and says to rebuild.
func New(string) mig.Manager { return static{} }

type static struct{}

var _ mig.Manager = static{}

func (static) err(gpu pci.Address) error {
	return fmt.Errorf("GPU %s: %w: this build has no cgo and cannot load NVIDIA's NVML (libnvidia-ml.so.1), which MIG-backed vGPU, the vGPU scheduler and mixed-size mode need; build vgpu-nvml with CGO_ENABLED=1 (make build)", gpu, mig.ErrUnavailable)
}

func (s static) Mode(gpu pci.Address) (mig.Mode, error)            { return mig.Mode{}, s.err(gpu) }
func (s static) SetMode(gpu pci.Address, _ bool) error             { return s.err(gpu) }
func (s static) Instances(gpu pci.Address) ([]mig.Instance, error) { return nil, s.err(gpu) }
func (s static) Destroy(gpu pci.Address, _ int) error              { return s.err(gpu) }
func (s static) VGPUTypes(gpu pci.Address) ([]mig.VGPUType, error) { return nil, s.err(gpu) }
func (s static) Sizes(gpu pci.Address) (mig.Sizes, error)          { return mig.Sizes{}, s.err(gpu) }
func (s static) Scheduler(gpu pci.Address) (mig.Sched, error)      { return mig.Sched{}, s.err(gpu) }
func (s static) SetScheduler(gpu pci.Address, _ mig.Sched) error   { return s.err(gpu) }
func (s static) MixedSize(gpu pci.Address) (bool, error)           { return false, s.err(gpu) }
func (s static) SetMixedSize(gpu pci.Address, _ bool) error        { return s.err(gpu) }
func (s static) Virtualization(gpu pci.Address) (mig.Virt, error)  { return mig.Virt{}, s.err(gpu) }
func (s static) Create(gpu pci.Address, _ int, _ *int) (mig.Instance, error) {
	return mig.Instance{}, s.err(gpu)
}
