package apiserver_test

import (
	"fmt"
	"sync"
	"testing"
)

// TestPatchRetriesConflicts: patches without a resourceVersion
// precondition never fail with 409 however many race on one object (kubectl
// cordon and label during a node's status updates), and none is lost; a
// patch with a stale resourceVersion precondition still gets its 409.
func TestPatchRetriesConflicts(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{})
	admin := s.client(t, adminToken)
	node := s.url + "/api/v1/nodes/n1"
	code, body, _ := do(t, admin, "POST", s.url+"/api/v1/nodes", "application/json",
		`{"apiVersion":"v1","kind":"Node","metadata":{"name":"n1","labels":{"base":"x"}}}`)
	if code != 201 {
		t.Fatalf("create node: %d %v", code, body)
	}
	stale := path(body, "metadata.resourceVersion").(string)

	const n = 12
	types := []string{"application/merge-patch+json", "application/strategic-merge-patch+json", "application/json-patch+json"}
	var wg sync.WaitGroup
	codes := make([]int, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ct := types[i%len(types)]
			patch := fmt.Sprintf(`{"metadata":{"labels":{"l%d":"v"}}}`, i)
			if ct == "application/json-patch+json" {
				patch = fmt.Sprintf(`[{"op":"add","path":"/metadata/labels/l%d","value":"v"}]`, i)
			}
			codes[i], _, _ = do(t, admin, "PATCH", node, ct, patch)
		}()
	}
	wg.Wait()
	for i, c := range codes {
		if c != 200 {
			t.Errorf("patch %d: %d", i, c)
		}
	}
	code, body, _ = do(t, admin, "GET", node, "", "")
	if code != 200 {
		t.Fatalf("get: %d %v", code, body)
	}
	for i := range n { // every patch added a label: none may be lost
		if path(body, fmt.Sprintf("metadata.labels.l%d", i)) != "v" {
			t.Errorf("label l%d lost: %v", i, path(body, "metadata.labels"))
		}
	}

	t.Run("precondition", func(t *testing.T) {
		for _, c := range []struct{ ct, patch string }{
			{"application/merge-patch+json", fmt.Sprintf(`{"metadata":{"resourceVersion":%q,"labels":{"x":"y"}}}`, stale)},
			{"application/json-patch+json", fmt.Sprintf(`[{"op":"test","path":"/metadata/resourceVersion","value":%q}]`, stale)},
		} {
			code, body, _ := do(t, admin, "PATCH", node, c.ct, c.patch)
			if code != 409 && code != 422 {
				t.Errorf("%s with a stale resourceVersion: %d %v", c.ct, code, body)
			}
		}
	})
}
