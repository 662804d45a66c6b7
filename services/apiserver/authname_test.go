package apiserver_test

import (
	"context"
	"net/http"
	"net/url"
	"testing"
	"time"

	k8scorev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podflow/podflow/services/auth"
)

// TestListAuthorizedByFieldSelectorName: a list or watch whose field
// selector requires metadata.name=NAME is authorized for NAME, as
// kube-apiserver's RequestInfoFactory makes it: alice, bound to the
// bootstrap Role extension-apiserver-authentication-reader (get, list,
// watch of that one ConfigMap, as an extension API server is), lists and
// watches it by name, and is refused a list of every ConfigMap and one
// selecting another name.
func TestListAuthorizedByFieldSelectorName(t *testing.T) {
	s := startSystem(t, options{})
	cs := s.adminClientset(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, name := range []string{auth.ExtensionAPIServerAuthentication, "other"} {
		if _, err := cs.CoreV1().ConfigMaps("kube-system").Create(ctx, &k8scorev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}},
			metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cs.RbacV1().RoleBindings("kube-system").Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "alice-auth-reader"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: auth.RoleExtensionAuthReader},
		Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: "alice"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	alice := s.client(t, aliceToken)
	base := s.url + "/api/v1/namespaces/kube-system/configmaps"
	byName := func(name string) string { return url.QueryEscape("metadata.name=" + name) }
	// The Role may be read through an informer's cache: eventually.
	for {
		code, body, _ := do(t, alice, "GET", base+"?fieldSelector="+byName(auth.ExtensionAPIServerAuthentication), "", "")
		if code == http.StatusOK {
			items, _ := body["items"].([]any)
			if len(items) != 1 || path(items[0].(map[string]any), "metadata.name") != auth.ExtensionAPIServerAuthentication {
				t.Fatalf("alice's list by name: %v", body)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("alice's list by name: %d %v", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code, body, _ := do(t, alice, "GET", base+"?watch=true&timeoutSeconds=1&fieldSelector="+byName(auth.ExtensionAPIServerAuthentication), "", ""); code != http.StatusOK {
		t.Fatalf("alice's watch by name: %d %v", code, body)
	}
	for _, u := range []string{base, base + "?fieldSelector=" + byName("other"), base + "?watch=true&fieldSelector=" + byName("other"),
		base + "?fieldSelector=" + url.QueryEscape("metadata.name!="+auth.ExtensionAPIServerAuthentication)} {
		if code, body, _ := do(t, alice, "GET", u, "", ""); code != http.StatusForbidden {
			t.Errorf("alice's GET %s: %d %v, want 403", u, code, body)
		}
	}
}
