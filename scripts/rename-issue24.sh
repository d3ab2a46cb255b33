#!/bin/bash
# scripts/rename-issue24.sh (also /work/helpers/rename.sh): issue 24's
# renames, reproducible on any checkout of vgpu; run again after a merge,
# it moves what a newer main added under an old path and leaves the rest.
#
#   pkg/mig               -> pkg/nvstate               (package nvstate)
#   pkg/mig/nvmlmig       -> pkg/nvstate/nvmlstate     (package nvmlstate)
#   pkg/mig/migrpc        -> pkg/nvstate/nvstaterpc    (package nvstaterpc)
#   internal/simkernel    -> internal/sim/kernel       (package simkernel)
#   internal/simnvml      -> internal/sim/nvml         (package simnvml)
#   internal/simtools     -> internal/sim/tools        (package simtools)
#
# pkg/mig holds NVIDIA's state that only NVML shows (MIG, the vGPU
# scheduler, mixed-size mode), and read as "migration" beside pkg/migrate.
# The simulator's packages keep their names under internal/sim/: "nvml"
# would clash with go-nvml's nvml, which the fake NVML and its tests
# import, and "kernel" and "tools" would read as anything; their importers
# name them explicitly.
#
# Usage: scripts/rename-issue24.sh [repo]   (default: the git top level of the cwd)
set -euo pipefail
cd "${1:-$(git rev-parse --show-toplevel)}"
export PATH=$PATH:/usr/local/go/bin
mod=github.com/vgpu-project/vgpu

# 1. Move the files (each tracked file, so a file a newer main added under
# an old directory follows the rest).
move() { # old new [file stem to rename: a file named after its package]
	local f to
	git ls-files -- "$1/" | while IFS= read -r f; do
		to=$2/${f#"$1"/}
		if [ -n "${3:-}" ] && [ "$(dirname "$to")" = "$2" ]; then
			to=$(dirname "$to")/$(basename "$to" | sed "s/^$3\(_test\)\{0,1\}\.go\$/$(basename "$2")\1.go/")
		fi
		mkdir -p "$(dirname "$to")"
		git mv -k "$f" "$to"
	done
}
move pkg/mig/nvmlmig pkg/nvstate/nvmlstate nvmlmig
move pkg/mig/migrpc pkg/nvstate/nvstaterpc migrpc
move pkg/mig pkg/nvstate mig
move internal/simkernel internal/sim/kernel
move internal/simnvml internal/sim/nvml
move internal/simtools internal/sim/tools

# 2. Go: import paths, package clauses, and the selectors of renamed
# packages (by the parser's resolution: a local variable of the old name is
# left alone); comments name the new paths.
tool=$(mktemp -d)
trap 'rm -rf "$tool"' EXIT
cat >"$tool/main.go" <<'EOF'
package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

const mod = "github.com/vgpu-project/vgpu/"

// A moved package: its old and new import path (under mod), its old and
// new package name.
type move struct{ oldPath, newPath, oldName, newName string }

var moves = []move{
	{"pkg/mig/nvmlmig", "pkg/nvstate/nvmlstate", "nvmlmig", "nvmlstate"},
	{"pkg/mig/migrpc", "pkg/nvstate/nvstaterpc", "migrpc", "nvstaterpc"},
	{"pkg/mig", "pkg/nvstate", "mig", "nvstate"},
	{"internal/simkernel", "internal/sim/kernel", "simkernel", "simkernel"},
	{"internal/simnvml", "internal/sim/nvml", "simnvml", "simnvml"},
	{"internal/simtools", "internal/sim/tools", "simtools", "simtools"},
}

// newPath maps an import path below mod, and whether it moved.
func newPath(p string) (string, *move, bool) {
	for i := range moves {
		m := &moves[i]
		if p == m.oldPath {
			return m.newPath, m, true
		}
		if strings.HasPrefix(p, m.oldPath+"/") {
			return m.newPath + p[len(m.oldPath):], nil, true
		}
	}
	return p, nil, false
}

// Text in comments and in files other than Go: paths, then the names of
// the renamed packages where they name them.
var text = func() []struct {
	re  *regexp.Regexp
	new string
} {
	var out []struct {
		re  *regexp.Regexp
		new string
	}
	add := func(re, new string) {
		out = append(out, struct {
			re  *regexp.Regexp
			new string
		}{regexp.MustCompile(re), new})
	}
	add(`\bpkg/mig/nvmlmig\b`, "pkg/nvstate/nvmlstate")
	add(`\bpkg/mig/migrpc\b`, "pkg/nvstate/nvstaterpc")
	add(`\bmig/nvmlmig\b`, "nvstate/nvmlstate")
	add(`\bmig/migrpc\b`, "nvstate/nvstaterpc")
	add(`\bpkg/mig\b`, "pkg/nvstate")
	add(`\binternal/simkernel\b`, "internal/sim/kernel")
	add(`\binternal/simnvml\b`, "internal/sim/nvml")
	add(`\binternal/simtools\b`, "internal/sim/tools")
	add(`\bnvmlmig\b`, "nvmlstate")
	add(`\bmigrpc\b`, "nvstaterpc")
	add(`\bmig\.([A-Z])`, "nvstate.$1")
	return out
}()

func rewriteText(s string) string {
	for _, t := range text {
		s = t.re.ReplaceAllString(s, t.new)
	}
	return s
}

// rewritePaths renames the paths alone (text's first eight rules): in Go
// code, a path in a string is a path (help texts, generated sources).
func rewritePaths(s string) string {
	for _, t := range text[:8] {
		s = t.re.ReplaceAllString(s, t.new)
	}
	return s
}

type edit struct {
	from, to int
	text     string
}

func main() {
	for _, f := range os.Args[1:] {
		if err := rewrite(f); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}

// rewrite edits the file in place, byte for byte outside what it renames.
func rewrite(file string) error {
	src, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, src, parser.ParseComments)
	if err != nil {
		fmt.Fprintf(os.Stderr, "rename: %v: left as it is\n", err)
		return nil
	}
	off := func(p token.Pos) int { return fset.Position(p).Offset }
	var edits []edit
	// The package clause of a moved package.
	dir := path.Dir(file)
	docs := map[*ast.Comment]string{} // package docs to rename
	for _, m := range moves {
		if (dir == m.newPath) && m.oldName != m.newName {
			for _, suf := range []string{"", "_test"} {
				if f.Name.Name == m.oldName+suf {
					edits = append(edits, edit{off(f.Name.Pos()), off(f.Name.End()), m.newName + suf})
				}
			}
			if f.Doc != nil && strings.HasPrefix(f.Doc.List[0].Text, "// Package "+m.oldName+" ") {
				docs[f.Doc.List[0]] = "// Package " + m.newName + " " + strings.TrimPrefix(f.Doc.List[0].Text, "// Package "+m.oldName+" ")
			}
		}
	}
	// Imports: the path, and the name where the package's name changed or
	// now differs from its directory.
	renamed := map[string]string{} // old name in this file -> new
	for _, im := range f.Imports {
		p, _ := strconv.Unquote(im.Path.Value)
		if !strings.HasPrefix(p, mod) {
			continue
		}
		np, m, ok := newPath(strings.TrimPrefix(p, mod))
		if !ok {
			continue
		}
		spec := strconv.Quote(mod + np)
		if m != nil && im.Name == nil {
			if m.oldName != m.newName {
				renamed[m.oldName] = m.newName
			} else if path.Base(np) != m.newName {
				spec = m.newName + " " + spec
			}
		}
		edits = append(edits, edit{off(im.Path.Pos()), off(im.Path.End()), spec})
	}
	// Selectors on a renamed package: identifiers the parser left
	// unresolved (a local variable of that name resolves to its object).
	if len(renamed) > 0 {
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); ok && id.Obj == nil {
				if nn, ok := renamed[id.Name]; ok {
					edits = append(edits, edit{off(id.Pos()), off(id.End()), nn})
				}
			}
			return true
		})
	}
	// Comments.
	for _, cg := range f.Comments {
		for _, c := range cg.List {
			t := c.Text
			if d, ok := docs[c]; ok {
				t = d
			}
			if nt := rewriteText(t); nt != c.Text {
				edits = append(edits, edit{off(c.Pos()), off(c.End()), nt})
			}
		}
	}
	sort.Slice(edits, func(i, j int) bool { return edits[i].from > edits[j].from })
	out := src
	for _, e := range edits {
		out = append(append(append([]byte{}, out[:e.from]...), e.text...), out[e.to:]...)
	}
	out = []byte(rewritePaths(string(out)))
	if string(out) == string(src) {
		return nil
	}
	return os.WriteFile(file, out, 0o644)
}

// textMode rewrites a file that is not Go.
func init() {
	if len(os.Args) > 1 && os.Args[1] == "-text" {
		for _, file := range os.Args[2:] {
			src, err := os.ReadFile(file)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			if nt := rewriteText(string(src)); nt != string(src) {
				if err := os.WriteFile(file, []byte(nt), 0o644); err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(1)
				}
			}
		}
		os.Exit(0)
	}
}
EOF
(cd "$tool" && go mod init rename >/dev/null 2>&1 && go build -o rename .)
git ls-files -z -- '*.go' | xargs -0 "$tool/rename"
{ git grep -lz -e "$mod/pkg/nvstate" -e "$mod/internal/sim/" -- '*.go' || true; } | xargs -0 -r gofmt -w

# The simulator's packages are one directory deeper: their tests' paths up
# to the repository's root get one more "..".
git ls-files -z -- 'internal/sim/*.go' | xargs -0 -r perl -pi -e \
	's/(?<!"\.\.", )"\.\.", "\.\.", "(examples|profiles|e2e|docs)"/"..", "..", "..", "$1"/g'

# 3. Everything else that names the old paths: docs, Makefile, scripts,
# YAML (profile sources cite the fake NVML), goldens.
{ git grep -lzIE 'pkg/mig\b|internal/sim(kernel|nvml|tools)|nvmlmig|migrpc|\bmig\.[A-Z]' -- ':!*.go' ':!scripts/rename-issue24.sh' || true; } |
	xargs -0 -r "$tool/rename" -text
echo "rename.sh: done; left naming the old paths:"
git grep -nE 'pkg/mig\b|internal/sim(kernel|nvml|tools)\b|\bnvmlmig\b|\bmigrpc\b' -- ':!scripts/rename-issue24.sh' || echo "  nothing"
