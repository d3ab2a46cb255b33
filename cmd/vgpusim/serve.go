package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/vgpu-project/vgpu/internal/durable"
	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/internal/sim/kernel/fusefs"
	"github.com/vgpu-project/vgpu/internal/usage"
)

type serveOpts struct {
	host      string
	mount     string
	control   string
	readyFile string
	etc       string
	debug     bool
}

func newServeCmd(e env) *cobra.Command {
	var o serveOpts
	cmd := &cobra.Command{
		Use:   "serve --host FILE --mount DIR",
		Short: "Mount a simulated host at DIR and serve it until SIGINT/SIGTERM",
		Long: `Build the host FILE describes (examples/hosts/*.yaml), as after a reboot: every GPU
on its boot driver, no VFs, no mdevs. Mount it at DIR (created if missing) and serve
it. A FUSE mount left at DIR by a vgpusim that crashed is unmounted first; one that
a running vgpusim still serves is an error.

With --control, a unix socket takes faults at run time (see vgpusim fault). With
--ready-file, the file is written once the mount answers, and removed on exit.
With --etc, the host's configuration files (/etc/gim_config, which old AMD GIM
writes when it loads) are kept in that directory across restarts, as a disk
keeps them over a reboot: read at start, written when the simulated kernel
writes them.

SIGINT or SIGTERM unmounts and exits 0. If a process still has a file open under
DIR the mount is detached lazily: it disappears from the tree at once and the
kernel drops it when the last file is closed.`,
		Example: `  vgpusim serve --host examples/hosts/mixed.yaml --mount /run/vgpusim
  vgpusim serve --host examples/hosts/t4.yaml --mount /tmp/sim --control /tmp/sim.sock --ready-file /tmp/sim.ready`,
		Args: usage.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.host == "" {
				return usage.Errorf("--host is required (a host description such as examples/hosts/mixed.yaml)")
			}
			if o.mount == "" {
				return usage.Errorf("--mount is required (the directory to serve the host at)")
			}
			return serve(cmd.Context(), o, e.stderr)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.host, "host", "", "host description file (examples/hosts/*.yaml)")
	f.StringVar(&o.mount, "mount", "", "directory to mount the simulated host at (created if missing)")
	f.StringVar(&o.control, "control", "", "unix socket for run-time faults (vgpusim fault --control)")
	f.StringVar(&o.readyFile, "ready-file", "", "file written once the mount is up, removed on exit")
	f.StringVar(&o.etc, "etc", "", "directory keeping the host's /etc files across restarts")
	f.BoolVar(&o.debug, "debug", false, "log every FUSE request to stderr")
	return cmd
}

func serve(ctx context.Context, o serveOpts, stderr io.Writer) error {
	if os.Geteuid() != 0 {
		return errors.New("serve mounts a FUSE filesystem with mount(2), which needs root: run it with sudo")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return fmt.Errorf("serve needs /dev/fuse (modprobe fuse): %w", err)
	}
	host, err := simkernel.LoadHost(o.host)
	if err != nil {
		return usage.Wrap(err)
	}
	if o.etc != "" {
		if err := keepEtc(&host, o.etc, stderr); err != nil {
			return err
		}
	}
	k, err := simkernel.New(host)
	if err != nil {
		return fmt.Errorf("build simulated host from %s: %w", o.host, err)
	}
	dir, err := filepath.Abs(o.mount)
	if err != nil {
		return fmt.Errorf("resolve mount point %s: %w", o.mount, err)
	}
	if o.readyFile != "" {
		// One left by a crash would announce a mount that is not there.
		if err := os.Remove(o.readyFile); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("remove old ready file %s: %w", o.readyFile, err)
		}
	}
	if err := clearStale(dir, stderr); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create mount point %s: %w", dir, err)
	}
	toolCtx, stopTools := context.WithCancel(ctx)
	defer stopTools()
	tools, err := installTools(toolCtx, k, host, dir)
	if err != nil {
		return err
	}
	defer os.RemoveAll(tools)

	// Signals are caught before the mount exists, so that none is lost
	// between mounting and waiting.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)

	var opts []fusefs.Option
	if o.debug {
		opts = append(opts, fusefs.WithDebug(log.New(stderr, "vgpusim: fuse: ", log.Lmicroseconds)))
	}
	m, err := fusefs.New(dir, k, opts...)
	if err != nil {
		return err
	}
	stopped := make(chan struct{})
	go func() { m.Wait(); close(stopped) }()

	var ctl *http.Server
	if o.control != "" {
		ln, err := listenControl(o.control)
		if err != nil {
			_, _ = m.Unmount()
			return err
		}
		ctl = &http.Server{Handler: fusefs.NewControl(k, m, o.host), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = ctl.Serve(ln) }()
	}
	cleanup := func() {
		if ctl != nil {
			_ = ctl.Close()
			_ = os.Remove(o.control)
		}
		if o.readyFile != "" {
			_ = os.Remove(o.readyFile)
		}
	}
	if o.readyFile != "" {
		if err := writeReady(o.readyFile, dir); err != nil {
			cleanup()
			_, _ = m.Unmount()
			return err
		}
	}
	fmt.Fprintf(stderr, "vgpusim: serving %s (%d devices) at %s", o.host, len(host.GPUs), dir)
	if o.control != "" {
		fmt.Fprintf(stderr, ", control socket %s", o.control)
	}
	fmt.Fprintln(stderr)

	var why string
	select {
	case s := <-sigs:
		why = s.String()
	case <-ctx.Done():
		why = "stopped"
	case <-stopped:
		cleanup()
		fmt.Fprintf(stderr, "vgpusim: %s was unmounted from outside; exiting\n", dir)
		return nil
	}
	fmt.Fprintf(stderr, "vgpusim: %s: unmounting %s\n", why, dir)
	cleanup()
	lazy, err := m.Unmount()
	if err != nil {
		return err
	}
	if lazy {
		fmt.Fprintf(stderr, "vgpusim: %s is still in use: detached it; the kernel drops it when the last file closes\n", dir)
	}
	return nil
}

// listenControl binds the control socket (0600). A socket file left by a
// crash is replaced; one a live vgpusim answers on is an error.
func listenControl(path string) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("control socket %s: exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			_ = c.Close()
			return nil, fmt.Errorf("control socket %s: a live process answers on it (another vgpusim?)", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove stale control socket %s: %w", path, err)
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("create directory for control socket %s: %w", path, err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on control socket %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("restrict control socket %s to root: %w", path, err)
	}
	return ln, nil
}

// writeReady writes the mount point to path atomically, so a watcher never
// reads half a file.
func writeReady(path, dir string) error {
	if err := durable.WriteFile(path, []byte(dir+"\n"), 0o644); err != nil {
		return fmt.Errorf("write ready file %s: %w", path, err)
	}
	return nil
}

// keepEtc loads the host files kept in dir into host and has the kernel
// write the ones it changes back there.
func keepEtc(host *simkernel.Host, dir string, stderr io.Writer) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create the /etc directory %s: %w", dir, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("read the /etc directory %s: %w", dir, err)
	}
	host.Files = map[string]string{}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return fmt.Errorf("read host file: %w", err)
		}
		host.Files["/etc/"+e.Name()] = string(b)
	}
	host.OnFile = func(p, data string) {
		if filepath.Dir(p) != "/etc" {
			return
		}
		dst := filepath.Join(dir, filepath.Base(p))
		if err := os.WriteFile(dst, []byte(data), 0o644); err != nil {
			fmt.Fprintf(stderr, "vgpusim: keep host file %s in %s: %v\n", p, dst, err)
		}
	}
	return nil
}
