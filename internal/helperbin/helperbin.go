package helperbin

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Find returns name's path: $env when set, else next to this executable (a
// build tree's bin/), else ../libexec/vgpu/ beside it (make install). The
// error lists the places tried.
func Find(name, env string) (string, error) {
	if p := os.Getenv(env); p != "" {
		return p, nil
	}
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find %s: locate this executable: %w", name, err)
	}
	if r, err := filepath.EvalSymlinks(self); err == nil {
		self = r
	}
	return findIn(filepath.Dir(self), name, env)
}

// findIn looks beside an executable in dir.
func findIn(dir, name, env string) (string, error) {
	tried := []string{
		filepath.Join(dir, name),
		filepath.Join(dir, "..", "libexec", "vgpu", name),
	}
	for _, p := range tried {
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("find %s at %s: %w", name, p, err)
		}
	}
	return "", &NotFoundError{Name: name, Tried: tried, Env: env}
}

// NotFoundError says where a helper was looked for.
type NotFoundError struct {
	Name  string
	Tried []string
	Env   string
}

func (e *NotFoundError) Error() string {
	return fmt.Sprintf("%s is in none of %s, %s (reinstall vgpu, or set %s)", e.Name, e.Tried[0], e.Tried[1], e.Env)
}
