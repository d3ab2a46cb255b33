package simkernel

import (
	"syscall"
	"testing"
)

func TestKstrtoul(t *testing.T) {
	tests := []struct {
		in    string
		bits  uint
		want  uint64
		errno syscall.Errno
	}{
		{"4", 16, 4, 0},
		{"4\n", 16, 4, 0},
		{"+4", 16, 4, 0},
		{"0x10", 16, 16, 0},
		{"0X1f", 16, 31, 0},
		{"010", 16, 8, 0}, // base 0: a leading 0 is octal
		{"0", 16, 0, 0},
		{"65535", 16, 65535, 0},
		{"65536", 16, 0, syscall.ERANGE},
		{"-1", 16, 0, syscall.EINVAL},
		{" 4", 16, 0, syscall.EINVAL},
		{"4 ", 16, 0, syscall.EINVAL},
		{"4\n\n", 16, 0, syscall.EINVAL},
		{"abc", 16, 0, syscall.EINVAL},
		{"08", 16, 0, syscall.EINVAL},
		{"0x", 16, 0, syscall.EINVAL},
		{"\n", 16, 0, syscall.EINVAL},
		{"18446744073709551615", 64, 1<<64 - 1, 0},
		{"18446744073709551616", 64, 0, syscall.ERANGE},
	}
	for _, tt := range tests {
		got, errno := kstrtoul(tt.in, tt.bits)
		if got != tt.want || errno != tt.errno {
			t.Errorf("kstrtoul(%q, %d) = %d, %v; want %d, %v", tt.in, tt.bits, got, errno, tt.want, tt.errno)
		}
	}
}

// kstrtol(buf, 10, ...), as nvidia-vgpu-vfio's current_vgpu_type store
// parses: decimal only, so a hex id is refused rather than misread.
func TestKstrtol10(t *testing.T) {
	tests := []struct {
		in    string
		want  int64
		errno syscall.Errno
	}{
		{"1147", 1147, 0},
		{"1147\n", 1147, 0},
		{"+12", 12, 0},
		{"-5", -5, 0},
		{"0", 0, 0},
		{"010", 10, 0}, // base 10: no octal
		{"0x47b", 0, syscall.EINVAL},
		{"47b", 0, syscall.EINVAL},
		{"", 0, syscall.EINVAL},
		{"-", 0, syscall.EINVAL},
		{"9223372036854775807", 1<<63 - 1, 0},
		{"9223372036854775808", 0, syscall.ERANGE},
		{"-9223372036854775808", -1 << 63, 0},
		{"-9223372036854775809", 0, syscall.ERANGE},
	}
	for _, tt := range tests {
		got, errno := kstrtol10(tt.in)
		if got != tt.want || errno != tt.errno {
			t.Errorf("kstrtol10(%q) = %d, %v; want %d, %v", tt.in, got, errno, tt.want, tt.errno)
		}
	}
}

func TestKstrtobool(t *testing.T) {
	for in, want := range map[string]bool{"1": true, "y": true, "Y\n": true, "on": true, "true": true, "enable": true,
		"0": false, "n": false, "off": false, "false": false, "disable": false} {
		got, errno := kstrtobool(in)
		if errno != 0 || got != want {
			t.Errorf("kstrtobool(%q) = %v, %v", in, got, errno)
		}
	}
	for _, in := range []string{"", "2", "o", "maybe", "x"} {
		if _, errno := kstrtobool(in); errno != syscall.EINVAL {
			t.Errorf("kstrtobool(%q) errno %v, want EINVAL", in, errno)
		}
	}
}

func TestRelPath(t *testing.T) {
	tests := map[[2]string]string{
		{"/sys/bus/pci/devices", "/sys/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0"}:                              "../../../devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0",
		{"/sys/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0", "/sys/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.4"}: "../0000:3b:00.4",
		{"/sys/class/mdev_bus", "/sys/devices/virtual/mtty/mtty"}:                                                  "../../devices/virtual/mtty/mtty",
	}
	for in, want := range tests {
		if got := relPath(in[0], in[1]); got != want {
			t.Errorf("relPath(%s, %s) = %s, want %s", in[0], in[1], got, want)
		}
	}
}
