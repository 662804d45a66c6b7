package registry_test

import (
	"strings"
	"testing"

	"github.com/podflow/podflow/services/registry"
)

const statefulSet = `apiVersion: apps/v1
kind: StatefulSet
metadata: {name: web, namespace: shop}
spec:
  serviceName: web
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: nginx}]
`

// TestStatefulSetClaimTemplatesRefused: podflow has no storage
// provisioner, so a StatefulSet with volumeClaimTemplates is refused 422
// naming the field, on create and on update; one without is accepted.
func TestStatefulSetClaimTemplatesRefused(t *testing.T) {
	r := registry.Default()
	if _, st := r.PrepareCreate(ctx, nil, "", decode(t, statefulSet)); st != nil {
		t.Fatalf("a StatefulSet without volumeClaimTemplates: %v", st)
	}
	withClaims := statefulSet + `  volumeClaimTemplates:
  - metadata: {name: data}
    spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}
`
	_, st := r.PrepareCreate(ctx, nil, "", decode(t, withClaims))
	const msg = `StatefulSet.apps "web" is invalid: spec.volumeClaimTemplates: Forbidden: podflow does not support ` + registry.NoClaimTemplates
	if st.GetCode() != 422 || st.GetReason() != "Invalid" || st.GetMessage() != msg {
		t.Fatalf("create with volumeClaimTemplates: %d %s\n got %s\nwant %s", st.GetCode(), st.GetReason(), st.GetMessage(), msg)
	}
	if len(st.GetCauses()) != 1 || st.GetCauses()[0].GetField() != "spec.volumeClaimTemplates" || st.GetCauses()[0].GetType() != "FieldValueForbidden" {
		t.Errorf("causes %v", st.GetCauses())
	}
	old := created(t, statefulSet)
	_, st = r.PrepareUpdate(ctx, nil, "", decode(t, strings.Replace(withClaims, "namespace: shop}", "namespace: shop, resourceVersion: \"5\"}", 1)), old)
	if st.GetCode() != 422 || !strings.Contains(st.GetMessage(), "spec.volumeClaimTemplates: Forbidden: podflow does not support PersistentVolumeClaims") {
		t.Errorf("update adding volumeClaimTemplates: %v", st)
	}
}
