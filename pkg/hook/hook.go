package hook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/vgpu-project/vgpu/pkg/domxml"
)

// Exit codes. libvirt treats any non-zero exit of a begin hook as a
// failure of the operation and shows the hook's stderr to the user.
const (
	ExitOK     = 0
	ExitFailed = 1
)

// DefaultTimeout bounds one agent call: libvirt holds the domain's job
// while the hook runs, and must not wait forever on a hung agent.
const DefaultTimeout = 30 * time.Second

// maxXML caps what the hook reads from stdin; a domain XML is kilobytes.
const maxXML = 16 << 20

// Agent is what the hook asks of vgpud. d is the domain as its XML says:
// UUID, name, request, and the request's vGPUs its hostdevs carry.
type Agent interface {
	// Ready makes d's vGPUs exist and marks them attached to d: the mdev
	// created with its UUID, the VF on vfio-pci, the NVIDIA type written;
	// a lease d holds on this host becomes the allocation (prepare/begin).
	Ready(ctx context.Context, d domxml.Domain) (Readied, error)
	// Release undoes Ready after d stopped, by the agent's policy (destroy
	// the mdev, clear the NVIDIA type, keep VFs bound) (release/end).
	Release(ctx context.Context, d domxml.Domain) (Released, error)
	// Lease reserves on this host, for a while, one vGPU of d's profile
	// for each of d's vGPUs, for a domain arriving by migration or restore
	// (migrate/begin, restore/begin). A domain that holds vGPUs of its
	// profile here already (a restore on the host it was saved on) is
	// pointed at those instead.
	Lease(ctx context.Context, d domxml.Domain) (Leased, error)
	// Probe answers as Lease would, with the vGPUs it would lease, and
	// leases nothing (a migration vgpuctl migrate --dry-run started).
	Probe(ctx context.Context, d domxml.Domain) (Leased, error)
}

// Readied is what Ready made ready: vGPU ids.
type Readied struct{ VGPUs []string }

// Released is what Release gave back: vGPU ids.
type Released struct{ VGPUs []string }

// Leased maps each of the domain's vGPU ids (the source host's) to the
// vGPU leased here. An mdev keeps its UUID (it derives from the domain);
// a VF gets this host's address.
type Leased struct {
	Moves   map[string]domxml.VGPU
	Expires time.Time
	// Free is how many vGPUs of the profile are free here (Probe only).
	Free int
}

// A probe's answer: the hook prints "vgpu: " and one of these, then the
// answer, and always fails the probe migration, so nothing moves whether
// it admits or refuses. vgpuctl finds the line in libvirt's error
// (ParseProbe).
const (
	ProbeAdmits  = "probe: admits: "
	ProbeRefuses = "probe: refuses: "
)

// ParseProbe finds a probe's answer in msg, libvirt's error for the
// probe migration: whether the destination admits the domain, and its
// answer; ok is false when msg has none (no vgpu hook answered).
func ParseProbe(msg string) (admits bool, answer string, ok bool) {
	_, rest, ok := strings.Cut(msg, "vgpu: probe: ")
	if !ok {
		return false, "", false
	}
	rest = strings.TrimSpace("probe: " + rest)
	if a, found := strings.CutPrefix(rest, ProbeAdmits); found {
		return true, a, true
	}
	if a, found := strings.CutPrefix(rest, ProbeRefuses); found {
		return false, a, true
	}
	return false, "", false
}

// Invocation is libvirt's argv, program name excluded.
type Invocation struct {
	Domain, Op, SubOp, Extra string
}

// ParseArgs reads libvirt's argv, program name excluded. libvirt always
// passes four arguments; EXTRA ("-" when unused) may be absent when an
// admin runs the hook by hand.
func ParseArgs(args []string) (Invocation, error) {
	if len(args) < 3 || len(args) > 4 {
		return Invocation{}, fmt.Errorf("got %d arguments, want DOMAIN OPERATION SUBOPERATION [EXTRA] as libvirt passes them", len(args))
	}
	inv := Invocation{Domain: args[0], Op: args[1], SubOp: args[2], Extra: "-"}
	if len(args) == 4 {
		inv.Extra = args[3]
	}
	return inv, nil
}

// Action is what the hook does for one invocation.
type Action int

const (
	Ignore Action = iota
	Ready
	Release
	Lease
)

// Action decides from the operation alone; unknown operations (newer
// libvirt) are ignored, never failed.
func (inv Invocation) Action() Action {
	switch inv.Op + "/" + inv.SubOp {
	case "prepare/begin":
		return Ready
	case "release/end":
		return Release
	case "migrate/begin", "restore/begin":
		return Lease
	}
	return Ignore
}

// Hook runs one invocation. Its zero value is not usable: use New.
type Hook struct {
	agent   Agent
	timeout time.Duration
}

// Option configures a Hook.
type Option func(*Hook)

// WithTimeout bounds each agent call (DefaultTimeout otherwise).
func WithTimeout(d time.Duration) Option { return func(h *Hook) { h.timeout = d } }

// New returns a Hook that asks agent.
func New(agent Agent, opts ...Option) *Hook {
	h := &Hook{agent: agent, timeout: DefaultTimeout}
	for _, o := range opts {
		o(h)
	}
	return h
}

// Run performs one invocation and returns the exit code. On failure it
// writes exactly one line to stderr, starting "vgpu: ".
//
// Run returns when ctx ends (SIGTERM), whatever the hook is doing: libvirt
// and an admin's kill must not wait for a parse of a hostile document.
func (h *Hook) Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	done := make(chan error, 1)
	out := &gate{w: stdout}
	go func() { done <- h.run(ctx, args, stdin, out) }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		out.close() // nothing half-written reaches libvirt after this
		err = fmt.Errorf("interrupted (%w); the domain is left to libvirt's own handling of a failed hook", context.Cause(ctx))
	}
	if err == nil {
		return ExitOK
	}
	// One line: libvirt puts it in an error message and a log line.
	fmt.Fprintln(stderr, "vgpu: "+strings.Join(strings.Fields(err.Error()), " "))
	return ExitFailed
}

func (h *Hook) run(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error {
	inv, err := ParseArgs(args)
	if err != nil {
		return err
	}
	act := inv.Action()
	if act == Ignore {
		return nil
	}
	doc, mentioned, err := readXML(stdin)
	if err != nil {
		return fmt.Errorf("cannot read the domain XML of %s on stdin: %w", inv.Domain, err)
	}
	// The fast path, before any limit: no mention of our namespace, no
	// request, whatever the document's size.
	if !mentioned {
		return nil
	}
	if len(doc) > maxXML {
		return fmt.Errorf("cannot read the domain XML of %s on stdin: it asks for vGPUs and is longer than %d MiB", inv.Domain, maxXML>>20)
	}
	d, err := domxml.Parse(doc)
	if err != nil {
		return fmt.Errorf("cannot read the domain XML of %s: %w", inv.Domain, err)
	}
	if d.Request == nil {
		return nil
	}
	if d.Name == "" {
		d.Name = inv.Domain
	}
	ctx, cancel := context.WithTimeout(ctx, h.timeout)
	defer cancel()
	r := d.Request
	switch act {
	case Ready:
		if err := complete(d); err != nil {
			return fmt.Errorf("cannot make %d x %s ready for %s: %w", r.Count, r.Profile, d.Name, err)
		}
		if _, err := h.agent.Ready(ctx, d); err != nil {
			return fmt.Errorf("cannot make %d x %s ready for %s: %w", r.Count, r.Profile, d.Name, agentErr(ctx, err))
		}
	case Release:
		if len(d.Hostdevs) == 0 {
			return nil
		}
		if _, err := h.agent.Release(ctx, d); err != nil {
			return fmt.Errorf("cannot release the %s vGPUs of %s: %w", r.Profile, d.Name, agentErr(ctx, err))
		}
	case Lease:
		if o := r.Origin; o != nil && o.Probe {
			return h.probe(ctx, inv, d)
		}
		return h.lease(ctx, inv, d, doc, stdout)
	}
	return nil
}

// complete checks that the domain carries a hostdev for every vGPU it
// asks for: the hook cannot add one at prepare, and a VM silently started
// with fewer GPUs than asked is worse than one that does not start.
func complete(d domxml.Domain) error {
	r := d.Request
	if len(d.Hostdevs) == r.Count {
		return nil
	}
	var missing []string
	for _, v := range d.Missing() {
		missing = append(missing, v.ID())
	}
	why := fmt.Sprintf("%d of them are not assigned", r.Count-len(r.VGPUs))
	if len(missing) > 0 {
		why = "no hostdev carries " + strings.Join(missing, ", ")
	}
	return fmt.Errorf("the domain has hostdevs for %d of them (%s); repair it with vgpuctl detach %s, then vgpuctl attach %s --profile %s --count %d",
		len(d.Hostdevs), why, d.Name, d.Name, r.Profile, r.Count)
}

// lease asks for this host's vGPUs and prints the domain XML pointed at
// them; libvirt starts the domain from what the hook prints (nothing
// printed: the XML as it was).
func (h *Hook) lease(ctx context.Context, inv Invocation, d domxml.Domain, doc []byte, stdout io.Writer) error {
	r := d.Request
	what := fmt.Sprintf("cannot lease %d x %s on this host for %s (%s)", len(d.Hostdevs), r.Profile, d.Name, inv.Op)
	if len(d.Hostdevs) == 0 {
		return nil
	}
	l, err := h.agent.Lease(ctx, d)
	if err != nil {
		return fmt.Errorf("%s: %w", what, agentErr(ctx, err))
	}
	for _, v := range d.Hostdevs {
		if _, ok := l.Moves[v.ID()]; !ok {
			return fmt.Errorf("%s: vgpud leased nothing for %s", what, v.ID())
		}
	}
	out, err := domxml.Rewrite(doc, l.Moves)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if string(out) == string(doc) {
		return nil
	}
	if _, err := stdout.Write(out); err != nil {
		return fmt.Errorf("%s: write the domain XML to stdout: %w", what, err)
	}
	return nil
}

// probe answers a probe migration with what a lease would get here, and
// always fails it: a probe must never move the domain.
func (h *Hook) probe(ctx context.Context, inv Invocation, d domxml.Domain) error {
	r := d.Request
	if inv.Op != "migrate" {
		return fmt.Errorf("%sa probe is a migration, not a %s", ProbeRefuses, inv.Op)
	}
	if len(d.Hostdevs) == 0 {
		return fmt.Errorf("%s%s carries no hostdev for its %d x %s", ProbeRefuses, d.Name, r.Count, r.Profile)
	}
	l, err := h.agent.Probe(ctx, d)
	if err != nil {
		return fmt.Errorf("%s%w", ProbeRefuses, agentErr(ctx, err))
	}
	var ids []string
	for _, v := range d.Hostdevs {
		to, ok := l.Moves[v.ID()]
		if !ok {
			return fmt.Errorf("%svgpud would lease nothing for %s", ProbeRefuses, v.ID())
		}
		ids = append(ids, to.ID())
	}
	return fmt.Errorf("%s%d x %s for %s would be leased here (%s; %d free); nothing was leased",
		ProbeAdmits, len(ids), r.Profile, d.Name, strings.Join(ids, ", "), l.Free)
}

// agentErr says a timeout plainly.
func agentErr(ctx context.Context, err error) error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("vgpud did not answer in time: %w", err)
	}
	return err
}

// readXML reads the whole of stdin, keeping at most maxXML+1 bytes, and
// says whether our namespace appears anywhere in it. Reading to the end
// leaves libvirt no broken pipe however long the document is.
func readXML(r io.Reader) (doc []byte, mentioned bool, err error) {
	ns := []byte(domxml.Namespace)
	var buf bytes.Buffer
	tail := make([]byte, 0, len(ns)) // the end of the bytes not kept, for a match across reads
	chunk := make([]byte, 64<<10)
	for {
		n, rerr := r.Read(chunk)
		if n > 0 {
			p := chunk[:n]
			if keep := maxXML + 1 - buf.Len(); keep > 0 {
				buf.Write(p[:min(keep, len(p))])
			}
			if !mentioned {
				// The stream's last bytes before this read, then this read.
				win := append(append(make([]byte, 0, len(tail)+len(p)), tail...), p...)
				mentioned = bytes.Contains(win, ns)
				tail = append(tail[:0], win[len(win)-min(len(win), len(ns)-1):]...)
			}
		}
		if errors.Is(rerr, io.EOF) {
			return buf.Bytes(), mentioned, nil
		}
		if rerr != nil {
			return nil, false, rerr
		}
	}
}

// gate is a writer that can be shut: after close, writes are dropped.
type gate struct {
	mu     sync.Mutex
	w      io.Writer
	closed bool
}

func (g *gate) Write(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return 0, errors.New("the hook was interrupted")
	}
	return g.w.Write(p)
}

func (g *gate) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
}
