package libvirt

import (
	"bytes"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/pkg/ledger/ledgertest"
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
// on collecting; vgpuctl release frees a reservation by domain name, and
// a name that holds nothing "held nothing".
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
	// Nothing to free is success, by name as by UUID.
	if out, errs, code := r.vgpuctl("release", "nosuch01"); code != 0 || !strings.Contains(out, "domain nosuch01 held nothing") {
		t.Fatalf("release of an unknown name: exit %d, %s%s", code, out, errs)
	}
}

// TestLedgerRecovered: vgpud refuses a ledger emptied or cut short while
// it was stopped (a crash or a full disk while it was written or copied):
// one line that says it is damaged and what to do, exit 1, the file left
// as it is, never bbolt's SIGBUS; vgpuctl recover-ledger rebuilds it from
// the host and the rig's libvirtd, keeps the damaged file, and vgpud
// starts on the new ledger holding what it held before.
func TestLedgerRecovered(t *testing.T) {
	r := newRig(t, cfgKeep)
	r.define("keep01", "0f2a4c6e-8a0b-4c1d-9e2f-3a4b5c6d7e11", "mi25-4g", 1)
	r.define("keep02", "0f2a4c6e-8a0b-4c1d-9e2f-3a4b5c6d7e12", "mi25-4g", 2)
	// An mdev domain holds nothing until it starts (its mdev is made then).
	r.define("later01", "0f2a4c6e-8a0b-4c1d-9e2f-3a4b5c6d7e13", "t4-4q", 1)
	before := r.waitHeld(3, 5*time.Second, "after the attaches")
	r.stopVgpud()
	ledgerPath := filepath.Join(r.state, "ledger.db")
	// The rig's ledger uses 24 KiB; a busy host's grows past that. A
	// bucket vgpud does not read grows this one, for the first cut (24
	// KiB); the later ones cut the rebuilt ledger.
	ledgertest.Grow(t, ledgerPath, 16<<10)
	cuts := append(ledgertest.Cuts(), ledgertest.Cut{Name: "empty", Size: func(int64) int64 { return 0 }})
	for _, cut := range cuts {
		ok := t.Run(cut.Name, func(t *testing.T) {
			good, err := os.ReadFile(ledgerPath)
			if err != nil {
				t.Fatal(err)
			}
			used := ledgertest.InUse(t, ledgerPath)
			size := cut.Size(int64(len(good)))
			if size >= used {
				t.Fatalf("the ledger (%d bytes) uses %d: a cut to %d bytes loses nothing", len(good), used, size)
			}
			bad := good[:size]
			if err := os.WriteFile(ledgerPath, bad, 0o600); err != nil {
				t.Fatal(err)
			}
			p, err := spawn(built.vgpud, "--sysfs-root", r.sim.Mnt, "--state-dir", r.state, "--socket", r.socket, "--config", r.cfg, "--libvirt-uri", "")
			if err != nil {
				t.Fatal(err)
			}
			werr := p.Wait(time.Minute)
			out := p.Out.String()
			if werr != nil || p.ExitCode() != 1 || !strings.Contains(out, "ledger is damaged") || !strings.Contains(out, "vgpuctl recover-ledger") ||
				strings.Count(strings.TrimSpace(out), "\n") != 0 {
				_ = p.Kill()
				t.Fatalf("vgpud on a ledger cut to %d of %d bytes: %v, exit %d:\n%s\nwant exit 1 and one line: damaged, what to do",
					size, len(good), werr, p.ExitCode(), out)
			}
			t.Logf("vgpud on a ledger cut to %d of %d bytes (%d in use): %s", size, len(good), used, out)
			if after, _ := os.ReadFile(ledgerPath); !bytes.Equal(after, bad) {
				t.Fatal("vgpud changed the damaged ledger")
			}

			kept, _ := filepath.Glob(ledgerPath + ".damaged-*")
			out = r.mustVgpuctl("recover-ledger", "-c", r.uri, "--config", r.cfg)
			if !strings.Contains(out, "keep01") || !strings.Contains(out, "keep02") || !strings.Contains(out, "the old file is kept as") {
				t.Fatalf("recover-ledger:\n%s", out)
			}
			now, _ := filepath.Glob(ledgerPath + ".damaged-*")
			added := slices.DeleteFunc(now, func(f string) bool { return slices.Contains(kept, f) })
			if len(added) != 1 {
				t.Fatalf("kept files %v, before %v; want the damaged ledger kept once more", now, kept)
			}
			if b, _ := os.ReadFile(added[0]); !bytes.Equal(b, bad) {
				t.Fatalf("%s is not the damaged ledger as it was", added[0])
			}
			r.startVgpud()
			if after := r.held(); !maps.Equal(after, before) {
				t.Fatalf("after the recovery vgpud holds %v; before the damage %v", after, before)
			}
			r.stopVgpud()
		})
		if !ok {
			return
		}
	}
}
