package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

func goTool(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	//lint:ignore SA1019 the fallback when go is not on PATH
	p := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("no go tool on PATH or in GOROOT: %v", err)
	}
	return p
}

// TestNoCgo: libvirt waits for its hooks, so the hook must start fast and
// never call libvirt back. It links no libvirt and no cgo at all.
func TestNoCgo(t *testing.T) {
	list := func(cgo string) []string {
		cmd := exec.Command(goTool(t), "list", "-deps", "-f", "{{.ImportPath}} {{.Standard}} {{len .CgoFiles}}", ".")
		cmd.Env = append(os.Environ(), "CGO_ENABLED="+cgo)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list (CGO_ENABLED=%s): %v", cgo, err)
		}
		return strings.Split(strings.TrimSpace(string(out)), "\n")
	}
	// As built (CGO_ENABLED=0): nothing with cgo, not even the runtime's.
	for _, l := range list("0") {
		f := strings.Fields(l)
		if f[0] == "libvirt.org/go/libvirt" || f[0] == "runtime/cgo" || f[2] != "0" {
			t.Errorf("vgpu-hook depends on %s (cgo files: %s)", f[0], f[2])
		}
	}
	// With cgo available, still no non-standard package uses it: the
	// standard library's (net, os/user) have pure Go versions.
	for _, l := range list("1") {
		f := strings.Fields(l)
		if f[0] == "libvirt.org/go/libvirt" || (f[1] == "false" && f[2] != "0") {
			t.Errorf("vgpu-hook depends on %s (cgo files: %s)", f[0], f[2])
		}
	}
}

// TestFewPackages: the hook answers libvirt yes or no in milliseconds, so
// it links the API, the client, the domain XML and the shared nouns, not
// the carver, the inventory or the config (issue 24 counted 18 packages of
// vgpu before they moved out).
func TestFewPackages(t *testing.T) {
	out, err := exec.Command(goTool(t), "list", "-deps", "-f", "{{.ImportPath}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var ours []string
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "github.com/vgpu-project/vgpu/") {
			ours = append(ours, p)
		}
	}
	if len(ours) > 10 {
		t.Errorf("vgpu-hook links %d packages of vgpu, want at most 10: %s", len(ours), strings.Join(ours, " "))
	}
}

// TestBinary runs the built hook as libvirt would, with $VGPU_SOCKET
// naming a socket nothing listens on: a domain without a request passes
// fast; one with a request fails with one line naming the reason.
func TestBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "vgpu")
	sock := filepath.Join(t.TempDir(), "no-vgpud.sock") // nothing listens there
	build := exec.Command(goTool(t), "build", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("CGO_ENABLED=0 go build: %v\n%s", err, out)
	}
	run := func(xmlFile string, args ...string) (int, string, string, time.Duration) {
		doc, err := os.ReadFile(filepath.Join("..", "..", "pkg", "hook", "testdata", xmlFile))
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), SocketEnv+"="+sock)
		cmd.Stdin = bytes.NewReader(doc)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		start := time.Now()
		err = cmd.Run()
		took := time.Since(start)
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, out.String(), errb.String(), took
	}
	code, out, errs, took := run("domain-plain.xml", "web01", "prepare", "begin", "-")
	if code != 0 || out != "" || errs != "" {
		t.Fatalf("domain without a request: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	// A process start is milliseconds; a second means something waits.
	if took > time.Second {
		t.Errorf("domain without a request took %v", took)
	}
	code, out, errs, _ = run("domain-vf.xml", "web01", "prepare", "begin", "-")
	if code != 1 || out != "" || !strings.HasPrefix(errs, "vgpu: cannot make 2 x mi25-4g ready for web01: ") ||
		!strings.Contains(errs, sock) || !strings.HasSuffix(errs, "(is vgpud running? systemctl start vgpud)\n") || strings.Count(errs, "\n") != 1 {
		t.Fatalf("domain with a request: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if code, _, errs, _ = run("domain-vf.xml", "web01", "started", "begin", "-"); code != 0 || errs != "" {
		t.Fatalf("ignored operation: exit %d, %q", code, errs)
	}
}
