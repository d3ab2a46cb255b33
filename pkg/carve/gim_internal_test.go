package carve

import (
	"strings"
	"testing"
)

// A refused modprobe names the missing capability when the process lacks
// it (vgpud's unit without the GIM drop-in), and nothing otherwise.
func TestModuleHint(t *testing.T) {
	const root = "Name:\tvgpud\nCapInh:\t0000000000000000\nCapEff:\t000001ffffffffff\n"
	const sandboxed = "Name:\tvgpud\nCapEff:\t0000000000080023\n" // CHOWN, DAC_OVERRIDE, SYS_PTRACE...
	if h := moduleHint(root); h != "" {
		t.Errorf("full capabilities: hint %q", h)
	}
	if h := moduleHint(sandboxed); !strings.Contains(h, "CAP_SYS_MODULE") || !strings.Contains(h, "vgpud-gim.conf") {
		t.Errorf("no CAP_SYS_MODULE: hint %q", h)
	}
	if h := moduleHint("garbage"); h != "" {
		t.Errorf("unreadable status: hint %q", h)
	}
}
