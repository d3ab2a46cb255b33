package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// mountEntry is one line of /proc/self/mountinfo, the fields we use.
type mountEntry struct {
	point  string
	fstype string
}

// parseMountinfo reads proc(5) mountinfo: the mount point is field 5, the
// type follows the " - " separator; octal escapes (\040) are undone.
func parseMountinfo(r io.Reader) ([]mountEntry, error) {
	var out []mountEntry
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 1 {
			continue
		}
		out = append(out, mountEntry{point: unescapeOctal(f[4]), fstype: g[0]})
	}
	return out, sc.Err()
}

func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// mountsAt lists the filesystem types mounted at dir, last (top) last.
func mountsAt(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	defer f.Close()
	ents, err := parseMountinfo(f)
	if err != nil {
		return nil, fmt.Errorf("parse /proc/self/mountinfo: %w", err)
	}
	var types []string
	for _, e := range ents {
		if e.point == dir {
			types = append(types, e.fstype)
		}
	}
	return types, nil
}

// statTimeout stats dir, giving up after d: a FUSE mount whose server
// hangs would block stat forever.
func statTimeout(dir string, d time.Duration) (err error, timedOut bool) {
	done := make(chan error, 1)
	go func() {
		var st unix.Stat_t
		done <- unix.Stat(dir, &st)
	}()
	select {
	case err := <-done:
		return err, false
	case <-time.After(d):
		return nil, true
	}
}

// clearStale unmounts what a crashed vgpusim left at dir (absolute): a
// FUSE mount whose server is gone (stat fails ENOTCONN) or hangs. A FUSE
// mount that still answers belongs to a live server: that is an error.
// It reports what it did on w.
func clearStale(dir string, w io.Writer) error {
	for range 8 { // mounts can stack; each round removes the top one
		types, err := mountsAt(dir)
		if err != nil {
			return err
		}
		serr, hung := statTimeout(dir, 2*time.Second)
		stale := hung || errors.Is(serr, syscall.ENOTCONN)
		if len(types) == 0 && !stale {
			return nil
		}
		top := "unknown type"
		if len(types) > 0 {
			top = types[len(types)-1]
		}
		if !stale {
			if strings.HasPrefix(top, "fuse") {
				return fmt.Errorf("mount point %s: already served by a live %s mount (another vgpusim?); stop it or pick another directory", dir, top)
			}
			return nil // an ordinary mount point (a tmpfs, say): mount on top
		}
		why := "its server is gone (ENOTCONN)"
		if hung {
			why = "its server does not answer"
		}
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("unmount stale %s mount at %s (%s): %w", top, dir, why, err)
		}
		fmt.Fprintf(w, "vgpusim: %s was a stale mount left by a crash (%s): unmounted it\n", dir, why)
	}
	return fmt.Errorf("mount point %s: still mounted after 8 unmounts", dir)
}
