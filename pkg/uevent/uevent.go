package uevent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"

	"golang.org/x/sys/unix"
)

// kernelGroup is the netlink multicast group the kernel sends uevents to
// (udev re-sends them to group 2, after its rules ran).
const kernelGroup = 1

// Event is one uevent.
type Event struct {
	Action    string // add, remove, bind, unbind, change, move, online, offline
	DevPath   string // under /sys: /devices/pci0000:00/0000:00:01.0/0000:01:00.0
	Subsystem string // pci, mdev, vfio, ...
}

// Listener is an open uevent socket.
type Listener struct {
	f *os.File
}

// Listen opens the kernel's uevent socket. It needs no privilege; in a
// network namespace other than the host's the kernel sends it nothing.
func Listen() (*Listener, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_KOBJECT_UEVENT)
	if err != nil {
		return nil, fmt.Errorf("open the kernel's uevent socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: kernelGroup}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("bind the kernel's uevent socket: %w", err)
	}
	// Bursts (a GPU's VFs going at once) must not overflow the socket.
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 1<<20)
	// Non-blocking, so the File is pollable and Close ends a Read.
	return &Listener{f: os.NewFile(uintptr(fd), "uevent")}, nil
}

// Close closes the socket; a Run in progress returns.
func (l *Listener) Close() error { return l.f.Close() }

// Run calls fn for each event of the given subsystems (all when none are
// given) until ctx ends or the socket is closed. Events lost to an
// overflowing socket are reported as one Event with Action "overflow":
// something changed, reread everything.
func (l *Listener) Run(ctx context.Context, fn func(Event), subsystems ...string) error {
	stop := context.AfterFunc(ctx, func() { _ = l.f.Close() })
	defer stop()
	buf := make([]byte, 16<<10)
	for {
		n, err := l.f.Read(buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, unix.ENOBUFS) {
				fn(Event{Action: "overflow"})
				continue
			}
			return fmt.Errorf("read the kernel's uevent socket: %w", err)
		}
		ev, ok := parse(buf[:n])
		if ok && (len(subsystems) == 0 || slices.Contains(subsystems, ev.Subsystem)) {
			fn(ev)
		}
	}
}

// parse reads a kernel uevent: "ACTION@DEVPATH\0KEY=VALUE\0...". udev's
// own messages (group 2, "libudev" header) are not sent to this group.
func parse(b []byte) (Event, bool) {
	fields := bytes.Split(b, []byte{0})
	if len(fields) == 0 || !bytes.Contains(fields[0], []byte("@")) {
		return Event{}, false
	}
	var ev Event
	for _, f := range fields[1:] {
		k, v, ok := bytes.Cut(f, []byte("="))
		if !ok {
			continue
		}
		switch string(k) {
		case "ACTION":
			ev.Action = string(v)
		case "DEVPATH":
			ev.DevPath = string(v)
		case "SUBSYSTEM":
			ev.Subsystem = string(v)
		}
	}
	return ev, ev.Action != ""
}
