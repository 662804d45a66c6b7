package apiserver_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// TestConcurrentCreateAlreadyExists: creates of one name racing each other
// (as the upstream webhook tests' createAuthReaderRoleBinding does from
// parallel processes) end with one 201 and, for every loser, kube-apiserver's
// 409 AlreadyExists — never "the object has been modified", which a client
// tolerating an existing object does not pass over.
func TestConcurrentCreateAlreadyExists(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{})
	cfg := &rest.Config{Host: s.url, BearerToken: adminToken, TLSClientConfig: rest.TLSClientConfig{CAData: s.ca.CertPEM},
		QPS: 100, Burst: 100}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const rounds, racers = 5, 8
	for round := range rounds {
		name := fmt.Sprintf("auth-reader-%d", round)
		rb := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "extension-apiserver-authentication-reader"},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "default", Namespace: "default"}},
		}
		var wg sync.WaitGroup
		errs := make([]error, racers)
		start := make(chan struct{})
		for i := range racers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, errs[i] = cs.RbacV1().RoleBindings("kube-system").Create(ctx, rb.DeepCopy(), metav1.CreateOptions{}) // client-go sets its kind
			}()
		}
		close(start)
		wg.Wait()
		created := 0
		for i, err := range errs {
			switch {
			case err == nil:
				created++
			case !apierrors.IsAlreadyExists(err):
				t.Errorf("round %d, create %d: %v (reason %q), want AlreadyExists", round, i, err, apierrors.ReasonForError(err))
			}
		}
		if created != 1 {
			t.Errorf("round %d: %d creates succeeded, want 1", round, created)
		}
	}
}
