package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/config"
	"github.com/vgpu-project/vgpu/pkg/daemon"
	"github.com/vgpu-project/vgpu/pkg/daemon/metrics"
	"github.com/vgpu-project/vgpu/pkg/deviceplugin"
	"github.com/vgpu-project/vgpu/pkg/engine"
	"github.com/vgpu-project/vgpu/pkg/version"
)

// Exit codes.
const (
	exitOK     = 0
	exitFailed = 1 // could not start or stopped on an error
	exitUsage  = 2 // bad flags, config or profile catalog
)

// stringList is a repeatable flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	reload := make(chan struct{}, 1)
	go func() {
		for range hup {
			select {
			case reload <- struct{}{}:
			default: // one reload pending covers several signals
			}
		}
	}()
	code := run(ctx, os.Args[1:], os.Stderr, reload)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stderr io.Writer, reload <-chan struct{}) int {
	fl := flag.NewFlagSet("vgpud", flag.ContinueOnError)
	fl.SetOutput(stderr)
	var o daemon.Options
	var profiles stringList
	var logFormat, logLevel string
	var showVersion bool
	var libvirtURI string
	fl.StringVar(&o.ConfigPath, "config", config.DefaultPath, "host config file (a missing file manages no GPU)")
	fl.StringVar(&o.SysfsRoot, "sysfs-root", "/", "directory holding the host's sys/, dev/ and vendor tools (a vgpusim mount for a simulated host)")
	fl.StringVar(&o.SriovManage, "sriov-manage", "", "NVIDIA's sriov-manage, which enables an NVIDIA GPU's VFs (default: usr/lib/nvidia/sriov-manage under --sysfs-root)")
	fl.StringVar(&o.AMDSMI, "amd-smi", "", "new AMD GIM's amd-smi, which sets an MI300X/MI350X/V710's VF count (default: usr/bin/amd-smi under --sysfs-root)")
	fl.StringVar(&o.NVMLLibrary, "nvml-library", "", "NVIDIA's NVML, loaded by the vgpu-nvml helper, which vgpud starts only when a MIG-backed profile or one that sets the vGPU scheduler or mixed-size mode needs it (default: libnvidia-ml.so.1 from the library path)")
	fl.StringVar(&o.StateDir, "state-dir", engine.DefaultStateDir, "state directory: ledger.db and locks/")
	fl.StringVar(&o.MdevctlDir, "mdevctl-dir", "", "mdevctl's definitions: a config or carve managing an mdev parent mdevctl starts mdevs on (start auto) is refused (default: etc/mdevctl.d under --sysfs-root)")
	fl.StringVar(&o.SocketPath, "socket", api.DefaultSocket, "API socket")
	fl.Var(&profiles, "profiles", "extra profile catalog directory (repeatable); the built-in catalog is always loaded")
	fl.StringVar(&logFormat, "log-format", "text", "log format: text or json")
	fl.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fl.StringVar(&libvirtURI, "libvirt-uri", "qemu:///system", "the local libvirt to watch for domains that are gone, whose vGPUs are then freed: qemu:///system, optionally ?socket=PATH (\"\": do not watch)")
	fl.DurationVar(&o.CollectEvery, "collect-every", engine.DefaultCollectEvery, "how often the ledger is checked against libvirt's domains")
	fl.DurationVar(&o.CollectGrace, "collect-grace", engine.DefaultCollectGrace, "how long a domain must be gone from libvirt, or a pod from the kubelet's PodResources, before its vGPUs are freed")
	fl.DurationVar(&o.PodResourcesEvery, "pod-resources-every", deviceplugin.DefaultPodResourcesEvery, "how often the kubelet's PodResources is asked which pods hold vGPUs (with kubernetes.device-plugin on)")
	fl.BoolVar(&showVersion, "version", false, "print the version and exit")
	o.DevicePlugin = deviceplugin.ForDaemon
	fl.Usage = func() {
		fmt.Fprintf(stderr, `Usage: vgpud [flags]

vgpud reconciles the host's GPUs to its config at start, on SIGHUP and on
vgpuctl apply, records which vGPU serves which domain, and serves its API
on a unix socket. With the config's kubernetes.device-plugin on, it is also
the kubelet's device plugin: one resource per carved profile, from the same
ledger (docs/kubevirt.md). SIGTERM or SIGINT stops it gracefully.

Exit codes: 0 stopped cleanly, 1 failed, 2 bad flags, config or catalog.

Flags:
`)
		fl.PrintDefaults()
	}
	if err := fl.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fl.NArg() > 0 {
		fmt.Fprintf(stderr, "vgpud: unexpected arguments %q; see vgpud -h\n", fl.Args())
		return exitUsage
	}
	if showVersion {
		fmt.Fprintln(stderr, "vgpud", version.Version)
		return exitOK
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(logLevel)); err != nil {
		fmt.Fprintf(stderr, "vgpud: --log-level %q: allowed: debug, info, warn, error\n", logLevel)
		return exitUsage
	}
	hopts := &slog.HandlerOptions{Level: level}
	switch logFormat {
	case "text":
		o.Logger = slog.New(slog.NewTextHandler(stderr, hopts))
	case "json":
		o.Logger = slog.New(slog.NewJSONHandler(stderr, hopts))
	default:
		fmt.Fprintf(stderr, "vgpud: --log-format %q: allowed: text, json\n", logFormat)
		return exitUsage
	}
	o.ProfileDirs = profiles
	o.Metrics = metrics.New(o.Logger)
	wctx, stopWatch := context.WithCancel(ctx)
	watched, err := watchLibvirt(wctx, libvirtURI, &o, o.Logger)
	if err != nil {
		stopWatch()
		fmt.Fprintf(stderr, "vgpud: --libvirt-uri: %v\n", err)
		return exitUsage
	}
	defer func() { stopWatch(); watched() }()

	d, err := daemon.New(o)
	if err != nil {
		o.Logger.Error("cannot start", "err", err)
		if errors.Is(err, engine.ErrConfig) {
			return exitUsage
		}
		return exitFailed
	}
	if err := d.Run(ctx, reload); err != nil {
		o.Logger.Error("stopped on an error", "err", err)
		return exitFailed
	}
	o.Logger.Info("stopped")
	return exitOK
}
