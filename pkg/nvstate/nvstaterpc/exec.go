package nvstaterpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-project/vgpu/internal/helperbin"
)

// HelperName is the program that loads NVIDIA's NVML for vgpud and vgpuctl,
// which are static (NVML is a C library); HelperEnv overrides where it is.
const (
	HelperName = "vgpu-nvml"
	HelperEnv  = "VGPU_NVML_HELPER"
)

const (
	// helperTimeout bounds one call to the helper: a MIG mode change or a
	// GPU instance can take the driver seconds, and a call stuck in the
	// driver longer than this gets its helper killed, not vgpud.
	helperTimeout = 2 * time.Minute
	// helperIdle is how long a helper without calls lives: NVML's pages are
	// mapped only while it is in use, and starting it again costs a few ms.
	helperIdle = 30 * time.Second
	// helperGrace is how long a helper has to exit once its socket closes.
	helperGrace = 2 * time.Second
)

// Helper returns a Client whose calls go to vgpu-nvml, found at the first
// call ($VGPU_NVML_HELPER, beside this executable, ../libexec/vgpu/) and
// run with --library library when that is set.
func Helper(library string) *Client {
	var args []string
	if library != "" {
		args = append(args, "--library", library)
	}
	find := func() (string, error) { return helperbin.Find(HelperName, HelperEnv) }
	return execClient(HelperName, find, args, os.Stderr, helperIdle, helperTimeout)
}

// Exec returns a Client whose calls go to the program at path, run with
// args and serving Handler on its file descriptor 3 (ServeConn). It starts
// at the first call; calls share it one at a time; it stops after
// helperIdle without calls and starts again at the next. Its stderr is
// stderr.
func Exec(path string, args []string, stderr io.Writer) *Client {
	return execClient(path, func() (string, error) { return path, nil }, args, stderr, helperIdle, helperTimeout)
}

func execClient(name string, find func() (string, error), args []string, stderr io.Writer, idle, timeout time.Duration) *Client {
	if _, ok := stderr.(*os.File); !ok {
		// An old helper may still write while a new one starts.
		stderr = &lockedWriter{w: stderr}
	}
	h := &helperProc{find: find, args: args, stderr: stderr}
	return &Client{
		what: "NVML's helper " + name,
		http: &http.Client{Transport: &http.Transport{
			DialContext:     h.dial,
			MaxConnsPerHost: 1, // one helper, one call at a time
			IdleConnTimeout: idle,
		}},
		timeout: timeout,
	}
}

// helperProc starts a helper per connection the transport opens.
type helperProc struct {
	find   func() (string, error)
	args   []string
	stderr io.Writer
}

// startError is a helper that could not be found or started.
type startError struct{ err error }

func (e startError) Error() string { return e.err.Error() }
func (e startError) Unwrap() error { return e.err }

func (h *helperProc) dial(context.Context, string, string) (net.Conn, error) {
	c, err := h.start()
	if err != nil {
		return nil, startError{err}
	}
	return c, nil
}

func (h *helperProc) start() (net.Conn, error) {
	path, err := h.find()
	if nf := (*helperbin.NotFoundError)(nil); errors.As(err, &nf) {
		return nil, fmt.Errorf("NVML is loaded by its helper, and %w", err)
	} else if err != nil {
		return nil, err
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("start %s: socket pair: %w", path, err)
	}
	mine, theirs := os.NewFile(uintptr(fds[0]), "nvml"), os.NewFile(uintptr(fds[1]), "nvml")
	defer theirs.Close()
	defer mine.Close() // FileConn dups it
	// Not bound to the dial's context: the helper outlives the call that
	// started it.
	cmd := exec.Command(path, h.args...)
	cmd.ExtraFiles = []*os.File{theirs}
	cmd.Stderr = h.stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start NVML's helper: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	c, err := net.FileConn(mine)
	if err != nil {
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("start %s: connect: %w", path, err)
	}
	return &helperConn{Conn: c, proc: cmd.Process, done: done}, nil
}

// helperConn is the socket to one helper; closing it ends the helper.
type helperConn struct {
	net.Conn
	proc *os.Process
	done chan struct{}
	once sync.Once
}

func (c *helperConn) Close() error {
	err := c.Conn.Close()
	// The helper exits when its socket closes; one stuck in the driver (a
	// call that timed out) is killed.
	c.once.Do(func() {
		go func() {
			select {
			case <-c.done:
			case <-time.After(helperGrace):
				_ = c.proc.Kill()
			}
		}()
	})
	return err
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// ServeConn serves h on the one connection c until the other side closes
// it: the helper's side of Exec.
func ServeConn(c net.Conn, h http.Handler) error {
	ln := &oneConn{c: c, closed: make(chan struct{})}
	srv := &http.Server{Handler: h, ConnState: func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			ln.Close()
		}
	}}
	if err := srv.Serve(ln); !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("serve NVML on the helper's socket: %w", err)
	}
	return nil
}

// oneConn is a listener of one connection, closed when it closes.
type oneConn struct {
	mu     sync.Mutex
	c      net.Conn
	closed chan struct{}
	once   sync.Once
}

func (l *oneConn) Accept() (net.Conn, error) {
	l.mu.Lock()
	c := l.c
	l.c = nil
	l.mu.Unlock()
	if c != nil {
		return c, nil
	}
	<-l.closed
	return nil, net.ErrClosed
}

func (l *oneConn) Close() error {
	l.once.Do(func() { close(l.closed) })
	return nil
}

func (l *oneConn) Addr() net.Addr { return &net.UnixAddr{Name: "fd", Net: "unix"} }
