package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	simtools "github.com/vgpu-project/vgpu/internal/sim/tools"
	"github.com/vgpu-project/vgpu/internal/usage"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// newToolCmd is a vendor tool of the simulated host, acting on the mount
// at --root: what the wrapper installed in the mount runs.
func newToolCmd(tool string) *cobra.Command {
	return &cobra.Command{
		Use:   tool + " --root DIR ARGS...",
		Short: "Run the simulated host's " + tool + " against the host mounted at DIR",
		Long: `Runs the vendor tool as the simulated host has it: the same sysfs writes, in the
same order, with the same messages and exit code as the real one (internal/sim/tools).
serve installs a wrapper at the tool's path in the mount (a symlink to it), so vgpud
and vgpuctl run it there as they run the real tool under /.`,
		Hidden:             true,
		DisableFlagParsing: true, // the tool's own flags (-e, -d) pass through
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) >= 2 && args[0] == "--kernel" {
				return runInKernel(cmd, args[1], tool, args[2:])
			}
			if len(args) < 2 || args[0] != "--root" {
				return usage.Errorf("%s: want --root DIR or --kernel SOCK first", tool)
			}
			code := simtools.Run(cmd.Context(), sysfs.NewOS(args[1]), tool, args[2:], cmd.OutOrStdout())
			if code != 0 {
				return exitCode(code)
			}
			return nil
		},
	}
}

// exitCode ends vgpusim with a tool's own exit code, printing nothing more.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// toolRun is a tool run the serving vgpusim carries out in its kernel.
type toolRun struct {
	Tool   string   `json:"tool"`
	Args   []string `json:"args"`
	Output string   `json:"output"`
	Code   int      `json:"code"`
}

// kernelTool: tool runs in the kernel itself rather than through the
// mount; modprobe loads modules and amd-smi talks to new GIM through its
// own device, which no sysfs write does.
func kernelTool(tool string) bool { return tool == sysfs.ToolModprobe || tool == sysfs.ToolAMDSMI }

// runInKernel asks the serving vgpusim at sock to run tool.
func runInKernel(cmd *cobra.Command, sock, tool string, args []string) error {
	c := http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	body, _ := json.Marshal(toolRun{Tool: tool, Args: args})
	resp, err := c.Post("http://vgpusim/tool", "application/json", strings.NewReader(string(body)))
	if err != nil {
		return fmt.Errorf("%s: reach the simulated host at %s: %w", tool, sock, err)
	}
	defer resp.Body.Close()
	var r toolRun
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return fmt.Errorf("%s: read the answer of %s: %w", tool, sock, err)
	}
	fmt.Fprint(cmd.OutOrStdout(), r.Output)
	if r.Code != 0 {
		return exitCode(r.Code)
	}
	return nil
}

// serveKernelTools answers runInKernel on a socket in dir until ctx ends.
func serveKernelTools(ctx context.Context, k *simkernel.Kernel, sock string) error {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /tool", func(w http.ResponseWriter, r *http.Request) {
		var run toolRun
		if err := json.NewDecoder(r.Body).Decode(&run); err != nil || !kernelTool(run.Tool) {
			http.Error(w, "want a JSON tool run of a kernel tool", http.StatusBadRequest)
			return
		}
		out, err := k.RunTool(r.Context(), run.Tool, run.Args...)
		run.Output = string(out)
		if err != nil {
			run.Code = 1
		}
		_ = json.NewEncoder(w).Encode(run)
	})
	return serveOn(ctx, sock, "tool runs", mux)
}

// serveOn serves h on a new unix socket at sock until ctx ends.
func serveOn(ctx context.Context, sock, what string, h http.Handler) error {
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return fmt.Errorf("listen for %s on %s: %w", what, sock, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintf(os.Stderr, "vgpusim: %s socket %s: %v\n", what, sock, err)
		}
	}()
	return nil
}

// installTools writes a wrapper per vendor tool of the host into a fresh
// directory and links the tool's path in the mount to it; modprobe's
// reaches the kernel through a socket there, served until ctx ends, and so
// does host's NVML (serveNVML). It returns the directory, to be removed on
// exit.
func installTools(ctx context.Context, k *simkernel.Kernel, host simkernel.Host, mount string) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find vgpusim's own path for the tool wrappers: %w", err)
	}
	dir, err := os.MkdirTemp("", "vgpusim-tools-")
	if err != nil {
		return "", fmt.Errorf("create the tool wrapper directory: %w", err)
	}
	sock := filepath.Join(dir, "kernel.sock")
	if err := serveKernelTools(ctx, k, sock); err != nil {
		_ = os.RemoveAll(dir)
		return "", err
	}
	if err := serveNVML(ctx, k, host, dir); err != nil {
		_ = os.RemoveAll(dir)
		return "", err
	}
	quote := func(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
	for tool := range sysfs.DefaultToolPaths() {
		w := filepath.Join(dir, tool)
		via := "--root " + quote(mount)
		if kernelTool(tool) {
			via = "--kernel " + quote(sock)
		}
		script := fmt.Sprintf("#!/bin/sh\nexec %s %s %s \"$@\"\n", quote(self), tool, via)
		if err := os.WriteFile(w, []byte(script), 0o755); err != nil {
			_ = os.RemoveAll(dir)
			return "", fmt.Errorf("write the %s wrapper %s: %w", tool, w, err)
		}
		k.InstallTool(tool, w)
	}
	return dir, nil
}
