package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-project/vgpu/pkg/domxml"
	"github.com/vgpu-project/vgpu/pkg/engine"
	"github.com/vgpu-project/vgpu/pkg/ledger"
	"github.com/vgpu-project/vgpu/pkg/ledger/ledgertest"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

func requestedDomain(uuid, name string, active bool, vfs ...string) engine.KnownDomain {
	r := domxml.Request{Profile: "mi25-4g", Count: len(vfs)}
	for i, vf := range vfs {
		r.VGPUs = append(r.VGPUs, domxml.VGPU{Index: i, Kind: vgpu.KindVF, Address: pci.MustParseAddress(vf)})
	}
	return engine.KnownDomain{UUID: uuid, Name: name, Active: active,
		XML: fmt.Appendf(nil, "<domain><name>%s</name><uuid>%s</uuid><metadata>%s</metadata></domain>", name, uuid, r.XML())}
}

// recover-ledger rebuilds an emptied ledger from the host and libvirt's
// domains, keeps the damaged file, leaves a sound ledger alone (unless
// --force), changes nothing on --dry-run, and refuses without libvirt.
func TestRecoverLedger(t *testing.T) {
	c, cfg, path := carvedForRecovery(t)
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	const web, db = "3b0c6d7e-8f90-4a1b-9c2d-3e4f5a6b7c8d", "4c1d7e8f-9011-4b2c-8d3e-4f5a6b7c8d9e"
	c.domains = func(string) ([]engine.KnownDomain, error) {
		return []engine.KnownDomain{
			requestedDomain(web, "web01", true, "0000:03:00.1"),
			requestedDomain(db, "db01", false, "0000:03:00.2", "0000:03:00.3"),
		}, nil
	}

	// Dry run: the empty file stays as it is.
	out := c.ok("recover-ledger", "--config", cfg, "--dry-run")
	if !strings.Contains(out, "would rebuild "+path) {
		t.Errorf("dry run said:\n%s", out)
	}
	if st, err := os.Stat(path); err != nil || st.Size() != 0 {
		t.Fatalf("dry run touched the ledger: %v %v", st, err)
	}

	out = c.ok("recover-ledger", "--config", cfg)
	for _, w := range []string{"carved for the config: 0000:03:00.0 mi25-4g", "0000:03:00.1  mi25-4g  attached  web01", "0000:03:00.3  mi25-4g  reserved  db01", ".damaged-"} {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
	kept, _ := filepath.Glob(path + ".damaged-*")
	if len(kept) != 1 {
		t.Fatalf("kept files %v, want one", kept)
	}
	if st, err := os.Stat(kept[0]); err != nil || st.Size() != 0 {
		t.Errorf("the damaged file was not kept as it was: %v %v", st, err)
	}
	if n := allocationsIn(t, path); n != 3 {
		t.Fatalf("rebuilt ledger holds %d allocations, want 3", n)
	}
	// A sound ledger is left alone, unless --force (which keeps it too).
	_, errs, code := c.run("recover-ledger", "--config", cfg)
	if code != exitUsage || !strings.Contains(errs, "opens and checks fine") {
		t.Errorf("sound ledger: exit %d, %s", code, errs)
	}
	c.ok("recover-ledger", "--config", cfg, "--force", "--dry-run")

	// No libvirt, no rebuild.
	c.domains = func(uri string) ([]engine.KnownDomain, error) { return nil, errors.New("connect to libvirt: refused") }
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	_, errs, code = c.run("recover-ledger", "--config", cfg)
	if code != exitFailed || !strings.Contains(errs, "needs libvirt's domains") {
		t.Errorf("libvirt down: exit %d, %s", code, errs)
	}
	if st, err := os.Stat(path); err != nil || st.Size() != 0 {
		t.Errorf("a refused recovery changed the ledger: %v %v", st, err)
	}
}

// recover-ledger rebuilds a ledger cut short as it does an empty one,
// without mapping the cut file (bbolt would die of SIGBUS reading the
// pages its meta names), and keeps the cut file as it was.
func TestRecoverCutLedger(t *testing.T) {
	for _, cut := range ledgertest.Cuts() {
		t.Run(cut.Name, func(t *testing.T) {
			c, cfg, path := carvedForRecovery(t)
			ledgertest.Grow(t, path, 16<<10)
			if used := ledgertest.InUse(t, path); used <= 24<<10 {
				t.Fatalf("the ledger uses %d bytes: a cut to 24 KiB would lose nothing", used)
			}
			good, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			bad := good[:cut.Size(int64(len(good)))]
			if err := os.WriteFile(path, bad, 0o600); err != nil {
				t.Fatal(err)
			}
			c.domains = func(string) ([]engine.KnownDomain, error) {
				return []engine.KnownDomain{requestedDomain("3b0c6d7e-8f90-4a1b-9c2d-3e4f5a6b7c8d", "web01", true, "0000:03:00.1")}, nil
			}
			// vgpuctl's own carve refuses it as vgpud does, and leaves it.
			if _, errs, code := c.run("carve", "0000:03:00.0", "--profile", "mi25-4g"); code != exitFailed ||
				!strings.Contains(errs, "ledger is damaged") || !strings.Contains(errs, "recover-ledger") {
				t.Fatalf("carve on the cut ledger: exit %d: %s", code, errs)
			}
			out := c.ok("recover-ledger", "--config", cfg)
			if !strings.Contains(out, "0000:03:00.1  mi25-4g  attached  web01") {
				t.Errorf("recover-ledger said:\n%s", out)
			}
			kept, _ := filepath.Glob(path + ".damaged-*")
			if len(kept) != 1 {
				t.Fatalf("kept files %v, want one", kept)
			}
			if b, _ := os.ReadFile(kept[0]); !bytes.Equal(b, bad) {
				t.Errorf("%s is not the cut ledger as it was", kept[0])
			}
			if n := allocationsIn(t, path); n != 1 {
				t.Fatalf("rebuilt ledger holds %d allocations, want 1", n)
			}
		})
	}
}

// allocationsIn counts the allocations of the ledger at path.
func allocationsIn(t *testing.T, path string) int {
	t.Helper()
	l, err := ledger.Open(path, ledger.WithReadOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	as, err := l.Allocations()
	if err != nil {
		t.Fatal(err)
	}
	return len(as)
}

// carvedForRecovery is a CLI whose vgpuctl carved mi25-4g as its config
// (cfg) says, with the ledger at path.
func carvedForRecovery(t *testing.T) (c *cli, cfg, path string) {
	t.Helper()
	c = newCLI(t, "mixed.yaml")
	cfg = filepath.Join(c.state, "config.yaml")
	if err := os.WriteFile(cfg, []byte("version: v1\ngpus:\n  - address: 0000:03:00.0\n    profile: mi25-4g\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c.ok("carve", "0000:03:00.0", "--profile", "mi25-4g")
	return c, cfg, filepath.Join(c.state, engine.LedgerFile)
}
