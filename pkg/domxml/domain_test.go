package domxml

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	d, err := Parse(fixture(t, "domain-vf.xml"))
	if err != nil {
		t.Fatal(err)
	}
	want := Request{Profile: "mi25-4g", Count: 2, VGPUs: []VGPU{vf(0, "0000:03:00.2"), vf(1, "0000:03:00.3")}}
	if d.UUID != web01 || d.Name != "web01" || d.Request == nil || !d.Request.Equal(want) {
		t.Fatalf("got %+v", d)
	}
	// The admin's own passthrough (0000:41:00.0) is not ours.
	if len(d.Hostdevs) != 2 || d.Hostdevs[0] != want.VGPUs[0] || d.Hostdevs[1] != want.VGPUs[1] || d.Missing() != nil {
		t.Fatalf("hostdevs %+v, missing %+v", d.Hostdevs, d.Missing())
	}

	d, err = Parse(fixture(t, "domain-mdev.xml"))
	if err != nil || d.Request == nil || len(d.Hostdevs) != 1 || d.Hostdevs[0] != mustMdev(t, web01, 0) {
		t.Fatalf("mdev domain: %+v, %v", d, err)
	}

	plain := fixture(t, "domain-plain.xml")
	if MayHaveRequest(plain) {
		t.Fatal("MayHaveRequest on a domain without our namespace")
	}
	d, err = Parse(plain)
	if err != nil || d.Request != nil || d.Hostdevs != nil || d.Name != "web01" {
		t.Fatalf("plain domain: %+v, %v", d, err)
	}
}

// vfLosingHostdev is domain-vf.xml without the hostdev of its second vGPU,
// 0000:03:00.3, which its request still names.
func vfLosingHostdev(t *testing.T) []byte {
	t.Helper()
	out, err := RemoveHostdevs(fixture(t, "domain-vf.xml"), []VGPU{vf(1, "0000:03:00.3")})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestParseMissingHostdev(t *testing.T) {
	d, err := Parse(vfLosingHostdev(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Hostdevs) != 1 || len(d.Missing()) != 1 || d.Missing()[0].ID() != "0000:03:00.3" {
		t.Fatalf("hostdevs %+v, missing %+v", d.Hostdevs, d.Missing())
	}
}

func TestParseRefuses(t *testing.T) {
	vfDoc := string(fixture(t, "domain-vf.xml"))
	req := vfDoc[strings.Index(vfDoc, "    <vgpu:request"):strings.Index(vfDoc, "  </metadata>")]
	for _, tc := range []struct{ name, doc, msg string }{
		{"not XML", "<domain><name>x</name>", "XML syntax error"},
		{"not a domain", "<network><name>x</name></network>", "expected element type <domain>"},
		{"two requests", strings.Replace(vfDoc, req, req+req, 1), "2 vgpu request elements"},
		{"bad domain UUID", strings.Replace(vfDoc, web01, "nope", 1), `UUID "nope"`},
		{"bad request", strings.Replace(vfDoc, `count="2"`, `count="two"`, 1), `count "two"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc))
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("error %v; want ErrInvalid with %q", err, tc.msg)
			}
		})
	}
}

func TestSetRequestDoc(t *testing.T) {
	r := Request{Profile: "mi25-4g", Count: 1, VGPUs: []VGPU{vf(0, "0000:03:00.2")}}
	noMeta := removeLines(t, fixture(t, "domain-plain.xml"), "<metadata>", "</metadata>")
	for _, tc := range []struct {
		name string
		doc  []byte
	}{
		{"beside-osinfo", fixture(t, "domain-plain.xml")},
		{"new-metadata", noMeta},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := SetRequest(tc.doc, &r)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, "setrequest-"+tc.name+".xml", out)
			d, err := Parse(out)
			if err != nil || d.Request == nil || !d.Request.Equal(r) {
				t.Fatalf("Parse after SetRequest: %+v, %v", d, err)
			}
			// Replacing keeps one element; removing gives back the bytes we started from.
			r2 := r
			r2.VGPUs = []VGPU{vf(0, "0000:03:00.7")}
			out2, err := SetRequest(out, &r2)
			if d, _ := Parse(out2); err != nil || !d.Request.Equal(r2) {
				t.Fatalf("replace: %v\n%s", err, out2)
			}
			back, err := SetRequest(out2, nil)
			if err != nil || !bytes.Equal(back, tc.doc) {
				t.Fatalf("remove did not restore the document (%v):\n%s", err, back)
			}
		})
	}
	if out, err := SetRequest(noMeta, nil); err != nil || !bytes.Equal(out, noMeta) {
		t.Fatal("removing an absent request changed the document")
	}
}

func TestAddRemoveHostdevs(t *testing.T) {
	plain := fixture(t, "domain-plain.xml")
	vs := []VGPU{vf(0, "0000:03:00.2"), mustMdev(t, web01, 1)}
	out, err := AddHostdevs(plain, vs)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "addhostdevs.xml", out)
	withReq, err := SetRequest(out, &Request{Profile: "mi25-4g", Count: 1, VGPUs: vs[:1]})
	if err != nil {
		t.Fatal(err)
	}
	if d, err := Parse(withReq); err != nil || len(d.Hostdevs) != 1 || d.Hostdevs[0] != vs[0] {
		t.Fatalf("Parse after AddHostdevs: %+v %v", d, err)
	}
	if _, err := AddHostdevs(out, vs[:1]); err == nil || !strings.Contains(err.Error(), "has one already") {
		t.Fatalf("adding a hostdev twice: %v", err)
	}
	back, err := RemoveHostdevs(out, vs)
	if err != nil || !bytes.Equal(back, plain) {
		t.Fatalf("RemoveHostdevs did not restore the document (%v):\n%s", err, back)
	}
	if again, err := RemoveHostdevs(back, vs); err != nil || !bytes.Equal(again, plain) {
		t.Fatal("removing absent hostdevs changed the document")
	}
	noDevices := removeLines(t, plain, "<devices>", "</devices>")
	out, err = AddHostdevs(noDevices, vs[:1])
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := Parse(out); !strings.Contains(string(out), "  <devices>\n    <hostdev") || d.Name != "web01" {
		t.Fatalf("AddHostdevs without <devices>:\n%s", out)
	}
}

// removeLines drops the lines from the one containing from to the one
// containing to, inclusive.
func removeLines(t *testing.T, doc []byte, from, to string) []byte {
	t.Helper()
	s := string(doc)
	i := strings.Index(s, from)
	j := strings.Index(s, to)
	if i < 0 || j < i {
		t.Fatalf("%s..%s not in the fixture", from, to)
	}
	i = strings.LastIndex(s[:i], "\n")
	j += len(to)
	return []byte(s[:i] + s[j:])
}

// scan keeps only the elements down to the depth asked for, with parents
// pointing at kept ancestors: a document nested thousands deep costs memory
// in its shallow part only.
func TestScanKeepsShallowElements(t *testing.T) {
	deep := "<domain><metadata><x>" + strings.Repeat("<a>", 5000) + strings.Repeat("</a>", 5000) + "</x></metadata><devices/></domain>"
	els, err := scan([]byte(deep), 2)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for i := range els {
		got = append(got, path(els, i))
	}
	if want := "domain domain/metadata domain/metadata/x domain/devices"; strings.Join(got, " ") != want {
		t.Fatalf("kept %q, want %q", strings.Join(got, " "), want)
	}
	x := els[2]
	if string([]byte(deep)[x.start:x.end]) != "<x>"+strings.Repeat("<a>", 5000)+strings.Repeat("</a>", 5000)+"</x>" {
		t.Fatal("the kept element's offsets do not span its deep content")
	}
}
