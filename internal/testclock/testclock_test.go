package testclock

import (
	"sync"
	"testing"
	"time"
)

// TestAdd: the clock stands still until moved, and concurrent moves all
// land (run with -race).
func TestAdd(t *testing.T) {
	start := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	c := New(start)
	if got := c.Now(); !got.Equal(start) {
		t.Fatalf("Now = %v, want %v", got, start)
	}
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			c.Add(time.Second)
			_ = c.Now()
		})
	}
	wg.Wait()
	if got, want := c.Now(), start.Add(10*time.Second); !got.Equal(want) {
		t.Fatalf("Now after 10 Adds of 1s = %v, want %v", got, want)
	}
}
