package inventory

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"sync"
)

// Where distributions install the pci.ids database: Debian's pci.ids
// package, and Fedora's hwdata; some install it compressed.
const (
	DebianPCIIDs = "/usr/share/misc/pci.ids"
	hwdataPCIIDs = "/usr/share/hwdata/pci.ids"
)

// Names turns PCI ids into vendor and device names from a pci.ids file.
// A nil *Names is valid and names everything by its hex id.
//
// The file is read once and searched for the vendors asked, rather than
// parsed whole: a host has a few GPU models, the file tens of thousands of
// entries, and parsing them all was most of what `vgpuctl gpus` cost.
// Names are what ghw's pcidb gives for the same file (the tests compare
// every entry of the system's pci.ids).
type Names struct {
	data []byte // the file, decompressed

	mu      sync.Mutex
	starts  []int // where the vendor lines start; nil until a vendor is asked
	vendors map[uint16]vendorEntry
}

// vendorEntry is a vendor's name and where its devices' lines start. A
// file may name a vendor twice: as in pcidb, the last name wins, and the
// devices of every block count, the last line of a device winning.
type vendorEntry struct {
	name    string
	devices map[uint16]int
}

// LoadNames reads a pci.ids file (gzip-compressed when its name ends in
// .gz); path "" means the system's. It never fetches from the network: a
// host without the file gets a clear error (install Debian's pci.ids
// package) and callers may go on with nil Names.
func LoadNames(path string) (*Names, error) {
	if path == "" {
		for _, p := range []string{DebianPCIIDs, hwdataPCIIDs, DebianPCIIDs + ".gz", hwdataPCIIDs + ".gz"} {
			if _, err := os.Stat(p); err == nil {
				path = p
				break
			}
		}
		if path == "" {
			return nil, fmt.Errorf("load PCI names: no pci.ids at %s or %s (apt-get install pci.ids): %w",
				DebianPCIIDs, hwdataPCIIDs, fs.ErrNotExist)
		}
	}
	data, err := readPCIIDs(path)
	if err != nil {
		return nil, fmt.Errorf("load PCI names from %s: %w", path, err)
	}
	if !hasVendor(data) {
		return nil, fmt.Errorf("load PCI names from %s: %w", path, errors.New("no vendors in the file"))
	}
	return &Names{data: data, vendors: map[uint16]vendorEntry{}}, nil
}

func readPCIIDs(path string) ([]byte, error) {
	if !strings.HasSuffix(path, ".gz") {
		return os.ReadFile(path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		return nil, err
	}
	return io.ReadAll(z)
}

// Vendor names a vendor id ("NVIDIA Corporation"), or "0x10de" if unknown.
func (n *Names) Vendor(id uint16) string {
	if n != nil {
		if name := n.vendor(id).name; name != "" {
			return name
		}
	}
	return fmt.Sprintf("0x%04x", id)
}

// Device names a device ("TU104GL [Tesla T4]"), or "0x1eb8" if unknown.
func (n *Names) Device(vendor, device uint16) string {
	if n != nil {
		if name := n.device(vendor, device); name != "" {
			return name
		}
	}
	return fmt.Sprintf("0x%04x", device)
}

func (n *Names) device(vendor, device uint16) string {
	at, ok := n.vendor(vendor).devices[device]
	if !ok {
		return ""
	}
	line, _ := lineAt(n.data, at)
	return field(line, 7)
}

// vendor reads the blocks of the lines naming the vendor: its devices are
// the lines with one tab up to the next line that is neither indented, a
// comment nor blank, as pcidb reads the file.
func (n *Names) vendor(id uint16) vendorEntry {
	n.mu.Lock()
	defer n.mu.Unlock()
	if v, ok := n.vendors[id]; ok {
		return v
	}
	if n.starts == nil {
		n.starts = vendorLines(n.data)
	}
	v := vendorEntry{devices: map[uint16]int{}}
	for _, start := range n.starts {
		if got, _ := lowerHex4(n.data[start : start+4]); got != id {
			continue
		}
		line, at := lineAt(n.data, start)
		v.name = field(line, 6)
		for at < len(n.data) {
			l, next := lineAt(n.data, at)
			if len(l) > 0 && l[0] != '\t' && l[0] != '#' {
				break
			}
			// A device line has one tab; two are a subsystem.
			if len(l) >= 5 && l[0] == '\t' && l[1] != '\t' {
				if d, ok := lowerHex4(l[1:5]); ok {
					v.devices[d] = at
				}
			}
			at = next
		}
	}
	n.vendors[id] = v
	return v
}

// vendorLines finds where the vendor lines of a pci.ids file start: lines
// that are not blank, a comment, indented or a class ("C 03  Display
// controller"), and start with an id.
func vendorLines(data []byte) []int {
	starts := make([]int, 0, 4096)
	for at := 0; at < len(data); {
		line, next := lineAt(data, at)
		if len(line) >= 4 && line[0] != '#' && line[0] != '\t' && line[0] != 'C' {
			if _, ok := lowerHex4(line[:4]); ok {
				starts = append(starts, at)
			}
		}
		at = next
	}
	return starts
}

// lineAt is the line starting at data[at], without its "\n" or a "\r"
// before it (as bufio.ScanLines, which pcidb reads with), and where the
// next line starts.
func lineAt(data []byte, at int) (line []byte, next int) {
	i := bytes.IndexByte(data[at:], '\n')
	if i < 0 {
		line, next = data[at:], len(data)
	} else {
		line, next = data[at:at+i], at+i+1
	}
	return bytes.TrimSuffix(line, []byte("\r")), next
}

// field is the line from its skip-th character on, counted in runes (as
// pcidb does: invalid UTF-8 becomes U+FFFD), "" for a shorter line.
func field(line []byte, skip int) string {
	r := []rune(string(line))
	if len(r) <= skip {
		return ""
	}
	return string(r[skip:])
}

// lowerHex4 parses an id as pci.ids writes it and pcidb keys it: four
// lower-case hex digits.
func lowerHex4(b []byte) (uint16, bool) {
	var v uint16
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | uint16(c-'0')
		case c >= 'a' && c <= 'f':
			v = v<<4 | uint16(c-'a'+10)
		default:
			return 0, false
		}
	}
	return v, len(b) == 4
}

// hasVendor reports whether the file has a vendor line: one that is not
// blank, a comment, indented or a class ("C 03  Display controller").
func hasVendor(data []byte) bool {
	for at := 0; at < len(data); {
		line, next := lineAt(data, at)
		if len(line) > 0 && line[0] != '#' && line[0] != '\t' && line[0] != 'C' {
			return true
		}
		at = next
	}
	return false
}
