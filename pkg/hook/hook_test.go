package hook

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/pkg/domxml"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

// fakeAgent records calls and answers as told.
type fakeAgent struct {
	calls []string
	seen  []domxml.Domain
	err   error
	moves map[string]domxml.VGPU
	block bool // wait for the context, as a hung vgpud would
}

func (a *fakeAgent) call(ctx context.Context, name string, d domxml.Domain) error {
	a.calls = append(a.calls, name)
	a.seen = append(a.seen, d)
	if a.block {
		<-ctx.Done()
		return ctx.Err()
	}
	return a.err
}

func (a *fakeAgent) Ready(ctx context.Context, d domxml.Domain) (Readied, error) {
	return Readied{}, a.call(ctx, "ready", d)
}

func (a *fakeAgent) Release(ctx context.Context, d domxml.Domain) (Released, error) {
	return Released{}, a.call(ctx, "release", d)
}

func (a *fakeAgent) Lease(ctx context.Context, d domxml.Domain) (Leased, error) {
	return Leased{Moves: a.moves}, a.call(ctx, "lease", d)
}

func (a *fakeAgent) Probe(ctx context.Context, d domxml.Domain) (Leased, error) {
	return Leased{Moves: a.moves, Free: 3}, a.call(ctx, "probe", d)
}

func fixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// errReader fails the test if the hook reads stdin when it should not.
type errReader struct{ t *testing.T }

func (r errReader) Read([]byte) (int, error) {
	r.t.Error("the hook read stdin for an operation it ignores")
	return 0, errors.New("must not be read")
}

func vf(i int, a string) domxml.VGPU { return domxml.PCIVGPU(i, vgpu.KindVF, pci.MustParseAddress(a)) }

func TestRun(t *testing.T) {
	vfDoc, mdevDoc, plain := fixture(t, "domain-vf.xml"), fixture(t, "domain-mdev.xml"), fixture(t, "domain-plain.xml")
	mdev0, _ := domxml.MdevVGPU("4dea22b3-1d52-d8f3-2516-782e98ab3fa0", 0)
	noHostdev, _ := domxml.RemoveHostdevs(vfDoc, []domxml.VGPU{vf(1, "0000:03:00.3")})
	unassigned, _ := domxml.SetRequest(plain, &domxml.Request{Profile: "mi25-4g", Count: 1})
	nsInText := bytes.Replace(plain, []byte("<title>Web front end</title>"), []byte("<title>see "+domxml.Namespace+"</title>"), 1)
	moved := map[string]domxml.VGPU{"0000:03:00.2": vf(0, "0000:86:00.4"), "0000:03:00.3": vf(0, "0000:86:00.5")}
	noCapacity := errors.New("no free vGPU of profile mi25-4g (0000:03:00.0: 4 of 4 in use)")
	// vgpuctl migrate --dry-run's probe: the hook answers and always fails.
	probeDoc := func(doc []byte) []byte {
		d, err := domxml.Parse(doc)
		if err != nil {
			t.Fatal(err)
		}
		r := *d.Request
		r.Origin = &domxml.Origin{Host: "host-a", Probe: true}
		out, err := domxml.SetRequest(doc, &r)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}

	for _, tc := range []struct {
		name    string
		args    []string
		stdin   []byte // nil: must not be read
		agent   fakeAgent
		code    int
		calls   string
		stdout  string // "" none; "rewritten": the XML with moved sources
		stderr  string // substring; "" wants none
		hostdev int    // hostdevs the agent saw
	}{
		{"prepare vf", []string{"web01", "prepare", "begin", "-"}, vfDoc, fakeAgent{}, 0, "ready", "", "", 2},
		{"prepare mdev", []string{"web01", "prepare", "begin", "-"}, mdevDoc, fakeAgent{}, 0, "ready", "", "", 1},
		{"prepare, no capacity", []string{"web01", "prepare", "begin", "-"}, vfDoc, fakeAgent{err: noCapacity}, 1, "ready", "",
			"vgpu: cannot make 2 x mi25-4g ready for web01: no free vGPU of profile mi25-4g (0000:03:00.0: 4 of 4 in use)\n", 2},
		{"prepare, hostdev missing", []string{"web01", "prepare", "begin", "-"}, noHostdev, fakeAgent{}, 1, "", "",
			"vgpu: cannot make 2 x mi25-4g ready for web01: the domain has hostdevs for 1 of them (no hostdev carries 0000:03:00.3); repair it with vgpuctl detach web01, then vgpuctl attach web01 --profile mi25-4g --count 2\n", 0},
		{"prepare, never assigned", []string{"web01", "prepare", "begin", "-"}, unassigned, fakeAgent{}, 1, "", "", "(1 of them are not assigned)", 0},
		{"prepare, no request", []string{"web01", "prepare", "begin", "-"}, plain, fakeAgent{err: errors.New("must not be called")}, 0, "", "", "", 0},
		{"prepare, namespace only in text", []string{"web01", "prepare", "begin", "-"}, nsInText, fakeAgent{err: errors.New("must not be called")}, 0, "", "", "", 0},
		{"prepare, bad XML", []string{"web01", "prepare", "begin", "-"}, vfDoc[:400], fakeAgent{}, 1, "", "", "vgpu: cannot read the domain XML of web01: invalid vgpu domain XML: XML syntax error on line 9: unexpected EOF\n", 0},
		{"prepare, bad request", []string{"web01", "prepare", "begin", "-"}, bytes.Replace(vfDoc, []byte(`count="2"`), []byte(`count="0"`), 1), fakeAgent{}, 1, "", "",
			"vgpu: cannot read the domain XML of web01: invalid vgpu domain XML: vgpu request for mi25-4g: count 0: want 1 to 64\n", 0},
		{"release", []string{"web01", "release", "end", "-"}, vfDoc, fakeAgent{}, 0, "release", "", "", 2},
		{"release fails", []string{"web01", "release", "end", "-"}, mdevDoc, fakeAgent{err: errors.New("vgpud agent is not available")}, 1, "release", "",
			"vgpu: cannot release the t4-4q vGPUs of web01: vgpud agent is not available\n", 1},
		{"release, no hostdevs", []string{"web01", "release", "end", "-"}, unassigned, fakeAgent{}, 0, "", "", "", 0},
		{"migrate", []string{"web01", "migrate", "begin", "-"}, vfDoc, fakeAgent{moves: moved}, 0, "lease", "rewritten", "", 2},
		{"restore", []string{"web01", "restore", "begin", "-"}, vfDoc, fakeAgent{moves: moved}, 0, "lease", "rewritten", "", 2},
		{"migrate mdev keeps its UUID", []string{"web01", "migrate", "begin", "-"}, mdevDoc,
			fakeAgent{moves: map[string]domxml.VGPU{mdev0.UUID: mdev0}}, 0, "lease", "", "", 1},
		{"migrate, lease refused", []string{"web01", "migrate", "begin", "-"}, vfDoc, fakeAgent{err: noCapacity}, 1, "lease", "",
			"vgpu: cannot lease 2 x mi25-4g on this host for web01 (migrate): no free vGPU", 2},
		{"migrate, lease short", []string{"web01", "migrate", "begin", "-"}, vfDoc,
			fakeAgent{moves: map[string]domxml.VGPU{"0000:03:00.2": vf(0, "0000:86:00.4")}}, 1, "lease", "", "vgpud leased nothing for 0000:03:00.3", 2},
		{"migrate, lease of another shape", []string{"web01", "migrate", "begin", "-"}, mdevDoc,
			fakeAgent{moves: map[string]domxml.VGPU{mdev0.UUID: vf(0, "0000:86:00.4")}}, 1, "lease", "", "between PCI and mdev", 1},
		{"migrate, no request", []string{"web01", "migrate", "begin", "-"}, plain, fakeAgent{}, 0, "", "", "", 0},
		{"probe admits", []string{"web01", "migrate", "begin", "-"}, probeDoc(vfDoc), fakeAgent{moves: moved}, 1, "probe", "",
			"vgpu: probe: admits: 2 x mi25-4g for web01 would be leased here (0000:86:00.4, 0000:86:00.5; 3 free); nothing was leased\n", 2},
		{"probe refuses", []string{"web01", "migrate", "begin", "-"}, probeDoc(vfDoc), fakeAgent{err: noCapacity}, 1, "probe", "",
			"vgpu: probe: refuses: no free vGPU of profile mi25-4g (0000:03:00.0: 4 of 4 in use)\n", 2},
		{"probe, agent short", []string{"web01", "migrate", "begin", "-"}, probeDoc(vfDoc),
			fakeAgent{moves: map[string]domxml.VGPU{"0000:03:00.2": vf(0, "0000:86:00.4")}}, 1, "probe", "", "vgpu: probe: refuses: vgpud would lease nothing for 0000:03:00.3\n", 2},
		{"probe on restore", []string{"web01", "restore", "begin", "-"}, probeDoc(vfDoc), fakeAgent{moves: moved}, 1, "", "",
			"vgpu: probe: refuses: a probe is a migration, not a restore\n", 0},
		{"start is ignored", []string{"web01", "start", "begin", "-"}, nil, fakeAgent{}, 0, "", "", "", 0},
		{"started is ignored", []string{"web01", "started", "begin", "-"}, nil, fakeAgent{}, 0, "", "", "", 0},
		{"stopped is ignored", []string{"web01", "stopped", "end", "-"}, nil, fakeAgent{}, 0, "", "", "", 0},
		{"reconnect is ignored", []string{"web01", "reconnect", "begin", "-"}, nil, fakeAgent{}, 0, "", "", "", 0},
		{"attach is ignored", []string{"web01", "attach", "begin", "-"}, nil, fakeAgent{}, 0, "", "", "", 0},
		{"unknown operation is ignored", []string{"web01", "teleport", "begin", "-"}, nil, fakeAgent{}, 0, "", "", "", 0},
		{"prepare end is ignored", []string{"web01", "prepare", "end", "-"}, nil, fakeAgent{}, 0, "", "", "", 0},
		{"three arguments", []string{"web01", "prepare", "begin"}, vfDoc, fakeAgent{}, 0, "ready", "", "", 2},
		{"too few arguments", []string{"web01", "prepare"}, nil, fakeAgent{}, 1, "", "",
			"vgpu: got 2 arguments, want DOMAIN OPERATION SUBOPERATION [EXTRA] as libvirt passes them\n", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var in interface{ Read([]byte) (int, error) } = errReader{t}
			if tc.stdin != nil {
				in = bytes.NewReader(tc.stdin)
			}
			var out, errb bytes.Buffer
			a := tc.agent
			code := New(&a).Run(context.Background(), tc.args, in, &out, &errb)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr %q", code, tc.code, errb.String())
			}
			if got := strings.Join(a.calls, ","); got != tc.calls {
				t.Fatalf("agent calls %q, want %q", got, tc.calls)
			}
			if len(a.seen) > 0 {
				d := a.seen[0]
				if d.Name != "web01" || d.UUID != "4dea22b3-1d52-d8f3-2516-782e98ab3fa0" || len(d.Hostdevs) != tc.hostdev {
					t.Fatalf("agent saw %+v", d)
				}
			}
			switch {
			case tc.stderr == "" && errb.Len() > 0:
				t.Fatalf("stderr %q", errb.String())
			case tc.stderr != "" && !strings.Contains(errb.String(), tc.stderr):
				t.Fatalf("stderr %q, want %q", errb.String(), tc.stderr)
			case strings.Count(errb.String(), "\n") > 1:
				t.Fatalf("more than one line on stderr: %q", errb.String())
			}
			switch tc.stdout {
			case "":
				if out.Len() > 0 {
					t.Fatalf("printed %d bytes; libvirt would replace the domain XML", out.Len())
				}
			case "rewritten":
				want, err := domxml.Rewrite(tc.stdin, tc.agent.moves)
				if err != nil {
					t.Fatal(err)
				}
				if out.String() != string(want) {
					t.Fatalf("stdout is not the rewritten XML:\n%s", out.String())
				}
				d, err := domxml.Parse(out.Bytes())
				if err != nil || d.Hostdevs[0].ID() != "0000:86:00.4" || d.Hostdevs[1].ID() != "0000:86:00.5" {
					t.Fatalf("printed XML reads back as %+v, %v", d, err)
				}
			}
		})
	}
}

func TestRunTimesOut(t *testing.T) {
	a := &fakeAgent{block: true}
	var errb bytes.Buffer
	start := time.Now()
	code := New(a, WithTimeout(20*time.Millisecond)).Run(context.Background(), []string{"web01", "prepare", "begin", "-"},
		bytes.NewReader(fixture(t, "domain-vf.xml")), &bytes.Buffer{}, &errb)
	if code != ExitFailed || !strings.Contains(errb.String(), "vgpud did not answer in time") || time.Since(start) > 5*time.Second {
		t.Fatalf("exit %d after %v: %q", code, time.Since(start), errb.String())
	}
}

// BenchmarkNoRequest is the hook's cost for every domain without a vGPU
// (the process start aside): it must stay in microseconds.
func BenchmarkNoRequest(b *testing.B) { benchPrepare(b, "domain-plain.xml") }

// BenchmarkPrepare is the hook's own cost for a domain with a request,
// the agent call aside.
func BenchmarkPrepare(b *testing.B) { benchPrepare(b, "domain-vf.xml") }

func benchPrepare(b *testing.B, xmlFile string) {
	doc := fixture(b, xmlFile)
	h := New(&fakeAgent{})
	args := []string{"web01", "prepare", "begin", "-"}
	r := bytes.NewReader(doc)
	for b.Loop() {
		r.Reset(doc)
		if h.Run(context.Background(), args, r, discard(), discard()) != 0 {
			b.Fatal("failed")
		}
	}
}

func discard() *bytes.Buffer { return &bytes.Buffer{} }

// TestNoRequestIsCheap holds the benchmark's promise in the ordinary test
// run without timing it (a loaded machine makes timed tests flaky): the
// no-request path never calls vgpud, and its allocations do not grow with
// the document, so it never parses it.
func TestNoRequestIsCheap(t *testing.T) {
	doc := fixture(t, "domain-plain.xml")
	h := New(&fakeAgent{err: errors.New("must not be called")})
	allocs := func(doc []byte) float64 {
		return testing.AllocsPerRun(200, func() {
			if h.Run(context.Background(), []string{"web01", "prepare", "begin", "-"}, bytes.NewReader(doc), discard(), discard()) != 0 {
				t.Fatal("failed")
			}
		})
	}
	small := allocs(doc)
	// The same domain with 4000 more devices: 100 times the XML.
	more := bytes.Repeat([]byte("<controller type='pci' model='pcie-root-port'/>\n"), 4000)
	big := bytes.Replace(doc, []byte("</devices>"), append(more, "</devices>"...), 1)
	if got := allocs(big); got > small+16 { // buffer growth, not 4000 elements parsed
		t.Fatalf("the no-request path allocates %.0f times on a %d-byte domain and %.0f on a %d-byte one: it grows with the document", small, len(doc), got, len(big))
	}
	t.Logf("allocations per run: %.0f (%d bytes), %.0f (%d bytes)", small, len(doc), allocs(big), len(big))
}

// TestParseProbe: the hook's answer is found in libvirt's error for the
// probe migration, as libvirt 9 words a failed hook.
func TestParseProbe(t *testing.T) {
	lv := "operation failed: hook script execution failed: internal error: Child process (LC_ALL=C PATH=/usr/bin /etc/libvirt/hooks/qemu web01 migrate begin -) unexpected exit status 1: "
	for _, tc := range []struct {
		msg    string
		admits bool
		answer string
		ok     bool
	}{
		{lv + "vgpu: probe: admits: 1 x t4-4q for web01 would be leased here (x; 3 free); nothing was leased\n", true, "1 x t4-4q for web01 would be leased here (x; 3 free); nothing was leased", true},
		{lv + "vgpu: probe: refuses: need 1 x t4-4q, 0 free on this host", false, "need 1 x t4-4q, 0 free on this host", true},
		{lv + "vgpu: cannot lease 1 x t4-4q on this host for web01 (migrate): 0 free", false, "", false},
		{"Failed to bind socket: Cannot assign requested address", false, "", false},
	} {
		admits, answer, ok := ParseProbe(tc.msg)
		if admits != tc.admits || answer != tc.answer || ok != tc.ok {
			t.Errorf("ParseProbe(%q) = %v, %q, %v; want %v, %q, %v", tc.msg, admits, answer, ok, tc.admits, tc.answer, tc.ok)
		}
	}
}
