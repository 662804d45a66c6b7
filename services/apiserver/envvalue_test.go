package apiserver_test

import (
	"fmt"
	"strings"
	"testing"
)

// TestEnvValueFromHTTPS: on the HTTPS front door an env variable whose
// valueFrom is only a resourceFieldRef is created, and valueFrom's one-of
// is refused 422 with Kubernetes' messages.
func TestEnvValueFromHTTPS(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{})
	admin := s.client(t, adminToken)
	pods := s.url + "/api/v1/namespaces/default/pods"
	body := func(name, env string) string {
		return fmt.Sprintf(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":%q},"spec":{"containers":[{"name":"c","image":"nginx",
"resources":{"limits":{"memory":"64Mi"}},"env":[%s]}]}}`, name, env)
	}
	t.Run("resourceFieldRef alone is created", func(t *testing.T) {
		code, out, _ := do(t, admin, "POST", pods, "application/json",
			body("res", `{"name":"MEM","valueFrom":{"resourceFieldRef":{"resource":"limits.memory","divisor":"1Mi"}}}`))
		if code != 201 {
			t.Fatalf("%d %v, want 201", code, out)
		}
		if got := path(out, "spec.containers"); !strings.Contains(fmt.Sprint(got), "limits.memory") {
			t.Errorf("stored containers %v, want the resourceFieldRef", got)
		}
	})
	for _, tc := range []struct{ name, env, message string }{
		{"none", `{"name":"E","valueFrom":{}}`,
			"spec.containers[0].env[0].valueFrom: Invalid value: \"\": must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`"},
		{"two", `{"name":"E","valueFrom":{"resourceFieldRef":{"resource":"limits.memory"},"fieldRef":{"fieldPath":"metadata.name"}}}`,
			`spec.containers[0].env[0].valueFrom: Invalid value: "": may not have more than one field specified at a time`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, _ := do(t, admin, "POST", pods, "application/json", body("bad-"+tc.name, tc.env))
			if code != 422 || path(out, "reason") != "Invalid" {
				t.Fatalf("%d %v, want 422 Invalid", code, out)
			}
			if msg := fmt.Sprint(out["message"]); !strings.Contains(msg, tc.message) {
				t.Errorf("message %q, want it to contain %q", msg, tc.message)
			}
		})
	}
}
