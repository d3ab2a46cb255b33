package clienttest

import (
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/vgpu-project/vgpu/pkg/api"
)

// Vanishing serves a vgpud that answers GET /v1/health and dies under
// every other request: it closes the connection before its answer or, for
// the paths in half, in the middle of one. It returns the socket's path;
// the test's Cleanup stops it.
func Vanishing(t testing.TB, half ...string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "vgpud-fake") // a socket path must fit 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	sock := filepath.Join(dir, "vgpud.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == api.PathHealth {
			_, _ = w.Write([]byte(`{"status":"ok"}`))
			return
		}
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		if slices.Contains(half, r.URL.Path) {
			_, _ = conn.Write([]byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"plan\""))
		}
		_ = conn.Close()
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return sock
}
