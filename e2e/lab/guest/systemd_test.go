//go:build labguest

package guest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/client"
	"github.com/vgpu-project/vgpu/pkg/deviceplugin/kubelettest"
)

// These tests run in the systemd guest (run.sh VGPU_LAB_SYSTEMD=1,
// e2e/lab/systemd-init): systemd is PID 1, vgpu's .deb is installed and
// vgpud runs from its unit, as shipped, plus a drop-in that only adds the
// lab's catalog (--profiles) to the command line. vgpuctl, vgpu-hook and
// vgpu-nvml are the package's (/usr/bin), not the lab's bin/.

// The installed unit and the catalog systemd-init put in place.
const (
	installedUnit = "/usr/lib/systemd/system/vgpud.service"
	sdProfiles    = "/etc/vgpud/profiles.d"
	sdConfig      = "/etc/vgpud/config.yaml"
)

// The domains the first boot defines with autostart, one per vGPU kind.
var sdDomains = []struct{ name, profile string }{
	{"lab-boot-vf", "lab-igb-4"},
	{"lab-boot-mdev", "lab-mbochs-64m"},
}

// unitProps reads properties of a unit through systemctl show.
func unitProps(t *testing.T, unit string, props ...string) map[string]string {
	t.Helper()
	args := []string{"show", unit}
	for _, p := range props {
		args = append(args, "-p", p)
	}
	out, _, code := run(t, "systemctl", args...)
	if code != 0 {
		t.Fatalf("systemctl show %s: exit %d", unit, code)
	}
	m := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			m[k] = v
		}
	}
	return m
}

func monotonic(t *testing.T, unit, prop string) uint64 {
	t.Helper()
	v := unitProps(t, unit, prop)[prop]
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil || n == 0 {
		t.Fatalf("%s %s = %q: not a time (did it start?)", unit, prop, v)
	}
	return n
}

// checkVgpudUnit: vgpud runs from the package's unit, unmodified, as
// Type=notify, with the shipped capability set and sandbox in force on its
// process.
func checkVgpudUnit(t *testing.T) int {
	t.Helper()
	p := unitProps(t, "vgpud.service", "Type", "ActiveState", "SubState", "MainPID", "FragmentPath",
		"DropInPaths", "ExecStart", "Wants", "Requires", "After", "Before", "WatchdogUSec", "LoadState")
	t.Logf("vgpud.service: %v", p)
	if p["Type"] != "notify" || p["ActiveState"] != "active" || p["SubState"] != "running" {
		t.Fatalf("vgpud.service: Type=%s ActiveState=%s SubState=%s, want notify, active, running", p["Type"], p["ActiveState"], p["SubState"])
	}
	if p["FragmentPath"] != installedUnit {
		t.Errorf("vgpud.service comes from %s, want the package's %s", p["FragmentPath"], installedUnit)
	}
	if p["DropInPaths"] != "/etc/systemd/system/vgpud.service.d/lab-catalog.conf" {
		t.Errorf("vgpud.service drop-ins: %q, want only the lab's catalog drop-in", p["DropInPaths"])
	}
	if !strings.Contains(p["ExecStart"], "--profiles /etc/vgpud/profiles.d") {
		t.Errorf("ExecStart lacks the lab's catalog: %s", p["ExecStart"])
	}
	// dpkg --verify: every file of the package as shipped; only the config,
	// a conffile the admin changed, differs.
	out, _, _ := run(t, "dpkg", "--verify", "vgpu")
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if l != "" && !strings.HasSuffix(l, " c "+sdConfig) {
			t.Errorf("dpkg --verify vgpu: a file differs from the package: %s", l)
		}
	}
	// Vendor services: wanted and ordered, never required.
	if !strings.Contains(" "+p["Wants"]+" ", " nvidia-vgpu-mgr.service ") || !strings.Contains(" "+p["After"]+" ", " nvidia-vgpu-mgr.service ") {
		t.Errorf("vgpud.service does not want and follow nvidia-vgpu-mgr.service: Wants=%s After=%s", p["Wants"], p["After"])
	}
	if strings.Contains(p["Requires"], "nvidia") {
		t.Errorf("vgpud.service requires %s", p["Requires"])
	}
	if lp := unitProps(t, "nvidia-vgpu-mgr.service", "LoadState")["LoadState"]; lp != "not-found" {
		t.Errorf("nvidia-vgpu-mgr.service LoadState=%s: the lab has no NVIDIA driver, want not-found", lp)
	}

	pid, err := strconv.Atoi(p["MainPID"])
	if err != nil || pid <= 0 {
		t.Fatalf("vgpud MainPID %q", p["MainPID"])
	}
	// The capability set the unit ships, on the process.
	unit, err := os.ReadFile(installedUnit)
	if err != nil {
		t.Fatal(err)
	}
	want := uint64(0)
	for _, l := range strings.Split(string(unit), "\n") {
		if v, ok := strings.CutPrefix(l, "CapabilityBoundingSet="); ok {
			for _, c := range strings.Fields(v) {
				bit, ok := capBits[strings.ToLower(strings.TrimPrefix(c, "CAP_"))]
				if !ok {
					t.Fatalf("the unit names %s, which this test does not know", c)
				}
				want |= 1 << bit
			}
		}
	}
	if want == 0 {
		t.Fatalf("no CapabilityBoundingSet= in %s", installedUnit)
	}
	status := readAttr(t, fmt.Sprintf("/proc/%d/status", pid))
	fields := map[string]string{}
	for _, l := range strings.Split(status, "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			fields[k] = strings.TrimSpace(v)
		}
	}
	for _, k := range []string{"CapBnd", "CapPrm", "CapEff"} {
		got, err := strconv.ParseUint(fields[k], 16, 64)
		if err != nil || got != want {
			t.Errorf("vgpud %s = %s, want %016x (the unit's CapabilityBoundingSet)", k, fields[k], want)
		}
	}
	if fields["CapAmb"] != "0000000000000000" || fields["CapInh"] != "0000000000000000" {
		t.Errorf("vgpud CapAmb=%s CapInh=%s, want none", fields["CapAmb"], fields["CapInh"])
	}
	if fields["NoNewPrivs"] != "1" || fields["Seccomp"] != "2" {
		t.Errorf("vgpud NoNewPrivs=%s Seccomp=%s, want 1 and 2 (a syscall filter)", fields["NoNewPrivs"], fields["Seccomp"])
	}
	// ProtectSystem=strict: vgpud's root is read-only, /sys and its state
	// are not.
	mounts := readAttr(t, fmt.Sprintf("/proc/%d/mountinfo", pid))
	ro := map[string]bool{}
	for _, l := range strings.Split(mounts, "\n") {
		f := strings.Fields(l)
		if len(f) > 5 {
			ro[f[4]] = strings.HasPrefix(f[5], "ro")
		}
	}
	for path, wantRO := range map[string]bool{"/": true, "/sys": false, "/var/lib/vgpud": false, "/run/vgpud": false} {
		if r, ok := ro[path]; !ok || r != wantRO {
			t.Errorf("vgpud's mount namespace: %s mounted=%v read-only=%v, want read-only=%v", path, ok, r, wantRO)
		}
	}
	return pid
}

// checkBootOrder: vgpud was ready (READY=1, the unit active) before
// libvirtd and libvirt-guests began to start, and no unit failed.
func checkBootOrder(t *testing.T) {
	t.Helper()
	ready := monotonic(t, "vgpud.service", "ActiveEnterTimestampMonotonic")
	for _, u := range []string{"libvirtd.service", "libvirt-guests.service"} {
		started := monotonic(t, u, "InactiveExitTimestampMonotonic")
		if started < ready {
			t.Errorf("%s began to start at %d µs, before vgpud was ready at %d µs", u, started, ready)
		} else {
			t.Logf("%s began to start %.1f s after vgpud was ready", u, float64(started-ready)/1e6)
		}
	}
	checkNoFailedUnit(t)
}

// checkNoFailedUnit: systemctl lists no failed unit; a failed one's
// journal is shown.
func checkNoFailedUnit(t *testing.T) {
	t.Helper()
	out, _, _ := run(t, "systemctl", "list-units", "--failed", "--no-legend", "--plain")
	if strings.TrimSpace(out) == "" {
		return
	}
	t.Errorf("failed units:\n%s", out)
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			run(t, "journalctl", "-b", "-u", f[0], "--no-pager")
		}
	}
}

// vgpuOf is vgpud's record of the vGPU the domain holds, asked of the
// packaged vgpud on its socket (vgpuctl's own 2 s probe of vgpud can miss
// it under the lab's emulation and list sysfs only).
func vgpuOf(t *testing.T, domain string) (api.VGPU, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	vs, err := client.New("/run/vgpud/vgpud.sock").VGPUs(ctx)
	if err != nil {
		t.Fatalf("list vGPUs from vgpud: %v", err)
	}
	for _, v := range vs {
		if v.DomainName == domain {
			t.Logf("vgpud: %s %s %s %s, in use %v", v.ID, v.Profile, v.State, v.DomainName, v.InUse)
			return v, true
		}
	}
	t.Logf("vgpud lists no vGPU of %s: %+v", domain, vs)
	return api.VGPU{}, false
}

// attach runs vgpuctl attach. vgpuctl gives vgpud 2 s to answer its
// health probe and otherwise takes it for not running and refuses before
// changing anything; under the lab's emulation on a loaded machine the
// answer can take longer, so that refusal is tried again while systemd
// says vgpud is active.
func attach(t *testing.T, domain, profile string) {
	t.Helper()
	for try := 1; ; try++ {
		_, errOut, code := run(t, "vgpuctl", "--profiles", sdProfiles, "attach", domain, "--profile", profile)
		if code == 0 {
			return
		}
		active := unitProps(t, "vgpud.service", "ActiveState")["ActiveState"] == "active"
		if try < 5 && active && strings.Contains(errOut, "vgpud is not running") {
			t.Logf("vgpuctl's probe missed the running vgpud (try %d); again", try)
			continue
		}
		t.Fatalf("vgpuctl attach %s --profile %s: exit %d", domain, profile, code)
	}
}

// waitFor polls cond until it holds or limit passes.
func waitFor(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, limit)
		}
		time.Sleep(time.Second)
	}
}

// TestSystemdFirstBoot: the first boot after dpkg -i. vgpud started from
// the package's unit as Type=notify with the shipped sandbox and carved
// the config (a VF split and an mdev split) before libvirt started; no
// unit failed on a host without NVIDIA's vGPU manager. Then, as an admin:
// systemctl reload reconciles a changed config; the watchdog restarts a
// vgpud stopped with SIGSTOP; the hook is installed and two domains asking
// for vGPUs (VF, mdev) are set to autostart, started once (the hook's
// prepare) and destroyed (its release). The next boot (TestSystemdReboot)
// starts them.
func TestSystemdFirstBoot(t *testing.T) {
	checkVgpudUnit(t)
	checkBootOrder(t)
	waitCarved(t)
	waitParentCarved(t)

	t.Run("reload", func(t *testing.T) {
		pid := unitProps(t, "vgpud.service", "MainPID")["MainPID"]
		orig, err := os.ReadFile(sdConfig)
		if err != nil {
			t.Fatal(err)
		}
		two := strings.Replace(string(orig), "profile: lab-igb-4", "profile: lab-igb-2", 1)
		if two == string(orig) {
			t.Fatalf("the config has no lab-igb-4 entry:\n%s", orig)
		}
		for _, step := range []struct {
			cfg  string
			want int
		}{{two, 2}, {string(orig), 4}} {
			if err := os.WriteFile(sdConfig, []byte(step.cfg), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, _, code := run(t, "systemctl", "reload", "vgpud"); code != 0 {
				t.Fatalf("systemctl reload vgpud: exit %d", code)
			}
			waitFor(t, fmt.Sprintf("%d VFs on vfio-pci after systemctl reload", step.want), 3*time.Minute, func() bool {
				vfs := vfsOf(t, igbPF)
				ok := len(vfs) == step.want
				for _, vf := range vfs {
					ok = ok && driverOf(t, vf.Address) == "vfio-pci"
				}
				return ok
			})
		}
		if now := unitProps(t, "vgpud.service", "MainPID")["MainPID"]; now != pid {
			t.Errorf("vgpud's MainPID went from %s to %s: reload restarted it", pid, now)
		}
	})

	t.Run("watchdog", func(t *testing.T) {
		p := unitProps(t, "vgpud.service", "MainPID", "NRestarts")
		if _, _, code := run(t, "kill", "-STOP", p["MainPID"]); code != 0 {
			t.Fatalf("kill -STOP %s: exit %d", p["MainPID"], code)
		}
		// WatchdogSec=30s, RestartSec=2s, then the new vgpud's first
		// reconcile before READY=1.
		waitFor(t, "systemd restarting the stopped vgpud", 6*time.Minute, func() bool {
			n := unitProps(t, "vgpud.service", "MainPID", "NRestarts", "ActiveState")
			return n["MainPID"] != p["MainPID"] && n["MainPID"] != "0" && n["ActiveState"] == "active" && n["NRestarts"] != p["NRestarts"]
		})
		out, _, _ := run(t, "journalctl", "-u", "vgpud", "--no-pager", "-o", "cat")
		if !strings.Contains(out, "Watchdog timeout") {
			t.Errorf("vgpud's journal has no watchdog timeout:\n%s", out)
		}
		checkVgpudUnit(t)
		waitCarved(t)
		waitParentCarved(t)
	})

	t.Run("domains", func(t *testing.T) {
		if _, _, code := run(t, "vgpuctl", "hook", "install"); code != 0 {
			t.Fatalf("vgpuctl hook install: exit %d", code)
		}
		// libvirtd looks for hooks when it starts.
		if _, _, code := run(t, "systemctl", "restart", "libvirtd"); code != 0 {
			t.Fatalf("systemctl restart libvirtd: exit %d", code)
		}
		for _, d := range sdDomains {
			defineDomain(t, d.name)
			attach(t, d.name, d.profile)
			virsh(t, "autostart", d.name)
			virsh(t, "start", d.name)
			if v, ok := vgpuOf(t, d.name); !ok || v.State != "attached" || v.Profile != d.profile || !v.InUse {
				t.Fatalf("after virsh start %s, vgpud: %+v, want a %s vGPU attached and in use", d.name, v, d.profile)
			}
			virsh(t, "destroy", d.name)
			if v, ok := vgpuOf(t, d.name); !ok || v.State != "reserved" {
				t.Fatalf("after virsh destroy %s, vgpud: %+v, want its vGPU reserved", d.name, v)
			}
		}
	})
	checkNoFailedUnit(t)
}

// TestSystemdReboot: the boot after TestSystemdFirstBoot, with its disk
// (config, ledger, libvirt's domains and hook). vgpud is ready before
// libvirt, which autostarts both domains: the hook has vgpud ready their
// vGPUs (the VF carved again after the reboot, the mdev created with the
// domain's UUID), and QEMU holds them. Then, on the same boot: the device
// plugin under the shipped unit, the maintainer scripts under a live
// systemd (an upgrade restarts vgpud and leaves the running domains'
// vGPUs; a remove stops it; an install starts it), and the hook's release
// when the domains are destroyed (which also spares the shutdown
// libvirt-guests' wait for guests that do not answer ACPI).
func TestSystemdReboot(t *testing.T) {
	checkVgpudUnit(t)
	checkBootOrder(t)
	waitLibvirtd(t)
	checkAutostarted(t)
	if n := unitProps(t, "vgpud.service", "NRestarts")["NRestarts"]; n != "0" {
		t.Errorf("vgpud restarted %s times during the boot", n)
	}
	if t.Failed() {
		return
	}
	t.Run("device-plugin", func(t *testing.T) { checkDevicePlugin(t) })
	t.Run("nvml-helper", func(t *testing.T) { checkHelperSandbox(t) })
	t.Run("maintainer-scripts", func(t *testing.T) { checkMaintainerScripts(t) })
	t.Run("release", func(t *testing.T) {
		for _, d := range sdDomains {
			virsh(t, "destroy", d.name)
			if v, ok := vgpuOf(t, d.name); !ok || v.State != "reserved" {
				t.Errorf("after virsh destroy %s, vgpud: %+v, want its vGPU reserved", d.name, v)
			}
		}
	})
	checkNoFailedUnit(t)
}

// libvirtdPatience bounds the wait for libvirtd's first answer after the
// boot. It is a hang's limit, not a speed target: measured on the shared
// 2-core machine, 31 s at a load of 1-4, 165 s at 12, 276 s at 15-17
// (docs/lab.md).
const libvirtdPatience = 15 * time.Minute

// waitLibvirtd waits until libvirtd answers a client, and logs how long
// after its start that was. libvirtd accepts clients only once its drivers
// are up, and the QEMU driver's start of day starts every autostart
// domain before that, one after the other, each through the hook
// (libvirt's src/remote/remote_daemon.c, daemonRunStateInit: "Only now
// accept clients"; src/libvirt.c, virStateInitialize runs each driver's
// stateAutoStart). Two nested TCG guests on a loaded machine take longer
// than run's 2-minute limit: that was the reboot's failure, not a hang. A
// real hang (a hook that never returns) is shown by the processes and
// the journals when this limit passes.
func waitLibvirtd(t *testing.T) {
	t.Helper()
	began := monotonic(t, "libvirtd.service", "InactiveExitTimestampMonotonic")
	t0 := time.Now()
	_, _, code := runFor(t, libvirtdPatience, "virsh", "-c", localURI, "uri")
	if code != 0 {
		run(t, "ps", "-eo", "pid,etime,stat,args")
		run(t, "journalctl", "-b", "-u", "libvirtd", "-u", "vgpud", "--no-pager", "-o", "short-monotonic")
		t.Fatalf("libvirtd did not answer within %s of this test's start (exit %d)", libvirtdPatience, code)
	}
	var now unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &now); err != nil {
		t.Fatal(err)
	}
	t.Logf("libvirtd answered its first client %.1f s after it began to start (%s of it waited here)",
		float64(uint64(now.Nano()/1000)-began)/1e6, time.Since(t0).Round(100*time.Millisecond))
	// The timeline: the hook's calls in vgpud's journal, each domain's
	// start in its QEMU log.
	run(t, "journalctl", "-b", "-u", "libvirtd", "-u", "vgpud", "--no-pager", "-o", "short-monotonic")
	for _, d := range sdDomains {
		run(t, "tail", "-n", "4", "/var/log/libvirt/qemu/"+d.name+".log")
	}
}

// checkAutostarted: both domains run, started by libvirt at boot, each
// with its vGPU attached and in use, and QEMU shows the device.
func checkAutostarted(t *testing.T) {
	t.Helper()
	for _, d := range sdDomains {
		if st := strings.TrimSpace(virsh(t, "domstate", d.name)); st != "running" {
			t.Errorf("%s is %q after the boot, want running (autostart)", d.name, st)
			continue
		}
		if v, ok := vgpuOf(t, d.name); !ok || v.State != "attached" || v.Profile != d.profile || !v.InUse {
			t.Errorf("%s runs, vgpud: %+v, want a %s vGPU attached and in use", d.name, v, d.profile)
		}
		pci := virsh(t, "qemu-monitor-command", d.name, "--hmp", "info pci")
		want := map[string]string{"lab-igb-4": "8086:10ca", "lab-mbochs-64m": "1234:1111"}[d.profile]
		if !strings.Contains(strings.ToLower(pci), want) {
			t.Errorf("%s's QEMU shows no %s device:\n%s", d.name, want, pci)
		}
	}
}

// checkDevicePlugin turns on the device plugin in the config of the
// shipped unit, with no drop-in for it: on a host with a kubelet
// (/var/lib/kubelet), the unit makes /var/lib/kubelet/device-plugins and
// leaves it writable to vgpud, which serves its sockets there, registers
// with the kubelet (the repository's fake kubelet, kubelettest) and hears
// the kernel's device events (AF_NETLINK). The config is restored at the
// end and the directory removed.
func checkDevicePlugin(t *testing.T) {
	t.Helper()
	const (
		kubeletDir = "/var/lib/kubelet"
		pluginDir  = kubeletDir + "/device-plugins"
		podSock    = kubeletDir + "/pod-resources/kubelet.sock"
		domain     = "vgpu.example.org"
	)
	if _, err := os.Stat(kubeletDir); err == nil {
		t.Fatalf("%s exists before the test", kubeletDir)
	}
	orig, err := os.ReadFile(sdConfig)
	if err != nil {
		t.Fatal(err)
	}
	// What the kubelet's package leaves; the plugin directory is the unit's.
	if err := os.MkdirAll(filepath.Dir(podSock), 0o755); err != nil {
		t.Fatal(err)
	}
	on := string(orig) + "kubernetes:\n  device-plugin: true\n  resource-domain: " + domain + "\n"
	if err := os.WriteFile(sdConfig, []byte(on), 0o644); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := os.WriteFile(sdConfig, orig, 0o644); err != nil {
			t.Error(err)
		}
		if _, _, code := run(t, "systemctl", "restart", "vgpud"); code != 0 {
			t.Errorf("systemctl restart vgpud with the device plugin off: exit %d", code)
		}
		if err := os.RemoveAll(kubeletDir); err != nil {
			t.Error(err)
		}
	}()
	since := time.Now()
	if _, _, code := run(t, "systemctl", "restart", "vgpud"); code != 0 {
		t.Fatalf("systemctl restart vgpud with the device plugin on: exit %d", code)
	}
	pid := checkVgpudUnit(t)
	if fi, err := os.Stat(pluginDir); err != nil || !fi.IsDir() {
		t.Fatalf("the unit made no %s: %v", pluginDir, err)
	}
	rw := false
	for _, l := range strings.Split(readAttr(t, fmt.Sprintf("/proc/%d/mountinfo", pid)), "\n") {
		if f := strings.Fields(l); len(f) > 5 && f[4] == pluginDir {
			rw = strings.HasPrefix(f[5], "rw")
		}
	}
	if !rw {
		t.Errorf("%s is not mounted read-write in vgpud's mount namespace", pluginDir)
	}
	k := kubelettest.New(t, pluginDir, podSock)
	k.Patience = 5 * time.Minute // a liveness bound under TCG, not a speed target
	k.Start()
	// Each resource lists the free vGPUs of its profile; the running
	// domains' are theirs, never offered.
	want := map[string]string{domain + "/lab-igb-4": "lab-boot-vf", domain + "/lab-mbochs-64m": "lab-boot-mdev"}
	k.Wait("vgpud registering lab-igb-4 and lab-mbochs-64m with vGPUs to offer", func(s kubelettest.State) bool {
		ok := true
		for r := range want {
			ok = ok && s.Current[r] && len(s.Lists[r]) > 0
		}
		return ok
	})
	st := k.State()
	for r, dom := range want {
		fi, err := os.Stat(filepath.Join(pluginDir, st.Endpoints[r]))
		if err != nil || fi.Mode()&os.ModeSocket == 0 {
			t.Errorf("%s's endpoint %s in %s: %v, want vgpud's socket", r, st.Endpoints[r], pluginDir, err)
		}
		if v, ok := vgpuOf(t, dom); ok {
			for _, d := range st.Lists[r] {
				if d.ID == v.ID {
					t.Errorf("%s offers %s, which the running domain %s holds", r, v.ID, dom)
				}
			}
		}
	}
	t.Logf("the kubelet's device lists:\n%s", kubelettest.Describe(st.Lists))
	out, _, _ := run(t, "journalctl", "-u", "vgpud", "--since", since.Format("2006-01-02 15:04:05"), "--no-pager", "-o", "cat")
	if !strings.Contains(out, "serving the kubelet's device manager") {
		t.Errorf("vgpud's journal does not say it serves the kubelet")
	}
	for _, bad := range []string{"cannot hear the kernel's device events", "read-only file system", "permission denied", "operation not permitted"} {
		if strings.Contains(strings.ToLower(out), bad) {
			t.Errorf("vgpud's journal: %q under the shipped sandbox", bad)
		}
	}
	k.Stop()
}

// checkMaintainerScripts installs the package again under the running
// systemd, as an upgrade (the same .deb with a higher version, repacked
// with dpkg-deb), then removes and installs it: postinst restarts vgpud
// on the upgrade (a new process, the running domains' vGPUs as they
// were), prerm stops it on remove (the vGPUs, the ledger and the config
// stay), postinst starts it on install.
func checkMaintainerScripts(t *testing.T) {
	t.Helper()
	dir := t.TempDir()
	tree := filepath.Join(dir, "tree")
	if _, _, code := run(t, "dpkg-deb", "-R", "/lab/vgpu.deb", tree); code != 0 {
		t.Fatal("dpkg-deb -R /lab/vgpu.deb: failed")
	}
	control := filepath.Join(tree, "DEBIAN", "control")
	c, err := os.ReadFile(control)
	if err != nil {
		t.Fatal(err)
	}
	old, _, _ := run(t, "dpkg-query", "-W", "-f", "${Version}", "vgpu")
	next := old + "+lab1"
	c2 := strings.Replace(string(c), "\nVersion: "+old+"\n", "\nVersion: "+next+"\n", 1)
	if c2 == string(c) {
		t.Fatalf("no Version: %s in the package's control file:\n%s", old, c)
	}
	if err := os.WriteFile(control, []byte(c2), 0o644); err != nil {
		t.Fatal(err)
	}
	newer := filepath.Join(dir, "vgpu-next.deb")
	// Uncompressed: xz on 55 MB under TCG outlasts run's limit.
	if _, _, code := runFor(t, 10*time.Minute, "dpkg-deb", "--root-owner-group", "-Znone", "-b", tree, newer); code != 0 {
		t.Fatal("dpkg-deb -b: failed")
	}
	const ledger = "/var/lib/vgpud/ledger.db"
	held := func(when string) {
		t.Helper()
		for _, d := range sdDomains {
			if v, ok := vgpuOf(t, d.name); !ok || v.State != "attached" || !v.InUse {
				t.Errorf("%s: vgpud: %+v, want %s's vGPU attached and in use", when, v, d.name)
			}
		}
	}

	before := unitProps(t, "vgpud.service", "MainPID")["MainPID"]
	if _, _, code := runFor(t, 10*time.Minute, "dpkg", "-i", newer); code != 0 {
		t.Fatalf("dpkg -i (upgrade to %s): exit %d", next, code)
	}
	p := unitProps(t, "vgpud.service", "MainPID", "ActiveState")
	if v, _, _ := run(t, "dpkg-query", "-W", "-f", "${Version}", "vgpu"); v != next {
		t.Errorf("after the upgrade dpkg has vgpu %s, want %s", v, next)
	}
	if p["ActiveState"] != "active" || p["MainPID"] == before || p["MainPID"] == "0" {
		t.Errorf("after the upgrade vgpud is %s with MainPID %s (was %s), want active in a new process", p["ActiveState"], p["MainPID"], before)
	}
	checkVgpudUnit(t)
	held("after the upgrade")

	if _, _, code := runFor(t, 10*time.Minute, "dpkg", "-r", "vgpu"); code != 0 {
		t.Fatalf("dpkg -r vgpu: exit %d", code)
	}
	if st := unitProps(t, "vgpud.service", "ActiveState")["ActiveState"]; st != "inactive" {
		t.Errorf("after dpkg -r vgpud is %s, want inactive (prerm stops it)", st)
	}
	for _, f := range []string{ledger, sdConfig} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("after dpkg -r: %v, want it kept", err)
		}
	}
	for _, d := range sdDomains {
		if st := strings.TrimSpace(virsh(t, "domstate", d.name)); st != "running" {
			t.Errorf("after dpkg -r %s is %q, want running", d.name, st)
		}
	}
	if vfs := vfsOf(t, igbPF); len(vfs) != 4 {
		t.Errorf("after dpkg -r the igb PF has %d VFs, want its 4 kept", len(vfs))
	}

	if _, _, code := runFor(t, 10*time.Minute, "dpkg", "-i", "/lab/vgpu.deb"); code != 0 {
		t.Fatalf("dpkg -i /lab/vgpu.deb after the remove: exit %d", code)
	}
	if st := unitProps(t, "vgpud.service", "ActiveState")["ActiveState"]; st != "active" {
		t.Errorf("after dpkg -i vgpud is %s, want active (postinst starts it)", st)
	}
	checkVgpudUnit(t)
	held("after the install")
}

// checkHelperSandbox has vgpud's way of starting the NVML helper run
// under the installed unit's sandbox: a transient copy of vgpud.service
// whose [Service] keeps every line but those that make it vgpud (its
// command, notify type, watchdog, restart, its directories, which a second
// unit would remove at its stop) runs guest.test as nvmlCall: vgpud's
// client (nvstaterpc.Helper) execs /usr/libexec/vgpu/vgpu-nvml with its socket
// on fd 3 and asks a GPU's MIG mode. The lab has no NVIDIA GPU, so vgpud
// itself never starts the helper (only for MIG-backed or scheduler
// profiles, which need the NVIDIA driver's sysfs): this shows the exec,
// the dynamic loader, libc and dlopen under the sandbox (seccomp filter,
// MemoryDenyWriteExecute, capabilities, read-only root), answered by the
// helper with "NVML did not load", not a refusal of the sandbox.
func checkHelperSandbox(t *testing.T) {
	t.Helper()
	unit, err := os.ReadFile(installedUnit)
	if err != nil {
		t.Fatal(err)
	}
	drop := []string{"ExecStart=", "ExecStartPre=", "ExecReload=", "Type=", "NotifyAccess=", "WatchdogSec=", "Restart=", "RestartSec=",
		"TimeoutStartSec=", "RuntimeDirectory", "StateDirectory", "ConfigurationDirectory", "WantedBy="}
	var b strings.Builder
	kept := 0
	for _, l := range strings.Split(string(unit), "\n") {
		skip := false
		for _, d := range drop {
			skip = skip || strings.HasPrefix(l, d)
		}
		if skip {
			continue
		}
		b.WriteString(l + "\n")
		if l == "[Service]" {
			fmt.Fprintf(&b, "Type=oneshot\nEnvironment=%s=1 VGPU_NVML_HELPER=/usr/libexec/vgpu/vgpu-nvml\nExecStart=%s/guest.test\n", nvmlCallEnv, binDir)
		}
		if strings.HasPrefix(l, "Protect") || strings.HasPrefix(l, "Capability") || strings.HasPrefix(l, "SystemCall") ||
			strings.HasPrefix(l, "MemoryDenyWriteExecute") || strings.HasPrefix(l, "RestrictAddressFamilies") {
			kept++
		}
	}
	if kept < 7 {
		t.Fatalf("the copy of %s kept %d sandbox lines:\n%s", installedUnit, kept, b.String())
	}
	const name = "vgpu-nvml-sandbox.service"
	if err := os.WriteFile("/run/systemd/system/"+name, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove("/run/systemd/system/" + name)
	run(t, "systemctl", "daemon-reload")
	_, _, code := run(t, "systemctl", "start", name)
	p := unitProps(t, name, "Result", "ExecMainStatus")
	out, _, _ := run(t, "journalctl", "-u", name, "--no-pager", "-o", "cat")
	if code != 0 || p["Result"] != "success" || p["ExecMainStatus"] != "0" || !strings.Contains(out, nvmlCallAnswer) {
		t.Errorf("vgpu-nvml started as vgpud starts it, under vgpud's sandbox: exit %d, Result=%s status=%s, want success and %q; journal:\n%s",
			code, p["Result"], p["ExecMainStatus"], nvmlCallAnswer, out)
	}
}
