//go:build e2e

package lab

import (
	"fmt"
	"net"
	"testing"
	"time"
)

// TestLabMigrate: two lab guests joined by a private link (QEMU -netdev
// socket), each with libvirtd, vgpud carving the mtty sample and the hook;
// on the source a domain with an mtty vGPU (vgpuctl attach, virsh start)
// gets UART state written, vgpuctl migrate moves it, and the destination
// reads the state back, holds the vGPU attached and restarts the domain on
// its own mdev (e2e/lab/guest/migrate_test.go).
func TestLabMigrate(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	ends := []struct{ name, pattern, net, ip, mac string }{
		{"source", "^TestMigrateSource$", fmt.Sprintf("listen=127.0.0.1:%d", port), "10.9.0.1/24", "52:54:00:4c:41:01"},
		{"destination", "^TestMigrateDest$", fmt.Sprintf("connect=127.0.0.1:%d", port), "10.9.0.2/24", "52:54:00:4c:41:02"},
	}
	t.Run("pair", func(t *testing.T) {
		for _, e := range ends {
			t.Run(e.name, func(t *testing.T) {
				t.Parallel()
				if e.name == "destination" {
					// -netdev socket,connect fails unless the source listens.
					time.Sleep(10 * time.Second)
				}
				// 20m, not the default 10m (and QEMU 25m, not 15m): its phases start
				// nested TCG guests, the link cut waits out libvirt's
				// keepalive, and at load 13 the source took over 10m
				// while every phase passed. A limit for a hang only.
				guestTestsOn(t, newShare(t), e.pattern, "VGPU_LAB_NET="+e.net, "VGPU_LAB_MAC="+e.mac,
					"VGPU_LAB_APPEND=lab.ip="+e.ip, "VGPU_LAB_MEM=1536M", "VGPU_LAB_GUEST_TIMEOUT=20m", "VGPU_LAB_TIMEOUT=1500")
			})
		}
	})
}
