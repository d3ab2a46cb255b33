package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"

	"github.com/vgpu-project/vgpu/pkg/nvstate/nvmlstate"
	"github.com/vgpu-project/vgpu/pkg/nvstate/nvstaterpc"
	"github.com/vgpu-project/vgpu/pkg/version"
)

func main() {
	os.Exit(run(os.Args[1:], os.NewFile(3, "socket"), os.Stderr))
}

func run(args []string, sock *os.File, stderr io.Writer) int {
	fl := flag.NewFlagSet("vgpu-nvml", flag.ContinueOnError)
	fl.SetOutput(stderr)
	library := fl.String("library", "", "NVIDIA's NVML (default: libnvidia-ml.so.1 from the library path)")
	showVersion := fl.Bool("version", false, "print the version and exit")
	fl.Usage = func() {
		fmt.Fprintf(stderr, `Usage: vgpu-nvml [--library PATH]

vgpud and vgpuctl start vgpu-nvml to reach NVIDIA's NVML, which they do
not link, and talk to it on the socket they pass as file descriptor 3.

Flags:
`)
		fl.PrintDefaults()
	}
	if err := fl.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *showVersion {
		fmt.Fprintln(stderr, "vgpu-nvml", version.Version)
		return 0
	}
	if fl.NArg() > 0 {
		fmt.Fprintf(stderr, "vgpu-nvml: unexpected arguments %q; see vgpu-nvml -h\n", fl.Args())
		return 2
	}
	c, err := net.FileConn(sock)
	_ = sock.Close()
	if err != nil {
		fmt.Fprintf(stderr, "vgpu-nvml: file descriptor 3 is not a socket (vgpud and vgpuctl start this helper with its socket there): %v\n", err)
		return 2
	}
	if err := nvstaterpc.ServeConn(c, nvstaterpc.Handler(nvmlstate.New(*library))); err != nil {
		fmt.Fprintf(stderr, "vgpu-nvml: %v\n", err)
		return 1
	}
	return 0
}
