package clienttest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/vgpu-project/vgpu/pkg/api"
)

// Reserver is what RaceReserve needs of a *client.Client (an interface:
// pkg/client's own tests use this package).
type Reserver interface {
	Reserve(ctx context.Context, domainUUID string, r api.ReserveRequest) (api.Holdings, error)
	Unreserve(ctx context.Context, domainUUID, vgpu string) (api.Holdings, error)
}

// Race is what RaceReserve saw.
type Race struct {
	// Reserved and Full count the reserves granted and those refused for
	// capacity.
	Reserved, Full int
	// Doubles counts the vGPUs granted to a domain while another held them.
	Doubles int
	// Errs holds every other failure, and each double grant.
	Errs []error
}

// RaceReserve sends calls reserve/unreserve pairs through c from workers
// goroutines: call i reserves one vGPU of profile for its own domain,
// holds it for hold (so that holders overlap) and unreserves it. A reserve
// that fails with noCapacity (pkg/client's ErrNoCapacity) counts as Full.
func RaceReserve(c Reserver, noCapacity error, profile string, calls, workers int, hold time.Duration) Race {
	ctx := context.Background()
	var (
		mu     sync.Mutex
		res    Race
		holder = map[string]string{} // vGPU -> domain, while held
		jobs   = make(chan int)
		wg     sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		res.Errs = append(res.Errs, err)
		mu.Unlock()
	}
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				dom := fmt.Sprintf("4dea22b3-1d52-d8f3-2516-%012x", i+1)
				h, err := c.Reserve(ctx, dom, api.ReserveRequest{Name: fmt.Sprintf("vm%d", i), Profile: profile, Count: 1})
				if errors.Is(err, noCapacity) {
					mu.Lock()
					res.Full++
					mu.Unlock()
					continue
				}
				if err != nil {
					fail(err)
					continue
				}
				v := h.Allocations[0].VGPU
				mu.Lock()
				if other, ok := holder[v]; ok {
					res.Doubles++
					res.Errs = append(res.Errs, fmt.Errorf("%s given to %s while %s holds it", v, dom, other))
				}
				holder[v] = dom
				res.Reserved++
				mu.Unlock()
				time.Sleep(hold)
				mu.Lock()
				delete(holder, v)
				mu.Unlock()
				if _, err := c.Unreserve(ctx, dom, ""); err != nil {
					fail(err)
				}
			}
		}()
	}
	for i := range calls {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	return res
}
