//go:build labguest

package guest

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/client"
	"github.com/vgpu-project/vgpu/pkg/pci"
)

// igbAutoprobe is the igb PF's sriov_drivers_autoprobe, which a carve
// turns off while the VFs appear, so that igbvf never probes them.
var igbAutoprobe = pci.DevicePath(igbPF) + "/sriov_drivers_autoprobe"

// crashTries bounds the attempts to kill a process while the setting is
// off: the kill is decided by what sysfs shows, and a process that put
// the setting back before it was stopped is tried again.
const crashTries = 5

// proc is a process the crash test starts and kills.
type proc struct {
	cmd  *exec.Cmd
	out  *bytes.Buffer
	done chan struct{}
}

func startProc(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(name, args...), out: &bytes.Buffer{}, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { // a test that failed first leaves nothing running
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// wait waits for the process to end, SIGTERM first when term.
func (p *proc) wait(t *testing.T, term bool) {
	t.Helper()
	if term {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	select {
	case <-p.done:
	case <-time.After(2 * time.Minute):
		_ = p.cmd.Process.Kill()
		<-p.done
		t.Errorf("%s did not end within 2 minutes", p.cmd.Path)
	}
}

// killWhileOff watches the igb PF's autoprobe setting while p runs and,
// once it reads 0, stops p (SIGSTOP), reads it again and, still 0, kills
// p (SIGKILL): p dies between turning the setting off and putting it
// back, as a kill -9 at that moment would leave it. False when p ended,
// or put the setting back before it was stopped (p then runs on).
func killWhileOff(t *testing.T, p *proc) bool {
	t.Helper()
	watch := time.Now()
	for {
		select {
		case <-p.done:
			t.Logf("%s ended without being caught with autoprobe off (%s after the watch began):\n%s", p.cmd.Path, time.Since(watch).Round(time.Millisecond), p.out)
			return false
		default:
		}
		if readAttr(t, igbAutoprobe) != "0" {
			continue
		}
		_ = p.cmd.Process.Signal(syscall.SIGSTOP)
		if readAttr(t, igbAutoprobe) != "0" {
			_ = p.cmd.Process.Signal(syscall.SIGCONT)
			t.Logf("%s put autoprobe back before it was stopped", p.cmd.Path)
			return false
		}
		_ = p.cmd.Process.Kill()
		<-p.done
		t.Logf("%s killed with autoprobe off, %s after the watch began; its output:\n%s", p.cmd.Path, time.Since(watch).Round(time.Millisecond), p.out)
		return true
	}
}

func vgpudArgs() []string {
	return []string{"--config", vgpudConfig, "--state-dir", vgpudState, "--profiles", profilesDir, "--socket", vgpudSocket}
}

// localVgpuctl runs vgpuctl on the host directly (no vgpud answers on its
// socket), on vgpud's state directory.
func localVgpuctl(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	return run(t, "vgpuctl", append([]string{"--profiles", profilesDir, "--state-dir", vgpudState, "--socket", "/nonexistent"}, args...)...)
}

func wantAutoprobe(t *testing.T, want, when string) {
	t.Helper()
	if got := readAttr(t, igbAutoprobe); got != want {
		t.Fatalf("igb PF's sriov_drivers_autoprobe %s: %s, want %s", when, got, want)
	}
}

// repaired starts vgpud on the lab's config after a crash and checks,
// after its start, after a SIGTERM and after a second start, that the
// PF's autoprobe is back on and the host is as configured.
func repaired(t *testing.T) {
	t.Helper()
	wantAutoprobe(t, "0", "right after the kill (the crash the repair must mend)")
	for _, when := range []string{"after the restart's repair", "after a second start"} {
		stop := sync.OnceFunc(startVgpud(t))
		t.Cleanup(stop) // a check that fails leaves no vgpud holding the ledger
		waitCarved(t)
		wantAutoprobe(t, "1", when)
		if _, _, code := run(t, "vgpuctl", "--profiles", profilesDir, "--socket", vgpudSocket, "assert", "-f", vgpudConfig); code != 0 {
			t.Fatalf("vgpuctl assert %s: exit %d", when, code)
		}
		stop()
		wantAutoprobe(t, "1", when+" and a SIGTERM")
	}
}

// TestVgpudCrash kills vgpud, and vgpuctl carving without it, with SIGKILL
// while a carve has the igb PF's sriov_drivers_autoprobe off (issue
// 22.3): vgpud's start carving 0 -> 4 VFs, a 4 -> 2 re-split vgpud makes
// on request, and vgpuctl's own 4 -> 2 re-split. Each time the next
// process puts the setting back on from the ledger's record (vgpud's
// repair, or vgpuctl's next carve), the host ends as configured, and
// after a SIGTERM and a second start the setting is still on; at the end
// a VF enabled by hand gets igbvf, as the kernel gives it with autoprobe on.
func TestVgpudCrash(t *testing.T) {
	relabelAsGPU(t, igbPF)
	if err := os.RemoveAll(vgpudState); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(vgpudConfig), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(vgpudConfig, []byte(labConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	wantAutoprobe(t, "1", "at boot")
	t.Cleanup(func() {
		if _, _, code := localVgpuctl(t, "uncarve", igbPF.String()); code != 0 {
			t.Errorf("uncarve the igb PF after the test: exit %d", code)
		}
	})

	t.Run("start carve", func(t *testing.T) {
		for try := 1; ; try++ {
			if n := len(vfsOf(t, igbPF)); n != 0 {
				t.Fatalf("try %d starts with %d VFs", try, n)
			}
			wantAutoprobe(t, "1", "before the try")
			p := startProc(t, "vgpud", vgpudArgs()...)
			if killWhileOff(t, p) {
				break
			}
			p.wait(t, true)
			if try == crashTries {
				t.Fatalf("vgpud's start carve was never caught with autoprobe off in %d tries", try)
			}
			if _, _, code := localVgpuctl(t, "uncarve", igbPF.String()); code != 0 {
				t.Fatal("uncarve between tries failed")
			}
		}
		repaired(t)
	})

	t.Run("re-split by vgpud", func(t *testing.T) {
		for try := 1; ; try++ {
			p := startProc(t, "vgpud", vgpudArgs()...)
			waitCarved(t)
			wantAutoprobe(t, "1", "before the try")
			c := client.New(vgpudSocket)
			for deadline := time.Now().Add(time.Minute); !c.Available(context.Background(), time.Second); {
				if time.Now().After(deadline) {
					t.Fatalf("vgpud did not answer within a minute:\n%s", p.out)
				}
				time.Sleep(100 * time.Millisecond)
			}
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				_, _ = c.Carve(ctx, api.CarveRequest{GPU: igbPF.String(), Profile: "lab-igb-2"})
			}()
			if killWhileOff(t, p) {
				break
			}
			p.wait(t, true)
			if try == crashTries {
				t.Fatalf("vgpud's re-split was never caught with autoprobe off in %d tries", try)
			}
		}
		repaired(t)
	})

	t.Run("re-split by vgpuctl", func(t *testing.T) {
		for try := 1; ; try++ {
			if n := len(vfsOf(t, igbPF)); n != 4 {
				t.Fatalf("try %d starts with %d VFs, want the 4 of the config", try, n)
			}
			wantAutoprobe(t, "1", "before the try")
			p := startProc(t, "vgpuctl", "--profiles", profilesDir, "--state-dir", vgpudState, "--socket", "/nonexistent",
				"carve", igbPF.String(), "--profile", "lab-igb-2")
			if killWhileOff(t, p) {
				break
			}
			p.wait(t, false)
			if try == crashTries {
				t.Fatalf("vgpuctl's re-split was never caught with autoprobe off in %d tries", try)
			}
			if _, _, code := localVgpuctl(t, "carve", igbPF.String(), "--profile", "lab-igb-4"); code != 0 {
				t.Fatal("carve back to 4 VFs between tries failed")
			}
		}
		wantAutoprobe(t, "0", "right after the kill (the crash the repair must mend)")
		// vgpuctl's next carve of the GPU puts the setting back first.
		out, _, code := localVgpuctl(t, "carve", igbPF.String(), "--profile", "lab-igb-2")
		if code != 0 || !strings.Contains(out, "done") {
			t.Fatalf("vgpuctl carve after the kill: exit %d", code)
		}
		wantAutoprobe(t, "1", "after vgpuctl's next carve")
		if n := len(vfsOf(t, igbPF)); n != 2 {
			t.Fatalf("%d VFs after vgpuctl's next carve, want 2", n)
		}
		for _, vf := range vfsOf(t, igbPF) {
			if d := driverOf(t, vf.Address); d != "vfio-pci" {
				t.Fatalf("%s on %q after vgpuctl's next carve", vf.Address, d)
			}
		}
	})

	// What the setting is for: a VF enabled by another tool gets its driver.
	if _, _, code := localVgpuctl(t, "uncarve", igbPF.String()); code != 0 {
		t.Fatal("uncarve failed")
	}
	numvfs := pci.DevicePath(igbPF) + "/sriov_numvfs"
	if err := os.WriteFile(numvfs, []byte("1"), 0); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := os.WriteFile(numvfs, []byte("0"), 0); err != nil {
			t.Error(err)
		}
	}()
	settleDriver(t, vfsOf(t, igbPF)[0].Address, "igbvf")
}
