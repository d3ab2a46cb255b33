//go:build labguest

package guest

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/pkg/pci"
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
	for _, d := range []string{"/var/log/libvirt/qemu", "/var/lib/libvirt/qemu", "/run/libvirt"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"virtlogd", "libvirtd"} {
		if _, _, code := run(t, d, "-d"); code != 0 {
			t.Fatalf("%s -d: exit %d", d, code)
		}
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

func virsh(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, code := run(t, "virsh", args...)
	if code != 0 {
		t.Fatalf("virsh %s: exit %d: %s", strings.Join(args, " "), code, errOut)
	}
	return out
}

func defineDomain(t *testing.T, name string) {
	t.Helper()
	p := filepath.Join(os.TempDir(), name+".xml")
	if err := os.WriteFile(p, []byte(strings.Replace(domainXML, "%s", name, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	virsh(t, "define", p)
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

// TestLibvirtFullPath: vgpud carves the host to its config, vgpu-hook is
// installed in libvirt's hook directory, a domain asks for a vGPU
// (vgpuctl attach); virsh start runs the hook, vgpud readies the VF, QEMU
// opens it (firmware only); virsh destroy releases it and the ledger says
// so. A domain without a request starts and stops untouched.
func TestLibvirtFullPath(t *testing.T) {
	relabelAsGPU(t, igbPF)
	stop := startVgpud(t)
	defer stop()
	waitCarved(t)
	if _, _, code := run(t, "vgpuctl", "hook", "install", "--hook-binary", labDir+"/bin/vgpu-hook"); code != 0 {
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
	if _, errOut, code := vgpuctl(t, "uncarve", igbPF.String()); code != 3 || !strings.Contains(errOut, vf) {
		t.Errorf("uncarve while the domain runs: exit %d %q, want 3 naming %s", code, errOut, vf)
	}

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
}
