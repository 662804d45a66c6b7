package manifest

import (
	"strings"
	"testing"
)

// TestNodeWriteOfWhatReadsReturn: a Node sent back as podflow's read
// returned it (kubectl cordon, taint and drain do: zero-valued
// daemonEndpoints and nodeInfo.bootID, kubeProxyVersion, systemUUID,
// which podflow does not keep) decodes without a warning; a value that
// would be lost still warns.
func TestNodeWriteOfWhatReadsReturn(t *testing.T) {
	node := func(bootID string) []byte {
		return []byte(`apiVersion: v1
kind: Node
metadata: {name: n1}
spec: {unschedulable: true}
status:
  daemonEndpoints: {kubeletEndpoint: {Port: 0}}
  nodeInfo: {bootID: "` + bootID + `", kubeProxyVersion: "", systemUUID: "", architecture: amd64, kubeletVersion: podflow}
`)
	}
	objs, err := Decode(node(""))
	if err != nil {
		t.Fatal(err)
	}
	if w := objs[0].Warnings; len(w) != 0 {
		t.Fatalf("warnings for what podflow's read returns: %q", w)
	}
	objs, err = Decode(node("b-1"))
	if err != nil {
		t.Fatal(err)
	}
	if w := strings.Join(objs[0].Warnings, "\n"); !strings.Contains(w, `field "status.nodeInfo.bootID" is not supported by podflow and was dropped`) || strings.Contains(w, "daemonEndpoints") {
		t.Fatalf("warnings %q, want bootID's only", w)
	}
}
