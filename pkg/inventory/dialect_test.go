package inventory

import (
	"reflect"
	"testing"
)

func TestDialects(t *testing.T) {
	mdevTypes := []MdevType{{ID: "nvidia-222", Name: "GRID T4-4Q"}}
	cases := []struct {
		name string
		g    GPU
		want []Dialect
	}{
		{"plain", GPU{VendorID: 0x1234}, []Dialect{DialectPassthrough}},
		{"AMD SR-IOV, no VFs yet", GPU{VendorID: 0x1002, SRIOV: &SRIOV{TotalVFs: 16}},
			[]Dialect{DialectSRIOV, DialectPassthrough}},
		{"T4: PF mdev types; its VFs are not vGPUs", GPU{VendorID: 0x10de, DeviceID: 0x1eb8, MdevTypes: mdevTypes, SRIOV: &SRIOV{TotalVFs: 16}},
			[]Dialect{DialectMdev, DialectPassthrough}},
		{"T4 unbound: no types shown", GPU{VendorID: 0x10de, DeviceID: 0x1eb8, SRIOV: &SRIOV{TotalVFs: 16}},
			[]Dialect{DialectPassthrough}},
		{"GVT-g", GPU{VendorID: 0x8086, MdevTypes: mdevTypes}, []Dialect{DialectMdev, DialectPassthrough}},
		{"L40S before VFs: table", GPU{VendorID: 0x10de, DeviceID: 0x26b9, SRIOV: &SRIOV{TotalVFs: 32}},
			[]Dialect{DialectNVIDIAVF, DialectPassthrough}},
		{"A100 before VFs: table", GPU{VendorID: 0x10de, DeviceID: 0x20b0, SRIOV: &SRIOV{TotalVFs: 16}},
			[]Dialect{DialectSRIOVMdev, DialectPassthrough}},
		{"unknown NVIDIA before VFs: both", GPU{VendorID: 0x10de, DeviceID: 0x9999, SRIOV: &SRIOV{TotalVFs: 8}},
			[]Dialect{DialectNVIDIAVF, DialectSRIOVMdev, DialectPassthrough}},
		{"A100 id but VFs show per-VF types: hardware wins", GPU{VendorID: 0x10de, DeviceID: 0x20b0,
			SRIOV: &SRIOV{TotalVFs: 16, NumVFs: 1, VFs: []VF{{NVIDIA: &NVIDIAVF{}}}}},
			[]Dialect{DialectNVIDIAVF, DialectPassthrough}},
		{"VFs are mdev parents", GPU{VendorID: 0x10de, DeviceID: 0x9999,
			SRIOV: &SRIOV{TotalVFs: 16, NumVFs: 2, VFs: []VF{{}, {MdevTypes: mdevTypes}}}},
			[]Dialect{DialectSRIOVMdev, DialectPassthrough}},
		{"AMD with VFs on vfio-pci", GPU{VendorID: 0x1002, SRIOV: &SRIOV{TotalVFs: 16, NumVFs: 2, VFs: []VF{{}, {}}}},
			[]Dialect{DialectSRIOV, DialectPassthrough}},
	}
	for _, c := range cases {
		if got := dialects(&c.g); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: dialects = %v, want %v", c.name, got, c.want)
		}
	}
}
