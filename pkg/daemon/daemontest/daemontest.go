package daemontest

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/client"
	"github.com/vgpu-project/vgpu/pkg/client/clienttest"
	"github.com/vgpu-project/vgpu/pkg/daemon"
	"github.com/vgpu-project/vgpu/pkg/engine"
	"github.com/vgpu-project/vgpu/pkg/sysfs"
)

// Server is a running vgpud.
type Server struct {
	// Dir holds config.yaml, state/ and the socket.
	Dir    string
	Socket string
	Client *client.Client
}

// Start runs vgpud on fs with the host config yaml ("": no config file, no
// GPU managed) and the extra catalog directories profileDirs (vgpud
// --profiles), and returns once its socket answers (clienttest.Serve).
// The test's Cleanup stops it and fails the test if it did not stop
// cleanly.
func Start(t testing.TB, fs sysfs.FS, yaml string, profileDirs ...string) *Server {
	t.Helper()
	// A unix socket path must fit in 108 bytes: t.TempDir's may not.
	dir, err := os.MkdirTemp("", "vgpud-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	s := &Server{Dir: dir, Socket: filepath.Join(dir, "vgpud.sock")}
	cfg := filepath.Join(dir, "config.yaml")
	if yaml != "" {
		if err := engine.WriteConfig(cfg, []byte(yaml)); err != nil {
			t.Fatal(err)
		}
	}
	d, err := daemon.New(daemon.Options{ConfigPath: cfg, FS: fs, StateDir: filepath.Join(dir, "state"), SocketPath: s.Socket,
		ProfileDirs: profileDirs, LookupGroup: func(string) (int, error) { return os.Getgid(), nil }})
	if err != nil {
		t.Fatal(err)
	}
	s.Client = client.New(s.Socket)
	clienttest.Serve(t, s.Client, func(ctx context.Context) error { return d.Run(ctx, nil) })
	return s
}

// Held maps each vGPU vgpud lists as not free to "STATE DOMAIN", as
// vgpuctl vgpus shows them: "attached web01", "leased db01".
func (s *Server) Held(t testing.TB) map[string]string {
	t.Helper()
	vs, err := s.Client.VGPUs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return Held(vs)
}

// Held is Server.Held of a listing.
func Held(vs []api.VGPU) map[string]string {
	out := map[string]string{}
	for _, v := range vs {
		if v.State != api.StateFree {
			out[v.ID] = v.State + " " + v.DomainName
		}
	}
	return out
}
