package domxml

import (
	"errors"
	"testing"
)

// FuzzParseRequest: the hook reads our element from any domain XML an
// admin wrote. It must never panic, must refuse only with ErrInvalid, and
// whatever it accepts must survive our own rendering unchanged.
func FuzzParseRequest(f *testing.F) {
	for _, seed := range []string{
		`<vgpu:request xmlns:vgpu="` + Namespace + `" profile="mi25-4g" count="2"><vgpu:vgpu index="0" kind="vf" id="0000:03:00.2"/><vgpu:vgpu index="1" kind="vf" id="0000:03:00.3"/></vgpu:request>`,
		`<vgpu:request xmlns:vgpu="` + Namespace + `" profile="t4-4q" count="1"><vgpu:vgpu index="0" kind="mdev" id="8ba0f263-ccc3-5181-8cb1-c925e7eda99b"/></vgpu:request>`,
		`<request xmlns="` + Namespace + `" profile="l40s-12q" count="1"/>`,
		`<request xmlns="` + Namespace + `" profile="a&amp;b" count="1"/>`,
		`<request profile="x" count="1"/>`,
		``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseRequest(b)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error without ErrInvalid: %v", err)
			}
			return
		}
		again, err := ParseRequest([]byte(r.XML()))
		if err != nil || !again.Equal(r) {
			t.Fatalf("accepted %q as %+v, but its rendering %q reads back as %+v, %v", b, r, r.XML(), again, err)
		}
	})
}
