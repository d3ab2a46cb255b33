package syncbuf

import (
	"strings"
	"sync"
	"testing"
)

// TestConcurrent: writers and a reader at once (run with -race), and
// every write lands whole.
func TestConcurrent(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 100 {
				_, _ = b.Write([]byte("ab"))
				_ = b.String()
			}
		})
	}
	wg.Wait()
	if s := b.String(); len(s) != 800 || strings.Count(s, "ab") != 400 {
		t.Fatalf("%d bytes, %d whole writes", len(s), strings.Count(s, "ab"))
	}
}
