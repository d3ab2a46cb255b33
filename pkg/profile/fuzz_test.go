package profile

import (
	"errors"
	"io/fs"
	"reflect"
	"strings"
	"testing"

	"github.com/vgpu-project/vgpu/profiles"
)

// FuzzDecode: Decode never panics; a failure is always an ErrInvalid whose
// every line names the file; a success validates, and survives Encode and
// Decode unchanged. `go test` runs the seeds (the catalog and the test
// documents); `make fuzz` runs it for FUZZTIME.
func FuzzDecode(f *testing.F) {
	entries, err := fs.ReadDir(profiles.FS, ".")
	if err != nil {
		f.Fatal(err)
	}
	for _, e := range entries {
		data, err := fs.ReadFile(profiles.FS, e.Name())
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	for _, s := range []string{sriovDoc, mdevDoc, nvidiaDoc, "", "---\n", "- a\n", "version: v1\n---\n",
		"a: &x [*x]\n", "profiles: [{name: a, split: 1, mdev-type: {id: 1, name: 2}}]\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Decode("fuzz.yaml", data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error is not ErrInvalid: %v", err)
			}
			for _, line := range strings.Split(err.Error(), "\n") {
				if !strings.HasPrefix(line, "fuzz.yaml") {
					t.Fatalf("error line does not name the file: %q", line)
				}
			}
			return
		}
		if err := file.Validate(); err != nil {
			t.Fatalf("decoded file does not validate: %v", err)
		}
		out, err := Encode(file)
		if err != nil {
			t.Fatalf("Encode: %v", err)
		}
		again, err := Decode("fuzz.yaml", out)
		if err != nil {
			t.Fatalf("re-decode of\n%s\nfailed: %v", out, err)
		}
		if !sameFile(file, again) {
			t.Fatalf("round trip changed the file:\n%+v\n%+v", file, again)
		}
	})
}

// sameFile compares what a file says, not where it said it.
func sameFile(a, b *File) bool {
	return a.Version == b.Version && reflect.DeepEqual(a.Model, b.Model) && reflect.DeepEqual(a.Profiles, b.Profiles)
}
