package deviceplugin

import (
	"context"
	"fmt"
	"slices"
	"strings"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// CheckUpdates applies, on Run's goroutine, the Change pending as Run
// would, then compares every endpoint's list with the lists a full list
// makes now: diff is "" when they agree. incremental and full count the
// changes applied so far by an update and by a full list.
func (m *Manager) CheckUpdates(ctx context.Context) (diff string, incremental, full int) {
	done := make(chan struct{})
	m.probe <- func() {
		defer close(done)
		select {
		case <-m.changes.C():
			m.changed(ctx, m.changes.Take())
		default:
		}
		incremental, full = m.updates.incremental, m.updates.full
		want, err := m.lists(ctx)
		if err != nil {
			diff = err.Error()
			return
		}
		var out []string
		for _, res := range sortedKeys(want) {
			var have []*pluginapi.Device
			if ep := m.endpoints[res]; ep != nil {
				have = ep.devices
			}
			if !slices.EqualFunc(have, want[res].devices, sameDevice) {
				out = append(out, fmt.Sprintf("%s: updated %s, full %s", res, devList(have), devList(want[res].devices)))
			}
		}
		for res, ep := range m.endpoints {
			if _, ok := want[res]; !ok && len(ep.devices) > 0 {
				out = append(out, fmt.Sprintf("%s: updated %s, full none", res, devList(ep.devices)))
			}
		}
		diff = strings.Join(out, "; ")
	}
	<-done
	return diff, incremental, full
}

func devList(ds []*pluginapi.Device) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = fmt.Sprintf("%s/%s/%d", d.ID, d.Health, numaOf(d))
	}
	return "[" + strings.Join(parts, " ") + "]"
}
