package api_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vgpu-project/vgpu/pkg/api"
)

// route is one route of API v1 with the golden files of its bodies ("":
// none) and the types they decode into.
type route struct {
	method, path string
	req          string
	newReq       func() any
	resp         string
	newResp      func() any
}

func newOf[T any]() func() any { return func() any { return new(T) } }

func routes() []route {
	const uuid = "6f1f1a0e-6f0b-4c2e-9a55-4a1f3e2a0b11"
	holdings := newOf[api.Holdings]()
	return []route{
		{"GET", api.PathHealth, "", nil, "health", newOf[api.Health]()},
		{"GET", api.PathGPUs, "", nil, "gpus", newOf[[]api.GPU]()},
		{"GET", api.PathVGPUs, "", nil, "vgpus", newOf[[]api.VGPU]()},
		{"GET", api.PathAllocations, "", nil, "holdings", holdings},
		{"GET", api.PathConfig, "", nil, "config", newOf[api.Config]()},
		{"POST", api.PathReconcile, "", nil, "reconcile-report", newOf[api.ReconcileReport]()},
		{"POST", api.PathApply, "apply-request", newOf[api.ApplyRequest](), "reconcile-report", newOf[api.ReconcileReport]()},
		{"GET", api.PathAssert, "", nil, "assert-report", newOf[api.AssertReport]()},
		{"POST", api.PathAssert, "assert-request", newOf[api.AssertRequest](), "assert-report", newOf[api.AssertReport]()},
		{"POST", api.PathCarve, "carve-request", newOf[api.CarveRequest](), "carve-result", newOf[api.CarveResult]()},
		{"POST", api.PathUncarve, "uncarve-request", newOf[api.UncarveRequest](), "carve-result", newOf[api.CarveResult]()},
		{"POST", api.ReservationsPath(uuid), "reserve-request", newOf[api.ReserveRequest](), "holdings", holdings},
		{"DELETE", api.ReservationsPath(uuid), "", nil, "holdings", holdings},
		{"POST", api.PreparePath(uuid), "prepare-request", newOf[api.PrepareRequest](), "holdings", holdings},
		{"POST", api.ReleasePath(uuid), "release-request", newOf[api.ReleaseRequest](), "release-result", newOf[api.ReleaseResult]()},
		{"POST", api.LeasesPath(uuid), "lease-request", newOf[api.LeaseRequest](), "holdings", holdings},
		{"DELETE", api.LeasesPath(uuid), "", nil, "holdings", holdings},
		{"POST", api.FreePath(uuid), "free-request", newOf[api.FreeRequest](), "holdings", holdings},
		{"POST", api.MigrationPath(uuid), "migration-request", newOf[api.MigrationRequest](), "holdings", holdings},
		// Every route's error answer.
		{"", "", "", nil, "error", newOf[api.Error]()},
		// No route: what the engine gives the device plugin's Allocate.
		{"", "", "", nil, "pod-grant", newOf[api.PodGrant]()},
	}
}

// TestWireGolden pins API v1's wire format: each golden body (written by
// pkg/daemon's TestWireGolden from the server's own values) decodes into
// its type with no field unknown and encodes back, as the server encodes
// (indented, one newline), to the same bytes. A field renamed, dropped,
// moved, or no longer left out when empty fails here.
func TestWireGolden(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range routes() {
		for _, b := range []struct {
			name   string
			newVal func() any
		}{{r.req, r.newReq}, {r.resp, r.newResp}} {
			if b.name == "" || seen[b.name] {
				continue
			}
			seen[b.name] = true
			for _, file := range []string{b.name + ".json", b.name + ".zero.json"} {
				if strings.HasSuffix(file, ".zero.json") && (b.name == "gpus" || b.name == "vgpus") {
					continue // a list: its example holds a zero element
				}
				t.Run(r.method+" "+r.path+" "+file, func(t *testing.T) { roundTrip(t, file, b.newVal()) })
			}
		}
	}
	files, err := filepath.Glob("testdata/*.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(strings.TrimSuffix(filepath.Base(f), ".json"), ".zero")
		if !seen[name] {
			t.Errorf("%s belongs to no route", f)
		}
	}
}

func roundTrip(t *testing.T, file string, v any) {
	want, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(want))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("decode %s: %v", file, err)
	}
	got, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, '\n')
	if !bytes.Equal(got, want) {
		t.Errorf("%s does not encode back byte for byte:\n got %s\nwant %s", file, got, want)
	}
}
