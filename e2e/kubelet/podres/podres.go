// Package podres reads the kubelet's PodResources v1 API: which devices
// each pod's containers hold, and which devices the kubelet can allocate.
package podres

import (
	"context"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// Holding is the devices of one resource that one container holds.
type Holding struct {
	Namespace, Pod, Container, Resource string
	IDs                                 []string // sorted
}

// Snapshot is one List and one GetAllocatableResources.
type Snapshot struct {
	Pods        []string            // namespace/name of every pod listed
	Holdings    []Holding           // devices held, by container and resource
	Allocatable map[string][]string // resource -> device IDs, sorted
}

// Held returns the IDs the pod's containers hold of resource, sorted.
func (s Snapshot) Held(namespace, pod, resource string) []string {
	var ids []string
	for _, h := range s.Holdings {
		if h.Namespace == namespace && h.Pod == pod && h.Resource == resource {
			ids = append(ids, h.IDs...)
		}
	}
	slices.Sort(ids)
	return ids
}

// HeldBy returns which pods (namespace/name) hold device id of resource.
func (s Snapshot) HeldBy(resource, id string) []string {
	var pods []string
	for _, h := range s.Holdings {
		if h.Resource == resource && slices.Contains(h.IDs, id) {
			pods = append(pods, h.Namespace+"/"+h.Pod)
		}
	}
	return pods
}

// Read asks the PodResources API at socket (a path) for a Snapshot.
func Read(ctx context.Context, socket string) (Snapshot, error) {
	cc, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return Snapshot{}, fmt.Errorf("podres: dial %s: %w", socket, err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c := podresourcesv1.NewPodResourcesListerClient(cc)
	list, err := c.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		return Snapshot{}, fmt.Errorf("podres: List on %s: %w", socket, err)
	}
	alloc, err := c.GetAllocatableResources(ctx, &podresourcesv1.AllocatableResourcesRequest{})
	if err != nil {
		return Snapshot{}, fmt.Errorf("podres: GetAllocatableResources on %s: %w", socket, err)
	}
	var s Snapshot
	for _, p := range list.PodResources {
		s.Pods = append(s.Pods, p.Namespace+"/"+p.Name)
		for _, c := range p.Containers {
			byRes := map[string][]string{}
			for _, d := range c.Devices {
				byRes[d.ResourceName] = append(byRes[d.ResourceName], d.DeviceIds...)
			}
			for r, ids := range byRes {
				slices.Sort(ids)
				s.Holdings = append(s.Holdings, Holding{Namespace: p.Namespace, Pod: p.Name, Container: c.Name, Resource: r, IDs: ids})
			}
		}
	}
	s.Allocatable = map[string][]string{}
	for _, d := range alloc.Devices {
		s.Allocatable[d.ResourceName] = append(s.Allocatable[d.ResourceName], d.DeviceIds...)
	}
	for _, ids := range s.Allocatable {
		slices.Sort(ids)
	}
	slices.Sort(s.Pods)
	return s, nil
}
