//go:build e2e

package lab

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// systemdConfig is /etc/vgpud/config.yaml of the systemd guest: the igb PF
// split into 4 VFs and the mbochs sample into 4 mdevs.
const systemdConfig = `version: v1
gpus:
  - address: "0000:01:00.0"
    profile: lab-igb-4
  - parent: mbochs
    profile: lab-mbochs-64m
socket:
  group: "0"
`

// sdEnv is run.sh's environment for the systemd guest: a boot of systemd
// with libvirt under TCG takes minutes before the tests start, and the
// reboot's tests wait for libvirtd's start of day (two nested TCG domains
// autostarted) and run dpkg three times. Limits for a loaded machine, not
// speed targets: docs/lab.md has the times measured.
var sdEnv = []string{"VGPU_LAB_SYSTEMD=1", "VGPU_LAB_TIMEOUT=2700", "VGPU_LAB_GUEST_TIMEOUT=35m"}

// TestSystemd boots the lab with systemd as PID 1 and vgpu's .deb (make
// package) installed, twice on one share (the host's disk): the first
// boot checks the unit as shipped (Type=notify, sandbox, capabilities),
// its order before libvirt, reload, the watchdog, and sets up two
// autostart domains with vGPU requests; the second, a reboot, finds them
// started by libvirt with their vGPUs, and on that boot the device plugin,
// the NVML helper's start and the maintainer scripts under the running
// systemd. See e2e/lab/systemd-init.
// VGPU_LAB_DEB names a .deb built from this tree (make package) to use
// instead of building one.
func TestSystemd(t *testing.T) {
	share := newShare(t)
	deb := os.Getenv("VGPU_LAB_DEB") // a .deb already built from this tree
	if deb == "" {
		t0 := time.Now()
		pkgDir := t.TempDir()
		cmd := exec.Command("make", "-s", "--no-print-directory", "package", "PKGDIR="+pkgDir)
		cmd.Dir = repoDir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("make package: %v\n%s", err, out)
		}
		debs, _ := filepath.Glob(filepath.Join(pkgDir, "*.deb"))
		if len(debs) != 1 {
			t.Fatalf("make package made %d .deb files in %s, want 1", len(debs), pkgDir)
		}
		deb = debs[0]
		t.Logf("make package: %s", time.Since(t0).Round(time.Second))
	}
	b, err := os.ReadFile(deb)
	if err == nil {
		err = os.WriteFile(filepath.Join(share, "vgpu.deb"), b, 0o644)
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(share, "config.yaml"), []byte(systemdConfig), 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Run("first-boot", func(t *testing.T) {
		guestTestsOn(t, share, "^TestSystemdFirstBoot$", sdEnv...)
	})
	if t.Failed() {
		return
	}
	if _, err := os.Stat(filepath.Join(share, "disk.tar")); err != nil {
		t.Fatalf("the first boot's shutdown kept no disk (lab-disk.service): %v", err)
	}
	t.Run("reboot", func(t *testing.T) {
		guestTestsOn(t, share, "^TestSystemdReboot$", sdEnv...)
	})
}
