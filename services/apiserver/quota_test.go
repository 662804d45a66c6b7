package apiserver_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	k8scorev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/auth"
)

// tenant makes namespace ns, gives alice the edit-like rights of a tenant
// there (pods, configmaps, services: create, get, list, delete) and
// returns the admin's and alice's clients.
func tenant(t *testing.T, ctx context.Context, s *system, ns string) (admin, alice *kubernetes.Clientset) {
	t.Helper()
	cfg := restConfig(s)
	admin = kubernetes.NewForConfigOrDie(cfg)
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &k8scorev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	role := &corev1.Role{Metadata: &corev1.ObjectMeta{Name: "tenant", Namespace: ns}, Rules: []*corev1.PolicyRule{
		{ApiGroups: []string{""}, Resources: []string{"pods", "configmaps", "services"}, Verbs: []string{"create", "get", "list", "delete"}}}}
	if _, err := s.store.Create(ctx, role); err != nil {
		t.Fatal(err)
	}
	if _, err := s.store.Create(ctx, &corev1.RoleBinding{Metadata: &corev1.ObjectMeta{Name: "alice-tenant", Namespace: ns},
		RoleRef:  &corev1.RoleRef{Kind: auth.KindRole, Name: "tenant", ApiGroup: auth.RBACGroup},
		Subjects: []*corev1.Subject{{Kind: auth.SubjectUser, Name: "alice"}}}); err != nil {
		t.Fatal(err)
	}
	acfg := rest.CopyConfig(cfg)
	acfg.BearerToken = aliceToken
	alice = kubernetes.NewForConfigOrDie(acfg)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := alice.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{}); err == nil {
			return admin, alice
		} else if time.Now().After(deadline) {
			t.Fatalf("alice's role is not in force: %v", err)
		}
	}
}

// createQuota creates a ResourceQuota and waits for the controller to
// fill its status (until then kube refuses what it limits: "status
// unknown for quota").
func createQuota(t *testing.T, ctx context.Context, admin *kubernetes.Clientset, ns, name string, hard k8scorev1.ResourceList, mod ...func(*k8scorev1.ResourceQuota)) {
	t.Helper()
	rq := &k8scorev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: k8scorev1.ResourceQuotaSpec{Hard: hard}}
	for _, m := range mod {
		m(rq)
	}
	if _, err := admin.CoreV1().ResourceQuotas(ns).Create(ctx, rq, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUsed(t, ctx, admin, ns, name, nil)
}

// waitUsed waits until quota ns/name's status.hard is its spec.hard and,
// for each resource of want, status.used equals it.
func waitUsed(t *testing.T, ctx context.Context, admin *kubernetes.Clientset, ns, name string, want map[string]string) *k8scorev1.ResourceQuota {
	t.Helper()
	var last *k8scorev1.ResourceQuota
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		rq, err := admin.CoreV1().ResourceQuotas(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		last = rq
		if len(rq.Status.Hard) != len(rq.Spec.Hard) {
			continue
		}
		ok := true
		for r, v := range want {
			got, has := rq.Status.Used[k8scorev1.ResourceName(r)]
			ok = ok && has && got.Cmp(resource.MustParse(v)) == 0
		}
		if ok {
			return rq
		}
	}
	t.Fatalf("quota %s/%s: status %+v, want used %v", ns, name, last.Status, want)
	return nil
}

func quotaConfigMap(name string) *k8scorev1.ConfigMap {
	return &k8scorev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"k": "v"}}
}

// wantForbidden asserts err is kube's 403 with exactly msg.
func wantForbidden(t *testing.T, err error, msg string) {
	t.Helper()
	if !apierrors.IsForbidden(err) {
		t.Fatalf("got %v, want 403 Forbidden %q", err, msg)
	}
	if got := err.(apierrors.APIStatus).Status().Message; got != msg {
		t.Fatalf("message %q\nwant    %q", got, msg)
	}
}

// TestQuotaConfigMapsFillNamespace: a tenant filling her namespace with
// ConfigMaps is refused at the quota's limit with kube-apiserver's
// message; deleting one frees its usage (the controller recomputes
// status.used) and the next create fits again.
func TestQuotaConfigMapsFillNamespace(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin, alice := tenant(t, ctx, s, "team")
	createQuota(t, ctx, admin, "team", "objects", k8scorev1.ResourceList{"count/configmaps": resource.MustParse("2"), "configmaps": resource.MustParse("5")})
	cms := alice.CoreV1().ConfigMaps("team")
	for _, n := range []string{"c1", "c2"} {
		if _, err := cms.Create(ctx, quotaConfigMap(n), metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s within the quota: %v", n, err)
		}
	}
	_, err := cms.Create(ctx, quotaConfigMap("c3"), metav1.CreateOptions{})
	wantForbidden(t, err, `configmaps "c3" is forbidden: exceeded quota: objects, requested: count/configmaps=1, used: count/configmaps=2, limited: count/configmaps=2`)
	if _, err := cms.Get(ctx, "c3", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the refused ConfigMap: %v, want 404", err)
	}
	waitUsed(t, ctx, admin, "team", "objects", map[string]string{"count/configmaps": "2", "configmaps": "2"})

	if err := cms.Delete(ctx, "c1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUsed(t, ctx, admin, "team", "objects", map[string]string{"count/configmaps": "1"})
	if _, err := cms.Create(ctx, quotaConfigMap("c3"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create after a delete freed usage: %v", err)
	}
	// Another namespace is not limited by team's quota.
	if _, err := admin.CoreV1().ConfigMaps("default").Create(ctx, quotaConfigMap("c9"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("a namespace without quota: %v", err)
	}
}

func cpuPod(name, cpu string) *k8scorev1.Pod {
	c := k8scorev1.Container{Name: "c", Image: "nginx"}
	if cpu != "" {
		c.Resources.Requests = k8scorev1.ResourceList{"cpu": resource.MustParse(cpu)}
	}
	return &k8scorev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: k8scorev1.PodSpec{Containers: []k8scorev1.Container{c}}}
}

// TestQuotaPodRequestsCPU: a pod through the pipeline is charged at
// admission: one over requests.cpu is PodRejected with kube's 403, one
// without a cpu request is refused (kube's "must specify"), and a
// BestEffort-scoped quota counts only BestEffort pods.
func TestQuotaPodRequestsCPU(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin, alice := tenant(t, ctx, s, "team")
	createQuota(t, ctx, admin, "team", "compute", k8scorev1.ResourceList{"requests.cpu": resource.MustParse("500m"), "pods": resource.MustParse("10")},
		func(rq *k8scorev1.ResourceQuota) {
			rq.Spec.Scopes = []k8scorev1.ResourceQuotaScope{k8scorev1.ResourceQuotaScopeNotBestEffort}
		})
	createQuota(t, ctx, admin, "team", "besteffort", k8scorev1.ResourceList{"pods": resource.MustParse("1")},
		func(rq *k8scorev1.ResourceQuota) {
			rq.Spec.Scopes = []k8scorev1.ResourceQuotaScope{k8scorev1.ResourceQuotaScopeBestEffort}
		})
	pods := alice.CoreV1().Pods("team")
	if _, err := pods.Create(ctx, cpuPod("p1", "300m"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("a pod within requests.cpu: %v", err)
	}
	_, err := pods.Create(ctx, cpuPod("p2", "300m"), metav1.CreateOptions{})
	wantForbidden(t, err, `pods "p2" is forbidden: exceeded quota: compute, requested: requests.cpu=300m, used: requests.cpu=300m, limited: requests.cpu=500m`)
	if _, err := pods.Create(ctx, cpuPod("p3", "200m"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("a pod filling requests.cpu exactly: %v", err)
	}
	waitUsed(t, ctx, admin, "team", "compute", map[string]string{"requests.cpu": "500m", "pods": "2"})
	// Burstable without a cpu request: kube's "must specify".
	mem := cpuPod("m1", "")
	mem.Spec.Containers[0].Resources.Requests = k8scorev1.ResourceList{"memory": resource.MustParse("64Mi")}
	_, err = pods.Create(ctx, mem, metav1.CreateOptions{})
	wantForbidden(t, err, `pods "m1" is forbidden: failed quota: compute: must specify requests.cpu for: c`)
	// A BestEffort pod is outside compute's scope, and besteffort's.
	if _, err := pods.Create(ctx, cpuPod("be1", ""), metav1.CreateOptions{}); err != nil {
		t.Fatalf("a BestEffort pod: %v", err)
	}
	_, err = pods.Create(ctx, cpuPod("be2", ""), metav1.CreateOptions{})
	wantForbidden(t, err, `pods "be2" is forbidden: exceeded quota: besteffort, requested: pods=1, used: pods=1, limited: pods=1`)
	if err := pods.Delete(ctx, "p1", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	waitUsed(t, ctx, admin, "team", "compute", map[string]string{"requests.cpu": "200m", "pods": "1"})
	if _, err := pods.Create(ctx, cpuPod("p2", "300m"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("after the delete freed 300m: %v", err)
	}
}

// TestQuotaConcurrentCreates is the race: 30 ConfigMaps and 12 pods
// created at once against quotas of 5 and 4 — every create is charged
// with a compare-and-swap on the quota, so exactly 5 and 4 are stored,
// never more, and status.used says so.
func TestQuotaConcurrentCreates(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	admin, alice := tenant(t, ctx, s, "team")
	createQuota(t, ctx, admin, "team", "q", k8scorev1.ResourceList{"count/configmaps": resource.MustParse("5"), "pods": resource.MustParse("4")})
	var wg sync.WaitGroup
	var mu sync.Mutex
	created := map[string]int{}
	for i := range 30 {
		wg.Go(func() {
			_, err := alice.CoreV1().ConfigMaps("team").Create(ctx, quotaConfigMap(fmt.Sprintf("c%d", i)), metav1.CreateOptions{})
			count(t, &mu, created, "configmaps", err)
		})
		if i < 12 {
			wg.Go(func() {
				_, err := alice.CoreV1().Pods("team").Create(ctx, cpuPod(fmt.Sprintf("p%d", i), ""), metav1.CreateOptions{})
				count(t, &mu, created, "pods", err)
			})
		}
	}
	wg.Wait()
	if created["configmaps"] != 5 || created["pods"] != 4 {
		t.Fatalf("created %v, want exactly 5 configmaps and 4 pods", created)
	}
	cms, _ := admin.CoreV1().ConfigMaps("team").List(ctx, metav1.ListOptions{})
	ps, _ := admin.CoreV1().Pods("team").List(ctx, metav1.ListOptions{})
	if len(cms.Items) != 5 || len(ps.Items) != 4 {
		t.Fatalf("stored %d configmaps and %d pods, want 5 and 4", len(cms.Items), len(ps.Items))
	}
	waitUsed(t, ctx, admin, "team", "q", map[string]string{"count/configmaps": "5", "pods": "4"})
}

// count tallies a successful create and fails on anything but quota's
// 403 (a 409 from an exhausted retry would hide a lost race).
func count(t *testing.T, mu *sync.Mutex, created map[string]int, what string, err error) {
	mu.Lock()
	defer mu.Unlock()
	switch {
	case err == nil:
		created[what]++
	case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "exceeded quota: q"):
	default:
		t.Errorf("create %s: %v", what, err)
	}
}

// TestQuotaKubectl: stock kubectl creates a quota and describes it with
// its Used and Hard columns, as against kube-apiserver.
func TestQuotaKubectl(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{})
	k := newStockKubectl(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin := kubernetes.NewForConfigOrDie(restConfig(s))
	k.must("", "create", "quota", "q", "--hard=count/configmaps=3,pods=2")
	waitUsed(t, ctx, admin, "default", "q", map[string]string{"count/configmaps": "0"})
	k.must("", "create", "configmap", "one", "--from-literal=a=b")
	waitUsed(t, ctx, admin, "default", "q", map[string]string{"count/configmaps": "1", "pods": "0"})
	out := k.must("", "describe", "quota", "q")
	for _, want := range []string{"Name:", "q", "Resource", "Used", "Hard", "count/configmaps  1     3", "pods              0     2"} {
		if !strings.Contains(out, want) {
			t.Fatalf("kubectl describe quota lacks %q:\n%s", want, out)
		}
	}
	k.must("", "create", "configmap", "two", "--from-literal=a=b")
	k.must("", "create", "configmap", "three", "--from-literal=a=b")
	_, errs, code := k.run("", "create", "configmap", "four", "--from-literal=a=b")
	if code == 0 || !strings.Contains(errs, `configmaps "four" is forbidden: exceeded quota: q, requested: count/configmaps=1, used: count/configmaps=3, limited: count/configmaps=3`) {
		t.Fatalf("kubectl create over the quota: exit %d, %s", code, errs)
	}
}

// TestQuotaOtherKinds: object counts of a generic kind
// (count/deployments.apps), Secrets (legacy name), Services and their
// NodePorts, each refused past its limit with kube's message.
func TestQuotaOtherKinds(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin, _ := tenant(t, ctx, s, "team")
	createQuota(t, ctx, admin, "team", "kinds", k8scorev1.ResourceList{"count/deployments.apps": resource.MustParse("1"),
		"secrets": resource.MustParse("1"), "services": resource.MustParse("2"), "services.nodeports": resource.MustParse("1")})
	dep := webDeployment("d1")
	if _, err := admin.AppsV1().Deployments("team").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := admin.AppsV1().Deployments("team").Create(ctx, webDeployment("d2"), metav1.CreateOptions{})
	wantForbidden(t, err, `deployments.apps "d2" is forbidden: exceeded quota: kinds, requested: count/deployments.apps=1, used: count/deployments.apps=1, limited: count/deployments.apps=1`)

	secret := func(n string) *k8scorev1.Secret {
		return &k8scorev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: n}, StringData: map[string]string{"k": "v"}}
	}
	if _, err := admin.CoreV1().Secrets("team").Create(ctx, secret("s1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = admin.CoreV1().Secrets("team").Create(ctx, secret("s2"), metav1.CreateOptions{})
	wantForbidden(t, err, `secrets "s2" is forbidden: exceeded quota: kinds, requested: secrets=1, used: secrets=1, limited: secrets=1`)

	svc := func(n string, typ k8scorev1.ServiceType) *k8scorev1.Service {
		return &k8scorev1.Service{ObjectMeta: metav1.ObjectMeta{Name: n}, Spec: k8scorev1.ServiceSpec{Type: typ,
			Selector: map[string]string{"app": "web"}, Ports: []k8scorev1.ServicePort{{Port: 80}}}}
	}
	if _, err := admin.CoreV1().Services("team").Create(ctx, svc("np1", k8scorev1.ServiceTypeNodePort), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = admin.CoreV1().Services("team").Create(ctx, svc("np2", k8scorev1.ServiceTypeNodePort), metav1.CreateOptions{})
	wantForbidden(t, err, `services "np2" is forbidden: exceeded quota: kinds, requested: services.nodeports=1, used: services.nodeports=1, limited: services.nodeports=1`)
	if _, err := admin.CoreV1().Services("team").Create(ctx, svc("c1", k8scorev1.ServiceTypeClusterIP), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = admin.CoreV1().Services("team").Create(ctx, svc("c2", k8scorev1.ServiceTypeClusterIP), metav1.CreateOptions{})
	wantForbidden(t, err, `services "c2" is forbidden: exceeded quota: kinds, requested: services=1, used: services=2, limited: services=2`)
}
