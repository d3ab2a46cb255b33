// Command connhold holds many connections to vgpud's API socket as a
// careless or hostile member of its group would, for e2e/agent's tests
// and benchmarks: idle ones, ones that send their headers or their body a
// byte a second, and keep-alive ones idle after an answer. A connection
// vgpud closes is opened again after -redial. Every -extra it also sends
// an ordinary request of its own and notes how vgpud answered.
//
// It prints "ready" once every connection was opened once, and a JSON
// report on stdout when stdin closes or it gets SIGTERM.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Modes of a held connection.
var modes = []string{"idle", "slow-header", "slow-body", "keep-alive"}

// report is what connhold saw.
type report struct {
	Dials      int            `json:"dials"`
	DialErrors int            `json:"dialErrors"`
	Closed     map[string]int `json:"closed"`  // by mode: closed by vgpud
	Answers    map[string]int `json:"answers"` // status of answers on held connections
	Extra      map[string]int `json:"extra"`   // the ordinary requests: served, refused (429), other status, closed, dial-error
	ExtraKinds map[string]int `json:"extraKinds"`
}

type holder struct {
	socket string
	redial time.Duration
	mu     sync.Mutex
	rep    report
}

func (h *holder) note(f func(r *report)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f(&h.rep)
}

func (h *holder) dial() (net.Conn, error) {
	c, err := net.DialTimeout("unix", h.socket, 10*time.Second)
	h.note(func(r *report) {
		r.Dials++
		if err != nil {
			r.DialErrors++
		}
	})
	return c, err
}

// hold keeps one connection of mode open, and opens it again whenever
// vgpud closes it, until ctx ends. first is called after the first dial.
func (h *holder) hold(ctx context.Context, mode string, first func()) {
	for ctx.Err() == nil {
		c, err := h.dial()
		if first != nil {
			first()
			first = nil
		}
		if err == nil {
			h.use(ctx, c, mode)
		}
		select {
		case <-ctx.Done():
		case <-time.After(h.redial):
		}
	}
}

// use runs mode on c until vgpud closes it or ctx ends.
func (h *holder) use(ctx context.Context, c net.Conn, mode string) {
	defer c.Close()
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		br := bufio.NewReader(c)
		for {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			h.note(func(r *report) { r.Answers[strconv.Itoa(resp.StatusCode)]++ })
		}
	}()
	var drip []byte // sent a byte a second
	switch mode {
	case "slow-header":
		_, _ = io.WriteString(c, "GET /v1/health HTTP/1.1\r\nHost: vgpud\r\nX-Slow: ")
		drip = []byte("a")
	case "slow-body":
		_, _ = io.WriteString(c, "POST /v1/assert HTTP/1.1\r\nHost: vgpud\r\nContent-Type: application/json\r\nContent-Length: 65536\r\n\r\n{\"config\":\"")
		drip = []byte("x")
	case "keep-alive":
		_, _ = io.WriteString(c, "GET /v1/health HTTP/1.1\r\nHost: vgpud\r\n\r\n")
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-closed:
			h.note(func(r *report) { r.Closed[mode]++ })
			return
		case <-tick.C:
			if drip != nil {
				_, _ = c.Write(drip)
			}
		}
	}
}

// extra sends an ordinary request of the holder's own every interval.
func (h *holder) extra(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		outcome, kind := h.oneExtra()
		h.note(func(r *report) {
			r.Extra[outcome]++
			if kind != "" {
				r.ExtraKinds[kind]++
			}
		})
	}
}

func (h *holder) oneExtra() (outcome, kind string) {
	c, err := net.DialTimeout("unix", h.socket, 10*time.Second)
	if err != nil {
		return "dial-error", ""
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c, "GET /v1/health HTTP/1.1\r\nHost: vgpud\r\nConnection: close\r\n\r\n"); err != nil {
		return "closed", ""
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return "closed", ""
	}
	defer resp.Body.Close()
	var e struct {
		Kind string `json:"kind"`
	}
	_ = json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&e)
	switch resp.StatusCode {
	case http.StatusOK:
		return "served", ""
	case http.StatusTooManyRequests:
		return "refused", e.Kind
	}
	return strconv.Itoa(resp.StatusCode), e.Kind
}

func main() {
	socket := flag.String("socket", "", "vgpud's API socket")
	conns := flag.Int("conns", 2000, "connections to hold, the modes in turn: idle, slow-header, slow-body, keep-alive")
	redial := flag.Duration("redial", time.Second, "pause before opening again a connection vgpud closed")
	every := flag.Duration("extra", 250*time.Millisecond, "how often to send an ordinary request of our own (0: never)")
	flag.Parse()
	if *socket == "" {
		fmt.Fprintln(os.Stderr, "connhold: -socket is required")
		os.Exit(2)
	}
	h := &holder{socket: *socket, redial: *redial, rep: report{Closed: map[string]int{}, Answers: map[string]int{},
		Extra: map[string]int{}, ExtraKinds: map[string]int{}}}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	go func() { // stdin closing ends the run too
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()
	var opened, wg sync.WaitGroup
	opened.Add(*conns)
	for i := range *conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.hold(ctx, modes[i%len(modes)], opened.Done)
		}()
	}
	opened.Wait()
	fmt.Println("ready")
	if *every > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.extra(ctx, *every)
		}()
	}
	<-ctx.Done()
	wg.Wait()
	h.mu.Lock()
	defer h.mu.Unlock()
	_ = json.NewEncoder(os.Stdout).Encode(h.rep)
}
