package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"time"
)

// Socket modes: 0660 with the config's group; 0600 (root only) when that
// group does not exist on this host.
const (
	socketMode     fs.FileMode = 0o660
	socketModeRoot fs.FileMode = 0o600
)

// listenUnix listens on path. Its directory is created 0755 when missing.
// A socket file that nothing answers on (left by a crash) is removed; one a
// live process answers on is an error: another vgpud runs.
func listenUnix(path string, log *slog.Logger) (net.Listener, error) {
	dir := filepath.Dir(path)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("create socket directory %s: %w", dir, err)
		}
		if err := os.Chmod(dir, 0o755); err != nil { // MkdirAll obeys the umask
			return nil, fmt.Errorf("set mode 0755 on socket directory %s: %w", dir, err)
		}
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&fs.ModeSocket == 0 {
			return nil, fmt.Errorf("listen on %s: it exists and is not a socket; remove it", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			_ = c.Close()
			return nil, fmt.Errorf("listen on %s: another process answers on it (is another vgpud running?)", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("remove stale socket %s: %w", path, err)
		}
		log.Warn("removed a stale API socket (left by a crash)", "socket", path)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	// Closing must not race a successor's bind: remove the file ourselves.
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	return ln, nil
}

// lookupGroup resolves a group name or numeric gid.
func lookupGroup(name string) (int, error) {
	if gid, err := strconv.Atoi(name); err == nil {
		return gid, nil
	}
	g, err := user.LookupGroup(name)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(g.Gid)
}

// setSocketAccess gives the socket to group with mode 0660; when the group
// does not exist it warns and keeps the socket root's alone (0600).
func setSocketAccess(path, group string, lookup func(string) (int, error), log *slog.Logger) error {
	gid, err := lookup(group)
	if err != nil {
		log.Warn("socket group not found; the API socket stays root-only", "group", group, "socket", path, "err", err)
		if err := os.Chmod(path, socketModeRoot); err != nil {
			return fmt.Errorf("set mode %o on %s: %w", socketModeRoot, path, err)
		}
		return nil
	}
	if err := os.Chown(path, -1, gid); err != nil {
		return fmt.Errorf("give socket %s to group %s (%d): %w", path, group, gid, err)
	}
	if err := os.Chmod(path, socketMode); err != nil {
		return fmt.Errorf("set mode %o on %s: %w", socketMode, path, err)
	}
	return nil
}
