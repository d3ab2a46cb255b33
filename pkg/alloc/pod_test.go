package alloc

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/vgpu-project/vgpu/pkg/ledger"
)

// podReq is a claim of count vGPUs for a pod's container.
func podReq(n, count int) Request {
	return Request{Profile: "mi25-4g", Count: count, DomainUUID: uuidN(100 + n), DomainName: "kubelet allocation of vgpu.example.org/mi25-4g",
		Pod: &ledger.Pod{Resource: "vgpu.example.org/mi25-4g"}}
}

// A vGPU serves a pod or a domain, never both: claims of either kind
// refuse what the other holds, and name the holder.
func TestClaimPodAndDomainExclude(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	host := twoMI25()
	got, err := r.a.Claim(ctx, podReq(1, 1), []string{host[0].ID}, host)
	if err != nil || got[0].Pod == nil || got[0].Pod.Resource != "vgpu.example.org/mi25-4g" || got[0].HolderKind() != ledger.HolderPod {
		t.Fatalf("pod claim = %+v, %v", got, err)
	}
	_, err = r.a.Claim(ctx, req(1, 1), []string{host[0].ID}, host)
	if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "not listed by its PodResources yet") {
		t.Errorf("domain claim of a pod's vGPU: %v", err)
	}
	if _, err := r.a.Claim(ctx, req(1, 1), []string{host[1].ID}, host); err != nil {
		t.Fatal(err)
	}
	_, err = r.a.Claim(ctx, podReq(2, 1), []string{host[1].ID}, host)
	if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "reserved for domain vm1") {
		t.Errorf("pod claim of a domain's vGPU: %v", err)
	}
	_, err = r.a.Claim(ctx, podReq(2, 1), []string{host[0].ID}, host)
	if !errors.Is(err, ErrConflict) {
		t.Errorf("pod claim of another pod's vGPU: %v", err)
	}
	// A pod's label may name the pod with '/'; a domain's may not.
	pr := podReq(4, 1)
	pr.DomainName = "pod default/vm1 container compute"
	if _, err := r.a.Claim(ctx, pr, []string{host[7].ID}, host); err != nil {
		t.Errorf("pod label with '/': %v", err)
	}
	pr = podReq(5, 1)
	pr.DomainName = "two\nlines"
	if _, err := r.a.Claim(ctx, pr, []string{host[6].ID}, host); !errors.Is(err, ErrBadDomainName) {
		t.Errorf("pod label with a newline: %v", err)
	}
	// An allocation of a domain picks neither.
	as, err := r.a.Allocate(ctx, req(3, 5), host)
	if err != nil || slices.ContainsFunc(as, func(a ledger.Allocation) bool { return a.VGPU == host[0].ID || a.VGPU == host[1].ID }) {
		t.Errorf("allocate beside a pod = %s, %v", ids(as), err)
	}
}

// Prefer follows the allocator's rules and writes nothing: must first,
// then least-loaded GPUs, on one NUMA node when the request fits there.
func TestPrefer(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	host := twoMI25() // 03:00.0 on node 0, 83:00.0 on node 1, 4 VFs each
	all := make([]string, len(host))
	for i, c := range host {
		all[i] = c.ID
	}
	// Node 1's GPU is busier: a domain holds one of its VFs.
	if _, err := r.a.Claim(ctx, req(1, 1), []string{host[4].ID}, host); err != nil {
		t.Fatal(err)
	}
	free := slices.DeleteFunc(slices.Clone(all), func(id string) bool { return id == host[4].ID })

	got, err := r.a.Prefer(ctx, "mi25-4g", host, free, nil, 2)
	if err != nil || !slices.Equal(got, []string{host[0].ID, host[1].ID}) {
		t.Errorf("Prefer 2 = %v, %v; want node 0's least-loaded GPU", got, err)
	}
	// With a device of node 1 that must be in: the rest stays on node 1.
	got, err = r.a.Prefer(ctx, "mi25-4g", host, free, []string{host[5].ID}, 3)
	if err != nil || !slices.Equal(got, []string{host[5].ID, host[6].ID, host[7].ID}) {
		t.Errorf("Prefer 3 with a must on node 1 = %v, %v", got, err)
	}
	// Too many for one node: across nodes, least-loaded first.
	got, err = r.a.Prefer(ctx, "mi25-4g", host, free, nil, 6)
	if err != nil || len(got) != 6 || !slices.Contains(got, host[0].ID) || slices.Contains(got, host[4].ID) {
		t.Errorf("Prefer 6 = %v, %v", got, err)
	}
	// Only what is offered: the kubelet's free list.
	got, err = r.a.Prefer(ctx, "mi25-4g", host, []string{host[7].ID, host[2].ID}, nil, 1)
	if err != nil || !slices.Equal(got, []string{host[2].ID}) {
		t.Errorf("Prefer among two offered = %v, %v", got, err)
	}
	// Nothing written.
	as, err := r.l.Allocations()
	if err != nil || len(as) != 1 {
		t.Errorf("allocations after Prefer = %+v, %v", as, err)
	}
}
