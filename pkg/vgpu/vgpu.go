package vgpu

// Kind is how a vGPU reaches a VM.
type Kind string

const (
	KindVF       Kind = "vf"        // a VF on vfio-pci or a variant (hostdev type=pci)
	KindMdev     Kind = "mdev"      // a mediated device (hostdev type=mdev)
	KindNVIDIAVF Kind = "nvidia-vf" // a VF with an NVIDIA vGPU type
	KindPF       Kind = "pf"        // the whole GPU on vfio-pci
)

// VGPU is one carved vGPU as the kernel shows it.
type VGPU struct {
	ID         string `json:"id"` // device address, or the mdev UUID
	GPU        string `json:"gpu"`
	Kind       Kind   `json:"kind"`
	Parent     string `json:"parent,omitempty"` // mdev parent / VF's PF
	Type       string `json:"type,omitempty"`   // mdev type id or NVIDIA type name
	Profile    string `json:"profile,omitempty"`
	IOMMUGroup int    `json:"iommuGroup"`
	Driver     string `json:"driver,omitempty"`
	InUse      bool   `json:"inUse"`
	// UseUnknown: nobody visible holds the vGPU, but a process whose open
	// files could not be read may (no CAP_SYS_PTRACE): a change that would
	// destroy it is refused unless forced.
	UseUnknown bool   `json:"useUnknown,omitempty"`
	Holder     string `json:"holder,omitempty"`
}

// Blocker is a vGPU in use (or of unknown use) that a change would
// destroy.
type Blocker struct {
	VGPU   string `json:"vgpu"`
	Holder string `json:"holder"`
	// Unknown: nobody visible holds the vGPU, but its use cannot be told
	// (the open files of some process could not be read); Holder says why.
	Unknown bool `json:"unknown,omitempty"`
}
