package pci

import (
	"fmt"
	"strings"
	"testing"
)

func TestParseAddress(t *testing.T) {
	good := map[string]string{
		"0000:03:00.0":  "0000:03:00.0",
		"03:00.0":       "0000:03:00.0",
		"0000:3B:1F.7":  "0000:3b:1f.7",
		"0001:af:00.4":  "0001:af:00.4",
		"10000:00:02.0": "10000:00:02.0",
	}
	for in, want := range good {
		a, err := ParseAddress(in)
		if err != nil {
			t.Errorf("ParseAddress(%q): %v", in, err)
			continue
		}
		if a.String() != want {
			t.Errorf("ParseAddress(%q) = %s, want %s", in, a, want)
		}
	}
	bad := map[string]string{
		"":                "separators",
		"0000:03:00":      "device.function",
		"0000:03:20.0":    "device must be",
		"0000:03:00.8":    "function must be",
		"0000:3:00.0":     "bus must be",
		"zzzz:03:00.0":    "domain is not hex",
		"0000:03:00.0x":   "device.function",
		"a:b:c:d":         "separators",
		" 0000:86:00.0\n": "whitespace around it",
		"0000:86:00.0 ":   "whitespace around it",
		"\t03:00.0":       "whitespace around it",
	}
	for in, want := range bad {
		_, err := ParseAddress(in)
		if err == nil {
			t.Errorf("ParseAddress(%q) succeeded, want error", in)
			continue
		}
		if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "DDDD:BB:DD.F") {
			t.Errorf("ParseAddress(%q) error %q does not say %q", in, err, want)
		}
	}
}

func TestAddressTextRoundTrip(t *testing.T) {
	a := MustParseAddress("0000:3d:00.1")
	b, _ := a.MarshalText()
	var c Address
	if err := c.UnmarshalText(b); err != nil || c != a {
		t.Fatalf("round trip %s -> %q -> %s, %v", a, b, c, err)
	}
	if !MustParseAddress("0000:03:00.0").Less(a) || a.Less(a) {
		t.Fatal("Less does not order by bus")
	}
}

func FuzzParseAddress(f *testing.F) {
	for _, s := range []string{"0000:03:00.0", "03:00.0", "ffff:ff:1f.7", "", "0:0:0.0", "0000:03:00.08", " 0000:86:00.0\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseAddress(s)
		if err != nil {
			return
		}
		if strings.TrimSpace(s) != s {
			t.Fatalf("%q, with whitespace around it, parsed as %v", s, a)
		}
		// A parsed address prints canonically and parses back to itself.
		b, err := ParseAddress(a.String())
		if err != nil {
			t.Fatalf("canonical %q of %q does not parse: %v", a.String(), s, err)
		}
		if a != b {
			t.Fatalf("%q -> %v -> %q -> %v", s, a, a.String(), b)
		}
		if a.Device > 0x1f || a.Function > 7 {
			t.Fatalf("%q parsed out of range: %v", s, a)
		}
	})
}

// TestAddressStringAsFmt checks the hand-made String against the format
// it replaces, on every field's edges, wide domains and functions too.
func TestAddressStringAsFmt(t *testing.T) {
	for _, d := range []uint32{0, 1, 0xa, 0xff, 0x100, 0xabcd, 0xffff, 0x10000, 0xffffffff} {
		for _, b := range []uint8{0, 0x9, 0x3b, 0xff} {
			for _, dev := range []uint8{0, 0x1f, 0xff} {
				for _, f := range []uint8{0, 7, 0xf, 0x10, 0xff} {
					a := Address{Domain: d, Bus: b, Device: dev, Function: f}
					want := fmt.Sprintf("%04x:%02x:%02x.%x", d, b, dev, f)
					if got := a.String(); got != want {
						t.Errorf("%#v.String() = %q, want %q", a, got, want)
					}
				}
			}
		}
	}
}
