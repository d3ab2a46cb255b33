package domxml

import (
	"bytes"
	"errors"
	"regexp"
	"strings"
	"testing"

	"libvirt.org/go/libvirtxml"

	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

func TestRewriteGolden(t *testing.T) {
	other := "6695eb01-f6a4-8304-79aa-97f2502e193f"
	for _, tc := range []struct {
		name, in string
		moves    map[string]VGPU
	}{
		{"vf", "domain-vf.xml", map[string]VGPU{
			"0000:03:00.2": vf(0, "0000:86:00.4"),
			"0000:03:00.3": PCIVGPU(0, vgpu.KindVF, pci.MustParseAddress("0001:c1:01.7")),
		}},
		{"vf-one", "domain-vf.xml", map[string]VGPU{"0000:03:00.3": vf(0, "0000:86:00.5")}},
		{"vf-swap", "domain-vf.xml", map[string]VGPU{"0000:03:00.2": vf(0, "0000:03:00.3"), "0000:03:00.3": vf(0, "0000:03:00.2")}},
		{"mdev", "domain-mdev.xml", map[string]VGPU{mustMdev(t, web01, 0).UUID: mustMdev(t, other, 5)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := fixture(t, tc.in)
			out, err := Rewrite(in, tc.moves)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, "rewrite-"+tc.name+".xml", out)
			before, err := Parse(in)
			if err != nil {
				t.Fatal(err)
			}
			after, err := Parse(out)
			if err != nil {
				t.Fatal(err)
			}
			// Every vGPU moved where asked, keeping its index; the rest stayed.
			for i, old := range before.Request.VGPUs {
				want := old
				if nv, ok := tc.moves[old.ID()]; ok {
					want = nv
					want.Index = old.Index
				}
				if after.Request.VGPUs[i] != want || after.Hostdevs[i] != want {
					t.Fatalf("vGPU %d: metadata %+v, hostdev %+v; want %+v", i, after.Request.VGPUs[i], after.Hostdevs[i], want)
				}
			}
			assertOnlySourcesChanged(t, in, out, tc.moves)
		})
	}
}

// assertOnlySourcesChanged proves the rewrite touched nothing but hostdev
// source addresses and our request, two independent ways: line by line, and
// by applying the same moves with libvirtxml to the input and comparing
// libvirtxml's serialisations.
func assertOnlySourcesChanged(t *testing.T, in, out []byte, moves map[string]VGPU) {
	t.Helper()
	il, ol := strings.Split(string(in), "\n"), strings.Split(string(out), "\n")
	if len(il) != len(ol) {
		t.Fatalf("rewrite changed the number of lines: %d -> %d", len(il), len(ol))
	}
	ours := regexp.MustCompile(`^\s*(<address (domain|uuid)=|<vgpu:vgpu )`)
	for i := range il {
		if il[i] != ol[i] && !ours.MatchString(il[i]) {
			t.Errorf("line %d changed:\n- %s\n+ %s", i+1, il[i], ol[i])
		}
	}

	var din, dout libvirtxml.Domain
	if err := din.Unmarshal(string(in)); err != nil {
		t.Fatal(err)
	}
	if err := dout.Unmarshal(string(out)); err != nil {
		t.Fatal(err)
	}
	req, _, err := ReadRequest(&din)
	if err != nil {
		t.Fatal(err)
	}
	for i, h := range din.Devices.Hostdevs {
		v, ok := VGPUOfHostdev(h, 0, vgpu.KindVF)
		nv, moved := moves[v.ID()]
		if !ok || !moved || !req.Has(v.ID()) {
			continue
		}
		nh, err := Hostdev(nv)
		if err != nil {
			t.Fatal(err)
		}
		if nh.SubsysPCI != nil {
			din.Devices.Hostdevs[i].SubsysPCI.Source = nh.SubsysPCI.Source
		} else {
			din.Devices.Hostdevs[i].SubsysMDev.Source = nh.SubsysMDev.Source
		}
	}
	for i, v := range req.VGPUs {
		if nv, ok := moves[v.ID()]; ok {
			nv.Index = v.Index
			req.VGPUs[i] = nv
		}
	}
	if err := WriteRequest(&din, &req); err != nil {
		t.Fatal(err)
	}
	want, _ := din.Marshal()
	got, _ := dout.Marshal()
	// Our element's own formatting aside (indentation), the documents agree.
	norm := func(s string) string { return regexp.MustCompile(`\s+`).ReplaceAllString(s, " ") }
	if norm(want) != norm(got) {
		t.Errorf("libvirtxml sees more than the sources changed:\n--- want\n%s\n--- got\n%s", want, got)
	}
}

func TestRewriteIdentityKeepsBytes(t *testing.T) {
	for _, name := range []string{"domain-mdev.xml", "domain-vf.xml", "domain-plain.xml"} {
		in := fixture(t, name)
		d, err := Parse(in)
		if err != nil {
			t.Fatal(err)
		}
		moves := map[string]VGPU{}
		for _, v := range d.Hostdevs {
			moves[v.ID()] = v
		}
		out, err := Rewrite(in, moves)
		if err != nil || !bytes.Equal(in, out) {
			t.Fatalf("%s: identity rewrite changed the document (%v)", name, err)
		}
	}
}

func TestRewriteRefuses(t *testing.T) {
	vfDoc := fixture(t, "domain-vf.xml")
	for _, tc := range []struct {
		name  string
		doc   []byte
		moves map[string]VGPU
		msg   string
	}{
		{"unknown vGPU", vfDoc, map[string]VGPU{"0000:41:00.0": vf(0, "0000:86:00.4")}, "0000:41:00.0 is not one of its vGPUs"},
		{"PCI to mdev", vfDoc, map[string]VGPU{"0000:03:00.2": mustMdev(t, web01, 0)}, "between PCI and mdev"},
		{"no request", fixture(t, "domain-plain.xml"), map[string]VGPU{"0000:03:00.2": vf(0, "0000:86:00.4")}, "has no vgpu request"},
		{"no hostdev", vfLosingHostdev(t), map[string]VGPU{"0000:03:00.3": vf(0, "0000:86:00.4")}, "no hostdev carries vGPU 0000:03:00.3"},
		{"two onto one", vfDoc, map[string]VGPU{"0000:03:00.2": vf(0, "0000:86:00.4"), "0000:03:00.3": vf(0, "0000:86:00.4")}, "listed twice"},
		{"bad XML", vfDoc[:200], map[string]VGPU{"0000:03:00.2": vf(0, "0000:86:00.4")}, "XML syntax error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Rewrite(tc.doc, tc.moves)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("error %v; want ErrInvalid with %q", err, tc.msg)
			}
		})
	}
}
