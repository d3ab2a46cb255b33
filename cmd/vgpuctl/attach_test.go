//go:build cgo

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/attach"
	"github.com/vgpu-project/vgpu/pkg/attach/attachtest"
	"github.com/vgpu-project/vgpu/pkg/daemon/daemontest"
	"github.com/vgpu-project/vgpu/pkg/domxml"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
	"github.com/vgpu-project/vgpu/pkg/virt"
)

// virtCLI runs vgpuctl in process against the test driver, with a domain
// of the test's own.
type virtCLI struct {
	t    *testing.T
	conn *virt.Conn
	res  *attachtest.Reserver // nil: vgpud on socket, if any
	// socket is where vgpuctl looks for vgpud; "": where none answers.
	socket string
	dom    string
	uuid   string
}

func newVirtCLI(t *testing.T, res *attachtest.Reserver) *virtCLI {
	t.Helper()
	c := &virtCLI{t: t, res: res, dom: "web01", uuid: "4dea22b3-1d52-d8f3-2516-782e98ab3fa0"}
	c.conn = attachtest.Define(t, c.dom, c.uuid)
	return c
}

func (c *virtCLI) run(args ...string) (stdout, stderr string, code int) {
	c.t.Helper()
	var e env
	if c.res != nil {
		e.reserver = c.res
	}
	if !slices.Contains(args, "-c") {
		args = append(args, "-c", attachtest.TestURI)
	}
	// Without a fake reserver, vgpuctl looks for vgpud: never the host's.
	sock := c.socket
	if sock == "" {
		sock = filepath.Join(c.t.TempDir(), "no-vgpud.sock")
	}
	args = append([]string{"--socket", sock}, args...)
	return runVgpuctl(args, e)
}

func (c *virtCLI) ok(args ...string) string {
	c.t.Helper()
	return wantOK(c.t, c.run, args...)
}

func (c *virtCLI) fails(code int, msg string, args ...string) {
	c.t.Helper()
	out, errs, got := c.run(args...)
	if got != code || !strings.Contains(errs, msg) {
		c.t.Errorf("vgpuctl %s: exit %d, stderr %q; want exit %d and %q (stdout %q)", strings.Join(args, " "), got, errs, code, msg, out)
	}
}

// xml is libvirt's own view of the domain: raw and parsed.
func (c *virtCLI) xml(which virt.Affect) ([]byte, domxml.Domain) {
	c.t.Helper()
	d, err := c.conn.LookupDomain(c.dom)
	if err != nil {
		c.t.Fatal(err)
	}
	defer d.Close()
	x, err := d.XML(which)
	if err != nil {
		c.t.Fatal(err)
	}
	pd, err := domxml.Parse(x)
	if err != nil {
		c.t.Fatalf("libvirt's XML of %s does not parse: %v\n%s", c.dom, err, x)
	}
	return x, pd
}

func (c *virtCLI) start() {
	c.t.Helper()
	d, err := c.conn.LookupDomain(c.dom)
	if err != nil {
		c.t.Fatal(err)
	}
	defer d.Close()
	if err := d.Start(); err != nil {
		c.t.Fatal(err)
	}
}

func ids(vs []domxml.VGPU) string {
	var s []string
	for _, v := range vs {
		s = append(s, fmt.Sprintf("%d:%s", v.Index, v.ID()))
	}
	return strings.Join(s, " ")
}

func TestAttachDetachVF(t *testing.T) {
	c := newVirtCLI(t, attachtest.NewReserver())
	golden(t, "attach-vf", c.ok("attach", "web01", "--profile", "mi25-4g"))
	x, d := c.xml(virt.Config)
	if d.Request == nil || d.Request.Count != 1 || ids(d.Hostdevs) != "0:0000:03:00.1" {
		t.Fatalf("after attach: %+v\n%s", d, x)
	}
	if !bytes.Contains(x, []byte("bus='0x41'")) {
		t.Fatal("the admin's own hostdev is gone")
	}
	if got := c.res.Held[c.uuid]; len(got) != 1 {
		t.Fatalf("vgpud holds %v", got)
	}

	// Attaching more keeps the first and adds at the next indices.
	c.ok("attach", "web01", "-p", "mi25-4g", "--count", "2", "--config")
	if _, d = c.xml(virt.Config); d.Request.Count != 3 || ids(d.Hostdevs) != "0:0000:03:00.1 1:0000:03:00.2 2:0000:03:00.3" {
		t.Fatalf("after attaching 2 more: %+v", d)
	}
	if c.res.Calls[1] != "reserve mi25-4g 3" {
		t.Fatalf("vgpud was asked %v; want the total", c.res.Calls)
	}

	golden(t, "detach-vf-one", c.ok("detach", "web01", "03:00.2"))
	if _, d = c.xml(virt.Config); d.Request.Count != 2 || ids(d.Hostdevs) != "0:0000:03:00.1 2:0000:03:00.3" {
		t.Fatalf("after detaching one: %+v", d)
	}
	if got := c.res.Held[c.uuid]; strings.Join(got, ",") != "0000:03:00.1,0000:03:00.3" {
		t.Fatalf("vgpud holds %v", got)
	}
	// The freed index is reused.
	c.ok("attach", "web01", "-p", "mi25-4g")
	if _, d = c.xml(virt.Config); ids(d.Hostdevs) != "0:0000:03:00.1 1:0000:03:00.2 2:0000:03:00.3" {
		t.Fatalf("after attaching into the gap: %+v", d)
	}

	golden(t, "detach-vf-all", c.ok("detach", "web01"))
	x, d = c.xml(virt.Config)
	if d.Request != nil || domxml.MayHaveRequest(x) || strings.Count(string(x), "<hostdev") != 1 {
		t.Fatalf("after detaching all:\n%s", x)
	}
	if got := c.res.Held[c.uuid]; len(got) != 0 {
		t.Fatalf("vgpud still holds %v", got)
	}
	if out := c.ok("detach", "web01"); out != "web01 has no vGPUs to detach; nothing to do\n" {
		t.Fatalf("second detach: %q", out)
	}
}

func TestAttachMdevNeedsNoAgent(t *testing.T) {
	c := newVirtCLI(t, nil)
	golden(t, "attach-mdev", c.ok("attach", c.uuid, "--profile", "t4-4q", "-n", "2"))
	_, d := c.xml(virt.Config)
	m0, _ := domxml.MdevVGPU(c.uuid, 0)
	m1, _ := domxml.MdevVGPU(c.uuid, 1)
	if d.Request == nil || d.Request.Count != 2 || len(d.Hostdevs) != 2 || d.Hostdevs[0] != m0 || d.Hostdevs[1] != m1 {
		t.Fatalf("after attach: %+v", d)
	}
	// Detach and attach again: the same identity comes back.
	c.ok("detach", "web01", strings.ToUpper(m0.UUID))
	c.ok("attach", "web01", "--profile", "t4-4q")
	if _, d = c.xml(virt.Config); ids(d.Hostdevs) != ids([]domxml.VGPU{m0, m1}) {
		t.Fatalf("after re-attach: %s", ids(d.Hostdevs))
	}
	c.ok("detach", "web01")
	if x, _ := c.xml(virt.Config); strings.Count(string(x), "<hostdev") != 1 || domxml.MayHaveRequest(x) {
		t.Fatalf("after detach:\n%s", x)
	}
}

func TestAttachVFWithoutAgent(t *testing.T) {
	c := newVirtCLI(t, nil)
	before, _ := c.xml(virt.Config)
	c.fails(exitFailed, "vgpuctl: profile mi25-4g gives web01 a vf, whose address vgpud must reserve, and vgpud is not running (start it: systemctl start vgpud)\n",
		"attach", "web01", "--profile", "mi25-4g")
	if after, _ := c.xml(virt.Config); !bytes.Equal(before, after) {
		t.Fatalf("a refused attach changed the domain:\n%s", after)
	}
}

func TestAttachRefusals(t *testing.T) {
	res := attachtest.NewReserver()
	c := newVirtCLI(t, res)
	c.ok("attach", "web01", "-p", "mi25-4g")
	before, _ := c.xml(virt.Config)
	for _, tc := range []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"no domain", []string{"attach", "nope", "-p", "mi25-4g"}, exitUsage, "vgpuctl: no domain nope on test:///default\n"},
		{"no profile", []string{"attach", "web01"}, exitUsage, "--profile is required"},
		{"unknown profile", []string{"attach", "web01", "-p", "mi25-3g"}, exitUsage, `unknown profile "mi25-3g"`},
		{"count 0", []string{"attach", "web01", "-p", "mi25-4g", "-n", "0"}, exitUsage, "--count 0: want 1 to 64"},
		{"other profile", []string{"attach", "web01", "-p", "t4-4q"}, exitUsage, "web01 has 1 x mi25-4g already; a domain holds vGPUs of one profile (vgpuctl detach web01 first)"},
		{"live on a stopped domain", []string{"attach", "web01", "-p", "mi25-4g", "--live"}, exitUsage, "--live: web01 is not running"},
		{"no capacity", []string{"attach", "web01", "-p", "mi25-4g", "-n", "4"}, exitFailed,
			"reserve 4 x mi25-4g for web01 in vgpud: no free vGPU of profile mi25-4g (1 of 4 in use)"},
		{"bad URI", []string{"attach", "web01", "-p", "mi25-4g", "-c", "nosuchdriver:///x"}, exitFailed, "connect to libvirt at nosuchdriver:///x: "},
		{"detach, no domain", []string{"detach", "nope"}, exitUsage, "no domain nope"},
		{"detach, bad id", []string{"detach", "web01", "gpu0"}, exitUsage, `vGPU "gpu0" is neither a PCI address`},
		{"detach, no args", []string{"detach"}, exitUsage, "takes a DOMAIN"},
	} {
		t.Run(tc.name, func(t *testing.T) { c.fails(tc.code, tc.msg, tc.args...) })
	}
	if after, _ := c.xml(virt.Config); !bytes.Equal(before, after) {
		t.Fatalf("refused commands changed the domain:\n%s", after)
	}
	if got := res.Held[c.uuid]; len(got) != 1 {
		t.Fatalf("refused commands left reservations: %v", got)
	}
}

func TestAttachUndoesReservation(t *testing.T) {
	res := attachtest.NewReserver()
	// vgpud hands out a VF the domain already has as the admin's own
	// passthrough: libvirt refuses the hostdev, and the reservation goes back.
	res.Pool["mi25-4g"] = append([]attach.Reserved{{ID: "0000:41:00.0", Kind: vgpu.KindVF, Address: pci.MustParseAddress("0000:41:00.0")}}, res.Pool["mi25-4g"]...)
	c := newVirtCLI(t, res)
	before, _ := c.xml(virt.Config)
	c.fails(exitFailed, "0000:41:00.0", "attach", "web01", "-p", "mi25-4g")
	if after, _ := c.xml(virt.Config); !bytes.Equal(before, after) {
		t.Fatalf("a failed attach changed the domain:\n%s", after)
	}
	if got := res.Held[c.uuid]; len(got) != 0 || res.Calls[len(res.Calls)-1] != "release 0000:41:00.0" {
		t.Fatalf("reservation left: %v (calls %v)", got, res.Calls)
	}
}

// An attach whose undo fails too exits 4 and says how to repair, and the
// repair it names works.
func TestAttachPartlyUndone(t *testing.T) {
	res := attachtest.NewReserver()
	// libvirt refuses the hostdev (the domain has 41:00.0 as the admin's
	// own), and vgpud is gone when the reservation goes back.
	res.Pool["mi25-4g"] = append([]attach.Reserved{{ID: "0000:41:00.0", Kind: vgpu.KindVF, Address: pci.MustParseAddress("0000:41:00.0")}}, res.Pool["mi25-4g"]...)
	res.FailRelease = errors.New("vgpud went away")
	c := newVirtCLI(t, res)
	c.fails(exitPartial, "releasing 0000:41:00.0 in vgpud failed too: vgpud went away (left partly done: vgpuctl detach web01 VGPU",
		"attach", "web01", "-p", "mi25-4g")
	if got := res.Held[c.uuid]; !slices.Equal(got, []string{"0000:41:00.0"}) {
		t.Fatalf("vgpud holds %v for web01, want the reservation the undo could not give back", got)
	}
	res.FailRelease = nil
	c.ok("detach", "web01", "0000:41:00.0")
	if got := res.Held[c.uuid]; len(got) != 0 {
		t.Fatalf("the repair left reservations: %v", got)
	}
}

func TestDetachRunningDomain(t *testing.T) {
	res := attachtest.NewReserver()
	c := newVirtCLI(t, res)
	c.ok("attach", "web01", "-p", "mi25-4g", "-n", "2")
	c.start()
	// The config loses 03:00.1; the running domain still uses it.
	golden(t, "detach-vf-config-running", c.ok("detach", "web01", "0000:03:00.1"))
	if _, d := c.xml(virt.Config); ids(d.Hostdevs) != "1:0000:03:00.2" {
		t.Fatalf("config: %+v", d)
	}
	if _, d := c.xml(virt.Live); ids(d.Hostdevs) != "0:0000:03:00.1 1:0000:03:00.2" {
		t.Fatalf("live: %+v", d)
	}
	if got := res.Held[c.uuid]; len(got) != 2 {
		t.Fatalf("released a VF the running domain uses: %v", got)
	}
	// Naming it again while it runs is refused with the reason.
	c.fails(exitUsage, "0000:03:00.1 is still used by web01", "detach", "web01", "0000:03:00.1")
	// Both definitions differ now: a change to both is refused.
	c.fails(exitUsage, "have different vGPUs", "attach", "web01", "-p", "mi25-4g", "--live", "--config")
	// An mdev profile cannot be hotplugged.
	c.fails(exitUsage, "--live: profile t4-4q gives web01 an mdev", "attach", "web01", "-p", "t4-4q", "--live")
	// A hotplug is prepared in vgpud first; when libvirt refuses it (the
	// test driver has no live device attach) it is given back.
	res.Calls = nil
	c.fails(exitFailed, "attach the hostdev", "attach", "web01", "-p", "mi25-4g", "--live")
	if want := "reserve mi25-4g 3,prepare mi25-4g 0000:03:00.3,release 0000:03:00.3"; strings.Join(res.Calls, ",") != want {
		t.Fatalf("vgpud calls of a refused hotplug: %v; want %s", res.Calls, want)
	}
	if got := res.Held[c.uuid]; len(got) != 2 {
		t.Fatalf("a refused hotplug left reservations: %v", got)
	}

	// Attaching to the config again gets 03:00.1 back from vgpud (the domain
	// holds it); a failure then must not release what the running domain uses.
	d, err := c.conn.LookupDomain("web01")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	boom := errors.New("metadata write failed")
	_, err = attach.Attach(context.Background(), attachtest.Failing{Domain: d, SetRequestErr: boom}, res,
		attach.Spec{Profile: "mi25-4g", Kind: vgpu.KindVF, Count: 1, Affect: virt.Config})
	if !errors.Is(err, boom) || len(res.Held[c.uuid]) != 2 || slices.Contains(res.Calls, "release 0000:03:00.1") {
		t.Fatalf("error %v; vgpud holds %v after %v", err, res.Held[c.uuid], res.Calls)
	}
	if _, d := c.xml(virt.Config); ids(d.Hostdevs) != "1:0000:03:00.2" {
		t.Fatalf("config after the failed attach: %+v", d)
	}
	c.ok("attach", "web01", "-p", "mi25-4g")
	if _, d := c.xml(virt.Config); ids(d.Hostdevs) != "0:0000:03:00.1 1:0000:03:00.2" {
		t.Fatalf("config after attach: %+v", d)
	}
}

func TestDetachReleaseRetry(t *testing.T) {
	res := attachtest.NewReserver()
	c := newVirtCLI(t, res)
	c.ok("attach", "web01", "-p", "mi25-4g")
	res.FailNext = errors.New("vgpud agent is not available")
	c.fails(exitFailed, "vgpuctl: detached from web01, but vgpud did not release 0000:03:00.1: vgpud agent is not available; run vgpuctl detach web01 0000:03:00.1 again\n",
		"detach", "web01")
	if _, d := c.xml(virt.Config); d.Request != nil {
		t.Fatalf("the libvirt side of the detach did not happen: %+v", d)
	}
	out := c.ok("detach", "web01", "0000:03:00.1")
	if out != "released in vgpud: 0000:03:00.1\n" || len(res.Held[c.uuid]) != 0 {
		t.Fatalf("retry: %q, held %v", out, res.Held[c.uuid])
	}
	// With vgpud, an id neither the domain has nor vgpud holds for it is a
	// typo too, not "nothing to do".
	c.fails(exitUsage, "web01 has no vGPU 0000:03:00.1 and vgpud holds none such for it (it has: none)", "detach", "web01", "0000:03:00.1")
	// Without vgpud, an id the domain does not have is a typo.
	c.res = nil
	c.fails(exitUsage, "web01 has no vGPU 0000:03:00.1 (it has: none)", "detach", "web01", "0000:03:00.1")
}

func TestDetachVFWithoutAgentChangesNothing(t *testing.T) {
	res := attachtest.NewReserver()
	c := newVirtCLI(t, res)
	c.ok("attach", "web01", "-p", "l40s-12q")
	before, _ := c.xml(virt.Config)
	c.res = nil
	c.fails(exitFailed, "detaching 0000:86:00.4 from web01 frees it in vgpud's ledger, and vgpud is not running (start it: systemctl start vgpud); nothing changed",
		"detach", "web01")
	if after, _ := c.xml(virt.Config); !bytes.Equal(before, after) {
		t.Fatalf("a refused detach changed the domain:\n%s", after)
	}
}

func TestAttachJSON(t *testing.T) {
	c := newVirtCLI(t, attachtest.NewReserver())
	var ch struct {
		Domain  string         `json:"domain"`
		UUID    string         `json:"uuid"`
		Affect  string         `json:"affect"`
		Changed []domxml.VGPU  `json:"changed"`
		Request domxml.Request `json:"request"`
	}
	if err := json.Unmarshal([]byte(c.ok("attach", "web01", "-p", "l40s-12q", "-o", "json")), &ch); err != nil {
		t.Fatal(err)
	}
	if ch.Domain != "web01" || ch.UUID != c.uuid || ch.Affect != "config" || len(ch.Changed) != 1 ||
		ch.Changed[0].Kind != vgpu.KindNVIDIAVF || ch.Request.Count != 1 {
		t.Fatalf("%+v", ch)
	}
}

// TestAttachDetachThroughVgpud runs attach and detach against a real vgpud
// (in process, on the fake kernel) found on --socket, with the hook's calls
// made through the client: the reservations, states and domains vgpud
// records follow the commands.
func TestAttachDetachThroughVgpud(t *testing.T) {
	bg := context.Background()
	cfg, err := os.ReadFile("testdata/config-mixed.yaml")
	if err != nil {
		t.Fatal(err)
	}
	v := daemontest.Start(t, newCLI(t, "mixed.yaml").k, string(cfg))
	sock, cl := v.Socket, v.Client
	c := newVirtCLI(t, nil)
	c.socket = sock
	held := func() map[string]string { t.Helper(); return v.Held(t) }
	hookPrepare := func(ids ...string) {
		t.Helper()
		_, d := c.xml(virt.Config)
		if _, err := cl.Prepare(bg, c.uuid, api.PrepareRequest{Name: c.dom, Profile: d.Request.Profile, VGPUs: ids}); err != nil {
			t.Fatal(err)
		}
	}
	hookRelease := func() {
		t.Helper()
		if _, err := cl.Release(bg, c.uuid, api.ReleaseRequest{Name: c.dom}); err != nil {
			t.Fatal(err)
		}
	}

	// A VF: attach reserves it in vgpud; the hook attaches it; vgpuctl
	// vgpus shows the domain; detach frees it.
	c.ok("attach", "web01", "-p", "mi25-4g")
	if got := held(); len(got) != 1 || got["0000:03:00.1"] != "reserved web01" {
		t.Fatalf("after attach: %v", got)
	}
	hookPrepare("0000:03:00.1")
	var out, errb bytes.Buffer
	if code := run(bg, []string{"--socket", sock, "vgpus"}, env{stdout: &out, stderr: &errb}); code != 0 {
		t.Fatalf("vgpuctl vgpus: exit %d: %s", code, errb.String())
	}
	golden(t, "vgpud-vgpus-attached", out.String())
	hookRelease()
	if out := c.ok("detach", "web01"); !strings.Contains(out, "released in vgpud: 0000:03:00.1\n") {
		t.Fatalf("detach:\n%s", out)
	}
	if got := held(); len(got) != 0 {
		t.Fatalf("after detach: %v", got)
	}

	// An mdev: attach needs nothing from vgpud; after a start and a stop
	// under on-release: keep, vgpud holds the domain's mdev, and detaching
	// from the stopped domain frees it.
	c.ok("attach", "web01", "-p", "t4-4q")
	if got := held(); len(got) != 0 {
		t.Fatalf("an mdev attach reserved %v", got)
	}
	m0, _ := domxml.MdevVGPU(c.uuid, 0)
	hookPrepare(m0.UUID)
	hookRelease()
	if got := held(); got[m0.UUID] != "reserved web01" {
		t.Fatalf("after a start and a stop: %v", got)
	}
	if out := c.ok("detach", "web01"); !strings.Contains(out, "released in vgpud: "+m0.UUID+"\n") {
		t.Fatalf("detach of the mdev:\n%s", out)
	}
	if got := held(); len(got) != 0 {
		t.Fatalf("after detaching the mdev: %v", got)
	}

	// What a --live detach asks of vgpud: the VF is attached (its VM runs),
	// but the VM no longer has it open, so vgpud frees it.
	c.ok("attach", "web01", "-p", "mi25-4g")
	hookPrepare("0000:03:00.1")
	rel, err := attach.VgpudReserver{Client: cl}.Release(bg, c.uuid, []string{"0000:03:00.1"})
	if err != nil || len(rel) != 1 {
		t.Fatalf("release of an attached VF its VM let go of = %v, %v", rel, err)
	}
	if got := held(); len(got) != 0 {
		t.Fatalf("after the release: %v", got)
	}
}
