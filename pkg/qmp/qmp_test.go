package qmp

import (
	"errors"
	"strings"
	"testing"
)

// Replies as QEMU 10.0 gives them in the lab (docs/lab.md): an mtty
// VM without enable-migration, and one migrating.
const (
	blocked  = `{"return": {"blocked-reasons": ["VFIO device doesn't support migration"]}, "id": "libvirt-42"}`
	running  = `{"return": {"status": "active", "vfio": {"transferred": 60}, "ram": {"total": 67108864}}, "id": "libvirt-43"}`
	notFound = `{"id": "libvirt-44", "error": {"class": "CommandNotFound", "desc": "The command query-migrate has not been found"}}`
)

func TestQueryMigrate(t *testing.T) {
	var sent string
	m := New(func(cmd string) (string, error) {
		sent = cmd
		return blocked, nil
	})
	info, err := QueryMigrate(m)
	if err != nil || len(info.BlockedReasons) != 1 || !strings.Contains(info.BlockedReasons[0], "VFIO device") {
		t.Fatalf("blocked: %+v, %v", info, err)
	}
	if sent != `{"execute":"query-migrate"}` {
		t.Fatalf("sent %s", sent)
	}
	info, err = QueryMigrate(New(func(string) (string, error) { return running, nil }))
	if err != nil || info.Status != "active" || info.VFIO == nil || info.VFIO.Transferred != 60 || len(info.BlockedReasons) != 0 {
		t.Fatalf("running: %+v, %v", info, err)
	}
	if _, err := QueryMigrate(New(func(string) (string, error) { return notFound, nil })); err == nil || !strings.Contains(err.Error(), "CommandNotFound") {
		t.Fatalf("error reply: %v", err)
	}
	if _, err := QueryMigrate(New(func(string) (string, error) { return "", errors.New("domain is not running") })); err == nil || !strings.Contains(err.Error(), "QMP query-migrate: domain is not running") {
		t.Fatalf("passthrough error: %v", err)
	}
	if _, err := QueryMigrate(New(func(string) (string, error) { return "{", nil })); err == nil {
		t.Fatal("a truncated reply was accepted")
	}
}

func TestDirtyRate(t *testing.T) {
	var sent []string
	replies := []string{`{"return": {}}`, `{"return": {"status": "measuring", "sample-pages": 512, "mode": "page-sampling"}}`,
		`{"return": {"status": "measured", "sample-pages": 512, "dirty-rate": 60, "mode": "page-sampling", "start-time": 15841, "calc-time": 1}}`}
	m := New(func(cmd string) (string, error) {
		sent = append(sent, cmd)
		r := replies[0]
		replies = replies[1:]
		return r, nil
	})
	if err := CalcDirtyRate(m, 1, 0); err != nil || sent[0] != `{"execute":"calc-dirty-rate","arguments":{"calc-time":1}}` {
		t.Fatalf("calc: %v, sent %s", err, sent)
	}
	if r, err := QueryDirtyRate(m); err != nil || r.Status != "measuring" {
		t.Fatalf("query while measuring: %+v, %v", r, err)
	}
	if r, err := QueryDirtyRate(m); err != nil || r.Status != "measured" || r.MiBs != 60 {
		t.Fatalf("query measured: %+v, %v", r, err)
	}
	replies = []string{`{"return": {}}`, `{"error": {"class": "GenericError", "desc": "Parameter 'max-cpu-throttle' expects an integer in the range of 0 to 99"}}`}
	if err := CalcDirtyRate(m, 1, 16384); err != nil || sent[3] != `{"execute":"calc-dirty-rate","arguments":{"calc-time":1,"sample-pages":16384}}` {
		t.Fatalf("calc with sample pages: %v, sent %s", err, sent)
	}
	if err := SetMigrateParameters(m, map[string]any{"max-cpu-throttle": 120}); err == nil || !strings.Contains(err.Error(), "QMP migrate-set-parameters: GenericError: Parameter 'max-cpu-throttle'") ||
		sent[4] != `{"execute":"migrate-set-parameters","arguments":{"max-cpu-throttle":120}}` {
		t.Fatalf("set parameters: %v, sent %s", err, sent)
	}
}
