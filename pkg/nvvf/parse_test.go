package nvvf

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseCreatable(t *testing.T) {
	in := "ID    : vGPU Name\n1145  : NVIDIA L40S-1B\n\n1155  : NVIDIA L40S-24Q\n  \n"
	got, err := ParseCreatable(in)
	if err != nil {
		t.Fatal(err)
	}
	want := []VGPUType{{1145, "NVIDIA L40S-1B"}, {1155, "NVIDIA L40S-24Q"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ParseCreatable = %v, want %v", got, want)
	}

	for _, empty := range []string{"", "ID    : vGPU Name\n", "\n\n"} {
		got, err := ParseCreatable(empty)
		if err != nil || len(got) != 0 {
			t.Errorf("ParseCreatable(%q) = %v, %v; want nothing, no error", empty, got, err)
		}
	}

	bad := map[string]string{
		"ID    : vGPU Name\n1145  NVIDIA L40S-1B\n": "line 2",
		"ID    : vGPU Name\nabc : NVIDIA L40S-1B\n": "line 2",
		"1145 :\n":                  "line 1",
		"0 : zero\n":                "line 1",
		"-3 : negative\n":           "line 1",
		"1145 : ok\n\n\nnonsense\n": "line 4",
	}
	for in, line := range bad {
		_, err := ParseCreatable(in)
		if err == nil || !strings.Contains(err.Error(), line) {
			t.Errorf("ParseCreatable(%q) = %v, want an error naming %s", in, err, line)
		}
	}
}

func FuzzParseCreatable(f *testing.F) {
	f.Add("ID    : vGPU Name\n1145  : NVIDIA L40S-1B\n")
	f.Add("1:a\n2 : b:c\n")
	f.Fuzz(func(t *testing.T, s string) {
		ts, err := ParseCreatable(s)
		if err != nil {
			return
		}
		for _, v := range ts {
			if v.ID <= 0 || v.Name == "" || strings.ContainsRune(v.Name, '\n') {
				t.Fatalf("%q parsed into bad entry %+v", s, v)
			}
		}
	})
}
