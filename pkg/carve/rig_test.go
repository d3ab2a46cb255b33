package carve_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"syscall"
	"testing"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/internal/sysfstest"
	"github.com/vgpu-project/vgpu/pkg/carve"
	"github.com/vgpu-project/vgpu/pkg/pci"
)

// mustDo carves prof ("" = uncarve) with no options; an error ends the
// test.
func (r *rig) mustDo(t *testing.T, prof string) carve.Result {
	t.Helper()
	res, err := r.do(context.Background(), prof, carve.Options{})
	if err != nil {
		t.Fatalf("carve %q: %v\nplan:\n%s", prof, err, res.Plan)
	}
	return res
}

// newRigCarved is a rig on model carved to prof, with pins as the
// config's mdev-uuids.
func newRigCarved(t *testing.T, model, prof string, pins []string) *rig {
	t.Helper()
	r := newRig(t, model)
	if _, err := r.do(context.Background(), prof, carve.Options{MdevUUIDs: pins}); err != nil {
		t.Fatal(err)
	}
	return r
}

// hold opens the device node at path as a VM's QEMU does (for a VF, its
// VFIO group: pci.GroupDevicePath), so that it shows in use; the test's
// end closes it, if the test has not.
func hold(t *testing.T, k *simkernel.Kernel, path string) io.Closer {
	t.Helper()
	h, err := k.OpenDevice(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	return h
}

// checkSettled checks that carving prof ("" = uncarve) again, with no
// options, plans nothing and writes nothing; what names that carve.
func (r *rig) checkSettled(t *testing.T, what, prof string) {
	t.Helper()
	n := len(r.rec.Writes())
	res, err := r.do(context.Background(), prof, carve.Options{})
	if err != nil || !res.Plan.Empty() || len(r.rec.Writes()) != n {
		t.Fatalf("%s: %v; planned %d ops and wrote %d times:\n%s", what, err, len(res.Plan.Ops), len(r.rec.Writes())-n, res.Plan)
	}
}

// checkUnchanged checks that what (a refused or failed change) left the
// host's state, before it and after, as it was.
func checkUnchanged(t *testing.T, what string, before, after map[string]string) {
	t.Helper()
	if d := sysfstest.Diff(before, after); d != "" {
		t.Fatalf("%s changed the host:\n%s", what, d)
	}
}

// checkBlockedBy checks that err refuses what because vGPU vgpu is in
// use, and names no other.
func checkBlockedBy(t *testing.T, what string, err error, vgpu string) {
	t.Helper()
	var iu *carve.InUseError
	if !errors.As(err, &iu) || len(iu.Blocked) != 1 || iu.Blocked[0].VGPU != vgpu {
		t.Fatalf("%s with %s in use: err = %v, want InUseError for it only", what, vgpu, err)
	}
}

// checkRefusal checks that err is want, says say, in one line.
func checkRefusal(t *testing.T, err, want error, say string) {
	t.Helper()
	if !errors.Is(err, want) || !strings.Contains(err.Error(), say) {
		t.Fatalf("err = %v, want %v saying %q", err, want, say)
	}
	if strings.Contains(err.Error(), "\n") {
		t.Errorf("more than one line: %q", err)
	}
}

// refusal is a setup of a rig R under which a carve is refused with want,
// saying say.
type refusal[R any] struct {
	name  string
	setup func(t *testing.T, r R)
	want  error
	say   string
}

// stateRig is a rig that reads the whole host's state, sysfs and NVML.
type stateRig interface {
	do(ctx context.Context, prof string, opt carve.Options) (carve.Result, error)
	state(t *testing.T) map[string]string
}

// checkRefusals runs each case on a rig of its own (newRig): after its
// setup, the carve of prof is refused in one line naming gpu as the case
// says, and the host is as it was.
func checkRefusals[R stateRig](t *testing.T, newRig func(*testing.T) R, prof string, gpu pci.Address, cases []refusal[R]) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			tc.setup(t, r)
			before := r.state(t)
			_, err := r.do(context.Background(), prof, carve.Options{})
			checkRefusal(t, err, tc.want, tc.say)
			if !strings.Contains(err.Error(), gpu.String()) {
				t.Fatalf("err = %v, want it naming %s", err, gpu)
			}
			checkUnchanged(t, "the refused carve", before, r.state(t))
		})
	}
}

// changeWrites makes the change (prof with opt) on probe and returns the
// writes it made: the places a fault-injection test fails in turn.
func changeWrites(t *testing.T, probe *rig, prof string, opt carve.Options) []sysfstest.Write {
	t.Helper()
	from := len(probe.rec.Writes())
	if res, err := probe.do(context.Background(), prof, opt); err != nil {
		t.Fatalf("%v\nplan:\n%s", err, res.Plan)
	}
	return probe.rec.Writes()[from:]
}

// failWrite makes write i of writes fail with EIO on k; faults count
// writes from their injection on.
func failWrite(k *simkernel.Kernel, writes []sysfstest.Write, i int) {
	k.InjectFault(simkernel.Fault{Path: writes[i].Path, Nth: sysfstest.Nth(writes, i), Errno: syscall.EIO})
}

// checkUndone checks that a change failed by a fault at what, err, was
// undone: its undo worked and the host's state after is what it was
// before.
func checkUndone(t *testing.T, what string, err error, before, after map[string]string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: the change succeeded", what)
	}
	if errors.Is(err, carve.ErrUndo) {
		t.Fatalf("%s: undo failed: %v", what, err)
	}
	if d := sysfstest.Diff(before, after); d != "" {
		t.Fatalf("after a fault at %s the host changed:\n%s\nerror: %v", what, d, err)
	}
}
