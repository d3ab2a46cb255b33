package carve_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/vgpu-project/vgpu"

// kernelOps are the packages that write to the kernel on carve's behalf;
// sysfs is the door they all go through.
var kernelOps = []string{"pkg/sysfs", "pkg/pci", "pkg/mdev", "pkg/nvvf", "pkg/sriov", "pkg/xe"}

// knownWriters are writers the derivation must find: were it to go blind
// (a renamed FS method, a new indirection), the check would pass vacuously.
var knownWriters = []string{
	"pci.Bind", "pci.Unbind", "pci.Probe", "pci.SetDriverOverride",
	"mdev.Create", "mdev.Remove",
	"nvvf.SetType", "nvvf.ClearType", "nvvf.SetParams",
	"sriov.SetNumVFs", "sriov.SetAutoprobe",
	"xe.Write",
	"sysfs.WriteString", "sysfs.RunTool",
}

// TestOnlyCarveWritesTheKernel: no package but carve and the kernel-op
// packages names a function of theirs that writes to the kernel, or calls
// an FS's WriteFile or RunTool itself. The simulator (internal/sim*, the
// vgpusim command) and tests (e2e/ and internal/sysfstest, the tests'
// recording FS) are exempt.
func TestOnlyCarveWritesTheKernel(t *testing.T) {
	root := moduleRoot(t)
	writers := deriveWriters(t, root)
	var all []string
	for path, fns := range writers {
		for fn := range fns {
			all = append(all, filepath.Base(path)+"."+fn)
		}
	}
	for _, w := range knownWriters {
		if !slices.Contains(all, w) {
			t.Errorf("the derivation of the kernel writers misses %s (found %v)", w, all)
		}
	}
	exempt := append([]string{"pkg/carve", "internal/sysfstest", "cmd/vgpusim"}, kernelOps...)
	var bad []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			name := d.Name()
			if rel != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor" ||
				strings.HasPrefix(rel, "internal/sim") || rel == "e2e" || slices.Contains(exempt, rel)) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		v, err := kernelWrites(rel, src, writers)
		if err != nil {
			return err
		}
		bad = append(bad, v...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(bad) > 0 {
		t.Errorf("kernel writes outside pkg/carve (run them as carve ops through Carver.Run):\n%s", strings.Join(bad, "\n"))
	}
}

// TestKernelWritesFindsEveryForm: the check sees a writer however it is
// named: renamed import, function value, an FS method, a dot import.
func TestKernelWritesFindsEveryForm(t *testing.T) {
	writers := map[string]map[string]bool{
		module + "/pkg/pci":  {"Bind": true},
		module + "/pkg/mdev": {"Remove": true},
		module + "/pkg/nvvf": {"SetParams": true},
	}
	src := `package x

import (
	p "github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/mdev"
	. "github.com/vgpu-project/vgpu/pkg/nvvf"
	"os"
)

func f(fsys any) {
	_ = p.Bind(nil, nil, p.Address{}, "vfio-pci")
	remove := mdev.Remove
	_ = remove
	_ = fsys.(interface{ WriteFile(string, []byte) error }).WriteFile("x", nil)
	_ = os.WriteFile("y", nil, 0o600)
	_, _ = mdev.Get(nil, "u")
}
`
	got, err := kernelWrites("pkg/x/x.go", []byte(src), writers)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"pkg/x/x.go:6: dot import of github.com/vgpu-project/vgpu/pkg/nvvf hides its writers",
		"pkg/x/x.go:11: pci.Bind",
		"pkg/x/x.go:12: mdev.Remove",
		"pkg/x/x.go:14: WriteFile on an FS",
	}
	if !slices.Equal(got, want) {
		t.Errorf("found\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func moduleRoot(t *testing.T) string {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = up
	}
}

// deriveWriters returns, per kernel-op package, its functions that write:
// those that call an FS's WriteFile or RunTool, or another writer.
func deriveWriters(t *testing.T, root string) map[string]map[string]bool {
	type fn struct {
		pkg  string
		body *ast.BlockStmt
		imps map[string]string
	}
	funcs := map[string]fn{} // "path.Name"
	for _, dir := range kernelOps {
		path := module + "/" + dir
		files, err := filepath.Glob(filepath.Join(root, dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range files {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			imps := imports(f)
			for _, d := range f.Decls {
				if fd, ok := d.(*ast.FuncDecl); ok && fd.Body != nil && fd.Recv == nil {
					funcs[path+"."+fd.Name.Name] = fn{pkg: path, body: fd.Body, imps: imps}
				}
			}
		}
	}
	writes := map[string]bool{}
	for changed := true; changed; {
		changed = false
		for key, f := range funcs {
			if writes[key] {
				continue
			}
			ast.Inspect(f.body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok || writes[key] {
					return !writes[key]
				}
				switch x := call.Fun.(type) {
				case *ast.Ident:
					writes[key] = writes[f.pkg+"."+x.Name]
				case *ast.SelectorExpr:
					if id, ok := x.X.(*ast.Ident); ok && f.imps[id.Name] != "" {
						writes[key] = writes[f.imps[id.Name]+"."+x.Sel.Name]
					} else {
						writes[key] = x.Sel.Name == "WriteFile" || x.Sel.Name == "RunTool"
					}
				}
				changed = changed || writes[key]
				return true
			})
		}
	}
	out := map[string]map[string]bool{}
	for key, w := range writes {
		i := strings.LastIndex(key, ".")
		if name := key[i+1:]; w && ast.IsExported(name) {
			if out[key[:i]] == nil {
				out[key[:i]] = map[string]bool{}
			}
			out[key[:i]][name] = true
		}
	}
	return out
}

// imports maps a file's import names to their paths.
func imports(f *ast.File) map[string]string {
	m := map[string]string{}
	for _, im := range f.Imports {
		path, _ := strconv.Unquote(im.Path.Value)
		name := path[strings.LastIndex(path, "/")+1:]
		if im.Name != nil {
			name = im.Name.Name
		}
		m[name] = path
	}
	return m
}

// kernelWrites lists, as "file:line: what", the kernel writes in one
// source file: a writer of a kernel-op package named in any way, and an
// FS's WriteFile or RunTool called on a value.
func kernelWrites(rel string, src []byte, writers map[string]map[string]bool) ([]string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, rel, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	imps := imports(f)
	var out []string
	at := func(n ast.Node, what string) {
		out = append(out, fmt.Sprintf("%s:%d: %s", rel, fset.Position(n.Pos()).Line, what))
	}
	for _, im := range f.Imports {
		path, _ := strconv.Unquote(im.Path.Value)
		if im.Name != nil && im.Name.Name == "." && writers[path] != nil {
			at(im, "dot import of "+path+" hides its writers")
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if id, ok := sel.X.(*ast.Ident); ok && imps[id.Name] != "" {
			if path := imps[id.Name]; writers[path][sel.Sel.Name] {
				at(sel, filepath.Base(path)+"."+sel.Sel.Name)
			}
			return true
		}
		if sel.Sel.Name == "WriteFile" || sel.Sel.Name == "RunTool" {
			at(sel, sel.Sel.Name+" on an FS")
		}
		return true
	})
	return out, nil
}
