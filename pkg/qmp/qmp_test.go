package qmp

import (
	"errors"
	"strings"
	"testing"
)

// Replies as QEMU 10.0 gives them in the lab (../shared/LAB.md): an mtty
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
