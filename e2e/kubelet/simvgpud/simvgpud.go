// Package simvgpud runs the real vgpud, with its device plugin on, on a
// simulated host (vgpusim serving the fake kernel over FUSE, as e2e/agent
// runs them), pointed at a kubelet's device-plugin directory and
// PodResources socket, and reads vgpud's ledger and log.
//
// vgpusim is built from the repository this module sits in (../.. of it,
// or $VGPU_REPO); vgpud too, unless $VGPUD_BIN names a vgpud binary to use
// instead (a branch's build, say). This module does not import the vgpu
// module: the kubelet it builds keeps the dependencies k8s.io/kubernetes
// v1.34 chose, and vgpud is driven as a process, over its HTTP API.
package simvgpud

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-project/vgpu/e2e/kubelet/logproc"
)

// Bins are the binaries a test builds once (Build) and its hosts share.
type Bins struct {
	Vgpud, Vgpusim string
	// Repo is the repository root: examples/hosts is there.
	Repo string
}

// Build builds vgpusim (and vgpud, unless $VGPUD_BIN is set) into dir.
func Build(dir string) (Bins, error) {
	repo := os.Getenv("VGPU_REPO")
	if repo == "" {
		out, err := exec.Command("go", "env", "GOMOD").Output()
		if err != nil {
			return Bins{}, fmt.Errorf("simvgpud: go env GOMOD: %w", err)
		}
		repo = filepath.Join(filepath.Dir(strings.TrimSpace(string(out))), "..", "..")
	}
	repo, err := filepath.Abs(repo)
	if err != nil {
		return Bins{}, fmt.Errorf("simvgpud: find the repository root: %w", err)
	}
	b := Bins{Vgpud: os.Getenv("VGPUD_BIN"), Vgpusim: filepath.Join(dir, "vgpusim"), Repo: repo}
	targets := []string{"vgpusim"}
	if b.Vgpud == "" {
		b.Vgpud = filepath.Join(dir, "vgpud")
		targets = append(targets, "vgpud")
	}
	for _, name := range targets {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, name), "./cmd/"+name)
		cmd.Dir = repo
		if out, err := cmd.CombinedOutput(); err != nil {
			return Bins{}, fmt.Errorf("simvgpud: go build ./cmd/%s in %s: %w\n%s", name, repo, err, out)
		}
	}
	if _, err := os.Stat(b.Vgpud); err != nil {
		return Bins{}, fmt.Errorf("simvgpud: vgpud ($VGPUD_BIN): %w", err)
	}
	return b, nil
}

// Kubelet says where vgpud finds the kubelet.
type Kubelet struct {
	PluginDir          string // the kubelet's device-plugin directory
	PodResourcesSocket string
}

// Host is a simulated host and the vgpud on it.
type Host struct {
	Socket string // vgpud's API socket

	t     testing.TB
	bins  Bins
	dir   string // config, state, logs, the sim's mount and sockets
	mnt   string
	sim   *logproc.Proc
	vgpud *logproc.Proc
	runs  int // vgpud's runs so far: its logs are vgpud-<n>.log
}

// stop stops p (SIGTERM, killed after 30s) and says whether it exited 0
// on SIGTERM.
func stop(p *logproc.Proc) error {
	if err := p.Stop(30 * time.Second); err != nil {
		return err
	}
	if code := p.Cmd.ProcessState.ExitCode(); code != 0 {
		return fmt.Errorf("%s exited %d on SIGTERM", p.Name, code)
	}
	return nil
}

// Flags every vgpud here runs with: pods are judged within a second of
// leaving PodResources, and there is no libvirt.
var flags = []string{"--collect-grace", "1s", "--pod-resources-every", "200ms", "--libvirt-uri", ""}

// Start boots examples/hosts/<hostFile> under vgpusim and starts vgpud
// with config (YAML; its kubernetes section is appended from k) on it.
// Cleanup stops vgpud, then vgpusim. It needs root and /dev/fuse.
func Start(t testing.TB, bins Bins, hostFile, config string, k Kubelet) *Host {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("simvgpud: vgpusim mounts a FUSE filesystem: run the tests as root")
	}
	// Unix socket paths are limited to 107 bytes: not t.TempDir.
	dir, err := os.MkdirTemp("", "simvgpud-")
	if err != nil {
		t.Fatal(err)
	}
	h := &Host{Socket: filepath.Join(dir, "vgpud.sock"), t: t, bins: bins, dir: dir, mnt: filepath.Join(dir, "mnt")}
	t.Cleanup(h.cleanup)
	ready := filepath.Join(dir, "sim.ready")
	h.sim, err = logproc.Start("vgpusim", exec.Command(bins.Vgpusim, "serve",
		"--host", filepath.Join(bins.Repo, "examples", "hosts", hostFile), "--mount", h.mnt,
		"--control", filepath.Join(dir, "sim.sock"), "--ready-file", ready, "--etc", filepath.Join(dir, "etc")),
		filepath.Join(dir, "vgpusim.log"))
	if err != nil {
		t.Fatalf("simvgpud: %v", err)
	}
	h.poll("vgpusim serving "+h.mnt, func() (bool, error) {
		b, err := os.ReadFile(ready)
		if !h.sim.Running() {
			t.Fatalf("simvgpud: vgpusim exited:\n%s", logproc.Tail(h.sim.Log, 40))
		}
		return err == nil && strings.TrimSpace(string(b)) == h.mnt, err
	})
	config += fmt.Sprintf(`kubernetes:
  device-plugin: true
  resource-domain: vgpu.example.org
  device-plugin-dir: %q
  pod-resources-socket: %q
`, k.PluginDir, k.PodResourcesSocket)
	// Root-owned and not writable by others: vgpud refuses a config with
	// a kubernetes section otherwise.
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	h.StartVgpud()
	return h
}

// StartVgpud starts vgpud and waits until its API answers.
func (h *Host) StartVgpud() {
	h.t.Helper()
	h.runs++
	p, err := logproc.Start("vgpud", exec.Command(h.bins.Vgpud,
		append([]string{"--sysfs-root", h.mnt, "--state-dir", filepath.Join(h.dir, "state"), "--socket", h.Socket,
			"--config", filepath.Join(h.dir, "config.yaml")}, flags...)...),
		filepath.Join(h.dir, fmt.Sprintf("vgpud-%d.log", h.runs)))
	if err != nil {
		h.t.Fatalf("simvgpud: %v", err)
	}
	h.vgpud = p
	h.poll("vgpud answering on "+h.Socket, func() (bool, error) {
		if !p.Running() {
			h.t.Fatalf("simvgpud: vgpud exited:\n%s", h.Log())
		}
		_, err := h.VGPUs()
		return err == nil, err
	})
}

// StopVgpud stops vgpud with SIGTERM; it fails the test unless vgpud
// exits 0.
func (h *Host) StopVgpud() {
	h.t.Helper()
	if h.vgpud == nil {
		return
	}
	if err := stop(h.vgpud); err != nil {
		h.t.Errorf("simvgpud: %v:\n%s", err, h.Log())
	}
	h.vgpud = nil
}

// Log is vgpud's output, all runs.
func (h *Host) Log() string {
	var b strings.Builder
	for i := 1; i <= h.runs; i++ {
		c, _ := os.ReadFile(filepath.Join(h.dir, fmt.Sprintf("vgpud-%d.log", i)))
		b.Write(c)
	}
	return b.String()
}

// WaitLog waits until vgpud's log (all runs) holds line at least n times.
func (h *Host) WaitLog(line string, n int, timeout time.Duration) {
	h.t.Helper()
	deadline := time.Now().Add(timeout)
	for strings.Count(h.Log(), line) < n {
		if time.Now().After(deadline) {
			h.t.Fatalf("simvgpud: vgpud logged %q %d times, not %d, in %v:\n%s", line, strings.Count(h.Log(), line), n, timeout, h.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// cleanup stops vgpud, then vgpusim (which unmounts), and removes the
// directory unless the test failed.
func (h *Host) cleanup() {
	h.StopVgpud()
	if h.sim != nil {
		if err := stop(h.sim); err != nil {
			h.t.Errorf("simvgpud: %v:\n%s", err, logproc.Tail(h.sim.Log, 40))
		}
		var st unix.Statfs_t
		if err := unix.Statfs(h.mnt, &st); err == nil && st.Type == unix.FUSE_SUPER_MAGIC {
			h.t.Errorf("simvgpud: vgpusim left %s mounted", h.mnt)
			_ = unix.Unmount(h.mnt, unix.MNT_DETACH)
		} else if err != nil && !errors.Is(err, os.ErrNotExist) {
			h.t.Errorf("simvgpud: statfs %s: %v", h.mnt, err)
		}
	}
	if h.t.Failed() {
		h.t.Logf("simvgpud: vgpud's and vgpusim's logs, state and config kept in %s", h.dir)
		return
	}
	_ = os.RemoveAll(h.dir)
}

// VGPU is one vGPU of the host as GET /v1/vgpus gives it, with the fields
// these tests read.
type VGPU struct {
	ID      string `json:"id"`
	Profile string `json:"profile"`
	State   string `json:"state"`
	Pod     *Pod   `json:"pod"`
}

// Pod is the pod's container vgpud's ledger says holds a vGPU.
type Pod struct {
	Resource, Namespace, Name, Container string
}

// VGPUs lists the host's vGPUs with their holders. It reads the JSON
// itself: the pod a vGPU is held by is new in the API.
func (h *Host) VGPUs() ([]VGPU, error) {
	hc := http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", h.Socket)
		}}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("http://vgpud/v1/vgpus")
	if err != nil {
		return nil, fmt.Errorf("simvgpud: GET /v1/vgpus on %s: %w", h.Socket, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("simvgpud: GET /v1/vgpus on %s: %s", h.Socket, resp.Status)
	}
	var out []VGPU
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("simvgpud: decode /v1/vgpus from %s: %w", h.Socket, err)
	}
	return out, nil
}

// Config is a host config for mixed.yaml: the T4 carved as t4-4q (four
// mdevs) and the MI25 as mi25-4g (SR-IOV VFs); the other GPUs unmanaged.
const Config = `version: v1
gpus:
  - address: "0000:3b:00.0"
    profile: t4-4q
  - address: "0000:03:00.0"
    profile: mi25-4g
`

// The resources vgpud serves for Config, and the variables KubeVirt's
// virt-launcher reads their devices from (its ResourceNameToEnvVar): mdev
// UUIDs for the T4's mdevs, PCI addresses for the MI25's VFs.
const (
	ResT4   = "vgpu.example.org/t4-4q"
	EnvT4   = "MDEV_PCI_RESOURCE_VGPU_EXAMPLE_ORG_T4-4Q"
	ResMI25 = "vgpu.example.org/mi25-4g"
	EnvMI25 = "PCI_RESOURCE_VGPU_EXAMPLE_ORG_MI25-4G"
)

// WaitCarved waits until vgpud lists vGPUs of profile and returns their
// IDs (mdev UUIDs or PCI addresses), sorted.
func (h *Host) WaitCarved(profile string) []string {
	h.t.Helper()
	var ids []string
	h.poll("vGPUs of "+profile, func() (bool, error) {
		vs, err := h.VGPUs()
		ids = ids[:0]
		for _, v := range vs {
			if v.Profile == profile {
				ids = append(ids, v.ID)
			}
		}
		return err == nil && len(ids) > 0, err
	})
	slices.Sort(ids)
	return ids
}

// WaitHolder waits until vgpud's ledger says pod holds vGPU id; the zero
// Pod: until id is free.
func (h *Host) WaitHolder(id string, pod Pod) {
	h.t.Helper()
	h.poll(fmt.Sprintf("vGPU %s held by %+v", id, pod), func() (bool, error) {
		vs, err := h.VGPUs()
		if err != nil {
			return false, err
		}
		for _, v := range vs {
			if v.ID != id {
				continue
			}
			if pod == (Pod{}) && v.State == "free" && v.Pod == nil || v.Pod != nil && *v.Pod == pod {
				return true, nil
			}
			return false, fmt.Errorf("it is %s, held by pod %+v", v.State, v.Pod)
		}
		return false, fmt.Errorf("vgpud lists no vGPU %s", id)
	})
}

// poll calls done every 20ms until it says so, and fails the test with
// its last error and vgpud's log if it does not within two minutes.
func (h *Host) poll(what string, done func() (bool, error)) {
	h.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ok, err := done()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("simvgpud: not %s after 2m (last: %v):\n%s", what, err, h.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
