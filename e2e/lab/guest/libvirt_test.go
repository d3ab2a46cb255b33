//go:build labguest

package guest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/e2e/lab/vfio"
	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/client"
	"github.com/vgpu-project/vgpu/pkg/mdev"
	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

const domainXML = `<domain type='qemu'>
  <name>%s</name>
  <memory unit='MiB'>64</memory>
  <vcpu>1</vcpu>
  <os><type arch='x86_64' machine='q35'>hvm</type></os>
  <devices><emulator>/usr/bin/qemu-system-x86_64</emulator></devices>
</domain>
`

// startLibvirt starts virtlogd and the monolithic libvirtd (libvirt 11 in
// Debian 13) as daemons and waits until virsh answers.
func startLibvirt(t *testing.T) {
	t.Helper()
	startLibvirtWith(t)
}

// startLibvirtWith is startLibvirt with extra libvirtd flags (--listen).
func startLibvirtWith(t *testing.T, libvirtdFlags ...string) {
	t.Helper()
	for _, d := range []string{"/var/log/libvirt/qemu", "/var/lib/libvirt/qemu", "/run/libvirt"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, code := run(t, "virtlogd", "-d"); code != 0 {
		t.Fatalf("virtlogd -d: exit %d", code)
	}
	if _, _, code := run(t, "libvirtd", append([]string{"-d"}, libvirtdFlags...)...); code != 0 {
		t.Fatalf("libvirtd -d %s: exit %d", strings.Join(libvirtdFlags, " "), code)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, _, code := run(t, "virsh", "version"); code == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("libvirtd did not answer within 60 s")
		}
		time.Sleep(time.Second)
	}
}

// stopLibvirt stops libvirtd and virtlogd (SIGTERM) and waits until both
// are gone, so that startLibvirt can run them again (libvirtd looks for
// hooks only when it starts).
func stopLibvirt(t *testing.T) {
	t.Helper()
	for _, d := range []string{"libvirtd", "virtlogd"} {
		pidFile := "/run/" + d + ".pid"
		b, err := os.ReadFile(pidFile)
		if err != nil {
			t.Fatalf("stop %s: %v", d, err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatalf("stop %s: %s: %v", d, pidFile, err)
		}
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
			t.Fatalf("stop %s (pid %d): %v", d, pid, err)
		}
		deadline := time.Now().Add(60 * time.Second)
		for {
			st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			if err != nil || strings.Contains(string(st), ") Z ") {
				break // gone, or a zombie its new parent has not reaped yet
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s (pid %d) did not stop within 60 s of SIGTERM", d, pid)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

func virsh(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, code := run(t, "virsh", args...)
	if code != 0 {
		t.Fatalf("virsh %s: exit %d: %s", strings.Join(args, " "), code, errOut)
	}
	return out
}

// localURI is this guest's libvirtd.
const localURI = "qemu:///system"

func defineDomain(t *testing.T, name string) {
	t.Helper()
	defineDomainAt(t, localURI, name)
}

// defineDomainAt defines domainXML as name at uri, with devices (XML of
// device elements) added.
func defineDomainAt(t *testing.T, uri, name string, devices ...string) {
	t.Helper()
	xml := strings.Replace(domainXML, "%s", name, 1)
	xml = strings.Replace(xml, "</devices>", strings.Join(devices, "")+"</devices>", 1)
	p := filepath.Join(os.TempDir(), name+".xml")
	if err := os.WriteFile(p, []byte(xml), 0o644); err != nil {
		t.Fatal(err)
	}
	virsh(t, "-c", uri, "define", p)
}

// vgpuRow is vgpuctl vgpus' line for vgpu.
func vgpuRow(t *testing.T, vgpu string) string {
	t.Helper()
	out, _, code := run(t, "vgpuctl", "--profiles", profilesDir, "vgpus")
	if code != 0 {
		t.Fatalf("vgpuctl vgpus: exit %d", code)
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, vgpu+" ") {
			return l
		}
	}
	t.Fatalf("vgpuctl vgpus does not list %s:\n%s", vgpu, out)
	return ""
}

// fullPathYAML is the lab's config plus the mbochs sample, a virtual mdev
// parent, carrying lab-mbochs-64m (4 mdevs of mbochs-large).
func fullPathYAML() string {
	return strings.Replace(labConfig, "socket:", "  - parent: mbochs\n    profile: lab-mbochs-64m\nsocket:", 1)
}

// waitParentCarved waits until vgpud carved mbochs to lab-mbochs-64m.
func waitParentCarved(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		if n := len(mbochsInstances(t)["mbochs-large"]); n == 4 {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("vgpud did not carve mbochs to lab-mbochs-64m within 90 s: %d mbochs-large mdevs", n)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// TestLibvirtFullPath: vgpud carves the host to its config, vgpu-hook is
// installed in libvirt's hook directory, a domain asks for a vGPU
// (vgpuctl attach); virsh start runs the hook, vgpud readies the VF, QEMU
// opens it (firmware only); virsh destroy releases it and the ledger says
// so. The same for an mdev of the mbochs sample (a virtual mdev parent the
// config names): the hook has vgpud create it with the domain-derived
// UUID. A domain without a request starts and stops untouched.
func TestLibvirtFullPath(t *testing.T) {
	relabelAsGPU(t, igbPF)
	stop := startVgpudWith(t, fullPathYAML())
	defer func() { stop() }()
	waitCarved(t)
	waitParentCarved(t)
	if _, _, code := run(t, "vgpuctl", "hook", "install", "--hook-binary", binDir+"/vgpu-hook"); code != 0 {
		t.Fatalf("vgpuctl hook install: exit %d", code)
	}
	if fi, err := os.Stat("/etc/libvirt/hooks/qemu.d/vgpu"); err != nil || fi.Mode().Perm()&0o100 == 0 {
		t.Fatalf("the hook is not installed executable: %v", err)
	}
	startLibvirt(t) // after the install: libvirtd looks for hooks when it starts

	defineDomain(t, "lab-plain")
	virsh(t, "start", "lab-plain")
	virsh(t, "destroy", "lab-plain")

	defineDomain(t, "lab-vgpu")
	out, _, code := run(t, "vgpuctl", "--profiles", profilesDir, "attach", "lab-vgpu", "--profile", "lab-igb-4")
	if code != 0 {
		t.Fatalf("vgpuctl attach: exit %d", code)
	}
	xml := virsh(t, "dumpxml", "lab-vgpu")
	if !strings.Contains(xml, `profile="lab-igb-4"`) || !strings.Contains(xml, "<hostdev mode='subsystem' type='pci'") {
		t.Fatalf("after attach the domain XML lacks the request or the hostdev:\n%s", xml)
	}
	vf := ""
	for _, f := range strings.Fields(out) {
		if a, err := pci.ParseAddress(f); err == nil && a != igbPF {
			vf = a.String()
		}
	}
	if vf == "" {
		t.Fatalf("vgpuctl attach named no VF:\n%s", out)
	}

	virsh(t, "start", "lab-vgpu")
	if row := vgpuRow(t, vf); !strings.Contains(row, "attached") || !strings.Contains(row, "lab-vgpu") {
		t.Errorf("running: %s is %q, want attached to lab-vgpu", vf, row)
	}
	info := virsh(t, "qemu-monitor-command", "lab-vgpu", "--hmp", "info pci")
	if !strings.Contains(info, "8086:10ca") {
		t.Errorf("the guest's QEMU shows no igb VF (8086:10ca):\n%s", info)
	}
	vfDev := pci.MustParseAddress(vf)
	node := "/dev/vfio/" + filepathBase(t, pci.DevicePath(vfDev))
	if f, err := os.OpenFile(node, os.O_RDWR, 0); !errors.Is(err, syscall.EBUSY) {
		if f != nil {
			f.Close()
		}
		t.Errorf("open %s while QEMU holds the VF: %v, want EBUSY", node, err)
	}
	// The refusal names QEMU, found in /proc/<pid>/fd (nothing opened the node).
	if _, errOut, code := vgpuctl(t, "uncarve", igbPF.String()); code != 3 || !strings.Contains(errOut, vf) ||
		!strings.Contains(errOut, "qemu") || !strings.Contains(errOut, "holds "+node) {
		t.Errorf("uncarve while the domain runs: exit %d %q, want 3 naming %s and QEMU holding %s", code, errOut, vf, node)
	}

	stop = restartsKeepTheVM(t, vf, stop)

	virsh(t, "destroy", "lab-vgpu")
	// Released, and still reserved for the domain whose config asks for it.
	if row := vgpuRow(t, vf); !strings.Contains(row, "reserved") || !strings.Contains(row, "lab-vgpu") {
		t.Errorf("destroyed: %s is %q, want reserved for lab-vgpu", vf, row)
	}
	mustOpenVFIO(t, pci.DevicePath(vfDev), vf).Close()
	if d := driverOf(t, vfDev); d != "vfio-pci" {
		t.Errorf("released VF on %q, want vfio-pci (on-release: keep)", d)
	}

	// The domain starts again on the same VF.
	virsh(t, "start", "lab-vgpu")
	if row := vgpuRow(t, vf); !strings.Contains(row, "attached") {
		t.Errorf("restarted: %s is %q, want attached", vf, row)
	}
	virsh(t, "destroy", "lab-vgpu")

	startsWhileListing(t, "lab-vgpu")

	mdevFullPath(t)
}

// mdevFullPath: a domain asking for lab-mbochs-64m starts with an mdev the
// hook had vgpud create under the domain-derived UUID, QEMU opens it,
// virsh destroy releases it (keep: reserved again, the mdev stays) and the
// ledger agrees; detach frees it.
func mdevFullPath(t *testing.T) {
	t.Helper()
	defineDomain(t, "lab-mdev")
	if _, _, code := run(t, "vgpuctl", "--profiles", profilesDir, "attach", "lab-mdev", "--profile", "lab-mbochs-64m"); code != 0 {
		t.Fatalf("vgpuctl attach lab-mdev: exit %d", code)
	}
	xml := virsh(t, "dumpxml", "lab-mdev")
	if !strings.Contains(xml, `profile="lab-mbochs-64m"`) || !strings.Contains(xml, "<hostdev mode='subsystem' type='mdev'") {
		t.Fatalf("after attach the domain XML lacks the request or the mdev hostdev:\n%s", xml)
	}
	u := ""
	if _, rest, ok := strings.Cut(xml, "<address uuid='"); ok {
		u, _, _ = strings.Cut(rest, "'")
	}
	if u == "" {
		t.Fatalf("the mdev hostdev names no UUID:\n%s", xml)
	}
	if _, ok, err := mdev.Get(host, u); err != nil || ok {
		t.Fatalf("mdev %s exists before the domain starts (%v): the hook should create it", u, err)
	}

	virsh(t, "start", "lab-mdev")
	in, ok, err := mdev.Get(host, u)
	if err != nil || !ok || in.Parent != "mbochs" || in.Type != "mbochs-large" {
		t.Fatalf("running: mdev %s = %+v, %v, %v; want an mbochs-large mdev of mbochs", u, in, ok, err)
	}
	if n := len(mbochsInstances(t)["mbochs-large"]); n != 4 {
		t.Errorf("running: %d mbochs-large mdevs, want 4 (one swapped, not added)", n)
	}
	if row := vgpuRow(t, u); !strings.Contains(row, "attached") || !strings.Contains(row, "lab-mdev") || !strings.Contains(row, "mbochs") {
		t.Errorf("running: %s is %q, want attached to lab-mdev on mbochs", u, row)
	}
	info := virsh(t, "qemu-monitor-command", "lab-mdev", "--hmp", "info pci")
	if !strings.Contains(info, "1234:1111") {
		t.Errorf("the guest's QEMU shows no mbochs device (1234:1111):\n%s", info)
	}
	if s, err := vfio.Open(sysfs.MdevDevices+"/"+u, u); err == nil {
		s.Close()
		t.Errorf("opened mdev %s while QEMU holds it", u)
	}

	virsh(t, "destroy", "lab-mdev")
	if row := vgpuRow(t, u); !strings.Contains(row, "reserved") || !strings.Contains(row, "lab-mdev") {
		t.Errorf("destroyed: %s is %q, want reserved for lab-mdev", u, row)
	}
	mustOpenVFIO(t, sysfs.MdevDevices+"/"+u, u).Close()
	if _, _, code := run(t, "vgpuctl", "--profiles", profilesDir, "detach", "lab-mdev"); code != 0 {
		t.Fatalf("vgpuctl detach lab-mdev: exit %d", code)
	}
	if row := vgpuRow(t, u); !strings.Contains(row, "free") {
		t.Errorf("detached: %s is %q, want free", u, row)
	}
}

// startsWhileListing starts and destroys domain again and again while
// vgpuctl vgpus runs in a tight loop, through vgpud and on the host
// directly: checking who uses a vGPU never opens its /dev/vfio node, so it
// can never make the QEMU that is opening it fail with EBUSY (issue 10.5).
func startsWhileListing(t *testing.T, domain string) {
	t.Helper()
	direct := []string{"--profiles", profilesDir, "--socket", filepath.Join(os.TempDir(), "no-vgpud.sock"),
		"--state-dir", filepath.Join(os.TempDir(), "vgpu-state-listing"), "vgpus"}
	loops := [][]string{{"--profiles", profilesDir, "vgpus"}, direct}
	stop := make(chan struct{})
	counts := make([]int, len(loops))
	failures := make([]string, len(loops))
	var wg sync.WaitGroup
	for i, args := range loops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				out, err := exec.Command("vgpuctl", args...).CombinedOutput()
				if err != nil {
					failures[i] = fmt.Sprintf("vgpuctl %s: %v\n%s", strings.Join(args, " "), err, out)
					continue
				}
				counts[i]++
			}
		}()
	}
	const cycles = 6
	for n := range cycles {
		if _, errOut, code := run(t, "virsh", "start", domain); code != 0 {
			t.Errorf("virsh start %s (cycle %d of %d) failed while vgpuctl vgpus ran: %s", domain, n+1, cycles, errOut)
			continue
		}
		virsh(t, "destroy", domain)
	}
	close(stop)
	wg.Wait()
	for i, args := range loops {
		if counts[i] == 0 {
			t.Errorf("vgpuctl %s never succeeded during the starts: %s", strings.Join(args, " "), failures[i])
		}
		t.Logf("vgpuctl %s ran %d times across %d starts", strings.Join(args, " "), counts[i], cycles)
	}
}

// restartsKeepTheVM: while lab-vgpu runs on VF vf, vgpud is restarted,
// killed (SIGKILL) and started again, installed as make install does
// (install(1) to /usr/local/sbin) and then upgraded in place to a new build
// while it runs, and restarted on it (issue 10.9). After each, the VM still
// runs with its VF: QEMU holds it (EBUSY), it stays on vfio-pci, and the
// ledger says attached to lab-vgpu. It returns the last vgpud's stop.
func restartsKeepTheVM(t *testing.T, vf string, stop func()) func() {
	t.Helper()
	vfDev := pci.MustParseAddress(vf)
	node := "/dev/vfio/" + filepathBase(t, pci.DevicePath(vfDev))
	check := func(when, wantVersion string) {
		t.Helper()
		c := client.New(vgpudSocket)
		deadline := time.Now().Add(90 * time.Second)
		var h api.Health
		var err error
		for h, err = c.Health(context.Background()); err != nil || h.Status != "ok"; h, err = c.Health(context.Background()) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: vgpud not ready within 90 s: %+v, %v", when, h, err)
			}
			time.Sleep(250 * time.Millisecond)
		}
		if wantVersion != "" && h.Version != wantVersion {
			t.Errorf("%s: vgpud %s runs, want %s", when, h.Version, wantVersion)
		}
		if st := strings.TrimSpace(virsh(t, "domstate", "lab-vgpu")); st != "running" {
			t.Errorf("%s: lab-vgpu is %s", when, st)
		}
		if d := driverOf(t, vfDev); d != "vfio-pci" {
			t.Errorf("%s: %s on %q, want vfio-pci", when, vf, d)
		}
		if f, err := os.OpenFile(node, os.O_RDWR, 0); !errors.Is(err, syscall.EBUSY) {
			if f != nil {
				f.Close()
			}
			t.Errorf("%s: open %s: %v, want EBUSY (QEMU holds it)", when, node, err)
		}
		if row := vgpuRow(t, vf); !strings.Contains(row, "attached") || !strings.Contains(row, "lab-vgpu") {
			t.Errorf("%s: %s is %q, want attached to lab-vgpu", when, vf, row)
		}
	}
	stop()
	stop, kill := startVgpudBin(t, "vgpud", fullPathYAML())
	check("after a restart", "")
	kill()
	stop, _ = startVgpudBin(t, "vgpud", fullPathYAML())
	check("after SIGKILL and a start", "")

	const installed = "/usr/local/sbin/vgpud"
	install := func(from string) {
		t.Helper()
		if _, errOut, code := run(t, "install", "-D", "-m", "0755", from, installed); code != 0 {
			t.Fatalf("install %s %s: exit %d: %s", from, installed, code, errOut)
		}
	}
	install(binDir + "/vgpud")
	stop()
	stop, _ = startVgpudBin(t, installed, fullPathYAML())
	check("installed", "")
	install(labDir + "/bin/vgpud.next") // over the running binary
	stop()
	stop, _ = startVgpudBin(t, installed, fullPathYAML())
	check("upgraded", "lab-upgrade")
	return stop
}
