package apiserver_test

import (
	"fmt"
	"strings"
	"testing"
)

// TestRefusedPodFieldsHTTPS: on the HTTPS front door a pod with a field
// podflow refuses gets 422 Invalid naming the field path — whether the
// proto cannot hold the field (refused as the body is decoded, under every
// fieldValidation) or holds it and admission refuses it — and is not
// stored; Kubernetes defaults of refused fields are accepted.
func TestRefusedPodFieldsHTTPS(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{})
	admin := s.client(t, adminToken)
	pods := s.url + "/api/v1/namespaces/default/pods"
	tests := []struct {
		name, query, spec, container string
		field, message               string
	}{
		{name: "not in the proto", spec: `"resources":{"limits":{"cpu":"10m"}},`,
			field: "spec.resources", message: `Pod "p" is invalid: spec.resources: Forbidden: podflow does not support pod-level resources`},
		{name: "not in the proto, Strict", query: "?fieldValidation=Strict", spec: `"readinessGates":[{"conditionType":"example.com/ready"}],`,
			field: "spec.readinessGates", message: "podflow does not support readiness gates"},
		{name: "with an unknown field too, Warn", query: "?fieldValidation=Warn", spec: `"hostnameOverride":"h",`, container: `,"imagePullPolcy":"Always"`,
			field: "spec.hostnameOverride", message: "podflow does not support hostnameOverride"},
		{name: "container field", container: `,"livenessProbe":{"grpc":{"port":9000,"mode":"TLS"}}`,
			field: "spec.containers[0].livenessProbe.grpc.mode", message: "podflow does not support gRPC probes over TLS (grpc.mode)"},
		{name: "in the proto, refused by admission", spec: `"volumes":[{"name":"d","persistentVolumeClaim":{"claimName":"data"}}],`,
			field: "spec.volumes[0].persistentVolumeClaim", message: "podflow does not support PersistentVolumeClaims: podflow has no storage provisioner"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body := fmt.Sprintf(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{%s"containers":[{"name":"c","image":"nginx"%s}]}}`, tc.spec, tc.container)
			code, out, _ := do(t, admin, "POST", pods+tc.query, "application/json", body)
			if code != 422 || path(out, "reason") != "Invalid" {
				t.Fatalf("%d %v, want 422 Invalid", code, out)
			}
			if msg := fmt.Sprint(out["message"]); !strings.Contains(msg, tc.message) {
				t.Errorf("message %q, want it to contain %q", msg, tc.message)
			}
			causes, _ := path(out, "details.causes").([]any)
			if len(causes) != 1 || causes[0].(map[string]any)["field"] != tc.field {
				t.Errorf("causes %v, want one for %s", causes, tc.field)
			}
			if code, _, _ := do(t, admin, "GET", pods+"/p", "", ""); code != 404 {
				t.Errorf("refused pod stored: GET %d", code)
			}
		})
	}
	t.Run("warnings reach the client", func(t *testing.T) {
		body := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"warned"},"spec":{"nodeSelector":{"beta.kubernetes.io/os":"linux"},"containers":[{"name":"c","image":"nginx"}]}}`
		code, out, hdr := do(t, admin, "POST", pods+"?dryRun=All", "application/json", body)
		want := `299 - "spec.nodeSelector[beta.kubernetes.io/os]: deprecated since v1.14; use \"kubernetes.io/os\" instead"`
		if code != 201 || hdr.Get("Warning") != want {
			t.Fatalf("%d %v: Warning %q, want %q", code, out, hdr.Values("Warning"), want)
		}
	})
	t.Run("Kubernetes defaults are accepted", func(t *testing.T) {
		body := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"defaults"},"spec":{"dnsPolicy":"ClusterFirst","enableServiceLinks":false,
"containers":[{"name":"c","image":"nginx","terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File"}]}}`
		if code, out, _ := do(t, admin, "POST", pods, "application/json", body); code != 201 {
			t.Fatalf("%d %v", code, out)
		}
	})
}
