package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// runVgpuctl runs vgpuctl in process with args and e, its output caught.
func runVgpuctl(args []string, e env) (stdout, stderr string, code int) {
	var out, errb bytes.Buffer
	e.stdout, e.stderr = &out, &errb
	code = run(context.Background(), args, e)
	return out.String(), errb.String(), code
}

// wantOK runs args with run, wants exit 0 and no stderr, and returns stdout.
func wantOK(t *testing.T, run func(args ...string) (stdout, stderr string, code int), args ...string) string {
	t.Helper()
	out, errs, code := run(args...)
	if code != 0 || errs != "" {
		t.Fatalf("vgpuctl %s: exit %d\nstderr: %s\nstdout: %s", strings.Join(args, " "), code, errs, out)
	}
	return out
}
