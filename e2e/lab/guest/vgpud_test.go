//go:build labguest

package guest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/client"
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
	stop, kill, _ = startVgpudCmd(t, []string{bin}, yaml)
	return stop, kill
}

// startVgpudCmd is startVgpudBin running argv (a wrapper such as setpriv,
// then vgpud) with vgpud's flags added; pid is the process started.
func startVgpudCmd(t *testing.T, argv []string, yaml string) (stop, kill func(), pid int) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(vgpudConfig), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(vgpudConfig, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	args := append(argv[1:], "--config", vgpudConfig, "--state-dir", vgpudState, "--profiles", profilesDir, "--socket", vgpudSocket)
	cmd := exec.Command(argv[0], args...)
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", strings.Join(argv, " "), err)
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
	return func() { end(syscall.SIGTERM) }, func() { end(syscall.SIGKILL) }, cmd.Process.Pid
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

// TestVgpudBeforeReboot: vgpud carves the host to its config at start,
// once the modules it needs are loaded.
func TestVgpudBeforeReboot(t *testing.T) {
	relabelAsGPU(t, igbPF)
	if n := len(vfsOf(t, igbPF)); n != 0 {
		t.Fatalf("a fresh boot with %d VFs", n)
	}
	modulesNeeded(t)
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

// modulesNeeded: on a host where vfio-pci is not loaded, vgpud refuses to
// start with one line saying which module and how to load it; the
// modules-load.d file make install puts in place (systemd/modules-load.d,
// in the share) names modules this kernel loads, and with them vgpud
// starts (issue 10.4). systemd-modules-load is not in the lab: its file
// format is a module name per line, # comments.
func modulesNeeded(t *testing.T) {
	t.Helper()
	if _, errOut, code := run(t, "modprobe", "-r", "vfio_pci"); code != 0 {
		t.Fatalf("modprobe -r vfio_pci: exit %d: %s", code, errOut)
	}
	if err := os.MkdirAll(filepath.Dir(vgpudConfig), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(vgpudConfig, []byte(labConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "vgpud", "--config", vgpudConfig, "--state-dir", vgpudState,
		"--profiles", profilesDir, "--socket", vgpudSocket).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), "vfio-pci") || !strings.Contains(string(out), "modprobe vfio-pci") {
		t.Fatalf("vgpud without vfio-pci: %v\n%s\nwant exit 1 naming vfio-pci and how to load it", err, out)
	}
	if n := len(vfsOf(t, igbPF)); n != 0 {
		t.Fatalf("vgpud refused to start but enabled %d VFs", n)
	}
	conf, err := os.ReadFile(labDir + "/modules-load.d/vgpu.conf")
	if err != nil {
		t.Fatal(err)
	}
	var mods []string
	for _, l := range strings.Split(string(conf), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") && !strings.HasPrefix(l, ";") {
			mods = append(mods, l)
		}
	}
	if len(mods) == 0 {
		t.Fatalf("vgpu.conf names no module:\n%s", conf)
	}
	for _, m := range mods {
		if _, errOut, code := run(t, "modprobe", m); code != 0 {
			t.Fatalf("modprobe %s (from vgpu.conf): exit %d: %s", m, code, errOut)
		}
	}
	if _, err := os.Stat("/sys/bus/pci/drivers/vfio-pci"); err != nil {
		t.Fatalf("vgpu.conf's modules loaded, and still no vfio-pci driver: %v", err)
	}
}

// unitCapabilities is the CapabilityBoundingSet of the systemd unit the
// share carries (lab_test.go's newShare), lower case without CAP_.
func unitCapabilities(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(labDir, "vgpud.service"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "CapabilityBoundingSet="); ok {
			var caps []string
			for _, c := range strings.Fields(v) {
				caps = append(caps, strings.ToLower(strings.TrimPrefix(c, "CAP_")))
			}
			return caps
		}
	}
	t.Fatal("the unit has no CapabilityBoundingSet")
	return nil
}

// capBits are the capabilities' numbers (linux/capability.h).
var capBits = map[string]uint{"chown": 0, "dac_override": 1, "sys_module": 16, "sys_ptrace": 19}

// TestVgpudCapabilities: vgpud run with only the unit's capability
// bounding set (setpriv, as systemd applies CapabilityBoundingSet to the
// root service) carves the lab's config and names a process of more
// capabilities that holds a VF open, which takes CAP_SYS_PTRACE (its
// /proc/<pid>/fd links). Without CAP_SYS_PTRACE the listing still answers,
// never "not in use": the VF's use is unknown, one warning names the
// capability, and an uncarve that would destroy the VF is refused unless
// forced.
func TestVgpudCapabilities(t *testing.T) {
	relabelAsGPU(t, igbPF)
	caps := unitCapabilities(t)
	runVgpud := func(caps []string) (stop func(), pid int) {
		t.Helper()
		set := "-all"
		var want uint64
		for _, c := range caps {
			bit, ok := capBits[c]
			if !ok {
				t.Fatalf("capability %s of the unit is not in the test's table", c)
			}
			set += ",+" + c
			want |= 1 << bit
		}
		stop, _, pid = startVgpudCmd(t, []string{"setpriv", "--bounding-set=" + set, "--inh-caps=-all", "vgpud"}, labConfig)
		waitCarved(t)
		// Until it answers, the process may still be setpriv (or not yet that).
		c := client.New(vgpudSocket)
		for deadline := time.Now().Add(time.Minute); !c.Available(context.Background(), time.Second); {
			if time.Now().After(deadline) {
				stop()
				t.Fatal("vgpud under setpriv did not answer within a minute")
			}
			time.Sleep(100 * time.Millisecond)
		}
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			stop()
			t.Fatal(err)
		}
		if !strings.HasPrefix(string(st), "Name:\tvgpud\n") {
			stop()
			t.Fatalf("pid %d is not vgpud:\n%s", pid, st)
		}
		if !strings.Contains(string(st), fmt.Sprintf("CapEff:\t%016x\n", want)) {
			stop()
			t.Fatalf("vgpud does not run with exactly %v:\n%s", caps, st)
		}
		return stop, pid
	}
	vgpus := func() ([]api.VGPU, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		return client.New(vgpudSocket).VGPUs(ctx)
	}

	stop, _ := runVgpud(caps)
	vf := vfsOf(t, igbPF)[0].Address
	hold := mustOpenVFIO(t, pci.DevicePath(vf), vf.String())
	vs, err := vgpus()
	if err != nil {
		t.Errorf("vgpud with %v lists no vGPUs: %v", caps, err)
	}
	found := false
	for _, v := range vs {
		if v.ID == vf.String() {
			found = true
			if !v.InUse || !strings.Contains(v.Holder, "guest.test") {
				t.Errorf("vgpud with %v says %s is in use %v by %q; want held by guest.test", caps, vf, v.InUse, v.Holder)
			}
		}
	}
	if !found {
		t.Errorf("vgpud does not list %s", vf)
	}
	stop()

	without := slices.DeleteFunc(slices.Clone(caps), func(c string) bool { return c == "sys_ptrace" })
	stop, _ = runVgpud(without)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := client.New(vgpudSocket)
	vs, warning, err := c.VGPUsWarning(ctx)
	if err != nil {
		t.Errorf("vgpud without CAP_SYS_PTRACE while a VF is held: %v; want the listing to answer", err)
	}
	// The processes it could not read include lab-init (pid 1) and this
	// one; the warning names the first few and the capability.
	if !strings.Contains(warning, "CAP_SYS_PTRACE") || !strings.Contains(warning, "(pid 1)") {
		t.Errorf("vgpud without CAP_SYS_PTRACE: warning %q, want one naming pid 1 and CAP_SYS_PTRACE", warning)
	}
	found = false
	for _, v := range vs {
		if v.ID == vf.String() {
			found = true
			if v.InUse || !v.UseUnknown {
				t.Errorf("vgpud without CAP_SYS_PTRACE says %s is in use %v, unknown %v; want unknown", vf, v.InUse, v.UseUnknown)
			}
		}
	}
	if !found {
		t.Errorf("vgpud without CAP_SYS_PTRACE does not list %s", vf)
	}
	before := vfsOf(t, igbPF)
	if _, err := c.Uncarve(ctx, api.UncarveRequest{GPU: igbPF.String()}); !errors.Is(err, client.ErrInUse) ||
		!strings.Contains(err.Error(), "CAP_SYS_PTRACE") {
		t.Errorf("uncarve of VFs of unknown use: %v; want refused naming CAP_SYS_PTRACE", err)
	}
	if after := vfsOf(t, igbPF); len(after) != len(before) {
		t.Errorf("the refused uncarve left %d of %d VFs", len(after), len(before))
	}
	// Let go of the VF: this process (more capabilities than vgpud) still
	// runs unreadable, so the use stays unknown, and --force goes through.
	hold.Close()
	if _, err := c.Uncarve(ctx, api.UncarveRequest{GPU: igbPF.String()}); !errors.Is(err, client.ErrInUse) {
		t.Errorf("uncarve while this process is unreadable: %v; want refused", err)
	}
	if _, err := c.Uncarve(ctx, api.UncarveRequest{GPU: igbPF.String(), Force: true}); err != nil {
		t.Errorf("forced uncarve through vgpud without CAP_SYS_PTRACE: %v", err)
	}
	stop()
	if _, _, code := run(t, "vgpuctl", "--profiles", profilesDir, "--state-dir", vgpudState, "--socket", "/nonexistent",
		"uncarve", igbPF.String()); code != 0 {
		t.Errorf("uncarve the igb PF after the test: exit %d", code)
	}
}
