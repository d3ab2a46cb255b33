package nvvf

// VGPUType is a line of creatable_vgpu_types.
type VGPUType struct {
	ID   int    `json:"id"`
	Name string `json:"name"` // "NVIDIA L40S-12Q"
}
