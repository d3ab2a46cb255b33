package durable

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// WriteFile fsyncs the new file before it is renamed over the old one,
// then the directory after the rename: each sync is seen with what is on
// disk at that moment.
func TestWriteFileSyncsFileThenDirectory(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	var synced []string
	sync := func(f *os.File) error {
		cur, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		synced = append(synced, f.Name()+" while "+string(cur))
		return f.Sync()
	}
	if err := writeFile(path, []byte("new"), 0o644, sync); err != nil {
		t.Fatal(err)
	}
	if len(synced) != 2 || !strings.HasPrefix(synced[0], filepath.Join(dir, ".config.yaml.new-")) || !strings.HasSuffix(synced[0], " while old") ||
		synced[1] != dir+" while new" {
		t.Fatalf("synced %q; want the temporary file while the old one is in place, then %s once the new one is", synced, dir)
	}
	got, err := os.ReadFile(path)
	if err != nil || string(got) != "new" {
		t.Fatalf("%s = %q, %v", path, got, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o644 {
		t.Fatalf("mode of %s: %v, %v; want 0644", path, fi.Mode(), err)
	}
	if es, _ := os.ReadDir(dir); len(es) != 1 {
		t.Fatalf("%s holds %v; want the file alone", dir, es)
	}
}

// A failed sync leaves the old file and no temporary one.
func TestWriteFileFailureKeepsOld(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "drivers.json")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("EIO")
	err := writeFile(path, []byte("new"), 0o644, func(*os.File) error { return boom })
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), filepath.Join(dir, ".drivers.json.new-")) {
		t.Fatalf("error %v; want the sync's, naming the temporary file", err)
	}
	if got, _ := os.ReadFile(path); string(got) != "old" {
		t.Fatalf("%s = %q after a failed replace", path, got)
	}
	if es, _ := os.ReadDir(dir); len(es) != 1 {
		t.Fatalf("%s holds %v after a failed replace; want the old file alone", dir, es)
	}
	if err := WriteFile(filepath.Join(dir, "missing", "x"), nil, 0o644); err == nil || !strings.Contains(err.Error(), "create a temporary file in "+filepath.Join(dir, "missing")) {
		t.Fatalf("replace in a missing directory: %v", err)
	}
}
