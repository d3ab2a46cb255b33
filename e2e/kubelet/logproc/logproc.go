// Package logproc runs the daemons of this module's rigs (containerd and
// the kubelet for kubeletrig, vgpusim and vgpud for simvgpud) as processes
// whose output goes to a log file, stops them (SIGTERM, then SIGKILL once
// a grace period has passed), and reads a log's last lines for a failure
// message.
package logproc

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Proc is a started process whose stdout and stderr go to the file Log.
type Proc struct {
	Name string // what messages call it
	Cmd  *exec.Cmd
	Log  string

	done chan struct{} // closed once the process has exited
}

// Start starts cmd (its other fields, Env or SysProcAttr, already set)
// with its output appended to the file log, which it creates if need be,
// and a goroutine that waits for its exit.
func Start(name string, cmd *exec.Cmd, log string) (*Proc, error) {
	f, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open %s's log: %w", name, err)
	}
	defer f.Close()
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{Name: name, Cmd: cmd, Log: log, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	return p, nil
}

// Running reports whether the process has not exited; false for nil.
func (p *Proc) Running() bool {
	if p == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Stop sends SIGTERM and waits up to grace for the exit, then kills the
// process and says so. A process not running is left alone.
func (p *Proc) Stop(grace time.Duration) error {
	if !p.Running() {
		return nil
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	_ = p.Cmd.Process.Kill()
	<-p.done
	return fmt.Errorf("%s ignored SIGTERM for %v; killed it", p.Name, grace)
}

// Tail is the last n lines of the file at path, headed by its name.
func Tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return fmt.Sprintf("--- %s, last %d lines:\n%s", path, len(lines), strings.Join(lines, "\n"))
}
