package raftstore_test

import (
	"os"
	"strings"
	"testing"
)

// TestModuleRequiresOnlyProto: raftstore sits below the bus and the
// services; of podflow's modules it requires proto alone (its tests'
// certificate authority is raftstoretest's own, not bus/bustest's).
func TestModuleRequiresOnlyProto(t *testing.T) {
	b, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(line), "require "))
		if len(f) < 2 || !strings.HasPrefix(f[0], "github.com/podflow/podflow/") || f[0] == "github.com/podflow/podflow/raftstore" {
			continue
		}
		if f[0] != "github.com/podflow/podflow/proto" {
			t.Errorf("go.mod requires %s; raftstore may require only github.com/podflow/podflow/proto", f[0])
		}
	}
}
