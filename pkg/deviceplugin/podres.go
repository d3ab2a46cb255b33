package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/vgpu-project/vgpu/pkg/alloc"
	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/ledger"
)

// podResourcesTimeout bounds one List call.
const podResourcesTimeout = 10 * time.Second

// settle: a claim younger than this when PodResources is asked is not
// judged yet. The kubelet records an allocation once vgpud's answer is
// back, a moment after the claim was written.
const settle = 2 * time.Second

// podState is what the collection of gone pods' vGPUs remembers between
// looks.
type podState struct {
	gone    map[string]time.Time // vGPU id -> first look that missed its pod
	kept    map[string]bool      // vGPU id -> logged as kept (VFIO group open)
	listErr string               // the last failure to ask PodResources, logged once
}

func (p *podState) init() {
	p.gone, p.kept = map[string]time.Time{}, map[string]bool{}
}

// waiting reports whether a pod's vGPU is in its grace period: its pod is
// gone from PodResources, so it is advertised unhealthy rather than given
// to the next pod before it is freed.
func (p *podState) waiting(id string) bool { _, ok := p.gone[id]; return ok }

// podKey is one device a live pod holds, as PodResources lists it.
type podKey struct{ resource, id string }

// collect asks the kubelet which pods hold which devices, names the pods
// of new claims in the ledger, and frees the vGPUs of pods that have been
// gone for the grace period. It never frees a vGPU whose VFIO group is
// open (QEMU in a virt-launcher still runs): that is logged once and kept.
// A PodResources that does not answer concludes nothing. The full list
// that follows it in Run carries what it changed.
func (m *Manager) collect(ctx context.Context) {
	asked := time.Now()
	live, err := m.listPods(ctx)
	if err != nil {
		if msg := err.Error(); msg != m.pods.listErr {
			m.log.Warn("cannot ask the kubelet which pods hold vGPUs; nothing is freed until it answers", "err", err)
			m.pods.listErr = msg
		}
		return
	}
	if m.pods.listErr != "" {
		m.log.Info("the kubelet's PodResources answers again", "socket", m.cfg.PodResourcesSocket)
		m.pods.listErr = ""
	}
	hs, err := m.engine.Holdings(ctx, "")
	if err != nil {
		m.log.Error("cannot read the ledger to free gone pods' vGPUs", "err", err)
		return
	}
	held := map[string]bool{}
	now := time.Now()
	for _, a := range hs.Allocations {
		if a.Pod == nil {
			continue
		}
		held[a.VGPU] = true
		if pod, ok := live[podKey{a.Pod.Resource, a.VGPU}]; ok {
			if m.pods.waiting(a.VGPU) {
				delete(m.pods.gone, a.VGPU)
				m.log.Info("pod's vGPU listed by the kubelet again: kept", "vgpu", a.VGPU, "pod", pod.String())
			}
			delete(m.pods.kept, a.VGPU)
			if a.Pod.Name != pod.Name || a.Pod.Namespace != pod.Namespace || a.Pod.Container != pod.Container {
				if err := m.engine.NamePod(ctx, a.DomainUUID, a.VGPU, pod, pod.String()); err != nil {
					m.log.Warn("cannot record which pod holds a vGPU", "vgpu", a.VGPU, "pod", pod.String(), "err", err)
				}
			}
			continue
		}
		if a.Since.After(asked.Add(-settle)) {
			continue
		}
		since, ok := m.pods.gone[a.VGPU]
		if !ok {
			m.pods.gone[a.VGPU] = now
			m.log.Info("pod gone from the kubelet's PodResources; its vGPU goes after the grace period",
				"vgpu", a.VGPU, "holder", holderOf(a.Pod), "claim", a.DomainUUID, "grace", m.grace)
			continue
		}
		if now.Before(since.Add(m.grace)) {
			continue
		}
		if _, err := m.engine.Unreserve(ctx, a.DomainUUID, a.VGPU); err != nil {
			if errors.Is(err, alloc.ErrAttached) {
				if !m.pods.kept[a.VGPU] {
					m.log.Warn("pod gone but its vGPU's VFIO group is open (its VM still runs): kept", "vgpu", a.VGPU,
						"holder", holderOf(a.Pod), "err", err)
					m.pods.kept[a.VGPU] = true
				}
				continue
			}
			m.log.Error("cannot free the vGPU of a gone pod", "vgpu", a.VGPU, "holder", holderOf(a.Pod), "err", err)
			continue
		}
		delete(m.pods.gone, a.VGPU)
		delete(m.pods.kept, a.VGPU)
		m.log.Info("freed the vGPU of a pod gone from the kubelet", "vgpu", a.VGPU, "holder", holderOf(a.Pod),
			"resource", a.Pod.Resource, "claim", a.DomainUUID)
	}
	for id := range m.pods.gone {
		if !held[id] { // freed by someone else (vgpuctl release)
			delete(m.pods.gone, id)
			delete(m.pods.kept, id)
		}
	}
}

// holderOf names a pod's claim for the log.
func holderOf(p *api.Pod) string {
	return ledger.Pod{Resource: p.Resource, Namespace: p.Namespace, Name: p.Name, Container: p.Container}.String()
}

// listPods asks the kubelet's PodResources which devices live pods hold.
func (m *Manager) listPods(ctx context.Context) (map[podKey]ledger.Pod, error) {
	sock := m.cfg.PodResourcesSocket
	cc, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("ask the kubelet's PodResources at %s: %w", sock, err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(ctx, podResourcesTimeout)
	defer cancel()
	resp, err := podresv1.NewPodResourcesListerClient(cc).List(ctx, &podresv1.ListPodResourcesRequest{})
	if err != nil {
		return nil, fmt.Errorf("ask the kubelet's PodResources at %s: %w", sock, err)
	}
	live := map[podKey]ledger.Pod{}
	for _, p := range resp.GetPodResources() {
		for _, c := range p.GetContainers() {
			for _, d := range c.GetDevices() {
				for _, id := range d.GetDeviceIds() {
					canon, err := alloc.VGPUID(id)
					if err != nil {
						continue // not a vGPU id: another plugin's device
					}
					live[podKey{d.GetResourceName(), canon}] = ledger.Pod{Resource: d.GetResourceName(),
						Namespace: p.GetNamespace(), Name: p.GetName(), Container: c.GetName()}
				}
			}
		}
	}
	return live, nil
}
