package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// registerTimeout bounds one Register call: the kubelet dials the plugin
// back within it (its own dial waits up to 10 s).
const registerTimeout = 15 * time.Second

// kubeletSocketName is the kubelet's registration socket in the plugin
// directory (v1beta1.KubeletSocket's base name).
const kubeletSocketName = "kubelet.sock"

// Backoff of a registration whose kubelet.sock exists but refuses: the
// kubelet's net.Listen creates the file at bind(), a moment before
// listen(), so the first connect can be refused.
const (
	registerRetryFirst = 20 * time.Millisecond
	registerRetryMax   = 5 * time.Second
)

// register asks the kubelet to take the endpoint, in the background: the
// kubelet dials the endpoint back before it answers. A refused connect is
// tried again, with a backoff, while the same kubelet.sock (same inode)
// stays: once it is removed or replaced the watch's next event registers
// anew, and a new register (or stop) of the endpoint cancels this one.
// Each outcome is one line: registered, no kubelet yet (it registers when
// the kubelet starts), or the kubelet's refusal (it tries again at the
// kubelet's next start); the retries add one line when they begin.
func (m *Manager) register(ctx context.Context, ep *endpoint) {
	sock := filepath.Join(m.dir, kubeletSocketName)
	ep.cancelRegister()
	ctx, cancel := context.WithCancel(ctx)
	ep.regCancel = cancel
	go func() {
		defer cancel()
		err := m.registerRetrying(ctx, sock, ep)
		st, grpcErr := status.FromError(err)
		switch {
		case err == nil:
			m.log.Info("registered with the kubelet", "resource", ep.resource, "socket", ep.socket)
		case ctx.Err() != nil:
		case errors.Is(err, errNoKubelet):
			m.log.Info("no kubelet listening yet; registering when it starts", "resource", ep.resource, "kubelet", sock)
		case grpcErr && st.Code() == codes.Unavailable:
			m.log.Info("the kubelet went away during the registration; registering when it starts again", "resource", ep.resource,
				"kubelet", sock, "err", st.Message())
		case grpcErr:
			m.log.Error("the kubelet refused the registration; trying again when it restarts", "resource", ep.resource, "kubelet", sock, "err", st.Message())
		default:
			m.log.Error("cannot register with the kubelet; trying again when it restarts", "resource", ep.resource, "kubelet", sock, "err", err)
		}
	}()
}

// registerRetrying registers ep with the kubelet on sock, trying again
// while sock is the same file and nothing accepts on it yet.
func (m *Manager) registerRetrying(ctx context.Context, sock string, ep *endpoint) error {
	first, statErr := fileIdentity(sock)
	delay := registerRetryFirst
	for {
		err := registerWith(ctx, sock, ep.resource, filepath.Base(ep.socket))
		if !errors.Is(err, errNoKubelet) || statErr != nil || ctx.Err() != nil {
			return err
		}
		if now, err2 := fileIdentity(sock); err2 != nil || now != first {
			return err // removed or replaced: the watch's next event registers
		}
		if delay == registerRetryFirst {
			m.log.Info("the kubelet's socket does not accept yet; trying again while it stays", "resource", ep.resource,
				"kubelet", sock, "err", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
		delay = min(2*delay, registerRetryMax)
	}
}

// fileID tells one file from another that took its name.
type fileID struct{ dev, ino uint64 }

func fileIdentity(path string) (fileID, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return fileID{}, fmt.Errorf("stat %s: %w", path, err)
	}
	return fileID{dev: uint64(st.Dev), ino: st.Ino}, nil // Dev is uint32 on some architectures
}

// errNoKubelet: nothing listens on the kubelet's registration socket.
var errNoKubelet = errors.New("no kubelet listening")

// registerWith registers resource, served on endpoint (a socket name in
// the kubelet's directory), with the kubelet on sock.
func registerWith(ctx context.Context, sock, resource, endpoint string) error {
	if _, err := os.Stat(sock); errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("register %s with %s: %w", resource, sock, errNoKubelet)
	}
	cc, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("register %s with %s: %w", resource, sock, err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(ctx, registerTimeout)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(cc).Register(ctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: endpoint, ResourceName: resource,
		Options: &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}})
	if err != nil {
		if s, ok := status.FromError(err); ok && s.Code() == codes.Unavailable {
			if _, serr := os.Stat(sock); serr == nil {
				return fmt.Errorf("register %s with %s: %w (%v)", resource, sock, errNoKubelet, s.Message())
			}
		}
		return err
	}
	return nil
}

// kubeletEventKind is what the plugin directory's watch saw.
type kubeletEventKind int

const (
	// kubeletStarted: kubelet.sock was created (the kubelet started, having
	// removed every plugin socket first).
	kubeletStarted kubeletEventKind = iota
	// dirGone: the directory was removed or moved.
	dirGone
)

// kubeletWatch watches the plugin directory with inotify for the
// kubelet's registration socket: the kubelet makes it anew each time it
// starts, so its creation means "register again".
type kubeletWatch struct {
	dir    string
	log    *slog.Logger
	events chan kubeletEventKind

	stop chan struct{} // closed by close

	mu   sync.Mutex
	file *os.File // the inotify instance; nil while not watching
	done chan struct{}
}

func newKubeletWatch(dir string, log *slog.Logger) *kubeletWatch {
	return &kubeletWatch{dir: dir, log: log, events: make(chan kubeletEventKind, 1), stop: make(chan struct{})}
}

func (w *kubeletWatch) kubeletSocket() string { return filepath.Join(w.dir, kubeletSocketName) }

// watch starts watching the directory, unless it does already.
func (w *kubeletWatch) watch() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.file != nil {
		return nil
	}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return fmt.Errorf("inotify_init1: %w", err)
	}
	const mask = unix.IN_CREATE | unix.IN_MOVED_TO | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR
	if _, err := unix.InotifyAddWatch(fd, w.dir, mask); err != nil {
		unix.Close(fd)
		return fmt.Errorf("inotify_add_watch %s: %w", w.dir, err)
	}
	// A non-blocking fd makes the File pollable: close ends the read.
	w.file = os.NewFile(uintptr(fd), "inotify:"+w.dir)
	w.done = make(chan struct{})
	go w.read(w.file, w.done)
	return nil
}

// read turns inotify events into kubelet events until the file closes or
// the directory goes.
func (w *kubeletWatch) read(f *os.File, done chan struct{}) {
	defer close(done)
	buf := make([]byte, 64*(unix.SizeofInotifyEvent+unix.NAME_MAX+1))
	for {
		n, err := f.Read(buf)
		if err != nil {
			return // closed
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := ""
			if ev.Len > 0 {
				raw := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
				for i, c := range raw {
					if c == 0 {
						raw = raw[:i]
						break
					}
				}
				name = string(raw)
			}
			off += unix.SizeofInotifyEvent + int(ev.Len)
			switch {
			case ev.Mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_IGNORED) != 0:
				w.mu.Lock()
				if w.file == f {
					w.file = nil
				}
				w.mu.Unlock()
				_ = f.Close()
				select {
				case w.events <- dirGone:
				case <-w.stop:
				}
				return
			case ev.Mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0 && name == kubeletSocketName:
				select {
				case w.events <- kubeletStarted:
				default: // one pending restart covers several
				}
			}
		}
	}
}

// close stops watching and waits for the reader.
func (w *kubeletWatch) close() {
	close(w.stop)
	w.mu.Lock()
	f, done := w.file, w.done
	w.file = nil
	w.mu.Unlock()
	if f != nil {
		_ = f.Close()
		<-done
	}
}
