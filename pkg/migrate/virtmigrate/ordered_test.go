package virtmigrate

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/pkg/migrate"
)

// TestOrderedChanges: a change libvirt has not answered in time goes on,
// and the next one is sent only once it is answered, so libvirt ends with
// the value asked last; an answer in time is returned as it is.
func TestOrderedChanges(t *testing.T) {
	var o ordered
	var mu sync.Mutex
	var sent []string
	change := func(name string, wait <-chan struct{}, answer error) func() error {
		return func() error {
			mu.Lock()
			sent = append(sent, name)
			mu.Unlock()
			if wait != nil {
				<-wait
			}
			return answer
		}
	}
	seen := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(sent)
	}
	busy := make(chan struct{})
	if err := o.do("raise", 20*time.Millisecond, change("raise", busy, nil)); !errors.Is(err, migrate.ErrNoAnswer) {
		t.Fatalf("a change libvirt does not answer = %v, want ErrNoAnswer", err)
	}
	if err := o.do("lower", 20*time.Millisecond, change("lower", nil, nil)); !errors.Is(err, migrate.ErrNoAnswer) {
		t.Fatalf("a change behind an unanswered one = %v, want ErrNoAnswer", err)
	}
	if got := seen(); !slices.Equal(got, []string{"raise"}) {
		t.Fatalf("sent %q while the first change was unanswered; want only the first", got)
	}
	close(busy)
	refused := errors.New("Requested operation is not valid: domain is not being migrated")
	if err := o.do("again", time.Minute, change("again", nil, refused)); err != refused {
		t.Fatalf("a change answered in time = %v, want its answer %v", err, refused)
	}
	if got := seen(); !slices.Equal(got, []string{"raise", "lower", "again"}) {
		t.Fatalf("sent %q, want raise, lower, again", got)
	}
}
