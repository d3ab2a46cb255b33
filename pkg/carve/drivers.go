package carve

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/vgpu-project/vgpu/internal/durable"
	"github.com/vgpu-project/vgpu/pkg/pci"
)

// FileDriverStore keeps original drivers in a JSON file, written atomically
// (temp file, fsync, rename) under flock so concurrent processes agree.
type FileDriverStore struct {
	path string
	mu   sync.Mutex
}

var _ DriverStore = (*FileDriverStore)(nil)

// NewFileDriverStore stores in path; its directory is created when needed.
func NewFileDriverStore(path string) *FileDriverStore { return &FileDriverStore{path: path} }

// RememberDriver implements DriverStore.
func (s *FileDriverStore) RememberDriver(addr pci.Address, driver string) error {
	return s.update(func(m map[string]string) bool {
		if _, ok := m[addr.String()]; ok {
			return false
		}
		m[addr.String()] = driver
		return true
	})
}

// ForgetDriver implements DriverStore.
func (s *FileDriverStore) ForgetDriver(addr pci.Address) error {
	return s.update(func(m map[string]string) bool {
		_, ok := m[addr.String()]
		delete(m, addr.String())
		return ok
	})
}

// OriginalDriver implements DriverStore.
func (s *FileDriverStore) OriginalDriver(addr pci.Address) (string, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, err := s.read()
	if err != nil {
		return "", false, err
	}
	d, ok := m[addr.String()]
	return d, ok, nil
}

func (s *FileDriverStore) read() (map[string]string, error) {
	m := map[string]string{}
	b, err := os.ReadFile(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return m, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read driver store %s: %w", s.path, err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("parse driver store %s: %w", s.path, err)
	}
	return m, nil
}

func (s *FileDriverStore) update(change func(map[string]string) bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	dir := filepath.Dir(s.path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	lf, err := os.OpenFile(s.path+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("open %s.lock: %w", s.path, err)
	}
	defer lf.Close()
	if err := unix.Flock(int(lf.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("lock %s.lock: %w", s.path, err)
	}
	m, err := s.read()
	if err != nil {
		return err
	}
	if !change(m) {
		return nil
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := durable.WriteFile(s.path, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("replace driver store %s: %w", s.path, err)
	}
	return nil
}
