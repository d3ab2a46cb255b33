// Package kubeletrig runs a real kubelet (built from this module's
// k8s.io/kubernetes, v1.34) standalone, without an API server, on
// Debian's containerd and runc, with images built here: a test drops
// static pods that ask for extended resources, reads their containers'
// environment from their logs, lists PodResources, deletes pods and
// restarts the kubelet. README.md in this module says how to use it and
// what the rig works around.
//
// Most of the kubelet's state lives in a private directory (its
// --root-dir, podLogsDir, containerd's root and state), but the
// device-plugin directory is fixed in the kubelet:
// /var/lib/kubelet/device-plugins. So a rig needs root, takes a host-wide
// lock (one rig at a time; others wait), refuses to run beside a kubelet
// it did not start, and on cleanup puts back what it changed: the
// device-plugin directory, the kernel tunables the kubelet sets, the
// /var/log/containers links and the kubepods cgroups it made.
package kubeletrig

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/vgpu-project/vgpu/e2e/kubelet/logproc"
	"github.com/vgpu-project/vgpu/e2e/kubelet/podres"
)

const (
	// PluginDir is the kubelet's device-plugin directory
	// (deviceplugin/v1beta1 DevicePluginPath), whatever its --root-dir.
	PluginDir = "/var/lib/kubelet/device-plugins"
	// NodeName is the rig's node name (--hostname-override): static pod
	// <name> runs as <name>-vgpurig.
	NodeName = "vgpurig"

	lockPath = "/run/lock/vgpu-kubelet-rig.lock"
	// marker in PluginDir says the rig made what is there, so a crashed
	// run's leftovers may be wiped.
	marker = ".vgpu-kubelet-rig"
	// containerName is the one container of every pod the rig runs.
	containerName = "envdump"
)

// kernelTunables are the sysctls the kubelet's container manager sets
// at start (pkg/kubelet/cm setupKernelTunables); the rig restores them.
var kernelTunables = []string{"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic",
	"kernel/panic_on_oops", "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes"}

// Rig is one containerd and one kubelet.
type Rig struct {
	// Dir is the run's private directory: the kubelet's root (kubelet/),
	// pod logs (pods/), static pod manifests (manifests/), containerd's
	// root and state, and the logs of both daemons (*.log).
	Dir string

	t          testing.TB
	kubeletBin string
	port       int // the kubelet's HTTPS server, on 127.0.0.1
	healthz    int
	containerd *logproc.Proc
	kubelet    *logproc.Proc
	// undo holds the steps that put back what the rig changed outside
	// Dir, run last first by cleanup.
	undo []func() error
}

// CheckHost says why a rig cannot run here, or nil: it needs root, and
// containerd, ctr and runc (scripts/deps.sh installs them).
func CheckHost() error {
	if os.Geteuid() != 0 {
		return errors.New("kubeletrig: the kubelet rig needs root (the kubelet mounts, runc makes containers): run the tests with sudo")
	}
	for _, b := range []string{"containerd", "ctr", "runc"} {
		if _, err := exec.LookPath(b); err != nil {
			return fmt.Errorf("kubeletrig: %s is not installed (scripts/deps.sh installs containerd and runc): %w", b, err)
		}
	}
	return nil
}

// Start builds (or finds) the kubelet, takes the host-wide rig lock,
// starts containerd with the rig's images and the kubelet, and waits until
// the kubelet serves device-plugin registration and PodResources. Cleanup
// stops everything, puts back what the rig changed, and fails the test
// if it cannot.
func Start(t testing.TB) *Rig {
	t.Helper()
	if err := CheckHost(); err != nil {
		t.Fatal(err)
	}
	bin, err := KubeletBinary()
	if err != nil {
		t.Fatal(err)
	}
	root, _, err := moduleFiles()
	if err != nil {
		t.Fatal(err)
	}
	unlock, err := flock(lockPath, 20*time.Minute, "another kubelet rig runs")
	if err != nil {
		t.Fatal(err)
	}
	r := &Rig{t: t, kubeletBin: bin}
	r.undo = append(r.undo, func() error { unlock(); return nil })
	t.Cleanup(r.cleanup)
	if err := r.setUp(root); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *Rig) setUp(moduleRoot string) error {
	if pids := foreignKubelets(); len(pids) > 0 {
		return fmt.Errorf("kubeletrig: a kubelet the rig did not start runs here (pid %v): the rig shares %s with it, so it will not run", pids, PluginDir)
	}
	if err := r.claimPluginDir(); err != nil {
		return err
	}
	r.saveTunables()
	r.watchHostPaths()
	// Unix socket paths are limited to 107 bytes; t.TempDir's can be long.
	dir, err := os.MkdirTemp("", "kubelet-rig-")
	if err != nil {
		return fmt.Errorf("kubeletrig: create the run directory: %w", err)
	}
	r.Dir = dir
	for _, d := range []string{"manifests", "pods", "kubelet", "images"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return fmt.Errorf("kubeletrig: create %s: %w", d, err)
		}
	}
	if r.port, err = freePort(); err != nil {
		return err
	}
	if r.healthz, err = freePort(); err != nil {
		return err
	}
	if err := r.startContainerd(); err != nil {
		return err
	}
	archives, err := buildImages(moduleRoot, filepath.Join(dir, "images"))
	if err != nil {
		return err
	}
	for _, a := range archives {
		if out, err := r.ctr("images", "import", a); err != nil {
			return fmt.Errorf("kubeletrig: ctr images import %s: %w\n%s", a, err, out)
		}
	}
	if err := r.writeKubeletConfig(); err != nil {
		return err
	}
	return r.startKubelet()
}

// foreignKubelets returns the pids of processes named kubelet.
func foreignKubelets() []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if comm, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm")); err == nil && strings.TrimSpace(string(comm)) == "kubelet" {
			pids = append(pids, pid)
		}
	}
	return pids
}

// claimPluginDir makes PluginDir the rig's: created if missing (and
// removed at cleanup with /var/lib/kubelet if the rig made that too),
// wiped if a crashed rig left it, refused if it holds a real kubelet's
// state.
func (r *Rig) claimPluginDir() error {
	parent := filepath.Dir(PluginDir)
	_, err := os.Stat(parent)
	madeParent := errors.Is(err, os.ErrNotExist)
	entries, err := os.ReadDir(PluginDir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := os.MkdirAll(PluginDir, 0o750); err != nil {
			return fmt.Errorf("kubeletrig: create %s: %w", PluginDir, err)
		}
		r.undo = append(r.undo, func() error {
			if err := os.RemoveAll(PluginDir); err != nil {
				return fmt.Errorf("kubeletrig: remove %s: %w", PluginDir, err)
			}
			if madeParent {
				if err := os.Remove(parent); err != nil && !errors.Is(err, os.ErrNotExist) {
					return fmt.Errorf("kubeletrig: remove %s (the rig made it; something else put files there since?): %w", parent, err)
				}
			}
			return nil
		})
	case err != nil:
		return fmt.Errorf("kubeletrig: read %s: %w", PluginDir, err)
	default:
		ours := slices.ContainsFunc(entries, func(e os.DirEntry) bool { return e.Name() == marker })
		if len(entries) > 0 && !ours {
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			return fmt.Errorf("kubeletrig: %s holds a kubelet's state the rig did not make (%s): move it away to run the rig", PluginDir, strings.Join(names, ", "))
		}
		wipe := func() error {
			entries, err := os.ReadDir(PluginDir)
			if err != nil {
				return fmt.Errorf("kubeletrig: read %s: %w", PluginDir, err)
			}
			for _, e := range entries {
				if err := os.RemoveAll(filepath.Join(PluginDir, e.Name())); err != nil {
					return fmt.Errorf("kubeletrig: clean %s: %w", PluginDir, err)
				}
			}
			return nil
		}
		if err := wipe(); err != nil {
			return err
		}
		r.undo = append(r.undo, wipe)
	}
	if err := os.WriteFile(filepath.Join(PluginDir, marker), []byte("made by e2e/kubelet/kubeletrig; removed when the rig stops\n"), 0o644); err != nil {
		return fmt.Errorf("kubeletrig: mark %s: %w", PluginDir, err)
	}
	return nil
}

// saveTunables remembers the sysctls the kubelet changes, to restore them.
func (r *Rig) saveTunables() {
	saved := map[string]string{}
	for _, k := range kernelTunables {
		if b, err := os.ReadFile(filepath.Join("/proc/sys", k)); err == nil {
			saved[k] = strings.TrimSpace(string(b))
		}
	}
	r.undo = append(r.undo, func() error {
		var errs []error
		for k, v := range saved {
			p := filepath.Join("/proc/sys", k)
			if b, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(b)) == v {
				continue
			}
			if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
				errs = append(errs, fmt.Errorf("kubeletrig: restore %s to %s: %w", p, v, err))
			}
		}
		return errors.Join(errs...)
	})
}

// watchHostPaths arranges for cleanup to remove what the kubelet makes
// outside Dir: links in /var/log/containers to Dir's logs (and the
// directory, if it made it), and the kubepods cgroups it made.
func (r *Rig) watchHostPaths() {
	const links = "/var/log/containers"
	_, err := os.Stat(links)
	madeLinks := errors.Is(err, os.ErrNotExist)
	cgroups, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods")
	r.undo = append(r.undo, func() error {
		var errs []error
		entries, _ := os.ReadDir(links)
		for _, e := range entries {
			p := filepath.Join(links, e.Name())
			if target, err := os.Readlink(p); err == nil && r.Dir != "" && strings.HasPrefix(target, r.Dir+"/") {
				if err := os.Remove(p); err != nil {
					errs = append(errs, fmt.Errorf("kubeletrig: remove %s: %w", p, err))
				}
			}
		}
		if madeLinks {
			if err := os.Remove(links); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, fmt.Errorf("kubeletrig: remove %s (the kubelet made it; did something else put files there?): %w", links, err))
			}
		}
		now, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods")
		for _, cg := range now {
			if !slices.Contains(cgroups, cg) {
				if err := removeCgroup(cg); err != nil {
					errs = append(errs, err)
				}
			}
		}
		return errors.Join(errs...)
	})
}

// removeCgroup removes a cgroup directory tree, leaves first (cgroupfs
// refuses to remove a directory with children, and its files go with it).
func removeCgroup(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("kubeletrig: read cgroup %s: %w", dir, err)
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := removeCgroup(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	if err := unix.Rmdir(dir); err != nil {
		return fmt.Errorf("kubeletrig: remove cgroup %s: %w", dir, err)
	}
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("kubeletrig: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (r *Rig) containerdSocket() string { return filepath.Join(r.Dir, "containerd.sock") }

// ctr runs Debian's ctr on the rig's containerd, in the CRI's namespace.
func (r *Rig) ctr(args ...string) ([]byte, error) {
	return exec.Command("ctr", append([]string{"--address", r.containerdSocket(), "--namespace", "k8s.io"}, args...)...).CombinedOutput()
}

func (r *Rig) startDaemon(name string, args ...string) (*logproc.Proc, error) {
	cmd := exec.Command(args[0], args[1:]...)
	// runc and the shims are found on PATH, in /usr/sbin on Debian.
	cmd.Env = append(os.Environ(), "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	// Its own process group: a ^C to the test does not reach it before
	// cleanup stops it in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	d, err := logproc.Start(name, cmd, filepath.Join(r.Dir, name+".log"))
	if err != nil {
		return nil, fmt.Errorf("kubeletrig: %w", err)
	}
	return d, nil
}

// await polls ready every 50ms until it returns nil, d exits, or timeout
// passes; the error carries ready's last answer and d's log's tail.
func (r *Rig) await(d *logproc.Proc, timeout time.Duration, what string, ready func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := ready()
		if err == nil {
			return nil
		}
		if !d.Running() {
			return fmt.Errorf("kubeletrig: %s exited (%v) before %s: %v\n%s", d.Name, d.Cmd.ProcessState, what, err, logproc.Tail(d.Log, 40))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kubeletrig: %s: not %s after %v: %v\n%s", d.Name, what, timeout, err, logproc.Tail(d.Log, 40))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (r *Rig) startContainerd() error {
	cfg := filepath.Join(r.Dir, "containerd.toml")
	// restrict_oom_score_adj: root here lacks CAP_SYS_RESOURCE, and runc
	// cannot give the sandbox its -998 (this module's README.md). No CNI:
	// only hostNetwork pods start.
	text := fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q

[grpc]
  address = %[3]q

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = %[4]q
    restrict_oom_score_adj = true
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = false
          Root = %[5]q
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = %[6]q
`, filepath.Join(r.Dir, "containerd", "root"), filepath.Join(r.Dir, "containerd", "state"), r.containerdSocket(),
		PauseImage, filepath.Join(r.Dir, "containerd", "runc"), filepath.Join(r.Dir, "containerd", "cni"))
	if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
		return fmt.Errorf("kubeletrig: write %s: %w", cfg, err)
	}
	d, err := r.startDaemon("containerd", "containerd", "--config", cfg)
	if err != nil {
		return err
	}
	r.containerd = d
	return r.await(d, time.Minute, "answering", func() error {
		if out, err := r.ctr("version"); err != nil {
			return fmt.Errorf("ctr version: %w: %s", err, out)
		}
		return nil
	})
}

func (r *Rig) writeKubeletConfig() error {
	cfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
staticPodPath: %[1]s
fileCheckFrequency: 1s
podLogsDir: %[2]s
containerRuntimeEndpoint: unix://%[3]s
cgroupDriver: cgroupfs
failSwapOn: false
failCgroupV1: false
makeIPTablesUtilChains: false
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
address: 127.0.0.1
port: %[4]d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %[5]d
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "1%%"
  imagefs.available: "1%%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
`, filepath.Join(r.Dir, "manifests"), filepath.Join(r.Dir, "pods"), r.containerdSocket(), r.port, r.healthz)
	p := filepath.Join(r.Dir, "kubelet.yaml")
	if err := os.WriteFile(p, []byte(cfg), 0o644); err != nil {
		return fmt.Errorf("kubeletrig: write %s: %w", p, err)
	}
	return nil
}

// startKubelet starts the kubelet and waits until it is healthy and
// serves a new registration socket and PodResources.
func (r *Rig) startKubelet() error {
	started := time.Now()
	d, err := r.startDaemon("kubelet", r.kubeletBin, "--config="+filepath.Join(r.Dir, "kubelet.yaml"),
		"--root-dir="+filepath.Join(r.Dir, "kubelet"), "--hostname-override="+NodeName, "--v=2",
		// Its self-signed serving certificate: /var/lib/kubelet/pki by
		// default, whatever --root-dir says.
		"--cert-dir="+filepath.Join(r.Dir, "kubelet", "pki"))
	if err != nil {
		return err
	}
	r.kubelet = d
	hc := http.Client{Timeout: 5 * time.Second}
	return r.await(d, 2*time.Minute, "serving", func() error {
		resp, err := hc.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", r.healthz))
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("healthz: %s %s", resp.Status, body)
		}
		fi, err := os.Stat(filepath.Join(PluginDir, "kubelet.sock"))
		if err != nil {
			return err
		}
		if fi.ModTime().Before(started.Add(-time.Second)) {
			return fmt.Errorf("%s is the last kubelet's", fi.Name())
		}
		_, err = podres.Read(context.Background(), r.PodResourcesSocket())
		return err
	})
}

// PodResourcesSocket is the kubelet's PodResources API socket.
func (r *Rig) PodResourcesSocket() string {
	return filepath.Join(r.Dir, "kubelet", "pod-resources", "kubelet.sock")
}

// PodResources lists the kubelet's PodResources.
func (r *Rig) PodResources() (podres.Snapshot, error) {
	return podres.Read(context.Background(), r.PodResourcesSocket())
}

// WaitAllocatable waits until PodResources offers exactly ids of
// resource; a device-requesting pod must come after it (this module's
// README.md: a pod admitted before its plugin registers runs without the
// device).
func (r *Rig) WaitAllocatable(resource string, ids []string, timeout time.Duration) error {
	want := slices.Sorted(slices.Values(ids))
	var got []string
	return r.await(r.kubelet, timeout, fmt.Sprintf("offering %s %v", resource, want), func() error {
		s, err := r.PodResources()
		if err != nil {
			return err
		}
		if got = s.Allocatable[resource]; !slices.Equal(got, want) {
			return fmt.Errorf("allocatable %s: %v", resource, got)
		}
		return nil
	})
}

// WaitHeld waits until PodResources lists static pod name (namespace
// default) holding exactly ids of resource. After a restart the kubelet
// serves PodResources before it has admitted its static pods again, and
// lists a pod only once it has.
func (r *Rig) WaitHeld(name, resource string, ids []string, timeout time.Duration) error {
	want := slices.Sorted(slices.Values(ids))
	return r.await(r.kubelet, timeout, fmt.Sprintf("listing pod %s holding %s %v", PodName(name), resource, want), func() error {
		s, err := r.PodResources()
		if err != nil {
			return err
		}
		if got := s.Held("default", PodName(name), resource); !slices.Equal(got, want) {
			return fmt.Errorf("pod %s holds %v of %s; pods %v, holdings %+v", PodName(name), got, resource, s.Pods, s.Holdings)
		}
		return nil
	})
}

// PodName is the name the kubelet gives static pod name: name-<node>.
func PodName(name string) string { return name + "-" + NodeName }

// RunPod drops a static pod manifest: pod name (running as PodName(name)),
// hostNetwork, one container "envdump" of EnvdumpImage with limits (and so
// requests) of count of each resource.
func (r *Rig) RunPod(name string, limits map[string]int64) error {
	rl := v1.ResourceList{}
	for res, n := range limits {
		rl[v1.ResourceName(res)] = *resource.NewQuantity(n, resource.DecimalSI)
	}
	grace := int64(5)
	pod := v1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: v1.PodSpec{
			HostNetwork:                   true,
			TerminationGracePeriodSeconds: &grace,
			Containers: []v1.Container{{Name: containerName, Image: EnvdumpImage, ImagePullPolicy: v1.PullNever,
				Resources: v1.ResourceRequirements{Limits: rl}}},
		},
	}
	b, err := json.MarshalIndent(pod, "", "  ")
	if err != nil {
		return err
	}
	// The kubelet skips dot files: write one, then rename it into place.
	dst := filepath.Join(r.Dir, "manifests", name+".yaml")
	tmp := filepath.Join(r.Dir, "manifests", "."+name+".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("kubeletrig: write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		return fmt.Errorf("kubeletrig: place %s: %w", dst, err)
	}
	return nil
}

// Env waits until pod name's container has printed its environment and
// returns it. A pod that does not get there (refused at admission, say)
// is described in the error by the kubelet's own view of it.
func (r *Rig) Env(name string, timeout time.Duration) (map[string]string, error) {
	var env map[string]string
	err := r.await(r.kubelet, timeout, "running pod "+PodName(name), func() error {
		logs, _ := filepath.Glob(filepath.Join(r.Dir, "pods", "default_"+PodName(name)+"_*", containerName, "0.log"))
		if len(logs) == 0 {
			return fmt.Errorf("no log of %s yet; %s", PodName(name), r.describe(name))
		}
		e, done, err := readEnv(logs[0])
		if err != nil || !done {
			return fmt.Errorf("%s not done (%v); %s", logs[0], err, r.describe(name))
		}
		env = e
		return nil
	})
	return env, err
}

// readEnv parses a CRI log ("<time> stdout F <line>") of envdump.
func readEnv(path string) (map[string]string, bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		fields := strings.SplitN(sc.Text(), " ", 4)
		if len(fields) < 4 || fields[1] != "stdout" {
			continue
		}
		if fields[3] == envdumpDone {
			return env, true, nil
		}
		if k, v, ok := strings.Cut(fields[3], "="); ok {
			env[k] = v
		}
	}
	return env, false, sc.Err()
}

// Pod returns the kubelet's view of pod name (its /pods endpoint), or nil
// when the kubelet does not know it.
func (r *Rig) Pod(name string) (*v1.Pod, error) {
	c := http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		// The kubelet's self-signed serving certificate, on loopback.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := c.Get(fmt.Sprintf("https://127.0.0.1:%d/pods", r.port))
	if err != nil {
		return nil, fmt.Errorf("kubeletrig: the kubelet's /pods: %w", err)
	}
	defer resp.Body.Close()
	var list v1.PodList
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return nil, fmt.Errorf("kubeletrig: decode the kubelet's /pods: %w", err)
	}
	for i := range list.Items {
		if list.Items[i].Name == PodName(name) {
			return &list.Items[i], nil
		}
	}
	return nil, nil
}

func (r *Rig) describe(name string) string {
	p, err := r.Pod(name)
	switch {
	case err != nil:
		return err.Error()
	case p == nil:
		return "the kubelet does not know " + PodName(name)
	}
	return fmt.Sprintf("the kubelet says %s is %s (reason %q, message %q)", p.Name, p.Status.Phase, p.Status.Reason, p.Status.Message)
}

// Container is one of a pod's containers as containerd's CRI lists it.
type Container struct {
	ID      string
	Attempt uint32
	State   string // CONTAINER_RUNNING, CONTAINER_EXITED, ...
}

// Containers lists pod name's envdump containers through the CRI.
func (r *Rig) Containers(name string) ([]Container, error) {
	cc, err := grpc.NewClient("unix://"+r.containerdSocket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("kubeletrig: dial containerd: %w", err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := runtimeapi.NewRuntimeServiceClient(cc).ListContainers(ctx, &runtimeapi.ListContainersRequest{
		Filter: &runtimeapi.ContainerFilter{LabelSelector: map[string]string{"io.kubernetes.pod.name": PodName(name)}}})
	if err != nil {
		return nil, fmt.Errorf("kubeletrig: list %s's containers: %w", PodName(name), err)
	}
	var out []Container
	for _, c := range resp.Containers {
		out = append(out, Container{ID: c.Id, Attempt: c.GetMetadata().GetAttempt(), State: c.State.String()})
	}
	slices.SortFunc(out, func(a, b Container) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// DeletePod removes pod name's manifest and waits until the kubelet has
// forgotten it and none of its containers runs.
func (r *Rig) DeletePod(name string, timeout time.Duration) error {
	p := filepath.Join(r.Dir, "manifests", name+".yaml")
	if err := os.Remove(p); err != nil {
		return fmt.Errorf("kubeletrig: remove %s: %w", p, err)
	}
	return r.await(r.kubelet, timeout, "done with "+PodName(name), func() error {
		if p, err := r.Pod(name); err != nil || p != nil {
			return fmt.Errorf("the kubelet still has it (%v)", err)
		}
		cs, err := r.Containers(name)
		if err != nil {
			return err
		}
		for _, c := range cs {
			if c.State == runtimeapi.ContainerState_CONTAINER_RUNNING.String() {
				return fmt.Errorf("container %s still runs", c.ID)
			}
		}
		return nil
	})
}

// RestartKubelet stops the kubelet (SIGTERM; the pods go on running in
// containerd) and starts it again on the same directories; it returns
// once the new kubelet serves, before plugins have registered again.
func (r *Rig) RestartKubelet() error {
	if err := r.kubelet.Stop(30 * time.Second); err != nil {
		return fmt.Errorf("kubeletrig: %w", err)
	}
	return r.startKubelet()
}

// KubeletLog returns the last n lines of the kubelet's log.
func (r *Rig) KubeletLog(n int) string { return logproc.Tail(filepath.Join(r.Dir, "kubelet.log"), n) }

// cleanup stops the pods, the kubelet and containerd, in that order,
// unmounts and removes Dir, and runs the undo steps.
func (r *Rig) cleanup() {
	t := r.t
	if t.Failed() && r.Dir != "" {
		t.Logf("kubeletrig: the run failed; the daemons' logs:\n%s\n%s", logproc.Tail(filepath.Join(r.Dir, "kubelet.log"), 80), logproc.Tail(filepath.Join(r.Dir, "containerd.log"), 30))
	}
	var errs []error
	if r.kubelet.Running() {
		// The kubelet stops the pods whose manifests go.
		manifests, _ := filepath.Glob(filepath.Join(r.Dir, "manifests", "*"))
		for _, m := range manifests {
			_ = os.Remove(m)
		}
		_ = r.await(r.kubelet, 60*time.Second, "stopping every pod", func() error {
			out, err := r.ctr("tasks", "ls", "-q")
			if err != nil || strings.TrimSpace(string(out)) != "" {
				return fmt.Errorf("tasks left: %q (%v)", out, err)
			}
			return nil
		})
		errs = append(errs, r.kubelet.Stop(30*time.Second))
	}
	if r.containerd.Running() {
		errs = append(errs, r.removeSandboxes())
		errs = append(errs, r.containerd.Stop(30*time.Second))
	}
	if r.Dir != "" {
		errs = append(errs, unmountUnder(r.Dir))
		if err := os.RemoveAll(r.Dir); err != nil {
			errs = append(errs, fmt.Errorf("kubeletrig: remove %s: %w", r.Dir, err))
		}
	}
	for i := len(r.undo) - 1; i >= 0; i-- {
		errs = append(errs, r.undo[i]())
	}
	if err := errors.Join(errs...); err != nil {
		t.Errorf("kubeletrig: cleanup: %v", err)
	}
}

// removeSandboxes stops and removes every pod sandbox containerd still
// has (and so their containers and shims): what the kubelet left.
func (r *Rig) removeSandboxes() error {
	cc, err := grpc.NewClient("unix://"+r.containerdSocket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("kubeletrig: dial containerd: %w", err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := runtimeapi.NewRuntimeServiceClient(cc)
	resp, err := c.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return fmt.Errorf("kubeletrig: list pod sandboxes: %w", err)
	}
	var errs []error
	for _, s := range resp.Items {
		if _, err := c.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: s.Id}); err != nil {
			errs = append(errs, fmt.Errorf("kubeletrig: stop sandbox %s: %w", s.Id, err))
		}
		if _, err := c.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: s.Id}); err != nil {
			errs = append(errs, fmt.Errorf("kubeletrig: remove sandbox %s: %w", s.Id, err))
		}
	}
	return errors.Join(errs...)
}

// unmountUnder unmounts everything mounted at or below dir, deepest
// first: the kubelet's bind mount of its root onto itself, and what
// containerd left (rootfs overlays, sandbox shm).
func unmountUnder(dir string) error {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("kubeletrig: read the mount table: %w", err)
	}
	var points []string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			points = append(points, f[4])
		}
	}
	var errs []error
	for i := len(points) - 1; i >= 0; i-- {
		if err := unix.Unmount(points[i], 0); err != nil && !errors.Is(err, unix.EINVAL) {
			if err := unix.Unmount(points[i], unix.MNT_DETACH); err != nil {
				errs = append(errs, fmt.Errorf("kubeletrig: unmount %s: %w", points[i], err))
			}
		}
	}
	return errors.Join(errs...)
}
