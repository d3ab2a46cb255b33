package mdev

// Type is one entry of mdev_supported_types.
type Type struct {
	ID                 string `json:"id"`   // directory name: "nvidia-222", "i915-GVTg_V5_4"
	Name               string `json:"name"` // "GRID T4-4Q"; the id when the kernel has no name
	Description        string `json:"description,omitempty"`
	DeviceAPI          string `json:"deviceAPI"`
	AvailableInstances int    `json:"availableInstances"` // Unread where a lean read skipped it (Counted)
	// Parsed from the description where it says so; 0 unknown.
	MaxInstances  int    `json:"maxInstances,omitempty"`
	FramebufferMB uint64 `json:"framebufferMB,omitempty"`
	// Instances are the UUIDs of the existing mdevs of this type.
	Instances []string `json:"instances,omitempty"`
}
