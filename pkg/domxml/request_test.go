package domxml

import (
	"errors"
	"strings"
	"testing"

	"libvirt.org/go/libvirtxml"

	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

func vf(i int, addr string) VGPU { return PCIVGPU(i, vgpu.KindVF, pci.MustParseAddress(addr)) }

func TestRequestGolden(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    Request
	}{
		{"vf", Request{Profile: "mi25-4g", Count: 2, VGPUs: []VGPU{vf(0, "0000:03:00.2"), vf(1, "0000:03:00.3")}}},
		{"mdev", Request{Profile: "t4-4q", Count: 1, VGPUs: []VGPU{mustMdev(t, web01, 0)}}},
		{"unassigned", Request{Profile: "l40s-12q", Count: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			golden(t, "request-"+tc.name+".xml", []byte(tc.r.XML()+"\n"))
			got, err := ParseRequest(fixture(t, "request-"+tc.name+".xml"))
			if err != nil || !got.Equal(tc.r) {
				t.Fatalf("read back %+v, %v; want %+v", got, err, tc.r)
			}
		})
	}
}

func TestParseRequest(t *testing.T) {
	const ns = `xmlns:v="` + Namespace + `"`
	for _, tc := range []struct {
		name, xml string
		want      *Request // nil: an ErrInvalid error containing msg
		msg       string
	}{
		{"any prefix, sorted by index", `<v:request ` + ns + ` profile="mi25-4g" count="2"><v:vgpu index="1" kind="vf" id="03:00.3"/><v:vgpu index="0" kind="vf" id="0000:03:00.2"/></v:request>`,
			&Request{Profile: "mi25-4g", Count: 2, VGPUs: []VGPU{vf(0, "0000:03:00.2"), vf(1, "0000:03:00.3")}}, ""},
		{"default namespace", `<request xmlns="` + Namespace + `" profile="t4-4q" count="1"/>`, &Request{Profile: "t4-4q", Count: 1}, ""},
		{"unknown attributes and children are ignored", `<v:request ` + ns + ` profile="t4-4q" count="1" future="x"><v:hint/></v:request>`,
			&Request{Profile: "t4-4q", Count: 1}, ""},
		{"mdev UUID in upper case", `<v:request ` + ns + ` profile="t4-4q" count="1"><v:vgpu index="0" kind="mdev" id="8BA0F263-CCC3-5181-8CB1-C925E7EDA99B"/></v:request>`,
			&Request{Profile: "t4-4q", Count: 1, VGPUs: []VGPU{mustMdev(t, web01, 0)}}, ""},
		{"wrong namespace", `<request xmlns="urn:other" profile="t4-4q" count="1"/>`, nil, "expected element"},
		{"no namespace", `<request profile="t4-4q" count="1"/>`, nil, "expected element"},
		{"not XML", `<v:request`, nil, "read the vgpu request"},
		{"no profile", `<v:request ` + ns + ` count="1"/>`, nil, `profile ""`},
		{"bad profile", `<v:request ` + ns + ` profile="T4 4Q" count="1"/>`, nil, `profile "T4 4Q"`},
		{"no count", `<v:request ` + ns + ` profile="t4-4q"/>`, nil, `count "" is not a number`},
		{"zero count", `<v:request ` + ns + ` profile="t4-4q" count="0"/>`, nil, "count 0: want 1 to 64"},
		{"huge count", `<v:request ` + ns + ` profile="t4-4q" count="65"/>`, nil, "count 65"},
		{"more vGPUs than count", `<v:request ` + ns + ` profile="mi25-4g" count="1"><v:vgpu index="0" kind="vf" id="0000:03:00.2"/><v:vgpu index="1" kind="vf" id="0000:03:00.3"/></v:request>`, nil, "lists 2 vGPUs"},
		{"duplicate index", `<v:request ` + ns + ` profile="mi25-4g" count="2"><v:vgpu index="0" kind="vf" id="0000:03:00.2"/><v:vgpu index="0" kind="vf" id="0000:03:00.3"/></v:request>`, nil, "listed twice"},
		{"duplicate id", `<v:request ` + ns + ` profile="mi25-4g" count="2"><v:vgpu index="0" kind="vf" id="0000:03:00.2"/><v:vgpu index="1" kind="vf" id="0000:03:00.2"/></v:request>`, nil, "listed twice"},
		{"unknown kind", `<v:request ` + ns + ` profile="mi25-4g" count="1"><v:vgpu index="0" kind="gpu" id="0000:03:00.2"/></v:request>`, nil, `unknown kind "gpu"`},
		{"bad address", `<v:request ` + ns + ` profile="mi25-4g" count="1"><v:vgpu index="0" kind="vf" id="03:00"/></v:request>`, nil, `invalid PCI address "03:00"`},
		{"bad uuid", `<v:request ` + ns + ` profile="t4-4q" count="1"><v:vgpu index="0" kind="mdev" id="0000:03:00.2"/></v:request>`, nil, "is not a UUID"},
		{"bad index", `<v:request ` + ns + ` profile="t4-4q" count="1"><v:vgpu index="x" kind="vf" id="0000:03:00.2"/></v:request>`, nil, `index "x"`},
		{"negative index", `<v:request ` + ns + ` profile="t4-4q" count="1"><v:vgpu index="-1" kind="vf" id="0000:03:00.2"/></v:request>`, nil, "index -1"},
		{"mixed shapes", `<v:request ` + ns + ` profile="t4-4q" count="2"><v:vgpu index="0" kind="vf" id="0000:03:00.2"/><v:vgpu index="1" kind="mdev" id="` + mustMdev(t, web01, 1).UUID + `"/></v:request>`, nil, "mixes mdev and PCI"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseRequest([]byte(tc.xml))
			if tc.want == nil {
				if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.msg) {
					t.Fatalf("error %v; want ErrInvalid with %q", err, tc.msg)
				}
				return
			}
			if err != nil || !got.Equal(*tc.want) {
				t.Fatalf("got %+v, %v; want %+v", got, err, *tc.want)
			}
		})
	}
}

func TestRequestArithmetic(t *testing.T) {
	r := Request{Profile: "mi25-4g", Count: 3, VGPUs: []VGPU{vf(0, "0000:03:00.2"), vf(2, "0000:03:00.4")}}
	if got := r.FreeIndices(3); len(got) != 3 || got[0] != 1 || got[1] != 3 || got[2] != 4 {
		t.Fatalf("FreeIndices = %v, want [1 3 4]", got)
	}
	r2, err := r.Add(vf(1, "0000:03:00.3"), vf(3, "0000:03:00.5"))
	if err != nil || r2.Count != 4 || len(r2.VGPUs) != 4 || r2.VGPUs[1].ID() != "0000:03:00.3" {
		t.Fatalf("Add: %+v, %v", r2, err)
	}
	if len(r.VGPUs) != 2 {
		t.Fatal("Add changed its receiver")
	}
	if _, err := r.Add(vf(1, "0000:03:00.2")); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Add of a vGPU it has: %v", err)
	}
	r3, ok := r2.Remove("0000:03:00.2", "0000:99:00.0")
	if !ok || r3.Count != 3 || r3.Has("0000:03:00.2") || !r3.Has("0000:03:00.5") {
		t.Fatalf("Remove: %+v %v", r3, ok)
	}
	if _, ok := r3.Remove("0000:03:00.3", "0000:03:00.4", "0000:03:00.5"); ok {
		t.Fatal("removing every vGPU left a request")
	}
}

func TestReadWriteRequestLibvirtxml(t *testing.T) {
	var d libvirtxml.Domain
	if err := d.Unmarshal(string(fixture(t, "domain-plain.xml"))); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := ReadRequest(&d); ok || err != nil {
		t.Fatalf("plain domain: ok %v, %v", ok, err)
	}
	osinfo := d.Metadata.XML
	r := Request{Profile: "mi25-4g", Count: 1, VGPUs: []VGPU{vf(0, "0000:03:00.2")}}
	if err := WriteRequest(&d, &r); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(d.Metadata.XML, osinfo) {
		t.Fatalf("another application's metadata changed:\n%s", d.Metadata.XML)
	}
	got, ok, err := ReadRequest(&d)
	if !ok || err != nil || !got.Equal(r) {
		t.Fatalf("ReadRequest after WriteRequest: %+v %v %v", got, ok, err)
	}
	// Through libvirtxml's own serialisation and our parser.
	x, err := d.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	pd, err := Parse([]byte(x))
	if err != nil || pd.Request == nil || !pd.Request.Equal(r) || pd.UUID != web01 || pd.Name != "web01" {
		t.Fatalf("Parse of libvirtxml's output: %+v, %v", pd, err)
	}
	// Replace, then remove.
	r.VGPUs[0] = vf(0, "0000:03:00.5")
	if err := WriteRequest(&d, &r); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := ReadRequest(&d); !got.Equal(r) || strings.Count(d.Metadata.XML, "vgpu:request ") != 1 {
		t.Fatalf("replace: %s", d.Metadata.XML)
	}
	if err := WriteRequest(&d, nil); err != nil {
		t.Fatal(err)
	}
	if d.Metadata.XML != osinfo {
		t.Fatalf("remove left:\n%q\nwant\n%q", d.Metadata.XML, osinfo)
	}
	// A domain with no metadata gets one, and loses it again.
	d.Metadata = nil
	if err := WriteRequest(&d, &r); err != nil || d.Metadata == nil {
		t.Fatal(err)
	}
	if err := WriteRequest(&d, nil); err != nil || d.Metadata != nil {
		t.Fatalf("metadata left: %+v, %v", d.Metadata, err)
	}
	if err := WriteRequest(&d, &Request{Profile: "x", Count: 0}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("invalid request written: %v", err)
	}
}

// TestOrigin: the origin element a migration carries survives a parse and
// a render, and says how a destination vGPU differs.
func TestOrigin(t *testing.T) {
	r := Request{Profile: "lab-mtty-1", Count: 1, VGPUs: []VGPU{{Index: 0, Kind: "mdev", UUID: "83b8f4f2-509f-382f-3c1e-e6bfe0fa1001"}},
		Origin: &Origin{Host: "lab-a", Type: "mtty-1", Driver: "mtty", Version: "1.0"}}
	back, err := ParseRequest([]byte(r.XML()))
	if err != nil || !back.Equal(r) {
		t.Fatalf("round trip of\n%s\n= %+v, %v", r.XML(), back, err)
	}
	probe := r
	probe.Origin = &Origin{Host: "lab-a", Type: "mtty-1", Probe: true}
	if back, err := ParseRequest([]byte(probe.XML())); err != nil || !back.Origin.Probe || !back.Equal(probe) {
		t.Fatalf("round trip of the probe\n%s\n= %+v, %v", probe.XML(), back, err)
	}
	if back.Origin.Probe {
		t.Fatalf("an origin without probe=\"yes\" parsed as a probe: %+v", back.Origin)
	}
	if m := r.Origin.Mismatch(Origin{Type: "mtty-1", Driver: "mtty", Version: "1.0"}); m != "" {
		t.Fatalf("the same vGPU mismatches: %s", m)
	}
	if m := r.Origin.Mismatch(Origin{Type: "mtty-2", Driver: "mtty"}); m != "type mtty-2 here, mtty-1 on lab-a" {
		t.Fatalf("mismatch = %q", m)
	}
	if m := (Origin{Driver: "nvidia", Version: "550.90"}).Mismatch(Origin{Driver: "nvidia", Version: "570.1"}); m != "driver version 570.1 here, 550.90 on the source" {
		t.Fatalf("mismatch = %q", m)
	}
}
