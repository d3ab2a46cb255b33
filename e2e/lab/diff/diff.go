// Package diff is the lab's differential test: one scripted sequence of
// sysfs and /dev/vfio operations (Sequence), run by Run against any
// sysfs.FS — the real kernel in the lab guest (sysfs.NewOS("/"), through
// e2e/lab/cmd/labprobe) and the fake kernel (internal/sim/kernel) with the
// equivalent host (Host) — giving one observation per step. Compare lists
// the steps where the two disagree: each one is a bug in the fake.
//
// The lab's devices: an igb PF (Intel 82576, 8086:10c9) at 0000:01:00.0, a
// QEMU NVMe PF (1b36:0010) at 0000:02:00.0, and the kernel's mbochs and
// mtty sample mdev parents. IOMMU group numbers differ between the two
// kernels (the lab has more devices), so steps name a device and the
// observation says whether its group, and its /dev/vfio node, exist.
package diff

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// Op is what a step does.
type Op string

const (
	// Read an attribute: its content, trimmed, or the errno.
	Read Op = "read"
	// Write Data to an attribute in one write(2): "ok" or the errno.
	Write Op = "write"
	// Link: the base name of a symlink's target, "absent" when missing.
	Link Op = "link"
	// Exists: "yes" or "no" (Lstat).
	Exists Op = "exists"
	// List: the entries of Path whose names start with Data, space separated.
	List Op = "list"
	// Group: whether the device (a PCI address or an mdev UUID in Path)
	// has an IOMMU group and a /dev/vfio node: "group vfio", "group", "none".
	Group Op = "group"
	// Open the device's /dev/vfio group node and keep it open: "ok" or errno.
	Open Op = "open"
	// Close the node Open opened for the device.
	Close Op = "close"
	// Start writes Data to Path in the background: "started".
	Start Op = "start"
	// Pending: "pending" while the background write runs, else its result.
	Pending Op = "pending"
	// Wait for the background write: its result ("ok" or the errno).
	Wait Op = "wait"
	// Settle waits (up to 10 s) until the device in Path has no driver, or
	// the driver named by Data: "unbound" / the driver's name.
	Settle Op = "settle"
)

// Step is one operation of the sequence.
type Step struct {
	Op   Op     `json:"op"`
	Path string `json:"path"`
	Data string `json:"data,omitempty"`
	// Why names the kernel reaction the step shows (the fake's claims,
	// internal/sim/kernel/doc.go).
	Why string `json:"why,omitempty"`
}

func (s Step) String() string {
	if s.Data != "" {
		return fmt.Sprintf("%s %s %q", s.Op, s.Path, s.Data)
	}
	return fmt.Sprintf("%s %s", s.Op, s.Path)
}

// Observation is what one step saw.
type Observation struct {
	Step Step   `json:"step"`
	Got  string `json:"got"`
}

// ErrnoName is the errno's name ("EBUSY"), or err's text when it carries
// none.
func ErrnoName(err error) string {
	var e syscall.Errno
	if errors.As(err, &e) {
		if n := unix.ErrnoName(e); n != "" {
			return n
		}
		return "errno " + strconv.Itoa(int(e))
	}
	return "error: " + err.Error()
}

// DefaultPendingAfter is how long a background write must stay blocked to count as
// "pending": long enough for a TCG guest to finish a write that does not
// block (disabling VFs alone sleeps 1 s in the kernel).
const DefaultPendingAfter = 3 * time.Second

// Opener holds a device the way a VFIO user (QEMU) does: devDir is the
// device's sysfs directory, name its name in the group (PCI address or mdev
// UUID), group its IOMMU group number.
type Opener func(devDir, name, group string) (io.Closer, error)

// Config tunes a Run.
type Config struct {
	// Open holds devices for the Open steps; nil opens the group's
	// /dev/vfio node with the FS's OpenDevice, which is how the fake kernel
	// models a VFIO user.
	Open Opener
	// PendingAfter is how long a background write must stay blocked to
	// count as "pending"; 0 means DefaultPendingAfter, which a TCG guest
	// needs. The fake kernel blocks for real, so a short wait suffices.
	PendingAfter time.Duration
}

// Run executes steps in order against f and returns one observation per
// step. It fails only when the sequence itself is wrong (a Close without
// an Open, a Wait without a Start); every kernel answer is an observation.
func Run(f sysfs.FS, steps []Step, cfg Config) ([]Observation, error) {
	if cfg.Open == nil {
		cfg.Open = func(_, _, group string) (io.Closer, error) { return f.OpenDevice(sysfs.VFIODev + "/" + group) }
	}
	if cfg.PendingAfter == 0 {
		cfg.PendingAfter = DefaultPendingAfter
	}
	r := runner{f: f, opener: cfg.Open, pendingAfter: cfg.PendingAfter, open: map[string]io.Closer{}}
	defer r.closeAll()
	out := make([]Observation, 0, len(steps))
	for i, s := range steps {
		got, err := r.step(s)
		if err != nil {
			return out, fmt.Errorf("step %d (%s): %w", i, s, err)
		}
		out = append(out, Observation{Step: s, Got: got})
	}
	return out, nil
}

type runner struct {
	f            sysfs.FS
	opener       Opener
	pendingAfter time.Duration
	open         map[string]io.Closer
	bg           chan error // the background write, while one runs
	done         *error     // its result once Pending saw it finish
}

func (r *runner) closeAll() {
	for _, c := range r.open {
		_ = c.Close()
	}
	if r.bg != nil && r.done == nil {
		<-r.bg
	}
}

func result(err error) string {
	if err == nil {
		return "ok"
	}
	return ErrnoName(err)
}

func (r *runner) step(s Step) (string, error) {
	switch s.Op {
	case Read:
		b, err := r.f.ReadFile(s.Path)
		if err != nil {
			return ErrnoName(err), nil
		}
		return strings.TrimSpace(string(b)), nil
	case Write:
		return result(r.f.WriteFile(s.Path, []byte(s.Data))), nil
	case Link:
		t, err := r.f.Readlink(s.Path)
		if errors.Is(err, fs.ErrNotExist) {
			return "absent", nil
		}
		if err != nil {
			return ErrnoName(err), nil
		}
		return path.Base(t), nil
	case Exists:
		_, err := r.f.Lstat(s.Path)
		switch {
		case err == nil:
			return "yes", nil
		case errors.Is(err, fs.ErrNotExist):
			return "no", nil
		}
		return ErrnoName(err), nil
	case List:
		ents, err := r.f.ReadDir(s.Path)
		if err != nil {
			return ErrnoName(err), nil
		}
		var names []string
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), s.Data) {
				names = append(names, e.Name())
			}
		}
		slices.Sort(names)
		if len(names) == 0 {
			return "(none)", nil
		}
		return strings.Join(names, " "), nil
	case Group:
		n, ok, err := r.group(s.Path)
		if err != nil {
			return ErrnoName(err), nil
		}
		if !ok {
			return "none", nil
		}
		if _, err := r.f.Lstat(sysfs.VFIODev + "/" + n); err == nil {
			return "group vfio", nil
		}
		return "group", nil
	case Open:
		if _, dup := r.open[s.Path]; dup {
			return "", fmt.Errorf("%s is already open", s.Path)
		}
		n, ok, err := r.group(s.Path)
		if err != nil {
			return ErrnoName(err), nil
		}
		if !ok {
			return "no group", nil
		}
		c, err := r.opener(s.Path, path.Base(s.Path), n)
		if err != nil {
			return ErrnoName(err), nil
		}
		r.open[s.Path] = c
		return "ok", nil
	case Close:
		c, ok := r.open[s.Path]
		if !ok {
			return "", fmt.Errorf("%s is not open", s.Path)
		}
		delete(r.open, s.Path)
		return result(c.Close()), nil
	case Start:
		if r.bg != nil {
			return "", errors.New("a background write is already running")
		}
		r.bg, r.done = make(chan error, 1), nil
		go func(p string, data []byte) { r.bg <- r.f.WriteFile(p, data) }(s.Path, []byte(s.Data))
		return "started", nil
	case Pending:
		if r.bg == nil {
			return "", errors.New("no background write")
		}
		if r.done != nil {
			return result(*r.done), nil
		}
		select {
		case err := <-r.bg:
			r.done = &err
			return result(err), nil
		case <-time.After(r.pendingAfter):
			return "pending", nil
		}
	case Wait:
		if r.bg == nil {
			return "", errors.New("no background write")
		}
		var err error
		if r.done != nil {
			err = *r.done
		} else {
			select {
			case err = <-r.bg:
			case <-time.After(60 * time.Second):
				return "still blocked after 60 s", nil
			}
		}
		r.bg, r.done = nil, nil
		return result(err), nil
	case Settle:
		deadline := time.Now().Add(10 * time.Second)
		for {
			t, err := r.f.Readlink(s.Path + "/driver")
			got := "unbound"
			if err == nil {
				got = path.Base(t)
			} else if !errors.Is(err, fs.ErrNotExist) {
				return ErrnoName(err), nil
			}
			if got == s.Data || (s.Data == "" && got == "unbound") || time.Now().After(deadline) {
				return got, nil
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return "", fmt.Errorf("unknown op %q", s.Op)
}

// group finds the IOMMU group number of a device path (PCI device or mdev).
func (r *runner) group(dev string) (string, bool, error) {
	t, err := r.f.Readlink(dev + "/iommu_group")
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	return path.Base(t), true, nil
}

// Difference is a step where the fake and the real kernel disagree.
type Difference struct {
	Index int    `json:"index"`
	Step  Step   `json:"step"`
	Real  string `json:"real"`
	Fake  string `json:"fake"`
}

func (d Difference) String() string {
	why := ""
	if d.Step.Why != "" {
		why = " [" + d.Step.Why + "]"
	}
	return fmt.Sprintf("step %d: %s: real kernel %q, fake %q%s", d.Index, d.Step, d.Real, d.Fake, why)
}

// Compare lists the differences between the real and the fake runs of one
// sequence; a run cut short shows as differences on the missing steps.
func Compare(real, fake []Observation) []Difference {
	var out []Difference
	for i := range max(len(real), len(fake)) {
		var r, f Observation
		r.Got, f.Got = "(not run)", "(not run)"
		if i < len(real) {
			r = real[i]
		}
		if i < len(fake) {
			f = fake[i]
		}
		step := r.Step
		if i >= len(real) {
			step = f.Step
		}
		if r.Got != f.Got {
			out = append(out, Difference{Index: i, Step: step, Real: r.Got, Fake: f.Got})
		}
	}
	return out
}
