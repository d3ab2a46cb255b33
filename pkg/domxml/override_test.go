package domxml

import (
	"os"
	"strings"
	"testing"
)

func TestSetMigration(t *testing.T) {
	doc, err := os.ReadFile("testdata/domain-mdev.xml")
	if err != nil {
		t.Fatal(err)
	}
	d, err := Parse(doc)
	if err != nil {
		t.Fatal(err)
	}
	out, err := SetMigration(doc, d.Request, MigrationProps("none"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	for _, want := range []string{`<alias name="ua-vgpu0"></alias>`, `<override xmlns="http://libvirt.org/schemas/domain/qemu/1.0">`,
		`<device alias="ua-vgpu0">`, `<property name="enable-migration" type="string" value="on">`,
		`<property name="x-device-dirty-page-tracking" type="string" value="off">`, "s3cret"} {
		if !strings.Contains(s, want) {
			t.Fatalf("SetMigration lacks %s:\n%s", want, s)
		}
	}
	// The request, the other hostdev and the metadata survive.
	back, err := Parse(out)
	if err != nil || !back.Request.Equal(*d.Request) || strings.Count(s, "<hostdev ") != 2 {
		t.Fatalf("after SetMigration: %+v, %v\n%s", back, err, s)
	}
	if strings.Count(s, `alias name="ua-vgpu`) != 1 {
		t.Fatalf("an alias went to a hostdev that is not a vGPU:\n%s", s)
	}
	// Again (idempotent), then without the vGPU: its override goes.
	again, err := SetMigration(out, d.Request, MigrationProps("none"))
	if err != nil || strings.Count(string(again), `<device alias="ua-vgpu0">`) != 1 {
		t.Fatalf("twice: %v\n%s", err, again)
	}
	gone, err := SetMigration(again, nil, nil)
	if err != nil || strings.Contains(string(gone), "ua-vgpu0\">") && strings.Contains(string(gone), "<device alias") {
		t.Fatalf("without the request: %v\n%s", err, gone)
	}
	if on := MigrationProps("device"); on[1].Value != "on" {
		t.Fatalf("device tracking: %+v", on)
	}
}
