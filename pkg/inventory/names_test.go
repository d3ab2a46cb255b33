package inventory

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// systemNames loads the host's pci.ids; the project's setup script
// installs Debian's pci.ids package.
func systemNames(t *testing.T) *Names {
	t.Helper()
	if _, err := os.Stat(DebianPCIIDs); err != nil {
		t.Fatalf("%s is missing (%v): run the project setup script or apt-get install pci.ids", DebianPCIIDs, err)
	}
	n, err := LoadNames("")
	if err != nil {
		t.Fatalf("LoadNames: %v", err)
	}
	return n
}

func TestNamesSystem(t *testing.T) {
	n := systemNames(t)
	if got := n.Vendor(0x10de); got != "NVIDIA Corporation" {
		t.Errorf("Vendor(0x10de) = %q", got)
	}
	if got := n.Device(0x10de, 0x1eb8); got != "TU104GL [Tesla T4]" {
		t.Errorf("Device(10de:1eb8) = %q", got)
	}
	if got := n.Device(0x1002, 0x6929); got == "0x6929" {
		t.Errorf("Device(1002:6929) has no name: %q", got)
	}
	if got := n.Vendor(0xfff0); got != "0xfff0" {
		t.Errorf("unknown vendor = %q, want hex", got)
	}
	if got := n.Device(0x10de, 0xfffe); got != "0xfffe" {
		t.Errorf("unknown device = %q, want hex", got)
	}
	// A device id is looked up under its vendor, not on its own.
	if got := n.Device(0x8086, 0x1eb8); got == "TU104GL [Tesla T4]" {
		t.Errorf("Device(8086:1eb8) took NVIDIA's name")
	}
}

func TestNamesNil(t *testing.T) {
	var n *Names
	if got := n.Vendor(0x10de); got != "0x10de" {
		t.Errorf("nil Vendor = %q", got)
	}
	if got := n.Device(0x10de, 0x0a); got != "0x000a" {
		t.Errorf("nil Device = %q", got)
	}
}

func TestLoadNamesFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "pci.ids")
	ids := "# test\n1234  Test Vendor\n\t5678  Test GPU\n\t\t1234 0001  Subsystem\nC 03  Display controller\n\t00  VGA compatible controller\n"
	if err := os.WriteFile(p, []byte(ids), 0o644); err != nil {
		t.Fatal(err)
	}
	n, err := LoadNames(p)
	if err != nil {
		t.Fatal(err)
	}
	if n.Vendor(0x1234) != "Test Vendor" || n.Device(0x1234, 0x5678) != "Test GPU" {
		t.Errorf("got %q / %q", n.Vendor(0x1234), n.Device(0x1234, 0x5678))
	}
	if n.Vendor(0x10de) != "0x10de" {
		t.Errorf("a vendor absent from the file = %q", n.Vendor(0x10de))
	}

	_, err = LoadNames(filepath.Join(dir, "missing.ids"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v, want fs.ErrNotExist", err)
	}
	empty := filepath.Join(dir, "empty.ids")
	if err := os.WriteFile(empty, []byte("# nothing\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadNames(empty); err == nil {
		t.Error("a file without vendors loaded")
	}
}
