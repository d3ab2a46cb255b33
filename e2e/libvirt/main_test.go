package libvirt

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"testing"

	"github.com/vgpu-project/vgpu/e2e/internal/simproc"
)

// bins are what TestMain prepared, once, before any test runs; read-only
// afterwards.
type bins struct {
	vgpud, vgpuctl, vgpusim, hook string
	repo                          string // repository root, for examples/hosts
	qemu                          string // the emulator domains run
	// guest is the tiny guest that dirties a working set (guest/dirty.S).
	guest string
	// caps is libvirt's capabilities cache, shared by the tests' daemons:
	// probing QEMU takes seconds, and its answer does not change.
	caps string
}

var built bins

// tools are the programs the tests run besides the project's binaries,
// with the Debian package that has each.
var tools = [][2]string{
	{"libvirtd", "libvirt-daemon-system"},
	{"virtlogd", "libvirt-daemon-system"},
	{"virsh", "libvirt-clients"},
	{"qemu-system-x86_64", "qemu-system-x86"},
	{"unshare", "util-linux"},
	{"nsenter", "util-linux"},
	{"ip", "iproute2"},
	{"tc", "iproute2"},
	{"as", "binutils"},
	{"ld", "binutils"},
}

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "e2e/libvirt:", err)
		return 1
	}
	var missing []string
	paths := map[string]string{}
	for _, tl := range tools {
		p, err := exec.LookPath(tl[0])
		if err != nil {
			missing = append(missing, fmt.Sprintf("%s (Debian package %s)", tl[0], tl[1]))
		}
		paths[tl[0]] = p
	}
	if len(missing) > 0 {
		return fail(fmt.Errorf("missing %s: run scripts/deps.sh", strings.Join(missing, ", ")))
	}
	// vgpud gets the race detector when this test binary has it; the hook
	// is built as it ships: without cgo, so without the race detector.
	// QEMU runs as libvirt's qemu user and reads the tiny guest from the
	// binaries' directory.
	race := simproc.RaceEnabled()
	b, err := simproc.BuildAll("vgpu-libvirt-bin-", map[string]bool{"vgpud": race, "vgpuctl": race, "vgpusim": false, "vgpu-hook": false})
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(b.Dir)
	repo, dir := b.Repo, b.Dir
	built = bins{vgpud: b.Path("vgpud"), vgpuctl: b.Path("vgpuctl"), vgpusim: b.Path("vgpusim"),
		hook: b.Path("vgpu-hook"), repo: repo, qemu: paths["qemu-system-x86_64"], caps: filepath.Join(dir, "cache"),
		guest: filepath.Join(dir, "dirty.elf")}
	obj := filepath.Join(dir, "dirty.o")
	for _, c := range [][]string{{"as", "--32", "-o", obj, filepath.Join(repo, "e2e", "libvirt", "guest", "dirty.S")},
		{"ld", "-m", "elf_i386", "-Ttext=0x100000", "-o", built.guest, obj}} {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			return fail(fmt.Errorf("build the tiny guest: %s: %w\n%s", strings.Join(c, " "), err, out))
		}
	}
	if err := os.Mkdir(built.caps, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fail(fmt.Errorf("create the capabilities cache %s: %w", built.caps, err))
	}
	return m.Run()
}
