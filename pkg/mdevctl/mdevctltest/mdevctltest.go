package mdevctltest

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// Fixture is the content of pkg/mdevctl/testdata/name
// ("debian-define/6b9d4f2a-3c1e-4f5a-9b7d-2e8c1a0f3d44").
func Fixture(t testing.TB, name string) []byte {
	t.Helper()
	_, here, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("mdevctltest: cannot find its own source file")
	}
	b, err := os.ReadFile(filepath.Join(filepath.Dir(here), "..", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Dir makes an mdevctl directory in a temp dir, as the package installs it
// (scripts.d/callouts and notifiers, which mdevctl 1.2 requires), with
// files by "parent/uuid", and returns its path.
func Dir(t testing.TB, files map[string][]byte) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "mdevctl.d")
	for _, d := range []string{"scripts.d/callouts", "scripts.d/notifiers"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, data := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// ReadCase is one definition file and how mdevctl takes it.
type ReadCase struct {
	Name string
	JSON string
	// Refused: mdevctl fails on it (load_from_json, add_attributes).
	Refused bool
	// Type and Auto are what it reads otherwise.
	Type string
	Auto bool
}

// ReadCases are the files pkg/mdevctl's Read must take as mdevctl does;
// e2e/simhost runs Debian's mdevctl on the same.
func ReadCases() []ReadCase {
	return []ReadCase{
		{Name: "as written", JSON: `{"mdev_type": "nvidia-232", "start": "auto", "attrs": []}`, Type: "nvidia-232", Auto: true},
		{Name: "no attrs", JSON: `{"mdev_type": "nvidia-232", "start": "auto"}`, Type: "nvidia-232", Auto: true},
		{Name: "attrs null", JSON: `{"mdev_type": "nvidia-232", "start": "manual", "attrs": null}`, Type: "nvidia-232"},
		{Name: "unknown start is manual", JSON: `{"mdev_type": "nvidia-232", "start": "Auto"}`, Type: "nvidia-232"},
		{Name: "start not a string is manual", JSON: `{"mdev_type": "nvidia-232", "start": 1}`, Type: "nvidia-232"},
		{Name: "unknown field ignored", JSON: `{"mdev_type": "nvidia-232", "start": "auto", "parent": "0000:00:02.0"}`, Type: "nvidia-232", Auto: true},
		{Name: "attr with two fields", JSON: `{"mdev_type": "nvidia-232", "start": "auto", "attrs": [{"a": "1", "b": "2"}]}`, Refused: true},
		{Name: "attrs of strings", JSON: `{"mdev_type": "nvidia-232", "start": "auto", "attrs": ["a"]}`, Refused: true},
		{Name: "attrs not a list", JSON: `{"mdev_type": "nvidia-232", "start": "auto", "attrs": {"a": "1"}}`, Refused: true},
		{Name: "type not a string", JSON: `{"mdev_type": 232, "start": "auto"}`, Refused: true},
		{Name: "attr value not a string", JSON: `{"mdev_type": "nvidia-232", "start": "auto", "attrs": [{"a": 1}]}`, Refused: true},
		{Name: "no start", JSON: `{"mdev_type": "nvidia-232"}`, Refused: true},
		{Name: "no type", JSON: `{"start": "auto"}`, Refused: true},
		{Name: "not JSON", JSON: `mdev_type = nvidia-232`, Refused: true},
		{Name: "a JSON list", JSON: `[{"mdev_type": "nvidia-232", "start": "auto"}]`, Refused: true},
	}
}
