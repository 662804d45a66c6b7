package nodeagent

import (
	"os"
	"strings"
	"testing"
)

// TestModuleDependsOnNoServer keeps the node module below the servers: it
// needs proto (and its pod rules) and the bus, never the services module
// (the stages) nor the store (ops/processes/nodewire wires the agent to them).
func TestModuleDependsOnNoServer(t *testing.T) {
	mod, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for _, forbidden := range []string{"github.com/podflow/podflow/services", "github.com/podflow/podflow/raftstore"} {
		for _, line := range strings.Split(string(mod), "\n") {
			if f := strings.Fields(line); len(f) > 0 && (f[0] == forbidden || (len(f) > 1 && (f[0] == "require" || f[0] == "replace") && f[1] == forbidden)) {
				t.Errorf("nodeagent/go.mod requires %s: %q", forbidden, strings.TrimSpace(line))
			}
		}
	}
}
