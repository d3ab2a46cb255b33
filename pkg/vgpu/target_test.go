package vgpu

import (
	"strings"
	"testing"
)

// TestParseTarget: an address is a GPU, another name a virtual parent; a
// name with ':' gets the address's error, a name that is no path element
// an error naming it.
func TestParseTarget(t *testing.T) {
	gpu := Target{GPU: PCIAddress{Bus: 0x03}}
	for _, tc := range []struct {
		in   string
		want Target
		err  string
	}{
		{in: "0000:03:00.0", want: gpu},
		{in: "03:00.0", want: gpu},
		{in: "mbochs", want: Target{Parent: "mbochs"}},
		{in: "mdpy-1.x", want: Target{Parent: "mdpy-1.x"}},
		{in: "0000:03:00", err: `invalid PCI address "0000:03:00": device.function`},
		{in: " 0000:03:00.0\n", err: "whitespace around it"},
		{in: "a:b", err: `invalid PCI address "a:b"`},
		{in: "", err: `"" is neither a PCI address`},
		{in: "a/b", err: `"a/b" is neither a PCI address (DDDD:BB:DD.F, e.g. 0000:03:00.0) nor an mdev parent name (one name under /sys/class/mdev_bus`},
		{in: ".", err: `"." is neither`},
		{in: "..", err: `".." is neither`},
	} {
		got, err := ParseTarget(tc.in)
		switch {
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("ParseTarget(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("ParseTarget(%q) = %+v, %v; want an error saying %q", tc.in, got, err, tc.err)
		}
	}
}

// TestParseParent: a parent's name is one path element without ':', and
// the error states the rule.
func TestParseParent(t *testing.T) {
	if got, err := ParseParent("mbochs"); err != nil || got != Parent("mbochs") || !got.IsParent() {
		t.Errorf("ParseParent(mbochs) = %+v, %v", got, err)
	}
	for _, in := range []string{"", "0000:03:00.0", "a/b", ".", ".."} {
		want := `"` + in + `" is not an mdev parent name (one name under /sys/class/mdev_bus that names a virtual mdev parent, e.g. mbochs, matrix or 0.0.0313: ` +
			`1 to 255 bytes of printable characters without whitespace, '/' or ':' (an address names a GPU), not . or ..)`
		if got, err := ParseParent(in); err == nil || err.Error() != want {
			t.Errorf("ParseParent(%q) = %+v, %v; want the error %s", in, got, err, want)
		}
	}
}

// TestTargetNames: String is the bare name (ledger keys, reports), and
// Describe says which kind a parent is.
func TestTargetNames(t *testing.T) {
	g := GPU(PCIAddress{Bus: 0x41})
	p := Parent("mbochs")
	for _, tc := range []struct {
		t                Target
		parent           bool
		str, description string
	}{{g, false, "0000:41:00.0", "0000:41:00.0"}, {p, true, "mbochs", "mdev parent mbochs"}} {
		if tc.t.IsParent() != tc.parent || tc.t.String() != tc.str || tc.t.Describe() != tc.description {
			t.Errorf("%+v: IsParent %v, String %q, Describe %q; want %v, %q, %q",
				tc.t, tc.t.IsParent(), tc.t.String(), tc.t.Describe(), tc.parent, tc.str, tc.description)
		}
	}
}

// TestValidParentName: the names the kernel gives mdev parents pass; the
// bounds (length, printable, no space, no ':') hold at their edges.
func TestValidParentName(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{"mbochs", true}, {"mdpy", true}, {"mtty", true}, {"matrix", true}, {"0.0.0313", true},
		{"cciss!c0d0", true}, {"_x", true}, {"-x", true}, {"é", true}, {"...", true}, {".x", true},
		{strings.Repeat("b", 255), true},
		{strings.Repeat("b", 256), false}, {strings.Repeat("é", 128), false}, // 256 bytes
		{"", false}, {".", false}, {"..", false}, {"a/b", false}, {"a:b", false}, {"0000:03:00.0", false},
		{"a b", false}, {" a", false}, {"a\t", false}, {"a\n", false}, {"a\x00", false}, {"a\x7f", false},
		{"a\u00a0b", false}, {"a\u200bb", false}, {"a\xffb", false},
	} {
		if got := ValidParentName(tc.in); got != tc.want {
			t.Errorf("ValidParentName(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}
