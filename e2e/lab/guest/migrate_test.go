//go:build labguest

package guest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/client"
)

// Two lab guests joined by a private link (run.sh VGPU_LAB_NET): the
// source at 10.9.0.1, the destination at 10.9.0.2, each with libvirtd
// listening on TCP (no auth: a private link), vgpud carving the mtty sample
// to lab-mtty-12 and the hook installed.
const (
	srcAddr, dstAddr = "10.9.0.1", "10.9.0.2"
	migDomain        = "lab-mig"
	// doneDomain is how the source tells the destination it finished: a
	// domain it defines there (the guests share nothing else).
	doneDomain = "lab-mig-done"
)

var dstURI = "qemu+tcp://" + dstAddr + "/system"

const mttyYAML = `version: v1
gpus:
  - parent: mtty
    profile: lab-mtty-12
socket:
  group: "0"
`

// otherTypeYAML carves another vGPU (mbochs) and no mtty: a destination
// that cannot serve the source's lab-mtty-12.
var otherTypeYAML = strings.Replace(strings.Replace(mttyYAML, "lab-mtty-12", "lab-mbochs-64m", 1), "parent: mtty", "parent: mbochs", 1)

// Phases of the faults before the migration that succeeds: the destination
// defines phaseReady+N here (the source reads it over the link) when it is
// set up for fault N, the source defines phaseDone+N there when it tried
// (defineDomainAt, waitDomain).
const (
	phaseReady = "lab-phase-ready-"
	phaseDone  = "lab-phase-done-"
	// phaseKilled: the destination killed its vgpud mid-migration (fault 3).
	phaseKilled = "lab-phase-killed"
)

var srcURI = "qemu+tcp://" + srcAddr + "/system"

// ramBlob is a file of random bytes QEMU's generic loader puts into the
// migrating domain's RAM on both hosts: 16 MiB that are not zero pages,
// so that at --bandwidth 1MiB a migration moves memory for about 16 s, a
// window the mid-migration faults land in (an idle firmware-only guest
// has under 1 MiB to send).
const ramBlob = "/var/lib/libvirt/lab-ram.bin"

// writeRAMBlob writes ramBlob; each host needs it to start the domain.
func writeRAMBlob(t *testing.T) {
	t.Helper()
	b := make([]byte, 16<<20)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ramBlob, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// defineMigDomain defines migDomain with ramBlob loaded at 16 MiB.
func defineMigDomain(t *testing.T) {
	t.Helper()
	xml := strings.Replace(domainXML, "%s", migDomain, 1)
	xml = strings.Replace(xml, "<domain type='qemu'>", "<domain type='qemu' xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>", 1)
	xml = strings.Replace(xml, "</domain>", "  <qemu:commandline><qemu:arg value='-device'/><qemu:arg value='loader,file="+ramBlob+
		",addr=0x1000000,force-raw=on'/></qemu:commandline>\n</domain>", 1)
	p := filepath.Join(os.TempDir(), migDomain+".xml")
	if err := os.WriteFile(p, []byte(xml), 0o644); err != nil {
		t.Fatal(err)
	}
	virsh(t, "define", p)
}

// waitDomain waits until uri knows domain name.
func waitDomain(t *testing.T, uri, name string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		if _, _, code := run(t, "virsh", "-c", uri, "domuuid", name); code == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not define %s within %s", uri, name, within)
		}
		time.Sleep(2 * time.Second)
	}
}

// migrationHost sets up one end: libvirtd on TCP with its own host UUID,
// vgpud on mtty, the hook.
func migrationHost(t *testing.T, addr, hostUUID string) (stop func()) {
	t.Helper()
	stop, _ = migrationHostWith(t, addr, hostUUID, mttyYAML, "mtty", "mtty-2", 12)
	return stop
}

// migrationHostWith is migrationHost with vgpud's config yaml, which carves
// want mdevs of type typ on parent; kill ends vgpud with SIGKILL.
func migrationHostWith(t *testing.T, addr, hostUUID, yaml, parent, typ string, want int) (stop, kill func()) {
	t.Helper()
	conf := fmt.Sprintf("listen_tcp = 1\nlisten_tls = 0\nlisten_addr = %q\nauth_tcp = \"none\"\nhost_uuid = %q\n", addr, hostUUID)
	if err := os.MkdirAll("/etc/libvirt", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("/etc/libvirt/libvirtd.conf", []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	writeRAMBlob(t)
	stop, kill = startVgpudBin(t, "vgpud", yaml)
	deadline := time.Now().Add(90 * time.Second)
	for len(instancesOf(t, parent, typ)) != want {
		if time.Now().After(deadline) {
			stop()
			t.Fatalf("vgpud did not carve %s to %d %s mdevs within 90 s: %d", parent, want, typ, len(instancesOf(t, parent, typ)))
		}
		time.Sleep(250 * time.Millisecond)
	}
	if _, _, code := run(t, "vgpuctl", "hook", "install", "--hook-binary", binDir+"/vgpu-hook"); code != 0 {
		stop()
		t.Fatalf("vgpuctl hook install: exit %d", code)
	}
	startLibvirtWith(t, "--listen")
	return stop, kill
}

// mttyInstances lists the mtty-2 mdevs (lab-mtty-12's).
func mttyInstances(t *testing.T) []string {
	t.Helper()
	return instancesOf(t, "mtty", "mtty-2")
}

// instancesOf lists parent's mdevs of type typ.
func instancesOf(t *testing.T, parent, typ string) []string {
	t.Helper()
	es, _ := os.ReadDir("/sys/class/mdev_bus/" + parent + "/mdev_supported_types/" + typ + "/devices")
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

// uartPort is the I/O port of the mtty device's BAR in the domain's QEMU,
// once the guest's firmware mapped it (seconds under the lab's nested TCG).
func uartPort(t *testing.T, uri string) int {
	t.Helper()
	bar := regexp.MustCompile(`4348:3253(?s:.*?)I/O at 0x([0-9a-f]+)`)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		info := virsh(t, "-c", uri, "qemu-monitor-command", migDomain, "--hmp", "info pci")
		if m := bar.FindStringSubmatch(info); m != nil {
			p, _ := strconv.ParseInt(m[1], 16, 32)
			return int(p)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no mapped mtty device (4348:3253, an I/O BAR) in the domain's QEMU after 2 min:\n%s", info)
		}
		time.Sleep(2 * time.Second)
	}
}

func outb(t *testing.T, uri string, port, v int) {
	t.Helper()
	virsh(t, "-c", uri, "qemu-monitor-command", migDomain, "--hmp", fmt.Sprintf("o /b 0x%x 0x%x", port, v))
}

func inb(t *testing.T, uri string, port int) int {
	t.Helper()
	out := strings.TrimSpace(virsh(t, "-c", uri, "qemu-monitor-command", migDomain, "--hmp", fmt.Sprintf("i /b 0x%x", port)))
	// "inb 0x.. = 0x5a"
	v, err := strconv.ParseInt(out[strings.LastIndex(out, "0x")+2:], 16, 32)
	if err != nil {
		t.Fatalf("read port 0x%x: %q", port, out)
	}
	return int(v)
}

// TestMigrateSource: a domain with an mtty vGPU (vgpuctl attach, virsh
// start) has device state written into the UART (scratch register, line
// control), then vgpuctl migrate moves it to the destination guest; the
// state reads back there, QEMU counted VFIO bytes, and the source's vGPU is
// free.
func TestMigrateSource(t *testing.T) {
	stop := migrationHost(t, srcAddr, "1b9d5e6a-5c5a-4bd6-9f0e-0a1b2c3d4e01")
	defer stop()
	defineMigDomain(t)
	if _, _, code := run(t, "vgpuctl", "--profiles", profilesDir, "attach", migDomain, "--profile", "lab-mtty-12"); code != 0 {
		t.Fatalf("vgpuctl attach: exit %d", code)
	}
	if x := virsh(t, "dumpxml", "--inactive", migDomain); !strings.Contains(x, "enable-migration") || !strings.Contains(x, ramBlob) {
		t.Fatalf("attach wrote no migration override or lost the RAM loader:\n%s", x)
	}
	virsh(t, "start", migDomain)
	port := uartPort(t, localURI)
	outb(t, localURI, port+7, 0x5a) // scratch
	outb(t, localURI, port+3, 0x1b) // line control: 8 bits, 2 stop, even parity
	if got := inb(t, localURI, port+7); got != 0x5a {
		t.Fatalf("scratch reads 0x%x on the source, want 0x5a", got)
	}
	// stillHere: after a fault the VM runs here with its UART state and its
	// vGPU attached.
	stillHere := func(fault string) {
		t.Helper()
		if st := strings.TrimSpace(virsh(t, "domstate", migDomain)); st != "running" {
			t.Fatalf("fault %s: %s is %q here, want running", fault, migDomain, st)
		}
		if got := inb(t, localURI, port+7); got != 0x5a {
			t.Errorf("fault %s: scratch reads 0x%x on the source, want 0x5a", fault, got)
		}
		if row := vgpuRowOf(t, migDomain); !strings.Contains(row, "attached") {
			t.Errorf("fault %s: the source's vGPU for %s is %q, want attached", fault, migDomain, row)
		}
	}
	migrateArgs := []string{"--profiles", profilesDir, "migrate", migDomain, dstURI, "--migrate-uri", "tcp://" + dstAddr, "--max-downtime", "5s"}
	// The destination comes up in its own time; first it cannot serve the
	// vGPU (another type carved), then it has none free: --dry-run's probe
	// gets its refusal (exit 1), and each migration is refused by the
	// destination before anything moves (exit 5).
	for n, want := range []string{"no GPU on this host carries lab-mtty-12", "0 free"} {
		phase := strconv.Itoa(n + 1)
		waitDomain(t, dstURI, phaseReady+phase, 8*time.Minute)
		out, errOut, code := run(t, "vgpuctl", append(migrateArgs, "--dry-run")...)
		if code != 1 || !strings.Contains(errOut, "refuses "+migDomain) || !strings.Contains(errOut, want) {
			t.Errorf("fault %s: vgpuctl migrate --dry-run exit %d; want 1 and the destination's refusal with %q:\n%s%s", phase, code, want, out, errOut)
		}
		out, errOut, code = run(t, "vgpuctl", migrateArgs...)
		if code != 5 || !strings.Contains(out+errOut, want) {
			t.Errorf("fault %s: vgpuctl migrate exit %d; want 5 (rolled back) and the destination's %q", phase, code, want)
		}
		stillHere(phase)
		defineDomainAt(t, dstURI, phaseDone+phase)
	}
	// Now the destination could take it: --dry-run says so and leases
	// nothing (the destination checks).
	waitDomain(t, dstURI, phaseReady+"probe", 8*time.Minute)
	out, errOut, code := run(t, "vgpuctl", append(migrateArgs, "--dry-run")...)
	if code != 0 || !strings.Contains(out, "admits: 1 x lab-mtty-12 for "+migDomain+" would be leased here") || !strings.Contains(out, "; 12 free)") {
		t.Errorf("vgpuctl migrate --dry-run: exit %d; want 0 and the destination admitting 1 x lab-mtty-12:\n%s%s", code, out, errOut)
	}
	defineDomainAt(t, dstURI, phaseDone+"probe")

	// Fault 3: mid-migration (--bandwidth 1MiB: ramBlob takes ~16 s) the
	// destination kills its vgpud once the incoming domain holds its vGPU,
	// and says so; vgpuctl is interrupted (Ctrl-C) and rolls back.
	slow := append(slices.Clone(migrateArgs), "--bandwidth", "1MiB")
	waitDomain(t, dstURI, phaseReady+"3", 8*time.Minute)
	mig := startVgpuctl(t, slow...)
	waitDomain(t, localURI, phaseKilled, 3*time.Minute)
	if st := strings.TrimSpace(virsh(t, "domstate", migDomain)); st != "running" {
		t.Fatalf("fault 3: %s is %q here once the destination killed its vgpud, want running (the migration ended before the fault)", migDomain, st)
	}
	_ = mig.cmd.Process.Signal(os.Interrupt)
	if code, out := mig.wait(t, 3*time.Minute); code != 5 || !strings.Contains(out, "rolled back") {
		t.Errorf("fault 3: vgpuctl migrate interrupted: exit %d; want 5 (aborted, rolled back):\n%s", code, out)
	}
	stillHere("3")
	defineDomainAt(t, dstURI, phaseDone+"3")

	// Fault 4: the link cut mid-migration. libvirt's keepalive finds the
	// destination gone (about 30 s), the job fails, vgpuctl rolls back.
	waitDomain(t, dstURI, phaseReady+"4", 8*time.Minute)
	mig = startVgpuctl(t, slow...)
	waitJobMoving(t, localURI, migDomain)
	link := linkDev(t)
	run(t, "ip", "link", "set", link, "down")
	// Up again once libvirt gave up the job, or after 3 min.
	for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); time.Sleep(2 * time.Second) {
		if out, _, _ := run(t, "virsh", "domjobinfo", migDomain); !strings.Contains(out, "Unbounded") {
			break
		}
	}
	run(t, "ip", "link", "set", link, "up")
	if code, out := mig.wait(t, 3*time.Minute); code != 5 || !strings.Contains(out, "rolled back") {
		t.Errorf("fault 4: vgpuctl migrate with the link cut: exit %d; want 5 (failed, rolled back):\n%s", code, out)
	}
	stillHere("4")
	defineDomainAt(t, dstURI, phaseDone+"4")

	waitDomain(t, dstURI, phaseReady+"5", 8*time.Minute)
	// vgpuctl is killed once libvirt's job runs, then run again: it follows
	// the job libvirt goes on with to its end (or settles what it left) and
	// frees the source's vGPU once.
	args := []string{"--profiles", profilesDir, "migrate", migDomain, dstURI,
		"--migrate-uri", "tcp://" + dstAddr, "--max-downtime", "5s", "--undefine-source", "-o", "json"}
	first := exec.Command("vgpuctl", args...)
	stdout, err := first.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	var seen []string
	for sc.Scan() {
		seen = append(seen, sc.Text())
		if strings.Contains(sc.Text(), `"phase":"migrate"`) {
			break
		}
	}
	// The event comes as the job starts: kill once libvirt shows it running.
	jobRuns := false
	for deadline := time.Now().Add(10 * time.Second); !jobRuns && time.Now().Before(deadline); {
		b, _ := exec.Command("virsh", "domjobinfo", migDomain).Output()
		jobRuns = strings.Contains(string(b), "Unbounded")
		if !jobRuns {
			time.Sleep(20 * time.Millisecond)
		}
	}
	_ = first.Process.Kill()
	werr := first.Wait()
	t.Logf("the first vgpuctl migrate, killed once the job ran (libvirt showed it: %v; %v):\n%s", jobRuns, werr, strings.Join(seen, "\n"))
	if werr == nil {
		t.Fatalf("the first vgpuctl migrate ended before it was killed; its events:\n%s", strings.Join(seen, "\n"))
	}
	out, errOut, code = run(t, "vgpuctl", args...)
	t.Logf("vgpuctl migrate again: exit %d\n%s\n%s", code, out, errOut)
	if code != 0 {
		t.Fatalf("vgpuctl migrate again: exit %d", code)
	}
	var last struct {
		Phase  string `json:"phase"`
		Result *struct {
			Outcome     string `json:"outcome"`
			DeviceBytes uint64 `json:"deviceBytes"`
		} `json:"result"`
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil || last.Result == nil ||
		(last.Result.Outcome != "migrated" && last.Result.Outcome != "resolved") {
		t.Fatalf("last event %q: %v; want migrated or resolved", lines[len(lines)-1], err)
	}
	if !strings.Contains(out, `"phase":"resolve"`) {
		t.Errorf("the second run did not settle the first's migration (no resolve event)")
	}
	dport := uartPort(t, dstURI)
	if got := inb(t, dstURI, dport+7); got != 0x5a {
		t.Errorf("scratch reads 0x%x on the destination, want 0x5a: the device state did not move", got)
	}
	if got := inb(t, dstURI, dport+3); got != 0x1b {
		t.Errorf("line control reads 0x%x on the destination, want 0x1b", got)
	}
	vs, _, _ := run(t, "vgpuctl", "--profiles", profilesDir, "vgpus")
	if strings.Contains(vs, migDomain) {
		t.Errorf("the source still holds a vGPU for %s:\n%s", migDomain, vs)
	}
	drain(t)
	defineDomainAt(t, dstURI, doneDomain)
}

// TestMigrateDest: the destination's side: it waits for the source to say
// it finished, then checks its ledger holds the domain's vGPU attached and
// that a destroy and start there gets its own mdev.
func TestMigrateDest(t *testing.T) {
	// Fault 1: this host carves another vGPU (mbochs), none of the source's.
	stop, kill := migrationHostWith(t, dstAddr, "1b9d5e6a-5c5a-4bd6-9f0e-0a1b2c3d4e02", otherTypeYAML, "mbochs", "mbochs-large", 4)
	defer func() { stop() }()
	defineDomainAt(t, localURI, phaseReady+"1")
	waitDomain(t, localURI, phaseDone+"1", 10*time.Minute)
	noLeaseLeft(t, "fault 1")
	// Fault 2: the right type, every vGPU reserved by another domain.
	if err := os.WriteFile(vgpudConfig, []byte(mttyYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := run(t, "vgpuctl", "--profiles", profilesDir, "apply", "-f", vgpudConfig); code != 0 {
		t.Fatalf("vgpuctl apply lab-mtty-12: exit %d\n%s%s", code, out, errOut)
	}
	// A defined, shut-off domain holding all 12 (what on-release: keep
	// leaves it): an mdev attach reserves nothing, so ask vgpud directly.
	const hog = "lab-hog"
	defineDomain(t, hog)
	hogUUID := strings.TrimSpace(virsh(t, "domuuid", hog))
	c := client.New(vgpudSocket)
	if _, err := c.Reserve(context.Background(), hogUUID, api.ReserveRequest{Name: hog, Profile: "lab-mtty-12", Count: 12}); err != nil {
		t.Fatalf("reserve 12 x lab-mtty-12 for %s: %v", hog, err)
	}
	defineDomainAt(t, localURI, phaseReady+"2")
	waitDomain(t, localURI, phaseDone+"2", 10*time.Minute)
	noLeaseLeft(t, "fault 2")
	if _, err := c.Unreserve(context.Background(), hogUUID, ""); err != nil {
		t.Fatalf("free %s's reservations: %v", hog, err)
	}
	virsh(t, "undefine", hog)
	// --dry-run's probe: admitted, and nothing leased.
	defineDomainAt(t, localURI, phaseReady+"probe")
	waitDomain(t, localURI, phaseDone+"probe", 10*time.Minute)
	noLeaseLeft(t, "the --dry-run probe")

	// Fault 3: vgpud killed (SIGKILL) while the incoming domain holds its
	// vGPU; the source then aborts. The release hook finds no vgpud; the
	// restarted vgpud frees the vGPU at once and recreates its mdev.
	defineDomainAt(t, localURI, phaseReady+"3")
	incoming := ""
	for deadline := time.Now().Add(5 * time.Minute); !strings.Contains(vgpuRowOf(t, migDomain), "attached"); time.Sleep(time.Second) {
		if time.Now().After(deadline) {
			t.Fatalf("fault 3: no vGPU attached to an incoming %s within 5 min", migDomain)
		}
	}
	if f := strings.Fields(vgpuRowOf(t, migDomain)); len(f) > 0 {
		incoming = f[0]
	}
	kill()
	defineDomainAt(t, srcURI, phaseKilled)
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(2 * time.Second) {
		if _, _, code := run(t, "virsh", "domuuid", migDomain); code != 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("fault 3: the aborted incoming %s is still here after 3 min", migDomain)
		}
	}
	stop, kill = startVgpudBin(t, "vgpud", mttyYAML)
	waitNoLease(t, "fault 3", 2*time.Minute)
	if n := len(mttyInstances(t)); n != 12 || slices.Contains(mttyInstances(t), incoming) {
		t.Errorf("fault 3: after vgpud's restart %d mtty mdevs, the incoming one (%s) among them: %v; want 12, it recreated",
			n, incoming, mttyInstances(t))
	}
	waitDomain(t, localURI, phaseDone+"3", 10*time.Minute)

	// Fault 4: the link cut mid-migration (the source cuts it).
	defineDomainAt(t, localURI, phaseReady+"4")
	waitDomain(t, localURI, phaseDone+"4", 10*time.Minute)
	waitNoLease(t, "fault 4", 3*time.Minute)
	if n := len(mttyInstances(t)); n != 12 {
		t.Errorf("fault 4: %d mtty mdevs after the failed incoming migration, want 12", n)
	}
	defineDomainAt(t, localURI, phaseReady+"5")

	waitDomain(t, localURI, doneDomain, 12*time.Minute) // two migrations (one, then a drain)
	if st := strings.TrimSpace(virsh(t, "domstate", migDomain)); st != "running" {
		t.Fatalf("%s is %q here, want running", migDomain, st)
	}
	vs, _, _ := run(t, "vgpuctl", "--profiles", profilesDir, "vgpus")
	row := ""
	for _, l := range strings.Split(vs, "\n") {
		if strings.Contains(l, migDomain) {
			row = l
		}
	}
	if !strings.Contains(row, "attached") {
		t.Fatalf("the destination's ledger does not hold %s's vGPU attached:\n%s", migDomain, vs)
	}
	if x := virsh(t, "dumpxml", "--inactive", migDomain); !strings.Contains(x, "vgpu:request") {
		t.Fatalf("no persistent definition with the request here:\n%s", x)
	}
	virsh(t, "destroy", migDomain)
	virsh(t, "start", migDomain)
	uartPort(t, localURI) // its own mtty mdev, mapped
	x := virsh(t, "dumpxml", migDomain)
	own := false
	for _, m := range mttyInstances(t) {
		own = own || strings.Contains(x, m)
	}
	if !own {
		t.Errorf("restarted here, %s runs with no mdev of this host's mtty:\n%s", migDomain, x)
	}
	virsh(t, "destroy", migDomain)
}

// noLeaseLeft: a refused incoming migration left no lease or reservation
// for the migrating domain, and no domain of that name.
func noLeaseLeft(t *testing.T, when string) {
	t.Helper()
	vs, _, code := run(t, "vgpuctl", "--profiles", profilesDir, "vgpus")
	if code != 0 {
		t.Fatalf("%s: vgpuctl vgpus: exit %d", when, code)
	}
	if strings.Contains(vs, migDomain) || strings.Contains(vs, "leased") {
		t.Errorf("%s: the refused migration left a lease or reservation here:\n%s", when, vs)
	}
	if _, _, code := run(t, "virsh", "domuuid", migDomain); code == 0 {
		t.Errorf("%s: the refused migration left %s defined here", when, migDomain)
	}
}

// vgpuRowOf is vgpuctl vgpus' line that names domain ("" none).
func vgpuRowOf(t *testing.T, domain string) string {
	t.Helper()
	vs, _, _ := run(t, "vgpuctl", "--profiles", profilesDir, "vgpus")
	for _, l := range strings.Split(vs, "\n") {
		if strings.Contains(l, domain) {
			return l
		}
	}
	return ""
}

// drain: vgpuctl migrate --all moves every running domain with a vGPU (a
// second mtty domain) and leaves the rest (a domain without one) running
// here.
func drain(t *testing.T) {
	t.Helper()
	const withVGPU, without = "lab-drain", "lab-stays"
	defineDomain(t, withVGPU)
	if _, _, code := run(t, "vgpuctl", "--profiles", profilesDir, "attach", withVGPU, "--profile", "lab-mtty-12"); code != 0 {
		t.Fatalf("vgpuctl attach %s: exit %d", withVGPU, code)
	}
	virsh(t, "start", withVGPU)
	defineDomain(t, without)
	virsh(t, "start", without)
	out, errOut, code := run(t, "vgpuctl", "--profiles", profilesDir, "migrate", "--all", dstURI,
		"--migrate-uri", "tcp://"+dstAddr, "--max-downtime", "5s", "--undefine-source")
	t.Logf("vgpuctl migrate --all: exit %d\n%s\n%s", code, out, errOut)
	if code != 0 {
		t.Fatalf("vgpuctl migrate --all: exit %d", code)
	}
	moved := false
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		moved = moved || len(f) >= 2 && f[0] == withVGPU && f[1] == "moved"
		if len(f) > 0 && f[0] == without {
			t.Errorf("the drain's table lists %s, which has no vGPU: %q", without, l)
		}
	}
	if !moved {
		t.Errorf("the drain's table does not say %s moved", withVGPU)
	}
	if st := strings.TrimSpace(virsh(t, "domstate", without)); st != "running" {
		t.Errorf("%s is %q here after the drain, want running", without, st)
	}
	if _, _, code := run(t, "virsh", "domstate", withVGPU); code == 0 {
		t.Errorf("%s is still defined here after the drain with --undefine-source", withVGPU)
	}
	if st := strings.TrimSpace(virsh(t, "-c", dstURI, "domstate", withVGPU)); st != "running" {
		t.Errorf("%s is %q on the destination, want running", withVGPU, st)
	}
	virsh(t, "destroy", without)
}

// background is a vgpuctl running while the test acts.
type background struct {
	cmd  *exec.Cmd
	out  *bytes.Buffer
	done chan error
}

// startVgpuctl starts vgpuctl args without waiting for it.
func startVgpuctl(t *testing.T, args ...string) *background {
	t.Helper()
	b := &background{cmd: exec.Command("vgpuctl", args...), out: &bytes.Buffer{}, done: make(chan error, 1)}
	b.cmd.Stdout, b.cmd.Stderr = b.out, b.out
	if err := b.cmd.Start(); err != nil {
		t.Fatalf("start vgpuctl %s: %v", strings.Join(args, " "), err)
	}
	go func() { b.done <- b.cmd.Wait() }()
	t.Cleanup(func() { _ = b.cmd.Process.Kill() })
	return b
}

// wait waits for it to end within d and returns its exit code and output.
func (b *background) wait(t *testing.T, d time.Duration) (int, string) {
	t.Helper()
	select {
	case err := <-b.done:
		t.Logf("vgpuctl %s: %v\n%s", strings.Join(b.cmd.Args[1:], " "), err, b.out.String())
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), b.out.String()
		}
		if err != nil {
			t.Fatalf("vgpuctl: %v", err)
		}
		return 0, b.out.String()
	case <-time.After(d):
		t.Fatalf("vgpuctl %s did not end within %s:\n%s", strings.Join(b.cmd.Args[1:], " "), d, b.out.String())
		return 0, ""
	}
}

// waitJobMoving waits until domain's migration job at uri sends memory.
func waitJobMoving(t *testing.T, uri, domain string) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		out, _ := exec.Command("virsh", "-c", uri, "domjobinfo", domain).Output()
		if strings.Contains(string(out), "Memory processed:") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no migration job of %s sending memory at %s within 2 min:\n%s", domain, uri, out)
		}
	}
}

// linkDev is the private link's interface (virtio_net, as lab-init finds it).
func linkDev(t *testing.T) string {
	t.Helper()
	ns, _ := filepath.Glob("/sys/class/net/*")
	for _, n := range ns {
		if d, err := os.Readlink(n + "/device/driver"); err == nil && filepath.Base(d) == "virtio_net" {
			return filepath.Base(n)
		}
	}
	t.Fatal("no virtio_net interface: the private link is missing")
	return ""
}

// waitNoLease waits until noLeaseLeft would pass: a failed incoming
// migration's domain goes when libvirt notices, its vGPUs right after.
func waitNoLease(t *testing.T, when string, within time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(2 * time.Second) {
		vs, _, _ := run(t, "vgpuctl", "--profiles", profilesDir, "vgpus")
		_, _, code := run(t, "virsh", "domuuid", migDomain)
		// A table (a restarted vgpud answers: "no vGPUs carved" before it
		// carved) without the domain or a lease.
		if strings.HasPrefix(vs, "VGPU ") && !strings.Contains(vs, migDomain) && !strings.Contains(vs, "leased") && code != 0 {
			break
		}
	}
	noLeaseLeft(t, when)
}
