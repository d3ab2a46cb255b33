package daemon

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	simkernel "github.com/vgpu-project/vgpu/internal/sim/kernel"
	"github.com/vgpu-project/vgpu/internal/sysfstest"
	"github.com/vgpu-project/vgpu/internal/unixhttp"
	"github.com/vgpu-project/vgpu/pkg/api"
)

type badCase struct {
	name, method, path, ctype, body string
	status                          int
	field, msg                      string
}

func badCases() []badCase {
	res := api.ReservationsPath(domA)
	ok := `"name":"web01","profile":"mi25-4g","count":1`
	return []badCase{
		{"bad uuid", "POST", "/v1/domains/not-a-uuid/reservations", "", `{` + ok + `}`, 400, "uuid", "is not a UUID"},
		{"nil uuid", "POST", "/v1/domains/00000000-0000-0000-0000-000000000000/reservations", "", `{` + ok + `}`, 400, "uuid", "nil UUID"},
		{"uuid with dots", "POST", "/v1/domains/..%2f..%2fetc/reservations", "", `{` + ok + `}`, 400, "uuid", ""},
		{"unknown profile", "POST", res, "", `{"name":"web01","profile":"mi25-3g","count":1}`, 400, "profile", "unknown profile"},
		{"no profile", "POST", res, "", `{"name":"web01","count":1}`, 400, "profile", "no profile"},
		{"name with slash", "POST", res, "", `{"name":"../../etc/passwd","profile":"mi25-4g","count":1}`, 400, "name", "contains '/'"},
		{"name dotdot", "POST", res, "", `{"name":"..","profile":"mi25-4g","count":1}`, 400, "name", "is a path"},
		{"name newline", "POST", res, "", `{"name":"a\nb","profile":"mi25-4g","count":1}`, 400, "name", "newline"},
		{"empty name", "POST", res, "", `{"profile":"mi25-4g","count":1}`, 400, "name", "empty"},
		{"name too long", "POST", res, "", `{"name":"` + strings.Repeat("a", api.MaxBodyBytes-100) + `","profile":"mi25-4g","count":1}`, 400, "name", "libvirt's names are at most 247"},
		{"release name too long", "POST", api.ReleasePath(domA), "", `{"name":"` + strings.Repeat("a", 248) + `"}`, 400, "name", "248 bytes long"},
		{"count zero", "POST", res, "", `{"name":"web01","profile":"mi25-4g","count":0}`, 400, "count", "out of range"},
		{"count huge", "POST", res, "", `{"name":"web01","profile":"mi25-4g","count":100000}`, 400, "count", "out of range"},
		{"negative numa", "POST", res, "", `{` + ok + `,"numaNode":-1}`, 400, "numaNode", "out of range"},
		{"unknown field", "POST", res, "", `{` + ok + `,"force":true}`, 400, "force", "unknown field"},
		{"wrong type", "POST", res, "", `{"name":"web01","profile":"mi25-4g","count":"1"}`, 400, "count", "not a int"},
		{"not json", "POST", res, "", `name=web01`, 400, "", "not JSON"},
		{"two values", "POST", res, "", `{` + ok + `}{}`, 400, "", "more than one JSON value"},
		{"empty body", "POST", res, "", ``, 400, "", "empty request body"},
		{"wrong content type", "POST", res, "text/plain", `{` + ok + `}`, 415, "", "application/json"},
		{"oversize body", "POST", res, "", `{"name":"` + strings.Repeat("a", api.MaxBodyBytes) + `"}`, 413, "", "larger than"},
		{"unknown query", "POST", res + "?force=1", "", `{` + ok + `}`, 400, "force", "unknown query parameter"},
		{"bad vgpu query", "DELETE", res + "?vgpu=../x", "", ``, 400, "vgpu", "neither a PCI address"},
		{"prepare bad id", "POST", api.PreparePath(domA), "", `{"name":"web01","profile":"mi25-4g","vgpus":["0000:03:00.1","/dev/vfio/1"]}`, 400, "vgpus[1]", "neither a PCI address"},
		{"prepare dup id", "POST", api.PreparePath(domA), "", `{"name":"web01","profile":"mi25-4g","vgpus":["0000:03:00.1","03:00.1"]}`, 400, "vgpus[1]", "named twice"},
		{"prepare no ids", "POST", api.PreparePath(domA), "", `{"name":"web01","profile":"mi25-4g","vgpus":[]}`, 400, "vgpus", "0 vGPUs named"},
		{"prepare count mismatch", "POST", api.PreparePath(domA), "", `{"name":"web01","profile":"mi25-4g","count":2,"vgpus":["0000:03:00.1"]}`, 400, "count", "does not match"},
		{"release bad name", "POST", api.ReleasePath(domA), "", `{"name":"a/b"}`, 400, "name", ""},
		{"lease no ttl", "POST", api.LeasesPath(domA), "", `{` + ok + `}`, 400, "ttlSeconds", "out of range"},
		{"lease long ttl", "POST", api.LeasesPath(domA), "", `{` + ok + `,"ttlSeconds":99999999}`, 400, "ttlSeconds", "out of range"},
		{"carve bad address", "POST", api.PathCarve, "", `{"gpu":"0000:03:00","profile":"mi25-4g"}`, 400, "gpu", "invalid PCI address"},
		{"uncarve address with whitespace", "POST", api.PathUncarve, "", `{"gpu":" 0000:03:00.0\n"}`, 400, "gpu", "whitespace around it"},
		{"carve unknown profile", "POST", api.PathCarve, "", `{"gpu":"0000:03:00.0","profile":"x/../y"}`, 400, "profile", "unknown profile"},
		{"carve wrong gpu", "POST", api.PathCarve, "", `{"gpu":"0000:03:00.0","profile":"t4-4q"}`, 400, "profile", "t4-4q"},
		{"carve no such gpu", "POST", api.PathCarve, "", `{"gpu":"0000:99:00.0","profile":"mi25-4g"}`, 404, "", "0000:99:00.0"},
		{"uncarve not a gpu", "POST", api.PathUncarve, "", `{"gpu":"0000:07:00.0"}`, 404, "", ""},
		{"apply bad yaml", "POST", api.PathApply, "", `{"config":"version: v2\n"}`, 400, "config", "version"},
		{"apply unknown gpu", "POST", api.PathApply, "", `{"config":"version: v1\ngpus:\n  - address: \"0000:99:00.0\"\n    profile: mi25-4g\n"}`, 400, "config", "no GPU at 0000:99:00.0"},
		{"apply empty", "POST", api.PathApply, "", `{"config":""}`, 400, "config", "no config given"},
		{"assert bad yaml", "POST", api.PathAssert, "", `{"config":"gpus: 3"}`, 400, "config", ""},
		{"no route", "GET", "/v2/health", "", ``, 404, "", "versioned"},
		{"dot segments", "GET", "/v1/domains/../../etc/passwd", "", ``, 404, "", "no route GET /v1/domains/../../etc/passwd"},
		{"dot segment to a route", "GET", "/v1/gpus/../health", "", ``, 404, "", "no route"},
		{"dot segment in a change", "POST", "/v1/domains/" + domA + "/../" + domB + "/free", "", `{"force":true}`, 404, "", "no route"},
		{"empty segment", "GET", "//v1/health", "", ``, 404, "", "no route"},
		{"single dot", "GET", "/v1/./health", "", ``, 404, "", "no route"},
		{"trailing slash", "GET", "/v1/health/", "", ``, 404, "", "no route"},
		{"null body", "POST", res, "", `null`, 400, "", "request body is null; want a JSON object"},
		{"null body, optional", "POST", api.ReleasePath(domA), "", ` null `, 400, "", "request body is null"},
		{"null body to free", "POST", api.FreePath(domA), "", `null`, 400, "", "request body is null"},
		{"null body to reconcile", "POST", api.PathReconcile, "", `null`, 400, "", "request body is null"},
		{"array body", "POST", api.PathCarve, "", `[{"gpu":"0000:03:00.0","profile":"mi25-4g"}]`, 400, "", "request body is an array"},
		{"string body", "POST", api.PathApply, "", `"version: v1"`, 400, "", "request body is a string"},
		{"number body", "POST", api.LeasesPath(domA), "", `600`, 400, "", "request body is a number"},
		{"wrong method", "PUT", api.PathGPUs, "", ``, 405, "", "method not allowed"},
		{"get on reservations", "GET", res, "", ``, 405, "", "allowed: POST, DELETE"},
	}
}

func TestAPIValidation(t *testing.T) {
	r := startMixed(t)
	if _, err := r.c.Reserve(bg, domB, api.ReserveRequest{Name: "db01", Profile: "mi25-4g", Count: 1}); err != nil {
		t.Fatal(err)
	}
	hc := unixhttp.NewClient(r.socket)
	// A redirect is an answer of its own: the API gives none.
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	before, err := sysfstest.Snapshot(r.k)
	if err != nil {
		t.Fatal(err)
	}
	allocsBefore := r.allocations()
	for _, tc := range badCases() {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, "http://vgpud"+tc.path, bytes.NewBufferString(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if tc.ctype != "" {
				req.Header.Set("Content-Type", tc.ctype)
			}
			resp, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			var e api.Error
			if err := json.Unmarshal(b, &e); err != nil {
				t.Fatalf("status %d, body not JSON: %q", resp.StatusCode, b)
			}
			if resp.StatusCode != tc.status || e.Field != tc.field || !strings.Contains(e.Error, tc.msg) || e.Error == "" {
				t.Fatalf("got %d %+v; want %d field %q message with %q", resp.StatusCode, e, tc.status, tc.field, tc.msg)
			}
		})
	}
	after, err := sysfstest.Snapshot(r.k)
	if err != nil {
		t.Fatal(err)
	}
	if d := sysfstest.Diff(before, after); d != "" {
		t.Fatalf("bad requests changed the host:\n%s", d)
	}
	if got := r.allocations(); len(got) != len(allocsBefore) || got[0] != allocsBefore[0] {
		t.Fatalf("bad requests changed the ledger: %+v -> %+v", allocsBefore, got)
	}
	if open, _ := r.d.ledger.OpenIntents(); len(open) != 0 {
		t.Fatalf("intents left: %+v", open)
	}
}

// TestPanicIsA500 feeds a handler that panics through the middleware.
func TestPanicIsA500(t *testing.T) {
	r := start(t, simkernel.NewExample(t, "mi25.yaml"), "")
	h := r.d.middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") }))
	srv := &http.Server{Handler: h}
	ln, err := net.Listen("unix", r.socket+".panic")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	resp, err := unixhttp.NewClient(r.socket + ".panic").Get("http://vgpud/v1/health")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var e api.Error
	_ = json.NewDecoder(resp.Body).Decode(&e)
	if resp.StatusCode != 500 || e.Kind != api.KindInternal || !strings.Contains(e.Error, "boom") {
		t.Fatalf("panic answered %d %+v", resp.StatusCode, e)
	}
}
