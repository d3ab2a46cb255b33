package config

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
)

// The hand-written group name check accepts exactly what the pattern it
// replaces accepts (the pattern stays here, where compiling it is free).
// A parent's name is vgpu.ValidParentName's, tested with every layer in
// pkg/alloc's TestParentNamesAgree.
func TestNamesMatchTheirPatterns(t *testing.T) {
	group := regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]{0,31}\$?$`)
	const alphabet = "aZ_9.-:$/ é"
	rng := rand.New(rand.NewPCG(1, 2))
	cases := []string{"", "$", "a$", "a$$", "libvirt", "9a", "_", "a.b-c", "mbochs", "0000:03:00.0", ".", "..", "a/b",
		strings.Repeat("a", 32), strings.Repeat("a", 33), strings.Repeat("a", 32) + "$", strings.Repeat("b", 255), strings.Repeat("b", 256)}
	for range 20000 {
		n := rng.IntN(40)
		if rng.IntN(10) == 0 {
			n = 250 + rng.IntN(10)
		}
		var b strings.Builder
		for range n {
			b.WriteString(string([]rune(alphabet)[rng.IntN(len([]rune(alphabet)))]))
		}
		cases = append(cases, b.String())
	}
	for _, s := range cases {
		if got, want := isGroupName(s), group.MatchString(s); got != want {
			t.Errorf("isGroupName(%q) = %v, the pattern says %v", s, got, want)
		}
	}
}
