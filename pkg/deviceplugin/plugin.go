package deviceplugin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/vgpu-project/vgpu/pkg/api"
	"github.com/vgpu-project/vgpu/pkg/config"
	"github.com/vgpu-project/vgpu/pkg/engine"
	"github.com/vgpu-project/vgpu/pkg/pci"
)

// Defaults of Options.
const (
	// DefaultPodResourcesEvery is how often the kubelet's PodResources is
	// asked which pods hold which vGPUs.
	DefaultPodResourcesEvery = 10 * time.Second
	// DefaultGrace is how long a pod's vGPU outlives the pod's last listing
	// (vgpud passes its --collect-grace, the libvirt domains' grace).
	DefaultGrace = 30 * time.Second
	// DefaultDirEvery is how often a missing plugin directory is looked
	// for again (no kubelet on this host yet).
	DefaultDirEvery = 5 * time.Second
)

// settleChanges is how long a change waits for the rest of its burst
// before the lists are made: well under the 100 ms in which the kubelet
// must hear of a change.
const settleChanges = 2 * time.Millisecond

// Options configure a Manager.
type Options struct {
	Engine Engine
	// Config is the config's kubernetes section; DevicePlugin must be on.
	Config config.Kubernetes
	Logger *slog.Logger
	// PodResourcesEvery, Grace, DirEvery: the Default* when 0.
	PodResourcesEvery time.Duration
	Grace             time.Duration
	DirEvery          time.Duration
}

// Manager serves the kubelet while Run runs.
type Manager struct {
	engine Engine
	cfg    config.Kubernetes
	log    *slog.Logger
	dir    string
	every  time.Duration
	grace  time.Duration
	dirDue time.Duration

	// Run's goroutine alone uses what follows.
	endpoints map[string]*endpoint // by resource
	dirState  string               // "", "ok", or the problem last logged
	refused   map[string]string    // resource -> why it is not served, logged once
	ghosts    map[string]ghost     // vGPU id -> advertised, gone with its GPU
	owners    map[string]string    // vGPU id -> its GPU (or parent), as last listed
	// nextOwners and present are lists' scratch maps, kept from one
	// relist to the next: a relist follows every change.
	nextOwners map[string]string
	present    map[string]bool
	pods       podState
	// known is every vGPU on the host as last read, names the resources
	// of each profile as the last full list made them, and unserved says
	// a resource of that list has no endpoint: what an update after a
	// Change that names vGPUs starts from (update).
	known    map[string]engine.PodVGPU
	names    map[string][]string
	unserved bool
	// topo is one topology per NUMA node, shared by its devices: read only.
	topo    map[int]*pluginapi.TopologyInfo
	unknown int // vGPUs of unknown use left unadvertised, as last logged
	// updates counts the changes applied by update and by a full list.
	updates struct{ incremental, full int }
	// changes is Run's subscription; probe runs a function on Run's
	// goroutine (tests).
	changes *engine.Subscription
	probe   chan func()
}

// ghost is a vGPU that went with its GPU (off the bus): it stays listed,
// unhealthy, under its resources until the GPU is back.
type ghost struct {
	gpu       string
	resources []string
	numa      int
}

// New returns a Manager; it does nothing until Run.
func New(o Options) (*Manager, error) {
	if o.Engine == nil {
		return nil, errors.New("device plugin: no engine")
	}
	if !o.Config.DevicePlugin || o.Config.ResourceDomain == "" {
		return nil, errors.New("device plugin: not enabled, or no resource domain (kubernetes.device-plugin, kubernetes.resource-domain)")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	m := &Manager{engine: o.Engine, cfg: o.Config, log: o.Logger, dir: o.Config.DevicePluginDir,
		every: cmp.Or(o.PodResourcesEvery, DefaultPodResourcesEvery), grace: cmp.Or(o.Grace, DefaultGrace),
		dirDue:    cmp.Or(o.DirEvery, DefaultDirEvery),
		endpoints: map[string]*endpoint{}, refused: map[string]string{}, ghosts: map[string]ghost{}, owners: map[string]string{},
		nextOwners: map[string]string{}, present: map[string]bool{}, topo: map[int]*pluginapi.TopologyInfo{},
		probe: make(chan func())}
	if m.dir == "" {
		m.dir = config.DefaultDevicePluginDir
	}
	m.pods.init()
	return m, nil
}

// Run serves the kubelet until ctx ends: an endpoint per resource,
// registered with the kubelet (again when the kubelet restarts), device
// lists sent on every change of the engine and listed in full at every
// PodResources poll, vGPUs of gone pods freed.
// At the end the endpoints stop; the kubelet keeps their devices, marked
// unhealthy, for the next vgpud to come back.
func (m *Manager) Run(ctx context.Context) {
	changes := m.engine.Changes()
	defer changes.Cancel()
	m.changes = changes
	kubelet := newKubeletWatch(m.dir, m.log)
	defer kubelet.close()
	poll := time.NewTicker(m.every)
	defer poll.Stop()
	dirTimer := time.NewTimer(0)
	defer dirTimer.Stop()
	defer func() {
		for _, ep := range m.endpoints {
			ep.stop(false)
		}
	}()
	m.log.Info("serving the kubelet's device manager", "dir", m.dir, "resourceDomain", m.cfg.ResourceDomain,
		"podResources", m.cfg.PodResourcesSocket)
	for {
		select {
		case <-ctx.Done():
			return
		case <-dirTimer.C:
			if m.checkDir(kubelet) {
				m.sync(ctx)
			}
			if m.dirState != "ok" {
				dirTimer.Reset(m.dirDue)
			}
		case <-changes.C():
			// Changes come in bursts (a claim is three commits): one
			// update after the burst, a moment later.
			select {
			case <-ctx.Done():
				return
			case <-time.After(settleChanges):
			}
			m.changed(ctx, changes.Take())
		case fn := <-m.probe:
			fn()
		case ev := <-kubelet.events:
			m.kubeletEvent(ctx, ev, kubelet)
			if m.dirState != "ok" {
				dirTimer.Reset(m.dirDue)
			}
		case <-poll.C:
			// A full list each time, changed or not: an update reads
			// the engine's cached view however old, so this is when a
			// change behind vgpud's back that no kernel event told of
			// reaches the kubelet.
			m.collect(ctx)
			m.sync(ctx)
		}
	}
}

// checkDir looks at the plugin directory; it reports whether it just
// became usable. A missing or unusable one is logged once: vgpud runs
// without the kubelet as before.
func (m *Manager) checkDir(kw *kubeletWatch) bool {
	problem := ""
	fi, err := os.Stat(m.dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		problem = "no kubelet device-plugin directory " + m.dir + " (no kubelet on this host?): vgpud serves no kubelet until it appears"
	case err != nil:
		problem = fmt.Sprintf("cannot use the kubelet device-plugin directory %s: %v", m.dir, err)
	case !fi.IsDir():
		problem = "the kubelet device-plugin path " + m.dir + " is not a directory"
	}
	if problem == "" {
		if err := kw.watch(); err != nil {
			problem = fmt.Sprintf("cannot watch the kubelet device-plugin directory %s for the kubelet's restarts: %v", m.dir, err)
		}
	}
	if problem != "" {
		if problem != m.dirState {
			m.log.Warn(problem)
		}
		m.dirState = problem
		return false
	}
	was := m.dirState
	m.dirState = "ok"
	return was != "ok"
}

// kubeletEvent handles what the directory watch saw.
func (m *Manager) kubeletEvent(ctx context.Context, ev kubeletEventKind, kw *kubeletWatch) {
	switch ev {
	case kubeletStarted:
		// The kubelet wiped the directory's sockets when it started:
		// serve on new ones and register again.
		m.log.Info("kubelet (re)started: registering again", "socket", kw.kubeletSocket())
		for _, ep := range m.endpoints {
			if err := ep.reopen(); err != nil {
				m.log.Error("kubelet restarted; cannot serve again", "resource", ep.resource, "err", err)
				continue
			}
			m.register(ctx, ep)
		}
		m.sync(ctx)
	case dirGone:
		m.log.Warn("the kubelet device-plugin directory went away; vgpud serves no kubelet until it is back", "dir", m.dir)
		for r, ep := range m.endpoints {
			ep.stop(false)
			delete(m.endpoints, r)
		}
		m.dirState = "gone"
	}
}

// resourceList is one resource's devices as they should be advertised.
type resourceList struct {
	profile string
	devices []*pluginapi.Device
}

// sync computes every resource's device list from the engine and makes
// the endpoints follow: new resources served and registered, lists sent,
// resources with no device left withdrawn.
func (m *Manager) sync(ctx context.Context) {
	if m.dirState != "ok" {
		return
	}
	want, err := m.lists(ctx)
	if err != nil {
		m.log.Error("cannot list the vGPUs for the kubelet; the lists it has stay", "err", err)
		m.known = nil // the next change lists in full
		return
	}
	m.updates.full++
	m.unserved = false
	for r, ep := range m.endpoints {
		if _, ok := want[r]; !ok {
			ep.stop(true)
			delete(m.endpoints, r)
			m.log.Info("resource withdrawn: no GPU here carries its profile now", "resource", r)
		}
	}
	for _, r := range sortedKeys(want) {
		l := want[r]
		ep, ok := m.endpoints[r]
		if !ok {
			ep = newEndpoint(m, r, l.profile)
			ep.setDevices(l.devices)
			if err := ep.listen(); err != nil {
				m.unserved = true
				if m.refused[r] != err.Error() {
					m.log.Error("cannot serve a resource to the kubelet", "resource", r, "err", err)
					m.refused[r] = err.Error()
				}
				continue
			}
			delete(m.refused, r)
			m.endpoints[r] = ep
			m.register(ctx, ep)
			continue
		}
		ep.setDevices(l.devices)
	}
}

// lists builds each resource's device list: a profile's free vGPUs and
// those pods hold under that resource (healthy), pods' vGPUs whose pod is
// gone and whose grace runs, and vGPUs gone with their GPU (unhealthy).
// A vGPU a domain, a lease, another resource's pod or a process outside
// vgpud holds is not listed: it is not the kubelet's to give.
func (m *Manager) lists(ctx context.Context) (map[string]*resourceList, error) {
	vgpus, err := m.engine.PodVGPUs(ctx)
	if err != nil {
		return nil, err
	}
	gpus, err := m.engine.GPUAddresses(ctx)
	if err != nil {
		return nil, err
	}
	hs, err := m.engine.Holdings(ctx, "")
	if err != nil {
		return nil, err
	}
	names := m.profileNames(vgpus)
	out := map[string]*resourceList{}
	// The devices are allocated in one slab, not one by one: a relist
	// after each change makes a thousand of them on a large host.
	var slab []pluginapi.Device
	add := func(res, prof, id string, numa int, healthy bool) {
		l := out[res]
		if l == nil {
			l = &resourceList{profile: prof}
			out[res] = l
		}
		if len(slab) == cap(slab) {
			slab = make([]pluginapi.Device, 0, max(64, len(vgpus)))
		}
		slab = append(slab, pluginapi.Device{ID: id, Health: pluginapi.Healthy})
		d := &slab[len(slab)-1]
		if !healthy {
			d.Health = pluginapi.Unhealthy
		}
		d.Topology = m.topology(numa)
		l.devices = append(l.devices, d)
	}
	present := m.present
	clear(present)
	known := make(map[string]engine.PodVGPU, len(vgpus))
	for _, x := range vgpus {
		present[x.ID] = true
		known[x.ID] = x
		for _, res := range names[x.Profile] {
			if listed, healthy := m.advertised(x, res); listed {
				add(res, x.Profile, x.ID, x.NUMANode, healthy)
			}
		}
	}
	m.known, m.names = known, names
	m.noteUnknown()
	// Pods' vGPUs that are not on the host now: unhealthy, so the kubelet
	// neither counts them free nor forgets what its pods hold.
	for _, a := range hs.Allocations {
		if a.Pod != nil && !present[a.VGPU] {
			add(a.Pod.Resource, a.Profile, a.VGPU, -1, false)
			present[a.VGPU] = true
		}
	}
	// vGPUs advertised before whose GPU fell off the bus: unhealthy until
	// it is back (an uncarve, its GPU still there, just withdraws them).
	onBus := make(map[string]bool, len(gpus))
	for _, g := range gpus {
		onBus[g] = true
	}
	for id, g := range m.ghosts {
		if onBus[g.gpu] || present[id] {
			delete(m.ghosts, id)
			continue
		}
		for _, res := range g.resources {
			if _, served := m.endpoints[res]; served {
				add(res, m.endpoints[res].profile, id, g.numa, false)
			}
		}
	}
	for res, ep := range m.endpoints {
		ep.mu.Lock()
		devs := ep.devices
		ep.mu.Unlock()
		for _, d := range devs {
			if present[d.ID] || d.Health != pluginapi.Healthy {
				continue
			}
			gpu, ok := m.owners[d.ID]
			if !ok {
				continue
			}
			if _, err := pci.ParseAddress(gpu); err == nil && !onBus[gpu] {
				g := m.ghosts[d.ID]
				g.gpu, g.numa = gpu, numaOf(d)
				if !slices.Contains(g.resources, res) {
					g.resources = append(g.resources, res)
				}
				m.ghosts[d.ID] = g
				add(res, ep.profile, d.ID, g.numa, false)
				m.log.Warn("vGPU gone with its GPU from the bus: unhealthy", "resource", res, "vgpu", d.ID, "gpu", gpu)
			}
		}
	}
	next := m.nextOwners
	clear(next)
	for _, x := range vgpus {
		next[x.ID] = x.GPU
	}
	m.owners, m.nextOwners = next, m.owners
	for _, l := range out {
		slices.SortFunc(l.devices, func(a, b *pluginapi.Device) int { return cmp.Compare(a.ID, b.ID) })
		l.devices = slices.CompactFunc(l.devices, func(a, b *pluginapi.Device) bool { return a.ID == b.ID })
	}
	return out, nil
}

// advertised says whether vGPU x is listed under resource res (one of
// its profile's) and whether healthy: a pod's under the pod's resource
// (unhealthy while its pod is gone and its grace runs), a free one that
// no process holds under every resource of its profile. One whose use
// cannot be told is not listed: a QEMU may have it open, and a pod must
// never get a vGPU a QEMU has open.
func (m *Manager) advertised(x engine.PodVGPU, res string) (listed, healthy bool) {
	switch {
	case x.Pod != nil && x.Pod.Resource == res:
		return true, !m.pods.waiting(x.ID)
	case x.State == api.StateFree && !x.InUse && !x.UseUnknown:
		return true, true
	}
	return false, false
}

// topology is NUMA node numa's topology (nil for -1), shared by its
// devices.
func (m *Manager) topology(numa int) *pluginapi.TopologyInfo {
	if numa < 0 {
		return nil
	}
	t := m.topo[numa]
	if t == nil {
		t = &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: int64(numa)}}}
		m.topo[numa] = t
	}
	return t
}

// noteUnknown logs when vGPUs start or stop being left out for their
// unknown use.
func (m *Manager) noteUnknown() {
	n := 0
	for _, x := range m.known {
		if x.UseUnknown && x.State == api.StateFree {
			n++
		}
	}
	switch {
	case n > 0 && m.unknown == 0:
		m.log.Warn("free vGPUs whose use cannot be told are not advertised to the kubelet: a process whose open files vgpud cannot read may hold them (vgpud needs CAP_SYS_PTRACE; `vgpuctl vgpus` names the process)",
			"vgpus", n)
	case n == 0 && m.unknown > 0:
		m.log.Info("every free vGPU's use can be told again: all are advertised")
	}
	m.unknown = n
}

// changed brings the lists up to date after a Change: an update of the
// vGPUs it names where it can, a full list otherwise.
func (m *Manager) changed(ctx context.Context, c engine.Change) {
	if m.dirState != "ok" {
		return // the full list when the directory is back covers it
	}
	if !c.All && m.update(ctx, c.VGPUs) {
		m.updates.incremental++
		return
	}
	m.sync(ctx)
}

// update applies a Change that named vGPUs ids to the endpoints' lists:
// ids and every vGPU a process held or holds are read again and each
// list they are on or belong on is edited, giving the list a full one
// would. It reports false, changing nothing, where it cannot say: a
// vGPU gone from the host or new, one that changed GPU or profile, a
// resource not served, a failed read. Then the caller lists in full.
func (m *Manager) update(ctx context.Context, ids []string) bool {
	if m.known == nil || m.unserved {
		return false
	}
	ask := slices.Clone(ids)
	for id, x := range m.known {
		if (x.InUse || x.UseUnknown) && !slices.Contains(ids, id) {
			ask = append(ask, id)
		}
	}
	fresh, err := m.engine.PodVGPUsOf(ctx, ask)
	if err != nil {
		m.log.Warn("cannot read the changed vGPUs; listing them all", "err", err)
		return false
	}
	type edit struct {
		id  string
		dev *pluginapi.Device // nil: not listed
	}
	got := make(map[string]bool, len(fresh))
	edits := map[string][]edit{}
	for _, x := range fresh {
		got[x.ID] = true
		k, ok := m.known[x.ID]
		if !ok || k.GPU != x.GPU || k.Profile != x.Profile || k.NUMANode != x.NUMANode {
			return false
		}
		for _, res := range m.names[x.Profile] {
			if m.endpoints[res] == nil {
				return false
			}
			e := edit{id: x.ID}
			if listed, healthy := m.advertised(x, res); listed {
				e.dev = &pluginapi.Device{ID: x.ID, Health: pluginapi.Healthy, Topology: m.topology(x.NUMANode)}
				if !healthy {
					e.dev.Health = pluginapi.Unhealthy
				}
			}
			edits[res] = append(edits[res], e)
		}
	}
	for _, id := range ask {
		if !got[id] { // gone from the host
			return false
		}
	}
	for res, es := range edits {
		ep := m.endpoints[res]
		ep.mu.Lock()
		devs := slices.Clone(ep.devices) // a stream may be sending the old one
		ep.mu.Unlock()
		for _, e := range es {
			i, found := slices.BinarySearchFunc(devs, e.id, func(d *pluginapi.Device, id string) int { return cmp.Compare(d.ID, id) })
			switch {
			case found && e.dev == nil:
				devs = slices.Delete(devs, i, i+1)
			case found:
				devs[i] = e.dev
			case e.dev != nil:
				devs = slices.Insert(devs, i, e.dev)
			}
		}
		ep.setDevices(devs)
	}
	for _, x := range fresh { // those held before among them: ask had them
		m.known[x.ID] = x
	}
	m.noteUnknown()
	return true
}

func numaOf(d *pluginapi.Device) int {
	if d.Topology == nil || len(d.Topology.Nodes) == 0 {
		return -1
	}
	return int(d.Topology.Nodes[0].ID)
}

// profileNames maps each profile carved here to the resources it is
// advertised under: <domain>/<profile>, and NVIDIA's name where asked and
// unique. A name the kubelet would refuse is logged once and not served.
func (m *Manager) profileNames(vgpus []engine.PodVGPU) map[string][]string {
	out := map[string][]string{}
	nvidia := map[string][]string{} // NVIDIA name -> profiles
	for _, x := range vgpus {
		if x.Profile == "" || out[x.Profile] != nil {
			continue
		}
		out[x.Profile] = []string{}
		if r, err := ResourceName(m.cfg.ResourceDomain, x.Profile); err == nil {
			out[x.Profile] = append(out[x.Profile], r)
		} else {
			m.refuseOnce(m.cfg.ResourceDomain+"/"+x.Profile, err.Error())
		}
		if !m.cfg.NVIDIAResourceNames {
			continue
		}
		if p, ok := m.engine.Catalog().Get(x.Profile); ok {
			if n, ok := NVIDIAName(p); ok {
				nvidia[n] = append(nvidia[n], x.Profile)
			}
		}
	}
	for n, profs := range nvidia {
		r, err := ResourceName(NVIDIADomain, n)
		switch {
		case err != nil:
			m.refuseOnce(NVIDIADomain+"/"+n, err.Error())
		case len(profs) > 1:
			slices.Sort(profs)
			m.refuseOnce(r, fmt.Sprintf("profiles %v carved here all have NVIDIA's type name %q: the NVIDIA resource name would not say which; use the %s names",
				profs, n, m.cfg.ResourceDomain))
		default:
			out[profs[0]] = append(out[profs[0]], r)
		}
	}
	return out
}

// refuseOnce logs why a resource is not served, once per reason.
func (m *Manager) refuseOnce(resource, why string) {
	if m.refused[resource] == why {
		return
	}
	m.refused[resource] = why
	m.log.Warn("resource not served to the kubelet", "resource", resource, "why", why)
}

func sortedKeys[V any](mp map[string]V) []string {
	ks := make([]string, 0, len(mp))
	for k := range mp {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
