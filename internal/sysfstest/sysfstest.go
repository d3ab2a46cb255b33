package sysfstest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"

	simtools "github.com/vgpu-project/vgpu/internal/sim/tools"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// Roots a snapshot walks: every place the kernel shows device state.
var roots = []string{"/sys/devices", "/sys/bus", "/sys/class", "/sys/kernel/iommu_groups", "/dev/vfio"}

// Snapshot maps every path under the kernel's device trees to what it
// shows: "-> target" for links, the content for readable files, "dir" for
// directories. Write-only attributes and counters that read EACCES are
// skipped. Two equal snapshots mean the host looks the same to any reader.
func Snapshot(f sysfs.FS) (map[string]string, error) {
	out := map[string]string{}
	var walk func(string) error
	walk = func(p string) error {
		fi, err := f.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("lstat %s: %w", p, err)
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			t, err := f.Readlink(p)
			if err != nil {
				return fmt.Errorf("readlink %s: %w", p, err)
			}
			out[p] = "-> " + t
		case fi.IsDir():
			out[p] = "dir"
			ents, err := f.ReadDir(p)
			if err != nil {
				return fmt.Errorf("readdir %s: %w", p, err)
			}
			for _, e := range ents {
				if err := walk(path.Join(p, e.Name())); err != nil {
					return err
				}
			}
		case fi.Mode()&fs.ModeDevice != 0 || fi.Mode()&fs.ModeCharDevice != 0 || strings.HasPrefix(p, "/dev/vfio/"):
			// Never read a VFIO node: over FUSE it is a regular file, and one
			// held open by a VFIO user answers EBUSY.
			out[p] = "device"
		default:
			if fi.Mode().Perm()&0o444 == 0 {
				out[p] = "write-only"
				return nil
			}
			b, err := f.ReadFile(p)
			if errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.EIO) {
				out[p] = "unreadable"
				return nil
			}
			if err != nil {
				return fmt.Errorf("read %s: %w", p, err)
			}
			out[p] = string(b)
		}
		return nil
	}
	for _, r := range roots {
		if err := walk(r); err != nil {
			return nil, err
		}
	}
	return normalizeGroups(out), nil
}

// groupRef finds IOMMU group numbers in paths and link targets.
var groupRef = regexp.MustCompile(`(iommu_groups/|^/dev/vfio/)([0-9]+)`)

// normalizeGroups replaces IOMMU group numbers with the devices each group
// holds. The kernel numbers groups with the lowest free id when a device
// appears, so a VF or mdev that is removed and created again (an undo) may
// get another number on a real kernel too; its membership is what matters.
func normalizeGroups(snap map[string]string) map[string]string {
	members := map[string][]string{}
	for p := range snap {
		rest, ok := strings.CutPrefix(p, "/sys/kernel/iommu_groups/")
		if !ok {
			continue
		}
		if n, dev, ok := strings.Cut(rest, "/devices/"); ok && !strings.Contains(dev, "/") {
			members[n] = append(members[n], dev)
		}
	}
	label := func(n string) string {
		m := members[n]
		if len(m) == 0 {
			return n
		}
		sort.Strings(m)
		return "{" + strings.Join(m, ",") + "}"
	}
	rewrite := func(s string) string {
		return groupRef.ReplaceAllStringFunc(s, func(m string) string {
			sub := groupRef.FindStringSubmatch(m)
			return sub[1] + label(sub[2])
		})
	}
	out := make(map[string]string, len(snap))
	for p, v := range snap {
		if strings.HasPrefix(v, "-> ") {
			v = rewrite(v)
		}
		out[rewrite(p)] = v
	}
	return out
}

// Diff describes how two snapshots differ, one line per path; "" if equal.
func Diff(before, after map[string]string) string {
	var lines []string
	for p, v := range before {
		w, ok := after[p]
		switch {
		case !ok:
			lines = append(lines, fmt.Sprintf("- %s (%q) is gone", p, short(v)))
		case w != v:
			lines = append(lines, fmt.Sprintf("~ %s: %q -> %q", p, short(v), short(w)))
		}
	}
	for p, w := range after {
		if _, ok := before[p]; !ok {
			lines = append(lines, fmt.Sprintf("+ %s (%q) appeared", p, short(w)))
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func short(s string) string {
	if len(s) > 60 {
		return s[:60] + "..."
	}
	return s
}

// Write is one recorded write.
type Write struct {
	Path string
	Data string
	Err  error
	// Tool is the vendor tool that made the write, "" for the caller.
	Tool string
}

// Recorder is an FS that passes everything through and records writes and
// device opens.
type Recorder struct {
	sysfs.FS
	// AfterWrite, when set before use, hears each write once it is done,
	// in the writer's goroutine: a test that panics there stops the
	// writer dead after that write, as a kill -9 would.
	AfterWrite func(Write)
	mu         sync.Mutex
	writes     []Write
	opens      []string
}

var _ sysfs.FS = (*Recorder)(nil)

// Record wraps f.
func Record(f sysfs.FS) *Recorder { return &Recorder{FS: f} }

// WriteFile implements sysfs.FS.
func (r *Recorder) WriteFile(name string, data []byte) error { return r.write(name, data, "") }

func (r *Recorder) write(name string, data []byte, tool string) error {
	err := r.FS.WriteFile(name, data)
	r.record(Write{Path: name, Data: string(data), Err: err, Tool: tool})
	return err
}

func (r *Recorder) record(w Write) {
	r.mu.Lock()
	r.writes = append(r.writes, w)
	r.mu.Unlock()
	if r.AfterWrite != nil {
		r.AfterWrite(w)
	}
}

// toolFS is the recorder as a vendor tool writes through it.
type toolFS struct {
	*Recorder
	tool string
}

func (t toolFS) WriteFile(name string, data []byte) error { return t.write(name, data, t.tool) }

// RunTool implements sysfs.ToolRunner with the simulated vendor tools,
// acting through r: their writes are recorded (and meet r's faults) as a
// trace of the real tool's would be.
func (r *Recorder) RunTool(ctx context.Context, tool string, args ...string) ([]byte, error) {
	switch tool {
	case sysfs.ToolModprobe:
		// Modules load in the kernel, not through sysfs.
		if k, ok := r.FS.(sysfs.ToolRunner); ok {
			return k.RunTool(ctx, tool, args...)
		}
	case sysfs.ToolAMDSMI:
		// amd-smi reaches new GIM through its own device: a change is
		// recorded as a write to the tool's path, where the fake kernel
		// counts it and its faults fail it.
		if k, ok := r.FS.(sysfs.ToolRunner); ok {
			out, err := k.RunTool(ctx, tool, args...)
			if len(args) > 0 && args[0] == "set" {
				r.record(Write{Path: sysfs.DefaultToolPaths()[tool], Data: strings.Join(args, " "), Err: err, Tool: tool})
			}
			return out, err
		}
	}
	var out bytes.Buffer
	if code := simtools.Run(ctx, toolFS{r, tool}, tool, args, &out); code != 0 {
		return out.Bytes(), fmt.Errorf("%s %v: exit status %d: %s", tool, args, code, sysfs.LastLine(out.Bytes()))
	}
	return out.Bytes(), nil
}

// OpenDevice implements sysfs.FS.
func (r *Recorder) OpenDevice(name string) (io.Closer, error) {
	r.mu.Lock()
	r.opens = append(r.opens, name)
	r.mu.Unlock()
	return r.FS.OpenDevice(name)
}

// Opens returns the device nodes opened so far, in order.
func (r *Recorder) Opens() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.opens...)
}

// Crash is what a test panics with to stop the code under test dead at a
// step, as a kill -9 would: no undo, no deferred write, only what is done.
type Crash struct{ Step string }

// Crashed runs f and reports whether a Crash stopped it, and at which
// step; any other panic goes on.
func Crashed(f func()) (step string, crashed bool) {
	defer func() {
		if p := recover(); p != nil {
			c, ok := p.(Crash)
			if !ok {
				panic(p)
			}
			step, crashed = c.Step, true
		}
	}()
	f()
	return "", false
}

// CrashAfter makes the n-th write through r from now on panic with a
// Crash once it is done (AfterWrite).
func (r *Recorder) CrashAfter(n int) {
	seen := 0
	r.AfterWrite = func(w Write) {
		if seen++; seen == n {
			r.AfterWrite = nil
			panic(Crash{Step: fmt.Sprintf("write %s <- %q", w.Path, w.Data)})
		}
	}
}

// Writes returns the writes so far, in order.
func (r *Recorder) Writes() []Write {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Write(nil), r.writes...)
}

// Nth is how many writes to w[i].Path precede and include index i: the n
// to give a fault injector to hit exactly that write.
func Nth(w []Write, i int) int {
	n := 0
	for j := 0; j <= i; j++ {
		if w[j].Path == w[i].Path {
			n++
		}
	}
	return n
}

// EnableVFs gives the PF at pf VFs as its vendor does: NVIDIA's
// sriov-manage for a PF on nvidia, which enables all of them (the driver
// refuses sriov_numvfs), else n written to sriov_numvfs.
func EnableVFs(f sysfs.FS, pf string, n int) error {
	dev := sysfs.PCIDevices + "/" + pf
	if t, err := f.Readlink(dev + "/driver"); err == nil && path.Base(t) == "nvidia" {
		out, err := sysfs.RunTool(context.Background(), f, sysfs.ToolSriovManage, "-e", pf)
		if err != nil {
			return fmt.Errorf("enable the VFs of %s: %w: %s", pf, err, out)
		}
		return nil
	}
	return f.WriteFile(dev+"/sriov_numvfs", []byte(fmt.Sprint(n)))
}

// Access is one call through a Counter: its operation and path.
type Access struct{ Op, Path string }

// FixedTypeReads counts the accesses in as to an mdev type's attributes
// that its parent's driver fixes (name, description, device_api): what
// an mdev.TypeCache should read once per registration of the parent.
func FixedTypeReads(as []Access) int {
	n := 0
	for _, a := range as {
		for _, attr := range []string{"/name", "/description", "/device_api"} {
			if strings.HasSuffix(a.Path, attr) {
				n++
			}
		}
	}
	return n
}

// Counter is an FS that passes everything through and records every
// access (reads, writes, stats, device opens, vendor tool runs): what a
// caller costs a kernel served over FUSE, where each is a round trip.
type Counter struct {
	sysfs.FS
	mu  sync.Mutex
	log []Access
}

var _ sysfs.FS = (*Counter)(nil)

// Count wraps f.
func Count(f sysfs.FS) *Counter { return &Counter{FS: f} }

func (c *Counter) note(op, name string) {
	c.mu.Lock()
	c.log = append(c.log, Access{op, name})
	c.mu.Unlock()
}

// ReadFile implements sysfs.FS.
func (c *Counter) ReadFile(name string) ([]byte, error) {
	c.note("read", name)
	return c.FS.ReadFile(name)
}

// WriteFile implements sysfs.FS.
func (c *Counter) WriteFile(name string, data []byte) error {
	c.note("write", name)
	return c.FS.WriteFile(name, data)
}

// ReadDir implements sysfs.FS.
func (c *Counter) ReadDir(name string) ([]fs.DirEntry, error) {
	c.note("readdir", name)
	return c.FS.ReadDir(name)
}

// Readlink implements sysfs.FS.
func (c *Counter) Readlink(name string) (string, error) {
	c.note("readlink", name)
	return c.FS.Readlink(name)
}

// Lstat implements sysfs.FS.
func (c *Counter) Lstat(name string) (fs.FileInfo, error) {
	c.note("lstat", name)
	return c.FS.Lstat(name)
}

// Stat implements sysfs.FS.
func (c *Counter) Stat(name string) (fs.FileInfo, error) {
	c.note("stat", name)
	return c.FS.Stat(name)
}

// OpenDevice implements sysfs.FS.
func (c *Counter) OpenDevice(name string) (io.Closer, error) {
	c.note("open", name)
	return c.FS.OpenDevice(name)
}

// RunTool implements sysfs.ToolRunner through the wrapped FS; the tool's
// own accesses are not counted.
func (c *Counter) RunTool(ctx context.Context, tool string, args ...string) ([]byte, error) {
	c.note("tool", tool)
	return sysfs.RunTool(ctx, c.FS, tool, args...)
}

// Take returns the accesses since the last Take and starts a new count.
func (c *Counter) Take() []Access {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.log
	c.log = nil
	return l
}
