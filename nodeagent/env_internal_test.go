package nodeagent

import "testing"

// The cases of Kubernetes' expansion tests
// (third_party/forked/golang/expansion), as podflow expands env values,
// command and args.
func TestExpand(t *testing.T) {
	vals := map[string]string{"VAR_A": "A", "VAR_B": "B", "VAR_C": "C", "VAR_REF": "$(VAR_A)", "VAR_EMPTY": ""}
	cases := []struct {
		name, in, want string
	}{
		{"whole string", "$(VAR_A)", "A"},
		{"repeat", "$(VAR_A)-$(VAR_A)", "A-A"},
		{"beginning", "$(VAR_A)-1", "A-1"},
		{"middle", "___$(VAR_B)___", "___B___"},
		{"end", "___$(VAR_C)", "___C"},
		{"compound", "$(VAR_A)_$(VAR_B)_$(VAR_C)", "A_B_C"},
		{"escaped reference", "$$(VAR_B)_$(VAR_A)", "$(VAR_B)_A"},
		{"escaped operator alone", "$$", "$"},
		{"value is not expanded again", "$(VAR_REF)", "$(VAR_A)"},
		{"empty value", "x$(VAR_EMPTY)y", "xy"},
		{"undefined stays", "$(VAR_DNE)", "$(VAR_DNE)"},
		{"empty name", "$()", "$()"},
		{"no parens", "$VAR_A", "$VAR_A"},
		{"operator at end", "VAR_A$", "VAR_A$"},
		{"incomplete reference", "$(VAR_A", "$(VAR_A"},
		{"incomplete after a reference", "$(VAR_A)$(VAR_B", "A$(VAR_B"},
		{"operator before operator and reference", "$$$(VAR_A)", "$A"},
		{"triple operator", "$$$", "$$"},
		{"dollar letter", "$a$(VAR_B)", "$aB"},
		{"nested parens", "$(VAR_A$(VAR_B))", "$(VAR_A$(VAR_B))"},
		{"no operator", "plain", "plain"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := expand(tc.in, vals); got != tc.want {
				t.Errorf("expand(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}
