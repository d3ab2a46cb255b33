package libvirt

import (
	"strings"
	"testing"
	"time"
)

// waitHeld waits until vgpud holds exactly want (as rig.held) or fails.
func (r *rig) waitHeld(want int, within time.Duration, what string) map[string]string {
	r.t.Helper()
	deadline := time.Now().Add(within)
	for {
		got := r.held()
		if len(got) == want {
			return got
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("%s: vgpud holds %v after %s; want %d held\nvgpud's log:\n%s", what, got, within, want, r.vgpud.Out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestGoneDomainsAreCollected: vgpud, started before libvirtd, watches the
// rig's libvirtd: a domain that is undefined loses its reservation soon
// after (a lifecycle event, then the grace period); a defined shut-off
// domain keeps its own; after libvirtd restarts vgpud reconnects and goes
// on collecting; vgpuctl release frees a reservation by domain name.
func TestGoneDomainsAreCollected(t *testing.T) {
	r := newRig(t, cfgKeep)
	r.define("keep01", "0f2a4c6e-8a0b-4c1d-9e2f-3a4b5c6d7e01", "mi25-4g", 1)
	r.define("gone01", "0f2a4c6e-8a0b-4c1d-9e2f-3a4b5c6d7e02", "mi25-4g", 1)
	r.waitHeld(2, 5*time.Second, "after two attaches")
	r.mustVirsh("undefine", "gone01")
	held := r.waitHeld(1, 15*time.Second, "after gone01 was undefined")
	for _, who := range held {
		if !strings.HasSuffix(who, " keep01") {
			t.Fatalf("vgpud holds %v; want only keep01's reservation", held)
		}
	}
	if !strings.Contains(r.vgpud.Out.String(), "freed vGPU of a domain gone from libvirt") {
		t.Fatalf("vgpud did not log the collection:\n%s", r.vgpud.Out)
	}

	r.restartLibvirtd()
	r.define("gone02", "0f2a4c6e-8a0b-4c1d-9e2f-3a4b5c6d7e03", "mi25-4g", 1)
	r.waitHeld(2, 5*time.Second, "after attach following a libvirtd restart")
	r.mustVirsh("undefine", "gone02")
	r.waitHeld(1, 30*time.Second, "after gone02 was undefined, libvirtd restarted")

	out := r.mustVgpuctl("release", "keep01")
	if !strings.Contains(out, "freed ") || !strings.Contains(out, "keep01") {
		t.Fatalf("vgpuctl release keep01:\n%s", out)
	}
	r.waitHeld(0, time.Second, "after vgpuctl release")
	if _, errs, code := r.vgpuctl("release", "nosuch01"); code != 2 || !strings.Contains(errs, `nothing for a domain named "nosuch01"`) {
		t.Fatalf("release of an unknown name: exit %d, %s", code, errs)
	}
}
