package kubeletrig

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// LabDir is where the rig keeps what outlives a run (the kubelet binary):
// $KUBELET_LAB, or /var/tmp/kubelet-lab.
func LabDir() string {
	if d := os.Getenv("KUBELET_LAB"); d != "" {
		return d
	}
	return "/var/tmp/kubelet-lab"
}

// KubernetesVersion is the k8s.io/kubernetes version this module requires
// (the kubelet the rig builds and the device manager dmharness runs), as
// the go command reads it from go.mod in dir.
func KubernetesVersion(dir string) (string, error) {
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "k8s.io/kubernetes")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("kubeletrig: go list -m k8s.io/kubernetes in %s: %w", dir, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// moduleFiles returns this module's root directory and its go.mod and
// go.sum, read through the go command from the test's directory.
func moduleFiles() (string, []byte, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", nil, fmt.Errorf("kubeletrig: go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", nil, fmt.Errorf("kubeletrig: not inside a Go module (go env GOMOD: %q)", gomod)
	}
	root := filepath.Dir(gomod)
	var b []byte
	for _, f := range []string{"go.mod", "go.sum"} {
		c, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return "", nil, fmt.Errorf("kubeletrig: read %s: %w", f, err)
		}
		b = append(b, c...)
	}
	return root, b, nil
}

// KubeletBinary returns the kubelet built from this module's
// k8s.io/kubernetes, building it on first use into
// LabDir()/kubelet-<version>-<go version>-<hash of go.mod and go.sum>/:
// a cold build downloads and compiles for about 3 minutes on 2 cores, a
// build with the Go caches warm takes about 10 s, a cached binary none.
// Concurrent callers wait for one build.
func KubeletBinary() (string, error) {
	root, mod, err := moduleFiles()
	if err != nil {
		return "", err
	}
	version, err := KubernetesVersion(root)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(mod)
	dir := filepath.Join(LabDir(), fmt.Sprintf("kubelet-%s-%s-%s", version, runtime.Version(), hex.EncodeToString(sum[:6])))
	bin := filepath.Join(dir, "kubelet")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("kubeletrig: create %s: %w", dir, err)
	}
	unlock, err := flock(filepath.Join(dir, "build.lock"), 15*time.Minute, "the kubelet build in "+dir)
	if err != nil {
		return "", err
	}
	defer unlock()
	if _, err := os.Stat(bin); err == nil { // built while we waited
		return bin, nil
	}
	// Our own name: a build whose test timed out may still be writing.
	tmp := fmt.Sprintf("%s.tmp-%d", bin, os.Getpid())
	defer os.Remove(tmp)
	// The ldflags make --version say what it is instead of
	// v0.0.0-master+$Format:%H$, as the release build does.
	major, minor, _ := strings.Cut(strings.TrimPrefix(version, "v"), ".")
	minor, _, _ = strings.Cut(minor, ".")
	ld := fmt.Sprintf("-X k8s.io/component-base/version.gitVersion=%s -X k8s.io/component-base/version.gitMajor=%s -X k8s.io/component-base/version.gitMinor=%s", version, major, minor)
	cmd := exec.Command("go", "build", "-o", tmp, "-ldflags", ld, "k8s.io/kubernetes/cmd/kubelet")
	cmd.Dir = root
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("kubeletrig: build the kubelet %s in %s: %w\n%s", version, root, err, out)
	}
	if err := os.Rename(tmp, bin); err != nil {
		return "", fmt.Errorf("kubeletrig: install %s: %w", bin, err)
	}
	fmt.Fprintf(os.Stderr, "kubeletrig: built the kubelet %s into %s in %v\n", version, bin, time.Since(start).Round(time.Second))
	return bin, nil
}

// flock takes an exclusive lock on path, waiting up to patience for a
// holder to let go; what names the holder in the error. unlock releases it.
func flock(path string, patience time.Duration, what string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("kubeletrig: open lock %s: %w", path, err)
	}
	deadline := time.Now().Add(patience)
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { _ = unix.Flock(int(f.Fd()), unix.LOCK_UN); f.Close() }, nil
		}
		if err != unix.EWOULDBLOCK {
			f.Close()
			return nil, fmt.Errorf("kubeletrig: lock %s: %w", path, err)
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("kubeletrig: %s is still locked (%s) after %v", path, what, patience)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
