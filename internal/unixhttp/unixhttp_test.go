package unixhttp

import (
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"testing"
)

// TestRoundTrip sends a JSON body and none over a unix socket, whatever
// the URL's host: each arrives as built, with its content type.
func TestRoundTrip(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		_, _ = io.WriteString(w, r.Method+" "+r.Host+r.URL.Path+" "+r.Header.Get("Content-Type")+" "+string(b))
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })

	c := NewClient(sock)
	defer c.CloseIdleConnections()
	for _, tc := range []struct {
		method string
		in     any
		want   string
	}{
		{http.MethodPost, map[string]int{"n": 1}, `POST anyhost/x application/json {"n":1}`},
		{http.MethodGet, nil, "GET anyhost/x  "},
	} {
		req, err := NewJSONRequest(context.Background(), tc.method, "http://anyhost", "/x", tc.in)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || string(b) != tc.want {
			t.Errorf("%s: got %q, %v; want %q", tc.method, b, err, tc.want)
		}
	}
	if _, err := NewJSONRequest(context.Background(), http.MethodPost, "http://anyhost", "/x", func() {}); err == nil {
		t.Error("a body JSON cannot encode was accepted")
	}
}
