//go:build labguest

package guest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// benchRuns is how many times each side of each row runs.
const benchRuns = 7

// TestLabBench times vgpu against what an admin would otherwise run, in one
// boot, each row side by side: a bare shell loop doing the same writes and,
// for mdevs, Debian's mdevctl. It writes "row tool nanoseconds" lines to
// out/bench.txt for the host's BenchmarkLab; it asserts only that every
// side did its work (the targets live in the table, not in a test).
func TestLabBench(t *testing.T) {
	if os.Getenv("VGPU_LAB_BENCH") == "" {
		t.Skip("run by BenchmarkLab (VGPU_LAB_BENCH=1)")
	}
	relabelAsGPU(t, igbPF)
	out, err := os.Create(filepath.Join(outDir, "bench.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	state := filepath.Join(os.TempDir(), "bench-state")
	// The lab's catalog from the guest's own root, as a host keeps its
	// extra profiles on its disk (the share is 9p without a cache).
	profiles := filepath.Join(os.TempDir(), "bench-profiles")
	if err := os.CopyFS(profiles, os.DirFS(profilesDir)); err != nil {
		t.Fatal(err)
	}
	vg := func(args ...string) []string {
		return append([]string{"vgpuctl", "--profiles", profiles, "--state-dir", state, "--socket", filepath.Join(state, "none.sock")}, args...)
	}
	sh := func(script string) []string { return []string{"/bin/sh", "-ec", script} }
	// time runs setup (untimed), then cmd, then check and teardown (untimed).
	runs := benchRuns
	time1 := func(row, tool string, setup, cmd, teardown []string, check func() error) {
		for range runs {
			if setup != nil {
				mustRun(t, setup)
			}
			start := time.Now()
			if b, err := exec.Command(cmd[0], cmd[1:]...).CombinedOutput(); err != nil {
				t.Fatalf("%s/%s: %s: %v\n%s", row, tool, strings.Join(cmd, " "), err, b)
			}
			d := time.Since(start)
			if check != nil {
				if err := check(); err != nil {
					t.Fatalf("%s/%s: %v", row, tool, err)
				}
			}
			if teardown != nil {
				mustRun(t, teardown)
			}
			fmt.Fprintf(out, "%s %s %d\n", row, tool, d.Nanoseconds())
		}
	}

	time1("start", "shell", nil, []string{"/bin/true"}, nil, nil)
	time1("start", "go hello", nil, []string{"go-hello"}, nil, nil)
	time1("start", "vgpuctl", nil, []string{"vgpuctl", "--version"}, nil, nil)
	time1("start", "vgpuctl-libvirt", nil, []string{"vgpuctl-libvirt", "--version"}, nil, nil)

	// mdevs of the mbochs sample: 16 of mbochs-medium, 4 of mbochs-large.
	for _, m := range []struct {
		row, typ, profile string
		n                 int
	}{{"mdev16", "mbochs-medium", "lab-mbochs-16m", 16}, {"mdev4", "mbochs-large", "lab-mbochs-64m", 4}} {
		ids := make([]string, m.n)
		for i := range ids {
			ids[i] = uuid.NewString()
		}
		types := "/sys/class/mdev_bus/mbochs/mdev_supported_types/" + m.typ
		var create, remove, mctl, mctlUndo strings.Builder
		for _, id := range ids {
			fmt.Fprintf(&create, "echo %s > %s/create\n", id, types)
			fmt.Fprintf(&remove, "echo 1 > %s/%s/remove\n", sysfs.MdevDevices, id)
			fmt.Fprintf(&mctl, "mdevctl define -u %s -p mbochs -t %s\nmdevctl start -u %s\n", id, m.typ, id)
			fmt.Fprintf(&mctlUndo, "mdevctl stop -u %s\nmdevctl undefine -u %s\n", id, id)
		}
		count := func() error {
			if n := len(mbochsInstances(t)[m.typ]); n != m.n {
				return fmt.Errorf("%d %s mdevs, want %d", n, m.typ, m.n)
			}
			return nil
		}
		time1(m.row, "shell", nil, sh(create.String()), sh(remove.String()), count)
		time1(m.row, "vgpuctl", nil, vg("carve", "mbochs", "--profile", m.profile), vg("uncarve", "mbochs"), count)
		time1(m.row, "mdevctl", nil, sh(mctl.String()), sh(mctlUndo.String()), count)
	}

	// 4 igb VFs on vfio-pci, and back to 0.
	pf := pci.DevicePath(igbPF)
	var bind, unbind strings.Builder
	fmt.Fprintf(&bind, "echo 0 > %s/sriov_drivers_autoprobe\necho 4 > %s/sriov_numvfs\necho 1 > %s/sriov_drivers_autoprobe\n", pf, pf, pf)
	for i := range 4 {
		vf := fmt.Sprintf("%s/virtfn%d", pf, i)
		fmt.Fprintf(&bind, "echo vfio-pci > %s/driver_override\nbasename $(readlink -f %s) > /sys/bus/pci/drivers_probe\n", vf, vf)
		fmt.Fprintf(&unbind, "basename $(readlink -f %s) > %s/driver/unbind\n", vf, vf)
	}
	fmt.Fprintf(&unbind, "echo 0 > %s/sriov_numvfs\n", pf)
	vfsOn := func(want int) func() error {
		return func() error {
			vfs := vfsOf(t, igbPF)
			if len(vfs) != want {
				return fmt.Errorf("%d VFs, want %d", len(vfs), want)
			}
			for _, vf := range vfs {
				if d := driverOf(t, vf.Address); d != "vfio-pci" {
					return fmt.Errorf("VF %s on %q", vf.Address, d)
				}
			}
			return nil
		}
	}
	time1("vf4", "shell", nil, sh(bind.String()), sh(unbind.String()), vfsOn(4))
	time1("vf4", "vgpuctl", nil, vg("carve", igbPF.String(), "--profile", "lab-igb-4"), vg("uncarve", igbPF.String()), vfsOn(4))
	time1("vf0", "shell", sh(bind.String()), sh(unbind.String()), nil, vfsOn(0))
	time1("vf0", "vgpuctl", vg("carve", igbPF.String(), "--profile", "lab-igb-4"), vg("uncarve", igbPF.String()), nil, vfsOn(0))

	// A carve that is already as wanted, against the process start.
	mustRun(t, vg("carve", igbPF.String(), "--profile", "lab-igb-4"))
	time1("noop", "vgpuctl --version", nil, []string{"vgpuctl", "--version"}, nil, nil)
	time1("noop", "vgpuctl", nil, vg("carve", igbPF.String(), "--profile", "lab-igb-4"), nil, vfsOn(4))
	mustRun(t, vg("uncarve", igbPF.String()))

	// What vgpud's prepare and release, through the hook, add to virsh start
	// + destroy of a domain with one VF: against the same domain with a VF
	// on vfio-pci and no hook installed. vgpud carves the PF and stays up
	// for both sides, so only the hook differs; libvirtd reads hooks when it
	// starts, so it restarts at each switch. The sides alternate in blocks:
	// a TCG guest's times drift over a boot.
	stop := startVgpud(t)
	defer stop()
	waitCarved(t)
	startLibvirt(t)
	defineDomain(t, "bench-vgpu")
	attached, errOut, code := run(t, "vgpuctl", "--profiles", profilesDir, "attach", "bench-vgpu", "--profile", "lab-igb-4")
	if code != 0 {
		t.Fatalf("vgpuctl attach bench-vgpu: exit %d: %s", code, errOut)
	}
	var other pci.Address // a VF the vGPU domain did not get
	for _, vf := range vfsOf(t, igbPF) {
		if !strings.Contains(attached, vf.Address.String()) {
			other = vf.Address
		}
	}
	defineDomainAt(t, localURI, "bench-hand", hostdevXML(other))
	stopLibvirt(t)
	cycle := func(domain string) []string {
		return sh("virsh start " + domain + " >/dev/null && virsh destroy " + domain + " >/dev/null")
	}
	for block := range 4 {
		domain, tool, hook := "bench-hand", "by hand", []string{"hook", "uninstall"}
		if block%2 == 1 {
			domain, tool, hook = "bench-vgpu", "vgpu-hook", []string{"hook", "install", "--hook-binary", binDir + "/vgpu-hook"}
		}
		if _, _, code := run(t, "vgpuctl", hook...); code != 0 {
			t.Fatalf("vgpuctl %s: exit %d", strings.Join(hook, " "), code)
		}
		startLibvirt(t)
		runs = 4
		time1("hook", tool, nil, cycle(domain), nil, nil)
		stopLibvirt(t)
	}
}

// hostdevXML is vf as an unmanaged hostdev: the admin binds it to vfio-pci.
func hostdevXML(vf pci.Address) string {
	return fmt.Sprintf(`<hostdev mode='subsystem' type='pci' managed='no'><source><address domain='0x%04x' bus='0x%02x' slot='0x%02x' function='0x%x'/></source></hostdev>`,
		vf.Domain, vf.Bus, vf.Device, vf.Function)
}

func mustRun(t *testing.T, cmd []string) {
	t.Helper()
	if b, err := exec.Command(cmd[0], cmd[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(cmd, " "), err, b)
	}
}
