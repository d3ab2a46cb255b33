package hook

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/vgpu-project/vgpu/pkg/domxml"
)

// pad puts n bytes of comment before the document's end tag.
func pad(doc []byte, n int) []byte {
	c := append([]byte("<!--"), bytes.Repeat([]byte("x"), n)...)
	c = append(c, "-->\n</domain>"...)
	return bytes.Replace(doc, []byte("</domain>"), c, 1)
}

// nested puts, in the metadata, blocks of elements nested depth deep until
// the document has grown by size bytes: the shape that made a walk to the
// root for every element quadratic.
func nested(doc []byte, depth, size int) []byte {
	var b bytes.Buffer
	b.WriteString("<deep:x xmlns:deep='urn:deep'>")
	for b.Len() < size {
		b.WriteString(strings.Repeat("<a>", depth))
		b.WriteString(strings.Repeat("</a>", depth))
	}
	b.WriteString("</deep:x>\n  </metadata>")
	return bytes.Replace(doc, []byte("</metadata>"), b.Bytes(), 1)
}

// A domain without a request passes whatever its size: the fast path comes
// before the limit. One that asks for vGPUs over the limit is refused in
// one line, and vgpud is never asked.
func TestSizeLimitAfterFastPath(t *testing.T) {
	huge := pad(fixture(t, "domain-plain.xml"), maxXML+(4<<20))
	a := &fakeAgent{err: errors.New("must not be called")}
	var errb bytes.Buffer
	if code := New(a).Run(context.Background(), []string{"web01", "prepare", "begin", "-"}, bytes.NewReader(huge), discard(), &errb); code != ExitOK || errb.Len() != 0 {
		t.Fatalf("a %d MiB domain without a request: exit %d %q, want 0", len(huge)>>20, code, errb.String())
	}
	big := pad(fixture(t, "domain-vf.xml"), maxXML)
	errb.Reset()
	code := New(a).Run(context.Background(), []string{"web01", "prepare", "begin", "-"}, bytes.NewReader(big), discard(), &errb)
	if code != ExitFailed || !strings.Contains(errb.String(), "asks for vGPUs and is longer than 16 MiB") || len(a.calls) != 0 {
		t.Fatalf("a %d MiB domain with a request: exit %d %q, calls %v", len(big)>>20, code, errb.String(), a.calls)
	}
}

// The namespace is found however stdin is cut into reads.
func TestReadXMLFindsNamespaceAcrossReads(t *testing.T) {
	vfDoc, plain := fixture(t, "domain-vf.xml"), fixture(t, "domain-plain.xml")
	for _, tc := range []struct {
		name string
		r    io.Reader
		want bool
	}{
		{"one byte per read", iotest.OneByteReader(bytes.NewReader(vfDoc)), true},
		{"half reads", iotest.HalfReader(bytes.NewReader(vfDoc)), true},
		{"plain, one byte per read", iotest.OneByteReader(bytes.NewReader(plain)), false},
		{"beyond the limit", bytes.NewReader(append(pad(plain, maxXML+100), vfDoc...)), true},
	} {
		doc, got, err := readXML(tc.r)
		if err != nil || got != tc.want || len(doc) > maxXML+1 {
			t.Errorf("%s: mentioned %v, %d bytes kept, %v; want %v", tc.name, got, len(doc), err, tc.want)
		}
	}
	// A namespace cut by the 64 KiB read buffer: it starts 5 bytes before
	// the first read ends.
	at := bytes.Index(vfDoc, []byte(domxml.Namespace))
	cut := append(bytes.Repeat([]byte(" "), 64<<10-5-at), vfDoc...)
	if _, got, _ := readXML(bytes.NewReader(cut)); !got {
		t.Error("a namespace across two 64 KiB reads was missed")
	}
}

// SIGTERM (ctx ending) makes Run return at once, whatever it is doing.
func TestRunReturnsWhenInterrupted(t *testing.T) {
	stdin, w := io.Pipe() // libvirt still writing: the read blocks
	defer w.Close()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	var errb bytes.Buffer
	code := New(&fakeAgent{}).Run(ctx, []string{"web01", "migrate", "begin", "-"}, stdin, discard(), &errb)
	if code != ExitFailed || !strings.Contains(errb.String(), "interrupted") {
		t.Fatalf("exit %d %q; want %d saying interrupted", code, errb.String(), ExitFailed)
	}
}

// A migration of a domain whose metadata nests elements thousands deep is
// rewritten like any other, the nesting kept byte for byte.
func TestRewriteHostileNesting(t *testing.T) {
	doc := nested(fixture(t, "domain-vf.xml"), 9000, 4<<20)
	moved := map[string]domxml.VGPU{"0000:03:00.2": vf(0, "0000:86:00.4"), "0000:03:00.3": vf(1, "0000:86:00.5")}
	var out, errb bytes.Buffer
	code := New(&fakeAgent{moves: moved}).Run(context.Background(), []string{"web01", "migrate", "begin", "-"}, bytes.NewReader(doc), &out, &errb)
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	d, err := domxml.Parse(out.Bytes())
	if err != nil || len(d.Hostdevs) != 2 || d.Hostdevs[0].ID() != "0000:86:00.4" || d.Hostdevs[1].ID() != "0000:86:00.5" {
		t.Fatalf("rewritten: %+v, %v", d.Hostdevs, err)
	}
	if want := len(doc); out.Len() != want {
		t.Fatalf("rewritten document is %d bytes, want %d (the same addresses are as long)", out.Len(), want)
	}
}

func BenchmarkRewriteHostileNesting(b *testing.B) {
	doc := nested(fixture(b, "domain-vf.xml"), 9000, 4<<20)
	moved := map[string]domxml.VGPU{"0000:03:00.2": vf(0, "0000:86:00.4"), "0000:03:00.3": vf(1, "0000:86:00.5")}
	h := New(&fakeAgent{moves: moved})
	for b.Loop() {
		if h.Run(context.Background(), []string{"web01", "migrate", "begin", "-"}, bytes.NewReader(doc), discard(), discard()) != ExitOK {
			b.Fatal("failed")
		}
	}
}
