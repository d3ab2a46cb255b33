package ledger

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/vgpu-project/vgpu/pkg/pci"
	"github.com/vgpu-project/vgpu/pkg/sriov"
)

// IntentKind names a multi-step change to the host.
type IntentKind string

const (
	IntentCarve    IntentKind = "carve"
	IntentUncarve  IntentKind = "uncarve"
	IntentAllocate IntentKind = "allocate"
	IntentRelease  IntentKind = "release"
	// IntentMdevSwap gives a carved mdev a domain's identity: remove mdev
	// From, create To (same type, same parent). Data says which.
	IntentMdevSwap IntentKind = "mdev-swap"
	// IntentPodClaim: vGPUs claimed for a pod's container and not yet
	// answered to the kubelet. Open at start, the kubelet never had the
	// answer, so the claim is freed. Data names the claim.
	IntentPodClaim IntentKind = "pod-claim"
	// IntentAutoprobe: a carve turned the sriov_drivers_autoprobe of PF
	// GPU from the value Data records (carve.AutoprobeJournal); it ends
	// once the setting is back. Open at start, the repair puts it back.
	IntentAutoprobe IntentKind = "autoprobe"
)

// Intent is a change begun and not (yet) ended. Kernel changes cannot join
// a ledger transaction, so vgpud journals them: begin, change the kernel,
// end. An intent still open at start names what a crash interrupted, for
// reconcile to finish or undo.
type Intent struct {
	ID      uint64      `json:"id"`
	Kind    IntentKind  `json:"kind"`
	GPU     pci.Address `json:"gpu,omitzero"`
	Detail  string      `json:"detail,omitempty"` // free-form: profile, vGPU, domain
	Started time.Time   `json:"started"`
	// Data is what a repair needs beyond Detail, as the caller encoded it
	// (JSON); nil for most kinds.
	Data json.RawMessage `json:"data,omitempty"`
}

func (i Intent) String() string {
	s := fmt.Sprintf("#%d %s", i.ID, i.Kind)
	if !i.GPU.IsZero() {
		s += " on " + i.GPU.String()
	}
	if i.Detail != "" {
		s += ": " + i.Detail
	}
	return s + " (started " + i.Started.UTC().Format(time.RFC3339) + ")"
}

// intentKey sorts numerically: bbolt orders keys bytewise.
func intentKey(id uint64) string {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], id)
	return string(b[:])
}

// BeginIntent journals a change about to start and returns its id.
func (t *Tx) BeginIntent(kind IntentKind, gpu pci.Address, detail string) (uint64, error) {
	return t.BeginIntentData(kind, gpu, detail, nil)
}

// BeginIntentData is BeginIntent with data a repair needs, stored as JSON
// (nil stores none).
func (t *Tx) BeginIntentData(kind IntentKind, gpu pci.Address, detail string, data any) (uint64, error) {
	var raw json.RawMessage
	if data != nil {
		b, err := json.Marshal(data)
		if err != nil {
			return 0, t.wrap("encode the data of a "+string(kind)+" intent", err)
		}
		raw = b
	}
	id, err := t.bucket(bucketIntents).NextSequence()
	if err != nil {
		return 0, t.wrap("number an intent", err)
	}
	return id, t.put(bucketIntents, intentKey(id), Intent{ID: id, Kind: kind, GPU: gpu, Detail: detail, Started: t.Now(), Data: raw})
}

// EndIntent closes intent id. Ending one already ended is a no-op, so a
// reconcile that repaired it can end it again safely.
func (t *Tx) EndIntent(id uint64) error { return t.delete(bucketIntents, intentKey(id)) }

// OpenIntents returns the intents begun and not ended, oldest first.
func (t *Tx) OpenIntents() ([]Intent, error) {
	return records[Intent](t, bucketIntents, nil)
}

// BeginIntent journals a change about to start and returns its id.
func (l *Ledger) BeginIntent(kind IntentKind, gpu pci.Address, detail string) (uint64, error) {
	return updateValue(l, func(tx *Tx) (uint64, error) { return tx.BeginIntent(kind, gpu, detail) })
}

// EndIntent closes intent id.
func (l *Ledger) EndIntent(id uint64) error {
	return l.Update(func(tx *Tx) error { return tx.EndIntent(id) })
}

// OpenIntents returns the intents begun and not ended, oldest first.
func (l *Ledger) OpenIntents() ([]Intent, error) {
	return viewValue(l, (*Tx).OpenIntents)
}

// autoprobeData is an IntentAutoprobe's Data.
type autoprobeData struct {
	Was *bool `json:"was"` // a pointer: a record without it is not "off"
}

// BeginAutoprobe implements carve.AutoprobeJournal: an IntentAutoprobe.
func (l *Ledger) BeginAutoprobe(pf pci.Address, was bool) (uint64, error) {
	detail := "sriov_drivers_autoprobe was 0"
	if was {
		detail = "sriov_drivers_autoprobe was 1"
	}
	return updateValue(l, func(tx *Tx) (uint64, error) {
		return tx.BeginIntentData(IntentAutoprobe, pf, detail, autoprobeData{Was: &was})
	})
}

// EndAutoprobe implements carve.AutoprobeJournal.
func (l *Ledger) EndAutoprobe(id uint64) error { return l.EndIntent(id) }

// OpenAutoprobes implements carve.AutoprobeJournal: the open
// IntentAutoprobes.
func (l *Ledger) OpenAutoprobes() ([]sriov.AutoprobeRecord, error) {
	intents, err := l.OpenIntents()
	if err != nil {
		return nil, err
	}
	var out []sriov.AutoprobeRecord
	for _, in := range intents {
		if in.Kind != IntentAutoprobe {
			continue
		}
		var d autoprobeData
		err := json.Unmarshal(in.Data, &d)
		if err == nil && d.Was == nil {
			err = errors.New(`no "was"`)
		}
		if err != nil {
			return nil, fmt.Errorf("decode the data of intent %s in ledger %s: %w", in, l.path, err)
		}
		out = append(out, sriov.AutoprobeRecord{ID: in.ID, PF: in.GPU, Was: *d.Was})
	}
	return out, nil
}
