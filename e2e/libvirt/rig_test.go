package libvirt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/vgpu-project/vgpu/e2e/internal/simproc"
	"github.com/vgpu-project/vgpu/pkg/client"
	"github.com/vgpu-project/vgpu/pkg/daemon/daemontest"
	"github.com/vgpu-project/vgpu/pkg/engine/enginetest"
)

// Host configs of the tests, for examples/hosts/mixed.yaml: an AMD MI25
// split in 4 VFs, an NVIDIA T4 in 4 mdevs of GRID T4-4Q.
const (
	cfgKeep    = enginetest.MixedMI25T4Config
	cfgDestroy = cfgKeep + "on-release: destroy\n"
)

// privateDirs are the directories the daemons see replaced by the test's
// own (see the package doc): mount point -> directory name in the rig; ""
// is the capabilities cache all rigs share.
var privateDirs = [][2]string{
	{"/etc/libvirt/hooks", "hooks"},
	{"/etc/libvirt/qemu", "etc-qemu"},
	{"/run/libvirt", "run"},
	{"/var/lib/libvirt", "lib"},
	{"/var/log/libvirt", "log"},
	{"/var/cache/libvirt", ""},
	{"/run/vgpud", "vgpud-run"},
}

// freePort is a TCP port nothing listens on now, on 127.0.0.1.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// spawn starts name with args, a child that dies with the test binary.
func spawn(name string, args ...string) (*simproc.Proc, error) {
	p := simproc.Command(name, args...)
	// Should the test binary die, its daemons go with it.
	p.Cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.Start(); err != nil {
		return nil, err
	}
	return p, nil
}

// vgpuctlLimit bounds one vgpuctl run of the tests.
const vgpuctlLimit = 2 * time.Minute

// collectGrace is how long vgpud waits before it frees the vGPUs of a
// domain gone from the rig's libvirtd.
const collectGrace = time.Second

// stopGrace is how long a daemon may take to exit on SIGTERM.
const stopGrace = 30 * time.Second

// rig is one host: vgpusim, vgpud on it, and a private libvirtd with
// virtlogd in a mount namespace, vgpu-hook installed in its hook directory.
type rig struct {
	t   testing.TB
	dir string // short: unix socket paths must fit in 108 bytes
	sim *simproc.Sim

	cfg, state string
	socket     string // vgpud's socket, as seen from outside the namespace
	vgpud      *simproc.Proc
	c          *client.Client

	ns       *simproc.Proc // holds the mount namespace open
	made     []string      // mount points created for the namespace
	virtlogd *simproc.Proc
	libvirtd *simproc.Proc
	uri      string
	hostUUID string // each rig is a host of its own to libvirt (migrations)
	// tcpURI reaches libvirtd over TCP (no auth): a peer to peer
	// migration needs a destination URI with a host in it. On 127.0.0.1,
	// or at addr across the link for a rig in a network namespace of its
	// own (newLinkedRigs).
	tcpURI  string
	tcpPort int
	// migURI is where QEMU's migration stream reaches this host.
	migURI string
	// netns: libvirtd, its QEMUs, virsh and vgpuctl run in a network
	// namespace of the rig's own, reached only over the link; addr is
	// the rig's address there and dev its end of the link.
	netns     bool
	addr, dev string
	probe     string // the probe hook's records
}

// newRig starts everything with host config yaml and the hook installed;
// Cleanup stops it all and checks nothing is left.
func newRig(t testing.TB, yaml string) *rig {
	t.Helper()
	return startRig(t, yaml, "")
}

// startRig is newRig; with addr, in a network namespace of its own where
// libvirtd listens on addr (which the link, made afterwards, carries).
func startRig(t testing.TB, yaml, addr string) *rig {
	t.Helper()
	r := &rig{t: t, sim: simproc.Start(t, built.vgpusim, filepath.Join(built.repo, "examples", "hosts", "mixed.yaml"))}
	dir, err := os.MkdirTemp("", "vgpu-lv-")
	if err != nil {
		t.Fatal(err)
	}
	r.dir = dir
	r.hostUUID = uuid.NewString()
	r.tcpPort, r.addr, r.netns = freePort(t), "127.0.0.1", addr != ""
	if r.netns {
		r.addr = addr
	}
	r.tcpURI = fmt.Sprintf("qemu+tcp://%s:%d/system", r.addr, r.tcpPort)
	r.migURI = "tcp://" + r.addr
	t.Cleanup(r.cleanup)
	for _, sub := range []string{"sock", "probe", "hooks", "etc-qemu", "run", "lib", "log", "vgpud-run"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	r.cfg, r.state, r.probe = filepath.Join(dir, "config.yaml"), filepath.Join(dir, "state"), filepath.Join(dir, "probe")
	r.socket = filepath.Join(dir, "vgpud-run", "vgpud.sock")
	r.uri = "qemu:///system?socket=" + filepath.Join(dir, "sock", "libvirt-sock")
	r.c = client.New(r.socket)
	r.writeConfig(yaml)
	r.startVgpud()
	r.enterNamespace()
	// libvirt looks for hooks when its daemon starts: install first.
	if out, err := r.nsenter(built.vgpuctl, "hook", "install", "--hook-binary", built.hook).CombinedOutput(); err != nil {
		t.Fatalf("vgpuctl hook install: %v\n%s", err, out)
	}
	r.startLibvirt()
	return r
}

func (r *rig) writeConfig(yaml string) {
	r.t.Helper()
	if err := os.WriteFile(r.cfg, []byte(yaml), 0o644); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rig) startVgpud() {
	r.t.Helper()
	p, err := spawn(built.vgpud, "--sysfs-root", r.sim.Mnt, "--state-dir", r.state, "--socket", r.socket, "--config", r.cfg,
		"--libvirt-uri", r.uri, "--collect-every", "2s", "--collect-grace", collectGrace.String())
	if err != nil {
		r.t.Fatal(err)
	}
	r.vgpud = p
	simproc.AwaitVgpud(r.t, p, r.c)
}

func (r *rig) stopVgpud() {
	r.t.Helper()
	simproc.StopVgpud(r.t, r.vgpud, r.c)
}

// enterNamespace starts the process that holds the daemons' mount
// namespace, with the test's directories mounted over the daemons'.
func (r *rig) enterNamespace() {
	r.t.Helper()
	var script strings.Builder
	script.WriteString("set -e\n")
	for _, b := range privateDirs {
		src := filepath.Join(r.dir, b[1])
		if b[1] == "" {
			src = built.caps
		}
		if _, err := os.Stat(b[0]); errors.Is(err, os.ErrNotExist) {
			if err := os.MkdirAll(b[0], 0o755); err != nil {
				r.t.Fatalf("create the mount point %s: %v", b[0], err)
			}
			r.made = append(r.made, b[0])
		}
		fmt.Fprintf(&script, "mount --bind %s %s\n", strconv.Quote(src), strconv.Quote(b[0]))
	}
	ready := filepath.Join(r.dir, "ns-ready")
	flags := []string{"--mount", "--propagation", "private"}
	if r.netns {
		flags = append(flags, "--net")
		script.WriteString("ip link set lo up\n")
	}
	fmt.Fprintf(&script, "touch %s\nexec sleep infinity\n", strconv.Quote(ready))
	p, err := spawn("unshare", append(flags, "--", "/bin/sh", "-c", script.String())...)
	if err != nil {
		r.t.Fatal(err)
	}
	r.ns = p
	up := func() bool { _, err := os.Stat(ready); return err == nil }
	if err := p.Await(10*time.Second, 5*time.Millisecond, up); err != nil {
		r.t.Fatalf("the mount namespace for libvirt did not come up: %v:\n%s", err, p.Out)
	}
}

// nsenter is name run in the daemons' mount namespace (and network
// namespace, when the rig has one).
func (r *rig) nsenter(name string, args ...string) *exec.Cmd {
	return r.enter([]string{"--mount"}, name, args...)
}

// command is name run where the host's own tools run: in the rig's
// network namespace when it has one (to reach the other rig over the
// link), in the test's mount namespace.
func (r *rig) command(name string, args ...string) *exec.Cmd {
	if !r.netns {
		return exec.Command(name, args...)
	}
	return r.enter(nil, name, args...)
}

// enter runs name in the namespaces of ns (nsenter flags) and the rig's
// network namespace when it has one. nsenter execs name: the pid is name's.
func (r *rig) enter(ns []string, name string, args ...string) *exec.Cmd {
	if r.netns {
		ns = append(ns, "--net")
	}
	return exec.Command("nsenter", append(append(append([]string{"--target", strconv.Itoa(r.ns.Pid())}, ns...), "--", name), args...)...)
}

// startLibvirt starts virtlogd (if it does not run) and libvirtd in the
// namespace, with configs of the test's, and waits until libvirtd answers.
func (r *rig) startLibvirt() {
	r.t.Helper()
	conf := func(name, body string) string {
		p := filepath.Join(r.dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			r.t.Fatal(err)
		}
		return p
	}
	start := func(name string, args ...string) *simproc.Proc {
		c := r.nsenter(name, args...)
		p, err := spawn(c.Path, c.Args[1:]...)
		if err != nil {
			r.t.Fatal(err)
		}
		return p
	}
	if !r.virtlogd.Running() {
		vc := conf("virtlogd.conf", fmt.Sprintf("log_outputs = \"3:file:%s\"\n", filepath.Join(r.dir, "virtlogd.log")))
		r.virtlogd = start("virtlogd", "-f", vc, "-p", filepath.Join(r.dir, "virtlogd.pid"))
	}
	lc := conf("libvirtd.conf", fmt.Sprintf(`unix_sock_dir = "%s"
auth_unix_ro = "none"
auth_unix_rw = "none"
log_outputs = "3:file:%s"
host_uuid = "%s"
listen_tcp = 1
listen_tls = 0
listen_addr = "%s"
tcp_port = "%d"
auth_tcp = "none"
`, filepath.Join(r.dir, "sock"), filepath.Join(r.dir, "libvirtd.log"), r.hostUUID, r.listenAddr(), r.tcpPort))
	r.libvirtd = start("libvirtd", "--listen", "-f", lc, "-p", filepath.Join(r.dir, "libvirtd.pid"))
	up := func() bool { _, _, err := r.virsh("version"); return err == nil }
	if err := r.libvirtd.Await(60*time.Second, 20*time.Millisecond, up); err != nil {
		r.t.Fatalf("libvirtd did not come up: %v:\n%s\n%s", err, r.libvirtd.Out, r.logTail("libvirtd.log"))
	}
}

// listenAddr is where libvirtd listens: 127.0.0.1, or every address of
// the rig's own network namespace, whose link comes up after libvirtd.
func (r *rig) listenAddr() string {
	if r.netns {
		return "0.0.0.0"
	}
	return "127.0.0.1"
}

// restartLibvirtd restarts libvirtd, which looks for hooks when it starts.
func (r *rig) restartLibvirtd() {
	r.t.Helper()
	if err := r.libvirtd.Stop(syscall.SIGTERM, stopGrace); err != nil {
		r.t.Fatal(err)
	}
	r.startLibvirt()
}

// virsh runs virsh against the private libvirtd.
func (r *rig) virsh(args ...string) (stdout, stderr string, err error) {
	var out, errb bytes.Buffer
	c := exec.Command("virsh", append([]string{"-q", "-c", r.uri}, args...)...)
	c.Stdout, c.Stderr = &out, &errb
	err = c.Run()
	if err != nil {
		err = fmt.Errorf("virsh %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), errb.String(), err
}

func (r *rig) mustVirsh(args ...string) string {
	r.t.Helper()
	out, _, err := r.virsh(args...)
	if err != nil {
		r.t.Fatalf("%v\n%s", err, r.logTail("libvirtd.log"))
	}
	return out
}

// vgpuctl runs vgpuctl on this host: vgpud on its socket, libvirt at uri.
func (r *rig) vgpuctl(args ...string) (stdout, stderr string, code int) {
	r.t.Helper()
	return r.vgpuctlWithin(vgpuctlLimit, args...)
}

// vgpuctlWithin is vgpuctl for a run that may take longer than
// vgpuctlLimit by design (a migration given its own --timeout, a drain).
func (r *rig) vgpuctlWithin(limit time.Duration, args ...string) (stdout, stderr string, code int) {
	r.t.Helper()
	var out, errb simproc.LockedBuffer
	c := r.command(built.vgpuctl, append([]string{"--socket", r.socket, "--sysfs-root", r.sim.Mnt, "--state-dir", r.state}, args...)...)
	c.Stdout, c.Stderr = &out, &errb
	if err := c.Start(); err != nil {
		r.t.Fatalf("run vgpuctl: %v", err)
	}
	// A hung vgpuctl fails the test with where it and vgpusim wait.
	stuck, err := simproc.WaitCmd(c, limit, r.sim)
	if stuck != "" {
		r.t.Fatalf("vgpuctl %s: %s\nstdout:\n%s\nstderr, its goroutines last:\n%s", strings.Join(args, " "), stuck, &out, &errb)
	}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		r.t.Fatalf("run vgpuctl: %v", err)
	}
	return out.String(), errb.String(), code
}

func (r *rig) mustVgpuctl(args ...string) string {
	r.t.Helper()
	out, errs, code := r.vgpuctl(args...)
	if code != 0 {
		r.t.Fatalf("vgpuctl %s: exit %d: %s", strings.Join(args, " "), code, errs)
	}
	return out
}

// domainXML is a domain QEMU runs under TCG in 64 MiB: no disk, no
// network, no display; it sits in its firmware until destroyed.
func domainXML(name, uuid string) string {
	return fmt.Sprintf(`<domain type='qemu'>
  <name>%s</name>
  <uuid>%s</uuid>
  <memory unit='MiB'>64</memory>
  <vcpu>1</vcpu>
  <os><type arch='x86_64'>hvm</type></os>
  <on_poweroff>destroy</on_poweroff>
  <devices>
    <emulator>%s</emulator>
  </devices>
</domain>
`, name, uuid, built.qemu)
}

// guest is a domain running the tiny guest (guest/dirty.S): mem MiB of
// RAM, rewriting wss MiB of it forever (0: idle), at most rate MiB/s (0:
// as fast as its vCPU runs); fill writes every page first, so that
// migration moves bytes, not zero pages.
type guest struct {
	mem, wss, rate int
	fill           bool
}

func guestXML(name, uuid string, g guest) string {
	cmdline := strconv.Itoa(g.wss)
	if g.fill {
		cmdline += "f"
	}
	if g.rate > 0 {
		cmdline += "@" + strconv.Itoa(g.rate)
	}
	return fmt.Sprintf(`<domain type='qemu'>
  <name>%s</name>
  <uuid>%s</uuid>
  <memory unit='MiB'>%d</memory>
  <vcpu>1</vcpu>
  <os>
    <type arch='x86_64'>hvm</type>
    <kernel>%s</kernel>
    <cmdline>%s</cmdline>
  </os>
  <on_poweroff>destroy</on_poweroff>
  <devices>
    <emulator>%s</emulator>
  </devices>
</domain>
`, name, uuid, g.mem, built.guest, cmdline, built.qemu)
}

// defineGuest defines a domain running the tiny guest.
func (r *rig) defineGuest(name, uuid string, g guest) {
	r.t.Helper()
	p := filepath.Join(r.dir, name+".xml")
	if err := os.WriteFile(p, []byte(guestXML(name, uuid, g)), 0o644); err != nil {
		r.t.Fatal(err)
	}
	r.mustVirsh("define", p)
}

// define defines a domain; optionally vgpuctl attaches count x profile.
func (r *rig) define(name, uuid, profile string, count int) {
	r.t.Helper()
	p := filepath.Join(r.dir, name+".xml")
	if err := os.WriteFile(p, []byte(domainXML(name, uuid)), 0o644); err != nil {
		r.t.Fatal(err)
	}
	r.mustVirsh("define", p)
	if profile != "" {
		r.mustVgpuctl("attach", name, "--profile", profile, "--count", strconv.Itoa(count), "-c", r.uri)
	}
}

// held maps each vGPU vgpud lists as not free to "state domain".
func (r *rig) held() map[string]string {
	r.t.Helper()
	vs, err := r.c.VGPUs(context.Background())
	if err != nil {
		r.t.Fatal(err)
	}
	return daemontest.Held(vs)
}

// mdevs are the mdev UUIDs on the simulated host.
func (r *rig) mdevs() []string {
	r.t.Helper()
	es, err := os.ReadDir(filepath.Join(r.sim.Mnt, "sys", "bus", "mdev", "devices"))
	if err != nil {
		r.t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

// probeHook is a second hook, run by libvirt after vgpu (qemu.d runs in
// name order): it records every call and, at prepare/begin, what vgpud
// and the simulated host show while the domain starts, which a failed
// start undoes a few milliseconds later.
const probeHook = `#!/bin/sh
echo "$1 $2 $3" >> %[1]s/events
if [ "$2" = prepare ] && [ "$3" = begin ]; then
	%[2]s --socket %[3]s vgpus -o json > %[1]s/$1.vgpus.json 2>&1
	ls %[4]s/sys/bus/mdev/devices > %[1]s/$1.mdevs 2>&1
fi
exit 0
`

// installProbe adds the probe next to vgpu; libvirt reads qemu.d at each
// call, so no restart is needed while a hook was there at its start.
func (r *rig) installProbe() {
	r.t.Helper()
	p := filepath.Join(r.dir, "hooks", "qemu.d", "zz-probe")
	body := fmt.Sprintf(probeHook, r.probe, built.vgpuctl, r.socket, r.sim.Mnt)
	if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { _ = os.Remove(p) })
}

// events are the hook calls the probe saw for domain, in order.
func (r *rig) events(domain string) []string {
	r.t.Helper()
	b, err := os.ReadFile(filepath.Join(r.probe, "events"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		r.t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if rest, ok := strings.CutPrefix(l, domain+" "); ok {
			out = append(out, rest)
		}
	}
	return out
}

func (r *rig) logTail(name string) string {
	b, err := os.ReadFile(filepath.Join(r.dir, name))
	if err != nil {
		return fmt.Sprintf("(%s: %v)", name, err)
	}
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return fmt.Sprintf("--- %s\n%s", name, b)
}

// cleanup destroys and undefines every domain of the private libvirtd,
// stops the daemons, checks that no process is left in the namespace, and
// removes the mount points it created.
func (r *rig) cleanup() {
	t := r.t
	if r.libvirtd.Running() {
		if out, _, err := r.virsh("list", "--all", "--name"); err == nil {
			for _, name := range strings.Fields(out) {
				_, _, _ = r.virsh("destroy", name)
				if _, _, err := r.virsh("undefine", name); err != nil {
					t.Errorf("undefine %s: %v", name, err)
				}
			}
		} else {
			t.Errorf("list the domains to remove: %v", err)
		}
	}
	for _, p := range []*simproc.Proc{r.libvirtd, r.virtlogd} {
		if err := p.Stop(syscall.SIGTERM, stopGrace); err != nil {
			t.Error(err)
		}
	}
	if r.ns != nil {
		if left := inNamespace(r.ns.Pid()); len(left) > 0 {
			t.Errorf("processes left in libvirt's namespace (killed): %v", left)
			for _, pid := range left {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		_ = r.ns.Stop(syscall.SIGKILL, stopGrace)
	}
	if r.vgpud.Running() {
		r.stopVgpud()
	}
	for _, m := range r.made {
		// Another rig (of this test or, on a shared machine, another's)
		// may have made it too and removed it first.
		if err := os.Remove(m); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Errorf("remove the mount point %s the test created: %v", m, err)
		}
	}
	if t.Failed() {
		t.Logf("logs:\n%s\n%s\n--- vgpud\n%s", r.logTail("libvirtd.log"), r.logTail("virtlogd.log"), tail(r.vgpud))
		t.Logf("state kept in %s", r.dir)
		return
	}
	_ = os.RemoveAll(r.dir)
}

func tail(p *simproc.Proc) string {
	if p == nil {
		return ""
	}
	s := p.Out.String()
	if len(s) > 4000 {
		s = s[len(s)-4000:]
	}
	return s
}

// inNamespace lists the processes, other than holder, in holder's mount
// namespace.
func inNamespace(holder int) []int {
	ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", holder))
	if err != nil {
		return nil
	}
	es, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range es {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == holder {
			continue
		}
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", pid)); err == nil && l == ns {
			out = append(out, pid)
		}
	}
	return out
}
