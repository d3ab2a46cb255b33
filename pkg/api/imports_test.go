package api_test

import (
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// TestImportsNothingOfVgpu: the wire format is defined here and nowhere
// else, so no type of another package can change it (pkg/api/convert
// converts).
func TestImportsNothingOfVgpu(t *testing.T) {
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), e.Name(), nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, im := range f.Imports {
			if strings.HasPrefix(im.Path.Value, `"github.com/vgpu-project/vgpu/`) {
				t.Errorf("%s imports %s", e.Name(), im.Path.Value)
			}
		}
	}
}
