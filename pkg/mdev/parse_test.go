package mdev

import (
	"errors"
	"strings"
	"testing"
)

func TestParseDescription(t *testing.T) {
	cases := []struct {
		desc    string
		max     int
		fb      uint64
		comment string
	}{
		{"num_heads=4, frl_config=60, framebuffer=4096M, max_resolution=7680x4320, max_instance=4", 4, 4096, "NVIDIA GRID T4-4Q"},
		{"num_heads=1, frl_config=60, framebuffer=40960M, max_resolution=4096x2160, max_instance=1\n", 1, 40960, "NVIDIA A100-40C"},
		{"framebuffer=16G,max_instance=1", 1, 16384, "G unit, no spaces"},
		{"framebuffer=512MB, max_instance=32", 32, 512, "MB unit"},
		{"framebuffer = 1024 MiB , max_instance = 8", 8, 1024, "spaces and MiB"},
		{"virtual display, 64 MB video memory\n", 0, 64, "mbochs"},
		{"virtual display, 16MB Video Memory", 0, 16, "mbochs, no space, other case"},
		{"virtual display, MB video memory", 0, 0, "mbochs without a figure"},
		{"virtual display, 64 MB video memory left", 0, 0, "mbochs with words after"},
		{"low_gm_size: 64MB\nhigh_gm_size: 384MB\nfence: 4\nresolution: 1024x768\nweight: 2\n", 0, 0, "GVT-g: GM is not a framebuffer"},
		{"", 0, 0, "empty"},
		{"framebuffer=4096, max_instance=x", 0, 0, "no unit, bad count"},
		{"framebuffer=M, max_instance=-2", 0, 0, "no digits, negative"},
		{"garbage without separators", 0, 0, "junk"},
	}
	for _, c := range cases {
		max, fb := ParseDescription(c.desc)
		if max != c.max || fb != c.fb {
			t.Errorf("%s: ParseDescription(%q) = %d, %d; want %d, %d", c.comment, c.desc, max, fb, c.max, c.fb)
		}
	}
}

func TestIsGVTg(t *testing.T) {
	for id, want := range map[string]bool{
		"i915-GVTg_V5_8": true, "i915-GVTg_V5_1": true, "i915-GVTg_V4_2": true,
		"nvidia-222": false, "i915-GVTg_V5_x": false, "mtty-2": false,
		"i915-GVTg_V5_": false, "i915-GVTg_V_4": false, "i915-GVTg_V5": false, "i915-GVTg_V5_4_1": false,
	} {
		if got := IsGVTg(id); got != want {
			t.Errorf("IsGVTg(%q) = %v, want %v", id, got, want)
		}
	}
}

func TestValidateUUID(t *testing.T) {
	good := map[string]string{
		"83b8f4f2-509f-382f-3c1e-e6bfe0fa1001": "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001",
		"83B8F4F2-509F-382F-3C1E-E6BFE0FA1001": "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001",
	}
	for in, want := range good {
		got, err := ValidateUUID(in)
		if err != nil || got != want {
			t.Errorf("ValidateUUID(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{
		"", "1", "not-a-uuid",
		"83b8f4f2509f382f3c1ee6bfe0fa1001",               // no dashes: the kernel refuses it
		"{83b8f4f2-509f-382f-3c1e-e6bfe0fa1001}",         // braces
		"urn:uuid:83b8f4f2-509f-382f-3c1e-e6bfe0fa1001",  // urn
		"83b8f4f2-509f-382f-3c1e-e6bfe0fa100g",           // not hex
		"83b8f4f2-509f-382f-3c1e-e6bfe0fa1001/../remove", // path tricks
	} {
		_, err := ValidateUUID(in)
		if !errors.Is(err, ErrInvalidUUID) || !strings.Contains(err.Error(), "8-4-4-4-12") {
			t.Errorf("ValidateUUID(%q) = %v, want ErrInvalidUUID with the expected form", in, err)
		}
	}
}
