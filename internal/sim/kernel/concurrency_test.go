package simkernel

import (
	"errors"
	"fmt"
	"io/fs"
	"sync"
	"syscall"
	"testing"
)

// Many goroutines carving at once: the end state is consistent and -race
// finds nothing.
func TestConcurrentWrites(t *testing.T) {
	k := NewExample(t, "all.yaml")
	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	// SR-IOV on the MI25: enable/disable races resolve to EBUSY or success.
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for j := 0; j < 20; j++ {
				v := "0"
				if (i+j)%2 == 0 {
					v = "4"
				}
				err := k.WriteFile(devPath(mi25Addr, "sriov_numvfs"), []byte(v))
				if err != nil && !errors.Is(err, syscall.EBUSY) {
					errs <- fmt.Errorf("numvfs %s: %w", v, err)
				}
				_, _ = k.ReadDir("/sys/bus/pci/devices")
			}
		}(i)
	}
	// mdevs on mtty: 24 ports, 30 creators of single ports.
	created := make(chan string, 64)
	for i := 0; i < 30; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			u := fmt.Sprintf("00000000-0000-0000-0000-%012d", i)
			err := k.WriteFile(mttyTypesPath("mtty-1")+"/create", []byte(u))
			switch {
			case err == nil:
				created <- u
			case !errors.Is(err, syscall.ENOSPC):
				errs <- fmt.Errorf("create: %w", err)
			}
		}(i)
	}
	// NVIDIA per-VF types need VFs first.
	sriovManage(t, k, "-e", l40sAddr)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			err := k.WriteFile(devPath(l40sVF(i), "nvidia/current_vgpu_type"), []byte("1154")) // 16Q: three fit
			// The rest are refused: no longer creatable.
			if err != nil && !errors.Is(err, syscall.EIO) {
				errs <- fmt.Errorf("current_vgpu_type: %w", err)
			}
		}(i)
	}
	// Readers everywhere.
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 50; j++ {
				_, err := k.ReadFile(mttyTypesPath("mtty-2") + "/available_instances")
				if err != nil {
					errs <- err
				}
				_, err = k.Stat(devPath(l40sAddr, "sriov_numvfs"))
				if err != nil && !errors.Is(err, fs.ErrNotExist) {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	close(created)
	for err := range errs {
		t.Error(err)
	}
	n := 0
	for range created {
		n++
	}
	if n != 24 {
		t.Errorf("%d mtty-1 instances created, want exactly 24", n)
	}
	if got := avail(t, k, mttyTypesPath("mtty-1")); got != "0" {
		t.Errorf("mtty-1 available = %s", got)
	}
	typed := 0
	for i := 0; i < 8; i++ {
		if read(t, k, devPath(l40sVF(i), "nvidia/current_vgpu_type")) == "1154\n" {
			typed++
		}
	}
	if typed != 3 {
		t.Errorf("%d VFs got 16Q, want 3 (48 GB)", typed)
	}
}

func mttyTypesPath(typ string) string { return mttyTypesDir + "/" + typ }

func BenchmarkReadAttribute(b *testing.B) {
	k := newHost(b, ModelMI25, mi25Addr)
	p := devPath(mi25Addr, "sriov_totalvfs")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := k.ReadFile(p); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkWriteAttribute(b *testing.B) {
	k := newHost(b, ModelPlain, plainAddr)
	p := devPath(plainAddr, "driver_override")
	v := []byte("vfio-pci\n")
	b.ReportAllocs()
	for b.Loop() {
		if err := k.WriteFile(p, v); err != nil {
			b.Fatal(err)
		}
	}
}
