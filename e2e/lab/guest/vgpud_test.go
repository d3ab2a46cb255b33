//go:build labguest

package guest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/pkg/pci"
)

// vgpud's files as a host keeps them; /var/lib/vgpud survives the lab's
// "reboot" by a copy to the run's share (the guest's root is a tmpfs).
const (
	vgpudConfig  = "/etc/vgpud/config.yaml"
	vgpudState   = "/var/lib/vgpud"
	vgpudSocket  = "/run/vgpud/vgpud.sock"
	persistState = labDir + "/persist/var-lib-vgpud"
)

const labConfig = `version: v1
gpus:
  - address: "0000:01:00.0"
    profile: lab-igb-4
socket:
  group: "0"
`

// startVgpud runs vgpud on the lab's config and returns a stop function
// that sends SIGTERM and checks a clean exit.
func startVgpud(t *testing.T) (stop func()) {
	t.Helper()
	return startVgpudWith(t, labConfig)
}

// startVgpudWith is startVgpud on config yaml.
func startVgpudWith(t *testing.T, yaml string) (stop func()) {
	t.Helper()
	stop, _ = startVgpudBin(t, "vgpud", yaml)
	return stop
}

// startVgpudBin is startVgpudWith running the binary bin; kill ends it with
// SIGKILL instead (a crash), and either one logs vgpud's output.
func startVgpudBin(t *testing.T, bin, yaml string) (stop, kill func()) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(vgpudConfig), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(vgpudConfig, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	cmd := exec.Command(bin, "--config", vgpudConfig, "--state-dir", vgpudState,
		"--profiles", profilesDir, "--socket", vgpudSocket)
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	end := func(sig syscall.Signal) {
		t.Helper()
		_ = cmd.Process.Signal(sig)
		select {
		case err := <-done:
			if err != nil && sig == syscall.SIGTERM {
				t.Errorf("vgpud: %v", err)
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("vgpud did not stop within 30 s of %v", sig)
		}
		t.Logf("vgpud's log:\n%s", log.String())
	}
	return func() { end(syscall.SIGTERM) }, func() { end(syscall.SIGKILL) }
}

// waitCarved waits until the igb PF carries lab-igb-4: 4 VFs on vfio-pci.
func waitCarved(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		vfs := vfsOf(t, igbPF)
		ok := len(vfs) == 4
		for _, vf := range vfs {
			ok = ok && driverOf(t, vf.Address) == "vfio-pci"
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("vgpud did not carve %s to lab-igb-4 within 90 s: %d VFs", igbPF, len(vfs))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// checkLedger: vgpuctl, asking the running vgpud, lists the 4 VFs as the
// vGPUs of lab-igb-4.
func checkLedger(t *testing.T) {
	t.Helper()
	out, _, code := run(t, "vgpuctl", "--profiles", profilesDir, "--state-dir", vgpudState, "vgpus")
	if code != 0 {
		t.Fatalf("vgpuctl vgpus: exit %d", code)
	}
	for _, vf := range vfsOf(t, igbPF) {
		line := ""
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, vf.Address.String()) {
				line = l
			}
		}
		if !strings.Contains(line, "lab-igb-4") || !strings.Contains(line, "vfio-pci") {
			t.Errorf("vgpuctl vgpus: %s listed as %q, want a lab-igb-4 VF on vfio-pci", vf.Address, line)
		}
	}
}

// TestVgpudBeforeReboot: vgpud carves the host to its config at start.
func TestVgpudBeforeReboot(t *testing.T) {
	relabelAsGPU(t, igbPF)
	if n := len(vfsOf(t, igbPF)); n != 0 {
		t.Fatalf("a fresh boot with %d VFs", n)
	}
	stop := startVgpud(t)
	waitCarved(t)
	checkLedger(t)
	stop()
	if err := os.MkdirAll(filepath.Dir(persistState), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(persistState, os.DirFS(vgpudState)); err != nil {
		t.Fatalf("keep %s for the next boot: %v", vgpudState, err)
	}
}

// TestVgpudAfterReboot: after the guest rebooted (VFs do not survive one),
// vgpud, started again with its state, brings the host back to its config.
func TestVgpudAfterReboot(t *testing.T) {
	relabelAsGPU(t, igbPF)
	if n := len(vfsOf(t, igbPF)); n != 0 {
		t.Fatalf("the reboot kept %d VFs", n)
	}
	if d := driverOf(t, pci.MustParseAddress("0000:01:00.0")); d != "igb" {
		t.Fatalf("PF on %q after the reboot", d)
	}
	if err := os.CopyFS(vgpudState, os.DirFS(persistState)); err != nil {
		t.Fatalf("restore %s from before the reboot: %v", vgpudState, err)
	}
	stop := startVgpud(t)
	waitCarved(t)
	checkLedger(t)
	stop()
}
