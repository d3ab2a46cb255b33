// Package simnvml is an in-process fake of NVIDIA's NVML for MIG
// (Multi-Instance GPU), for tests of a MIG-backed vGPU backend. Unlike
// go-nvml's own mock (pkg/nvml/mock/dgxa100), it enforces the hardware's
// placement and capacity rules: profile IDs are the real ones (7g.40gb is 0,
// not the index constant 4), instances cannot overlap, and a MIG mode change
// stays pending while the GPU is busy.
//
// A Server implements nvmlstate.Library, a Device nvmlstate.Device and a
// GpuInstance nvmlstate.GpuInstance: the NVML calls vgpu makes, answering with
// go-nvml's nvml.Return codes, and nothing else. It never loads
// libnvidia-ml; go-nvml's package still needs cgo and a C compiler to build.
//
// # Modelled
//
//   - Init/Shutdown (nesting), device count, handles by index (PCI order),
//     PCI bus ID (every form nvml.h accepts, so the sysfs "0000:3b:00.0" too)
//     and UUID; name, UUID, PCI info and total memory.
//   - MIG mode: current and pending. Enabling on a busy GPU (SetBusy,
//     SetVFsEnabled) stays pending with activation status ERROR_IN_USE until
//     ResetGPU; disabling is refused with ERROR_IN_USE while GPU instances
//     exist or VFs are enabled.
//   - GPU instance profiles by index constant, possible placements,
//     remaining capacity, create (driver-chosen or given placement), list,
//     get by ID, info and destroy (ERROR_IN_USE while SetInstanceInUse).
//   - DriverRebind wipes every GPU instance, as sriov-manage's rebind does;
//     ResetGPU applies the pending mode and wipes them too.
//   - Models: A100-PCIE-40GB, H100-PCIE-80GB and H200-SXM-141GB (8 memory
//     slices, 7 SM slices) and A30-PCIE-24GB (4 and 4). GPU instance
//     profile info, placements and remaining capacity answer with MIG off
//     too, as a real H200's did; instances need MIG on.
//   - vGPU: the supported types (vgputype.go; the L40S's, H100's and A30's,
//     the last two with the fake kernel's own ids), the vGPU scheduler
//     (scheduler.go) and mixed-size (heterogeneous) mode
//     (heterogeneous.go): NOT_SUPPORTED with MIG on, IN_USE while a vGPU
//     exists, off after DriverRebind or ResetGPU.
//
// A Server also implements simkernel.MIGHost (kernel.go): joined to the
// fake kernel with Kernel.SetMIG, its instances make MIG-backed vGPU types
// appear on the VFs, a vGPU holds its instance (Destroy answers
// ERROR_IN_USE), and an open session holds the driver's unbind lock.
//
// # Sources
//
// Profile IDs, instance counts, engine counts and placements: the NVIDIA MIG
// user guide, https://docs.nvidia.com/datacenter/tesla/mig-user-guide/
// (supported-mig-profiles.html tables 6 and 7, the -lgipp output in
// getting-started-with-mig.html); the A30 profile IDs (14, 21, 5, 6, 0),
// placements and memory sizes from a published nvidia-smi 535 session on an
// A30. Per-profile memory sizes: go-nvml's pkg/nvml/mock/gpus/a100.go (they
// match an older guide's -lgip output) and an H100 80GB -lgip output. The
// H200 SXM's every number (ids, memory, engines, placements, which indices
// answer what, the memory total) and the H100's total: NVML on real boards
// (an H200 SXM and an H100 SXM5, driver 580.159.04, MIG off, 2026-11-26). NVML
// semantics (which call returns which code): go-nvml's pkg/nvml/nvml.h and
// pkg/nvml/device.go. GPU instance IDs: open-gpu-kernel-modules
// kmigmgr_ga100.c (see giID). PCI device IDs: pci.ids.
//
// # Choices the sources leave open
//
//   - CreateGpuInstance does not take the first free slot: it takes the free
//     placement that blocks the fewest other free placements (see
//     choosePlacement), which reproduces the guide's examples.
//   - GPU instance IDs follow the placement as in open-gpu-kernel-modules,
//     not "lowest free". Published outputs from other boards show other
//     permutations, so code must read the placement from GetInfo, never
//     derive it from the ID.
//   - Destroying an instance in use answers ERROR_IN_USE (nvml.h); disabling
//     MIG with instances present answers ERROR_IN_USE (inferred from the
//     driver's "In use by another client", not seen in a source with
//     instances).
//
// # Not modelled
//
// Compute instances, vGPU instances and placements, per-GPU-instance
// mixed-size mode, processes and memory use,
// MIG mode persistence across reboots, Hopper losing MIG mode on reset in
// pass-through, the pre-R510 ban on 4g+3g, GPUs without MIG, events,
// NVLink, clocks and everything else NVML has: the fake has no such calls.
// GetInfo's Device field is left nil (nvmlstate never reads it).
package simnvml
