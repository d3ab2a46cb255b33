package libvirt

import (
	"bufio"
	"encoding/json"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/e2e/internal/simproc"
)

// migrateEvent is one line of vgpuctl migrate -o json.
type migrateEvent struct {
	Time     time.Time `json:"time"`
	Domain   string    `json:"domain"`
	Phase    string    `json:"phase"`
	Message  string    `json:"message"`
	Decision string    `json:"decision"`
	Sample   *struct {
		Iteration uint64
	} `json:"sample"`
	Result *struct {
		Outcome    string `json:"outcome"`
		TotalNs    int64  `json:"totalNs"`
		DowntimeNs int64  `json:"downtimeNs"`
		RAMBytes   uint64 `json:"ramBytes"`
		Iterations uint64 `json:"iterations"`
		Throttle   int    `json:"throttle"`
	} `json:"result"`
}

func events(t testing.TB, out string) []migrateEvent {
	t.Helper()
	var evs []migrateEvent
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var e migrateEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("a line of vgpuctl migrate -o json is not JSON: %q: %v", sc.Text(), err)
		}
		evs = append(evs, e)
	}
	return evs
}

func (r *rig) domstate(name string) string {
	r.t.Helper()
	out, _, err := r.virsh("domstate", name)
	if err != nil {
		return "absent"
	}
	return strings.TrimSpace(out)
}

// TestMigratePlain: vgpuctl migrate moves a running domain between two
// libvirtds (two hosts to libvirt: distinct host UUIDs) joined by a link
// shaped at 8 MiB/s, through libvirt's peer-to-peer migration under the
// convergence policy; --dry-run changes nothing; the same host is refused
// before anything moves; a migration that cannot finish in time is
// aborted and the VM keeps running on the source (exit 5), with QEMU's
// own throttle settings back; a guest that dirties faster than the link
// is refused during the first pass with --no-throttle (before the job
// starts when told the link's rate), and migrates
// within the cap once vgpuctl throttles it.
func TestMigratePlain(t *testing.T) {
	a, b := newLinkedRigs(t, cfgKeep, link{rate: 8 << 20, rtt: 200 * time.Microsecond})
	const name, uuid = "mig01", "7d1e9c4a-3b2f-4a6e-9c8d-1f2e3d4c5b6a"
	a.defineGuest(name, uuid, guest{mem: 128})
	a.mustVirsh("start", name)
	common := []string{"migrate", name, b.tcpURI, "-c", a.uri, "--migrate-uri", b.migURI}

	out := a.mustVgpuctl(append(common, "--dry-run")...)
	if !strings.Contains(out, "checks passed") || !strings.Contains(out, "would start at downtime limit") {
		t.Fatalf("--dry-run:\n%s", out)
	}
	if a.domstate(name) != "running" || b.domstate(name) != "absent" {
		t.Fatalf("--dry-run moved something: a %s, b %s", a.domstate(name), b.domstate(name))
	}

	_, errs, code := a.vgpuctl("migrate", name, a.uri, "-c", a.uri)
	if code != 1 || !strings.Contains(errs, "is this host") {
		t.Fatalf("migrate to the same host: exit %d\n%s", code, errs)
	}

	// A guest rewriting 16 MiB cannot finish at 1 MiB/s within 3 s.
	const hot = "hot01"
	a.defineGuest(hot, "7d1e9c4a-3b2f-4a6e-9c8d-1f2e3d4c5b6b", guest{mem: 128, wss: 16})
	a.mustVirsh("start", hot)
	hotArgs := append([]string{"migrate", hot}, common[2:]...)
	_, errs, code = a.vgpuctl(append(hotArgs, "--bandwidth", "1MiB", "--timeout", "3s")...)
	if code != 5 || !strings.Contains(errs, "the VM still runs on the source") || !strings.Contains(errs, "the timeout 3s passed") {
		t.Fatalf("migrate that times out: exit %d\n%s", code, errs)
	}
	if a.domstate(hot) != "running" || b.domstate(hot) != "absent" {
		t.Fatalf("after the abort: a %s, b %s; want running on a only", a.domstate(hot), b.domstate(hot))
	}
	// The run let QEMU throttle the guest (auto-converge, ceiling 1%):
	// aborted, QEMU's own settings are back for whatever migrates it next.
	params := a.mustVirsh("qemu-monitor-command", hot, `{"execute":"query-migrate-parameters"}`)
	for _, want := range []string{`"cpu-throttle-initial":20`, `"cpu-throttle-increment":10`, `"max-cpu-throttle":99`} {
		if !strings.Contains(strings.ReplaceAll(params, " ", ""), want) {
			t.Fatalf("after the abort the source's QEMU has not its own throttle settings back (%s):\n%s", want, params)
		}
	}
	// The set rewritten faster than the link (8 MiB/s), the cap below what
	// it needs, and no throttle: refused as soon as the dirty rate is
	// measured, during the first pass. On a starved machine QEMU's monitor
	// can stop answering job readings for long (seen: over 90 s); the run
	// then aborts for the cap it cannot watch. Either way: aborted, the VM
	// on the source.
	out, errs, code = a.vgpuctl(append(hotArgs, "--no-throttle", "--max-downtime", "200ms", "-o", "json")...)
	converge := strings.Contains(errs, "cannot converge") && strings.Contains(errs, "the downtime cap 200ms")
	blind := strings.Contains(errs, "no reading of the job")
	if code != 5 || !converge && !blind {
		t.Fatalf("migrate that cannot converge: exit %d\n%s\n%s", code, out, errs)
	}
	if blind {
		t.Logf("aborted blind, not by the policy: QEMU's monitor did not answer\n%s", errs)
	}
	if a.domstate(hot) != "running" || b.domstate(hot) != "absent" {
		t.Fatalf("after the policy's abort: a %s, b %s", a.domstate(hot), b.domstate(hot))
	}
	// Told the link's rate, the same run measures first and is refused
	// before the job starts (exit 1, not an abort).
	_, errs, code = a.vgpuctl(append(hotArgs, "--no-throttle", "--max-downtime", "200ms", "--bandwidth", "8MiB")...)
	if code != 1 || !strings.Contains(errs, "cannot converge") || !strings.Contains(errs, "more than the 8.0 MiB/s the link sends") {
		t.Fatalf("migrate that cannot converge, bandwidth given: exit %d\n%s", code, errs)
	}
	if a.domstate(hot) != "running" || b.domstate(hot) != "absent" {
		t.Fatalf("after the refusal: a %s, b %s", a.domstate(hot), b.domstate(hot))
	}

	// A guest rewriting 16 MiB at 16 MiB/s, in step with its vCPU time:
	// faster than the link, and 2 s of it to send at every pass, twice the
	// cap. vgpuctl has QEMU throttle its vCPUs until passes shrink, and it
	// moves within the cap.
	const slow = "slow01"
	a.defineGuest(slow, "7d1e9c4a-3b2f-4a6e-9c8d-1f2e3d4c5b6c", guest{mem: 64, wss: 16, rate: 16})
	a.mustVirsh("start", slow)
	out, errs, code = a.vgpuctl(append([]string{"migrate", slow}, append(common[2:], "--max-downtime", "1s", "--timeout", "3m", "-o", "json")...)...)
	if code != 0 {
		t.Fatalf("migrate of a guest faster than the link, throttled: exit %d\n%s\n%s", code, out, errs)
	}
	evs := events(t, out)
	last := evs[len(evs)-1]
	throttled := false
	for _, e := range evs {
		throttled = throttled || e.Decision == "throttle"
	}
	if last.Result == nil || last.Result.Outcome != "migrated" || !throttled || last.Result.Throttle <= 1 {
		t.Fatalf("want a throttle decision, applied (result %+v); events:\n%s", last.Result, out)
	}
	t.Logf("throttled up to %d%%, downtime %s", last.Result.Throttle, time.Duration(last.Result.DowntimeNs))
	if a.domstate(slow) != "absent" && a.domstate(slow) != "shut off" || b.domstate(slow) != "running" {
		t.Fatalf("after the throttled migration: a %s, b %s", a.domstate(slow), b.domstate(slow))
	}

	// Under TCG stopping and resuming the guest alone takes a few hundred
	// ms, whatever is left to send: the cap leaves room for it.
	out, errs, code = a.vgpuctl(append(common, "--undefine-source", "--max-downtime", "1s", "-o", "json")...)
	if code != 0 {
		t.Fatalf("migrate: exit %d\n%s\n%s", code, out, errs)
	}
	evs = events(t, out)
	last = evs[len(evs)-1]
	if last.Phase != "done" || last.Result == nil || last.Result.Outcome != "migrated" || last.Result.RAMBytes == 0 {
		t.Fatalf("last event %+v; all:\n%s", last, out)
	}
	// QEMU's limit is a target its estimate aims at, not a bound: under TCG
	// on a loaded machine the pause overruns it (1.07 s seen). The figure
	// must be QEMU's, in ns: the benchmark tracks how close it stays.
	if last.Result.DowntimeNs <= 0 || last.Result.DowntimeNs > 30e9 {
		t.Fatalf("downtime as QEMU measured it: %d ns; want a measured pause (ns, well under 30 s)", last.Result.DowntimeNs)
	}
	if a.domstate(name) != "absent" || b.domstate(name) != "running" {
		t.Fatalf("after the migration: a %s, b %s; want running on b, undefined on a", a.domstate(name), b.domstate(name))
	}
	if x := b.mustVirsh("dumpxml", "--inactive", name); !strings.Contains(x, uuid) {
		t.Fatalf("b has no persistent definition of %s:\n%s", name, x)
	}
}

// TestMigrationOverrides: vgpuctl attach of a profile whose vendor driver
// migrates (the T4's, per the catalog) writes into the persistent
// definition what QEMU needs to migrate the vGPU, which libvirt's QEMU
// driver keeps; detach takes it out with the hostdev.
func TestMigrationOverrides(t *testing.T) {
	r := newRig(t, cfgKeep)
	const name = "ovr01"
	r.define(name, "0d1c2b3a-4e5f-4a6b-8c7d-9e0f1a2b3c4d", "t4-4q", 1)
	x := r.mustVirsh("dumpxml", "--inactive", name)
	for _, want := range []string{"<alias name='ua-vgpu0'/>", "<qemu:device alias='ua-vgpu0'>",
		"<qemu:property name='enable-migration' type='string' value='on'/>",
		"<qemu:property name='x-device-dirty-page-tracking' type='string' value='off'/>"} {
		if !strings.Contains(x, want) {
			t.Fatalf("after attach the definition lacks %s:\n%s", want, x)
		}
	}
	r.mustVgpuctl("detach", name, "-c", r.uri)
	if x := r.mustVirsh("dumpxml", "--inactive", name); strings.Contains(x, "ua-vgpu0") {
		t.Fatalf("after detach the definition still names ua-vgpu0:\n%s", x)
	}
}

// TestMigrateKilledAfterAbort: the killed vgpuctl had aborted its job
// just before (its policy saw the guest cannot converge, as in
// TestMigrateKilled when the kill lands late). libvirt then reports the
// job cancelled but holds it while the destination drops the incoming
// domain, refusing another migration meanwhile: the next run waits until
// libvirt lets go and migrates, never refused.
func TestMigrateKilledAfterAbort(t *testing.T) {
	a, b := newRig(t, cfgKeep), newRig(t, cfgKeep)
	const name = "kill02"
	args, kill := migrateToKill(t, a, b, name, "7b6c5d4e-3f20-4b1c-8d9e-0f1a2b3c4d5e", "--timeout", "10m")
	// libvirt acts on the abort once the destination has prepared: wait
	// until it reports the job cancelled (or gone already).
	a.mustVirsh("domjobabort", name)
	info := ""
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(info, "Cancelled") && !strings.Contains(info, "None"); {
		if time.Now().After(deadline) {
			t.Fatalf("the aborted job of %s is still reported after 30 s:\n%s", name, info)
		}
		time.Sleep(50 * time.Millisecond)
		info = a.mustVirsh("domjobinfo", name)
	}
	kill()
	stdout, errs, code := a.vgpuctl(append(args, "--timeout", "90s", "--bandwidth", "1GiB")...)
	if code != 0 || strings.Contains(stdout+errs, "another migration job") {
		t.Fatalf("vgpuctl migrate after an aborted job and a kill: exit %d\n%s\n%s", code, stdout, errs)
	}
	if a.domstate(name) == "running" || b.domstate(name) != "running" {
		t.Fatalf("after the run: a %s, b %s; want running on b only\n%s", a.domstate(name), b.domstate(name), stdout)
	}
	t.Logf("libvirt before the kill: %s; the run waited for the job: %v",
		strings.Fields(info)[2], strings.Contains(stdout, "is ending"))
}

// TestMigrateKilled: vgpuctl killed (SIGKILL) in the middle of a migration
// and run again settles what it left (libvirt's peer-to-peer job may go on
// without its client: it is followed, never started twice) and the domain
// ends up running on exactly one host. No throttle: the guest rewrites its
// set faster than any throttle slows, and the policy's steps to 99% would
// only make the abort longer.
func TestMigrateKilled(t *testing.T) {
	a, b := newRig(t, cfgKeep), newRig(t, cfgKeep)
	const name = "kill01"
	args, kill := migrateToKill(t, a, b, name, "6a5b4c3d-2e1f-4a0b-9c8d-7e6f5a4b3c2d")
	time.Sleep(time.Second)
	kill()
	// Run again, at the same 1 MiB/s. The killed run measured the guest
	// as the kill landed, and may have aborted its job first (it cannot
	// converge at 1 MiB/s): then libvirt holds the cancelled job while it
	// tears the incoming domain down on b, and the run waits until libvirt
	// lets go of it (a second job meanwhile is refused) and migrates
	// afresh, which cannot converge either. Otherwise libvirt kept the
	// job, which is followed, not started twice, and aborted under the
	// policy (or ended by the killed run's abort landing late). Either
	// way the VM stays on the source, and nothing is refused.
	stdout, errs, code := a.vgpuctl(append(args, "--timeout", "90s")...)
	// (Or blind, should QEMU's monitor stop answering: see TestMigratePlain.)
	if code != 5 || strings.Contains(stdout+errs, "another migration job") || !strings.Contains(errs, "still runs on the source") ||
		!strings.Contains(errs, "cannot converge") && !strings.Contains(errs, "no reading of the job") && !strings.Contains(errs, "ended without moving the domain") {
		t.Fatalf("vgpuctl migrate after a kill: exit %d\n%s\n%s", code, stdout, errs)
	}
	t.Logf("after the kill: job followed %v, an ending job waited out %v",
		strings.Contains(stdout, "already runs on the source"), strings.Contains(stdout, "is ending"))
	if a.domstate(name) != "running" || b.domstate(name) != "absent" {
		t.Fatalf("after the second run's abort: a %s, b %s", a.domstate(name), b.domstate(name))
	}
	// And once more, with the link's full speed: it moves. Said outright:
	// libvirt keeps the 1 MiB/s as the domain's migration speed, and a
	// guest dirtying faster than that is refused under --no-throttle (how
	// fast depends on how fast TCG runs it).
	stdout, errs, code = a.vgpuctl(append(args, "--timeout", "90s", "--bandwidth", "1GiB")...)
	if code != 0 {
		t.Fatalf("vgpuctl migrate, third run: exit %d\n%s\n%s", code, stdout, errs)
	}
	if a.domstate(name) == "running" || b.domstate(name) != "running" {
		t.Fatalf("after the second run: a %s, b %s; want running on b only\n%s", a.domstate(name), b.domstate(name), stdout)
	}
}

// migrateToKill starts a small guest that keeps dirtying 4 MiB on a and
// a vgpuctl migrate of it to b at 1 MiB/s, the domain's migration speed
// (extra: more flags), and
// returns once libvirt shows the job: the migrate flags to run it again
// with, and a SIGKILL of this run.
func migrateToKill(t *testing.T, a, b *rig, name, uuid string, extra ...string) (args []string, kill func()) {
	t.Helper()
	a.defineGuest(name, uuid, guest{mem: 128, wss: 4})
	a.mustVirsh("start", name)
	// The 1 MiB/s is the domain's migration speed, not --bandwidth: told
	// the link's rate, vgpuctl --no-throttle measures first and refuses a
	// guest faster than the link before any job starts.
	a.mustVirsh("migrate-setspeed", name, "1")
	args = []string{"migrate", name, b.tcpURI, "-c", a.uri, "--migrate-uri", b.migURI, "--max-downtime", "1s", "--no-throttle"}
	all := append([]string{"--socket", a.socket, "--sysfs-root", a.sim.Mnt, "--state-dir", a.state}, args...)
	c := exec.Command(built.vgpuctl, append(all, extra...)...)
	var out simproc.LockedBuffer
	c.Stdout, c.Stderr = &out, &out
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	kill = func() { once.Do(func() { _ = c.Process.Kill(); _ = c.Wait() }) }
	t.Cleanup(kill)
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(a.mustVirsh("domjobinfo", name), "Unbounded") {
		if time.Now().After(deadline) {
			t.Fatalf("no migration job on %s after 30 s:\n%s", name, out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	return args, kill
}
