package apiserver_test

import (
	"fmt"
	"testing"
)

// TestServiceAccountPullSecretsHTTPS: a pod created under a ServiceAccount
// with imagePullSecrets, naming none itself, is stored with them (as
// Kubernetes' ServiceAccount admission plugin copies them); a pod with
// its own keeps its own.
func TestServiceAccountPullSecretsHTTPS(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{})
	admin := s.client(t, adminToken)
	base := s.url + "/api/v1/namespaces/default/"
	sa := `{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"builder"},"imagePullSecrets":[{"name":"regcred"},{"name":"mirror"}]}`
	if code, out, _ := do(t, admin, "POST", base+"serviceaccounts", "application/json", sa); code != 201 {
		t.Fatalf("create serviceaccount: %d %v", code, out)
	}
	for _, tc := range []struct{ name, own, want string }{
		{"inherits", "", "[map[name:regcred] map[name:mirror]]"},
		{"own", `"imagePullSecrets":[{"name":"mine"}],`, "[map[name:mine]]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := fmt.Sprintf(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":%q},"spec":{"serviceAccountName":"builder",%s"containers":[{"name":"c","image":"nginx"}]}}`, tc.name, tc.own)
			if code, out, _ := do(t, admin, "POST", base+"pods", "application/json", body); code != 201 {
				t.Fatalf("%d %v", code, out)
			}
			code, out, _ := do(t, admin, "GET", base+"pods/"+tc.name, "", "")
			if got := fmt.Sprint(path(out, "spec.imagePullSecrets")); code != 200 || got != tc.want {
				t.Errorf("GET %d: imagePullSecrets %s, want %s", code, got, tc.want)
			}
		})
	}
}
