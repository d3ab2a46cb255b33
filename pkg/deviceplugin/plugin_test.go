package deviceplugin_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/deviceplugin/kubelettest"
	"github.com/vgpu-project/vgpu/pkg/vgpu"
)

// The mixed host's config: an MI25 split in 4 VFs (SR-IOV), a T4 in 4
// mdevs (GRID), the L40S in 4 NVIDIA per-VF vGPUs.
const mixedGPUs = `  - address: "0000:03:00.0"
    profile: mi25-4g
  - address: "0000:3b:00.0"
    profile: t4-4q
  - all: true
    profile: l40s-12q
`

const (
	resMI25 = domain + "/mi25-4g"
	resT4   = domain + "/t4-4q"
	resL40S = domain + "/l40s-12q"
)

var bg = context.Background()

// vgpusOf lists the host's vGPUs of profile through vgpud's API.
func (n *node) vgpusOf(profile string) []api.VGPU {
	n.t.Helper()
	vs, err := n.c.VGPUs(bg)
	if err != nil {
		n.t.Fatal(err)
	}
	return slices.DeleteFunc(vs, func(v api.VGPU) bool { return v.Profile != profile })
}

func ids(vs []api.VGPU) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.ID
	}
	slices.Sort(out)
	return out
}

// TestRegistersEachCarvedProfile: one endpoint per profile carved here, on
// its own socket in the kubelet's directory, registered with the kubelet;
// its list is the profile's vGPUs by their ids (mdev UUIDs, VF
// addresses), healthy, each with its GPU's NUMA node.
func TestRegistersEachCarvedProfile(t *testing.T) {
	n := startMixed(t)
	for _, tc := range []struct {
		res, profile string
		kind         vgpu.Kind
		numa         int64
	}{
		{resMI25, "mi25-4g", vgpu.KindVF, 0},
		{resT4, "t4-4q", vgpu.KindMdev, 0},
		{resL40S, "l40s-12q", vgpu.KindNVIDIAVF, 1},
	} {
		vs := n.vgpusOf(tc.profile)
		if len(vs) != 4 || vs[0].Kind != string(tc.kind) {
			t.Fatalf("%s: host has %+v", tc.profile, vs)
		}
		n.kube.WaitList(tc.res, "its 4 vGPUs, healthy", kubelettest.AllHealthy(ids(vs)))
		st := n.kube.State()
		for _, d := range st.Lists[tc.res] {
			if d.Topology == nil || len(d.Topology.Nodes) != 1 || d.Topology.Nodes[0].ID != tc.numa {
				t.Errorf("%s: device %s has topology %v, want NUMA node %d", tc.res, d.ID, d.Topology, tc.numa)
			}
		}
		sock := st.Endpoints[tc.res]
		if fi, err := os.Stat(filepath.Join(n.kube.Dir(), sock)); err != nil || fi.Mode()&os.ModeSocket == 0 {
			t.Errorf("%s: endpoint %s is not a socket in the kubelet's directory: %v", tc.res, sock, err)
		}
	}
	if reg := n.kube.State().Registered; len(reg) != 3 {
		t.Errorf("registered %v, want the 3 carved profiles only (GVT-g is not in the config)", reg)
	}
}

// TestNoKubelet: without the kubelet's directory vgpud runs as before and
// says so once; when the kubelet comes, vgpud registers.
func TestNoKubelet(t *testing.T) {
	n := newNode(t, "mixed.yaml", mixedGPUs)
	n.run()
	n.waitLog("no kubelet device-plugin directory")
	if vs := n.vgpusOf("t4-4q"); len(vs) != 4 {
		t.Fatalf("vgpud does not serve its API as before: %+v", vs)
	}
	// The directory without a kubelet: the endpoints serve, registration
	// waits for kubelet.sock.
	if err := os.MkdirAll(n.kube.Dir(), 0o750); err != nil {
		t.Fatal(err)
	}
	n.waitLog("no kubelet listening yet")
	n.kube.Start()
	n.kube.Wait("the 3 resources registered once the kubelet started", func(s kubelettest.State) bool { return len(s.Registered) == 3 })
	if c := n.logCount("no kubelet device-plugin directory"); c != 1 {
		t.Errorf("the missing directory was logged %d times, want once:\n%s", c, n.log.String())
	}
}

// TestKubeletRestart: a restarted kubelet removes the plugins' sockets
// and makes kubelet.sock anew; vgpud serves on new sockets and registers
// again, and the new connection allocates.
func TestKubeletRestart(t *testing.T) {
	n := startMixed(t)
	current := func(s kubelettest.State) bool { return s.Current[resT4] && s.Current[resMI25] && s.Current[resL40S] }
	n.kube.Wait("registered", current)
	n.kube.Restart()
	n.kube.Wait("registered again", current)
	vs := n.vgpusOf("t4-4q")
	n.kube.WaitList(resT4, "listed on the new stream", kubelettest.AllHealthy(ids(vs)))
	if _, err := n.kube.Allocate(resT4, vs[0].ID); err != nil {
		t.Fatalf("Allocate after the kubelet's restart: %v", err)
	}
}

// TestKubeletSocketBeforeListen: the kubelet's net.Listen creates
// kubelet.sock at bind(), before listen(), so vgpud's first connect can be
// refused. vgpud tries again while that socket stays, at its own start and
// at the kubelet's restart, and says so once per resource, not per try.
func TestKubeletSocketBeforeListen(t *testing.T) {
	n := newNode(t, "mixed.yaml", mixedGPUs)
	current := func(s kubelettest.State) bool { return s.Current[resT4] && s.Current[resMI25] && s.Current[resL40S] }
	const retrying = "the kubelet's socket does not accept yet"

	// refused waits until every resource's connects to kubelet.sock were
	// refused (retrying, or, before the fix, giving up) for the nth time:
	// each registers on its own, and one let listen early is never refused.
	refused := func(nth int) {
		t.Helper()
		n.eachLogged(nth, "try kubelet.sock", retrying, "no kubelet listening yet")
	}
	// The kubelet restarts only once vgpud has its answers: a restart
	// during a Register makes that registration give up (the next
	// registers), which is not what this test is about.
	registered := func(nth int) {
		t.Helper()
		n.eachLogged(nth, "log its registration", "registered with the kubelet")
	}

	listen := n.kube.StartBound()
	n.run()
	refused(1)
	time.Sleep(100 * time.Millisecond) // room for several refused tries
	listen()
	n.kube.Wait("registered once the kubelet listened", current)
	registered(1)

	listen = n.kube.RestartBound()
	refused(2)
	listen()
	n.kube.Wait("registered again once the restarted kubelet listened", current)
	if c := n.logCount("no kubelet listening yet"); c != 0 {
		t.Errorf("vgpud gave up %d times on a kubelet.sock that was about to listen:\n%s", c, n.log.String())
	}
	for _, r := range []string{resT4, resMI25, resL40S} {
		if c := n.logLines(retrying, r); c != 2 {
			t.Errorf("%s: the retries were logged %d times, want once per start (2):\n%s", r, c, n.log.String())
		}
	}
}

// TestKubeletSocketRemovedWhileRefusing: a kubelet.sock that goes away
// before it accepts ends the retries; the next kubelet's socket registers.
func TestKubeletSocketRemovedWhileRefusing(t *testing.T) {
	n := newNode(t, "mixed.yaml", mixedGPUs)
	_ = n.kube.StartBound()
	n.run()
	n.waitLog("the kubelet's socket does not accept yet")
	if err := os.Remove(filepath.Join(n.kube.Dir(), "kubelet.sock")); err != nil {
		t.Fatal(err)
	}
	n.waitLog("no kubelet listening yet")
	n.kube.Start()
	n.kube.Wait("registered with the next kubelet", func(s kubelettest.State) bool {
		return s.Current[resT4] && s.Current[resMI25] && s.Current[resL40S]
	})
}

// TestVgpudRestart: a new vgpud registers again and lists what pods hold
// as theirs.
func TestVgpudRestart(t *testing.T) {
	n := startMixed(t)
	vs := n.listed("mi25-4g")
	if _, err := n.kube.Allocate(resMI25, vs[1].ID); err != nil {
		t.Fatal(err)
	}
	n.kube.SetPod("default", "vm", "compute", resMI25, vs[1].ID)
	n.restart()
	n.kube.Wait("registered again", func(s kubelettest.State) bool { return s.Registered[resMI25] == 2 })
	n.kube.WaitList(resMI25, "the pod's VF still listed, healthy", kubelettest.AllHealthy(ids(vs)))
	if _, err := n.kube.Allocate(resMI25, vs[1].ID); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("the pod's VF allocated again after the restart: %v", err)
	}
}

// TestRegisterRefused: a kubelet that refuses Register is logged, one line
// per resource; vgpud goes on serving its API.
func TestRegisterRefused(t *testing.T) {
	n := newNode(t, "mixed.yaml", mixedGPUs)
	n.kube.Refuse("resource name is not valid")
	n.start()
	n.waitLog("the kubelet refused the registration")
	n.waitLog(resT4)
	if _, err := n.c.Health(bg); err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{resMI25, resT4, resL40S} {
		n.waitLog("resource=" + r + " kubelet=")
		if c := n.logLines("the kubelet refused the registration", "resource="+r+" "); c != 1 {
			t.Errorf("%s: refusal logged %d times, want 1:\n%s", r, c, n.log.String())
		}
	}
}

// TestSecondVgpud: a socket something serves already (a second vgpud) is
// not taken over; that is said, and the resource is left to it.
func TestSecondVgpud(t *testing.T) {
	n := newNode(t, "mixed.yaml", mixedGPUs)
	n.kube.Start()
	// Another process's plugin socket for the T4's resource.
	sock := filepath.Join(n.kube.Dir(), "vgpud-"+strings.ReplaceAll(resT4, "/", "_")+".sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	n.run()
	n.waitLog("another process serves this device plugin socket")
	n.kube.Wait("the others registered", func(s kubelettest.State) bool { return s.Registered[resMI25] == 1 && s.Registered[resL40S] == 1 })
	if reg := n.kube.State().Registered; reg[resT4] != 0 {
		t.Errorf("the taken socket's resource was registered: %v", reg)
	}
	if _, err := os.Stat(sock); err != nil {
		t.Errorf("the other process's socket was removed: %v", err)
	}
}

// TestDirUnusable: a plugin directory vgpud cannot make its sockets in is
// one line per resource, once, and vgpud serves its API. (Root ignores
// directory modes, so a directory whose path leaves no room for the
// socket's name in a unix address stands for it: bind fails there.)
func TestDirUnusable(t *testing.T) {
	n := newNode(t, "mixed.yaml", mixedGPUs)
	long := filepath.Join(n.dir, strings.Repeat("d", 80-len(n.dir)))
	n.kube = kubelettest.New(t, long, n.kube.PodSocket())
	n.kube.Start() // kubelet.sock's name is short: it fits
	n.run()
	for _, r := range []string{resMI25, resT4, resL40S} {
		n.waitLog("cannot serve a resource to the kubelet\" resource=" + r)
	}
	n.kernelChanged() // one more sync: not logged again
	if _, err := n.c.Health(bg); err != nil {
		t.Fatal(err)
	}
	if c := n.logCount("cannot serve a resource to the kubelet"); c != 3 {
		t.Errorf("logged %d times, want once per resource:\n%s", c, n.log.String())
	}
	if reg := n.kube.State().Registered; len(reg) != 0 {
		t.Errorf("registered %v", reg)
	}
}
