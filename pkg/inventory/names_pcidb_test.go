package inventory_test

import (
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jaypipes/pcidb"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/pkg/inventory"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/sriov"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// pcidbNames is what ghw's pcidb, which Names replaced, gives for a file:
// the reference the lookups must match.
type pcidbNames struct{ db *pcidb.DB }

func loadPcidb(t testing.TB, path string) pcidbNames {
	t.Helper()
	db, err := pcidb.New(pcidb.WithPath(path))
	if err != nil {
		t.Fatalf("pcidb %s: %v", path, err)
	}
	return pcidbNames{db}
}

// The fallbacks are Names': pcidb has no name, or an empty one.
func (p pcidbNames) vendor(id uint16) string {
	if v, ok := p.db.Vendors[hex4(id)]; ok && v.Name != "" {
		return v.Name
	}
	return "0x" + hex4(id)
}

func (p pcidbNames) device(vendor, device uint16) string {
	if d, ok := p.db.Products[hex4(vendor)+hex4(device)]; ok && d.Name != "" {
		return d.Name
	}
	return "0x" + hex4(device)
}

func hex4(id uint16) string {
	s := strconv.FormatUint(uint64(id), 16)
	for len(s) < 4 {
		s = "0" + s
	}
	return s
}

func parseHex4(s string) (uint16, bool) {
	if len(s) != 4 {
		return 0, false
	}
	v, err := strconv.ParseUint(s, 16, 16)
	return uint16(v), err == nil
}

func systemPCIIDs(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat(inventory.DebianPCIIDs); err != nil {
		t.Fatalf("%s is missing (%v): run the project setup script or apt-get install pci.ids", inventory.DebianPCIIDs, err)
	}
	return inventory.DebianPCIIDs
}

// systemNames is the system's pci.ids (systemPCIIDs) as pcidb reads it,
// the reference, and as LoadNames does.
func systemNames(t *testing.T) (path string, ref pcidbNames, n *inventory.Names) {
	t.Helper()
	path = systemPCIIDs(t)
	ref = loadPcidb(t, path)
	n, err := inventory.LoadNames(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, ref, n
}

// TestNamesMatchPcidbEverywhere looks up every vendor and device of the
// system's pci.ids, and for each device one its vendor lacks, in both.
func TestNamesMatchPcidbEverywhere(t *testing.T) {
	path, ref, n := systemNames(t)
	if len(ref.db.Vendors) < 1000 || len(ref.db.Products) < 10000 {
		t.Fatalf("%s has %d vendors and %d devices: not a full pci.ids", path, len(ref.db.Vendors), len(ref.db.Products))
	}
	for key := range ref.db.Vendors {
		id, ok := parseHex4(key)
		if !ok {
			continue
		}
		if got, want := n.Vendor(id), ref.vendor(id); got != want {
			t.Errorf("Vendor(%04x) = %q, pcidb %q", id, got, want)
		}
	}
	for key := range ref.db.Products {
		v, ok1 := parseHex4(key[:4])
		d, ok2 := parseHex4(key[4:])
		if !ok1 || !ok2 {
			continue
		}
		if got, want := n.Device(v, d), ref.device(v, d); got != want {
			t.Errorf("Device(%04x:%04x) = %q, pcidb %q", v, d, got, want)
		}
		if got, want := n.Device(v, d^0x8000), ref.device(v, d^0x8000); got != want {
			t.Errorf("Device(%04x:%04x) = %q, pcidb %q", v, d^0x8000, got, want)
		}
	}
}

// simulatedIDs are the vendor and device ids of every PCI function, and of
// every PF's VFs, on the example hosts.
func simulatedIDs(t *testing.T) map[[2]uint16]bool {
	t.Helper()
	files, err := filepath.Glob(hostsDir + "*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no example hosts in %s: %v", hostsDir, err)
	}
	ids := map[[2]uint16]bool{}
	for _, file := range files {
		h, err := simkernel.LoadHost(file)
		if err != nil {
			t.Fatal(err)
		}
		k, err := simkernel.New(h)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		entries, err := sysfs.Names(k, sysfs.PCIDevices)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			a, err := pci.ParseAddress(e)
			if err != nil {
				t.Fatal(err)
			}
			v, d, _, err := pci.ReadIDs(k, a)
			if err != nil {
				t.Fatal(err)
			}
			ids[[2]uint16{v, d}] = true
			if ok, err := sriov.IsPF(k, a); err != nil {
				t.Fatal(err)
			} else if ok {
				vf, err := sriov.VFDeviceID(k, a)
				if err != nil {
					t.Fatal(err)
				}
				ids[[2]uint16{v, vf}] = true
			}
		}
	}
	return ids
}

// TestNamesMatchPcidbOnSimulatedHosts: the ids the simulated hosts show,
// named from the system's pci.ids as pcidb names them.
func TestNamesMatchPcidbOnSimulatedHosts(t *testing.T) {
	path, ref, n := systemNames(t)
	ids := simulatedIDs(t)
	for _, must := range [][2]uint16{{0x10de, 0x1eb8}, {0x1002, 0x6929}, {0x8086, 0x10c9}} {
		if !ids[must] {
			t.Errorf("the example hosts lack %04x:%04x: the walk missed devices", must[0], must[1])
		}
	}
	named := 0
	for id := range ids {
		gotV, wantV := n.Vendor(id[0]), ref.vendor(id[0])
		gotD, wantD := n.Device(id[0], id[1]), ref.device(id[0], id[1])
		if gotV != wantV || gotD != wantD {
			t.Errorf("%04x:%04x = %q / %q, pcidb %q / %q", id[0], id[1], gotV, gotD, wantV, wantD)
		}
		if wantD != "0x"+hex4(id[1]) {
			named++
		}
	}
	if named < len(ids)/2 {
		t.Errorf("only %d of %d simulated ids have a name in %s", named, len(ids), path)
	}
	t.Logf("%d ids from the example hosts, %d named", len(ids), named)
}

// TestNamesMatchPcidbOnOddFiles: what a hand-written or damaged file may
// hold — a vendor named twice, comments and blank lines inside a block, CRLF,
// classes between vendors, names in UTF-8 and not, a vendor on the first
// line — is read as pcidb reads it, plain and gzip-compressed.
func TestNamesMatchPcidbOnOddFiles(t *testing.T) {
	ids := "1234  First Vendor\n" +
		"\t0001  Device one\n" +
		"\t\t1234 0001  Subsystem one\n" +
		"# a comment inside the block\n" +
		"\n" +
		"\t0002  Device two\r\n" +
		"\t0003  \xffBad UTF-8 é\n" +
		"\t0004  \n" +
		"abcd  Vendor ABCD\n" +
		"\t0001  ABCD one\n" +
		"C 03  Display controller\n" +
		"\t00  VGA compatible controller\n" +
		"\t\t00  VGA controller\n" +
		"1234  Second Name\n" +
		"\t0002  Device two, renamed\n" +
		"\t0005  Device five\n" +
		"1234  \n" +
		"\t0006  Device six\n" +
		"5678  Vendor 5678\n" +
		"\t0001  5678 one"
	dir := t.TempDir()
	plain := filepath.Join(dir, "pci.ids")
	if err := os.WriteFile(plain, []byte(ids), 0o644); err != nil {
		t.Fatal(err)
	}
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	if _, err := w.Write([]byte(ids)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	compressed := filepath.Join(dir, "pci.ids.gz")
	if err := os.WriteFile(compressed, gz.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	ref := loadPcidb(t, plain)
	for _, path := range []string{plain, compressed} {
		n, err := inventory.LoadNames(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range []uint16{0x1234, 0xabcd, 0x5678, 0x0003, 0x0000} {
			if got, want := n.Vendor(v), ref.vendor(v); got != want {
				t.Errorf("%s: Vendor(%04x) = %q, pcidb %q", path, v, got, want)
			}
			for d := range uint16(8) {
				if got, want := n.Device(v, d), ref.device(v, d); got != want {
					t.Errorf("%s: Device(%04x:%04x) = %q, pcidb %q", path, v, d, got, want)
				}
			}
		}
		// What pcidb gives, spelled out, so the reference cannot drift.
		for _, c := range []struct{ got, want string }{
			{n.Vendor(0x1234), "0x1234"}, // the last line naming it has no name
			{n.Device(0x1234, 0x0002), "Device two, renamed"},
			{n.Device(0x1234, 0x0001), "Device one"},
			{n.Device(0x1234, 0x0006), "Device six"},
			{n.Device(0x1234, 0x0003), "\uFFFDBad UTF-8 é"},
			{n.Device(0x1234, 0x0004), "0x0004"},
			{n.Vendor(0x5678), "Vendor 5678"},
			{n.Device(0x5678, 0x0001), "5678 one"},
			{n.Device(0xabcd, 0x0000), "0x0000"},
		} {
			if c.got != c.want {
				t.Errorf("%s: got %q, want %q", path, c.got, c.want)
			}
		}
	}

	// Lines too short for a name, on which pcidb panics, name nothing.
	short := filepath.Join(dir, "short.ids")
	if err := os.WriteFile(short, []byte("1234\n\t0001\n\t\n9abc  Vendor\n\t0001 x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	n, err := inventory.LoadNames(short)
	if err != nil {
		t.Fatal(err)
	}
	if got := n.Vendor(0x1234) + " " + n.Device(0x1234, 1) + " " + n.Vendor(0x9abc) + " " + n.Device(0x9abc, 1); got != "0x1234 0x0001 Vendor 0x0001" {
		t.Errorf("short lines: %q", got)
	}
}

// BenchmarkNames is what naming the GPUs of a host costs: load the
// system's pci.ids and name an NVIDIA H200, an AMD MI300X and an Intel Arc
// Pro B60. BenchmarkNamesPcidb does the same with ghw's pcidb, which parses
// the whole file (vgpuctl's way before). cpu-ns/op is the process's CPU
// time per op, which a busy machine inflates less than ns/op.
func BenchmarkNames(b *testing.B) {
	cpu := cpuTime(b)
	for range b.N {
		n, err := inventory.LoadNames(inventory.DebianPCIIDs)
		if err != nil {
			b.Fatal(err)
		}
		for _, id := range benchIDs() {
			_, _ = n.Vendor(id[0]), n.Device(id[0], id[1])
		}
	}
	cpu()
}

func BenchmarkNamesPcidb(b *testing.B) {
	cpu := cpuTime(b)
	for range b.N {
		ref := loadPcidb(b, inventory.DebianPCIIDs)
		for _, id := range benchIDs() {
			_, _ = ref.vendor(id[0]), ref.device(id[0], id[1])
		}
	}
	cpu()
}

// cpuTime starts counting the process's CPU time; the function it returns
// reports it per op.
func cpuTime(b *testing.B) func() {
	b.Helper()
	used := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	start := used()
	return func() { b.ReportMetric(float64(used()-start)/float64(b.N), "cpu-ns/op") }
}

// benchIDs: an NVIDIA H200, an AMD MI300X, an Intel Arc Pro B60.
func benchIDs() [][2]uint16 { return [][2]uint16{{0x10de, 0x2335}, {0x1002, 0x74a1}, {0x8086, 0xe211}} }
