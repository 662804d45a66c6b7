package apiserver_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/auth"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/podmetrics"
)

// TestMetricsAPI: metrics.k8s.io/v1beta1 serves the readings the nodes
// answer over NATS (a node agent stands in here, on the real bus): lists
// by namespace and label selector, gets by name, leaves out a node that does not answer, and
// RBAC guards it as its own group (get pods in core/v1 is not enough).
func TestMetricsAPI(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sub, err := podmetrics.Serve(ctx, s.conn.NATS(), "n1", func(node string) (podmetrics.Reading, error) {
		return podmetrics.Reading{Node: node, Timestamp: time.Now().UnixNano(), WindowNs: int64(15 * time.Second),
			Usage: podmetrics.Usage{CPUNanoCores: 250_000_000, MemoryBytes: 1 << 30},
			Pods: []podmetrics.Pod{
				{Namespace: "default", Name: "p1", Containers: []podmetrics.Container{{Name: "c", Usage: podmetrics.Usage{CPUNanoCores: 2_000_000, MemoryBytes: 8 << 20}}}},
				{Namespace: "other", Name: "p2", Containers: []podmetrics.Container{{Name: "c", Usage: podmetrics.Usage{CPUNanoCores: 1_000_000, MemoryBytes: 1 << 20}}}},
			}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	seed := []objects.Object{ // the bootstrap policy is the bootstrap controller's
		&corev1.Node{Metadata: &corev1.ObjectMeta{Name: "n1", Labels: map[string]string{"zone": "a"}}},
		&corev1.Node{Metadata: &corev1.ObjectMeta{Name: "n2"}}, // answers nothing
		&corev1.Pod{Metadata: &corev1.ObjectMeta{Name: "p1", Namespace: "default", Labels: map[string]string{"app": "web"}}, Spec: &corev1.PodSpec{NodeName: "n1"}},
		&corev1.Role{Metadata: &corev1.ObjectMeta{Name: "pod-reader", Namespace: "default"}, Rules: []*corev1.PolicyRule{
			{Verbs: []string{"get", "list"}, ApiGroups: []string{""}, Resources: []string{"pods"}}}},
		&corev1.RoleBinding{Metadata: &corev1.ObjectMeta{Name: "alice-reads", Namespace: "default"},
			RoleRef:  &corev1.RoleRef{Kind: auth.KindRole, Name: "pod-reader", ApiGroup: auth.RBACGroup},
			Subjects: []*corev1.Subject{{Kind: auth.SubjectUser, Name: "alice"}}},
	}
	for _, o := range seed {
		if _, err := s.store.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	admin, alice := s.client(t, adminToken), s.client(t, aliceToken)
	m := s.url + "/apis/metrics.k8s.io/v1beta1/"

	code, out, _ := do(t, admin, "GET", m+"namespaces/default/pods", "", "")
	if code != 200 || out["kind"] != "PodMetricsList" || fmt.Sprint(path(out, "items")) == "[]" {
		t.Fatalf("list PodMetrics: %d %v", code, out)
	}
	items := out["items"].([]any)
	if len(items) != 1 || path(items[0].(map[string]any), "metadata.name") != "p1" || fmt.Sprint(path(items[0].(map[string]any), "containers")) != "[map[name:c usage:map[cpu:2m memory:8Mi]]]" {
		t.Errorf("PodMetrics of default: %v", items)
	}
	code, out, _ = do(t, admin, "GET", m+"nodes", "", "")
	if items, _ := out["items"].([]any); code != 200 || len(items) != 1 || path(items[0].(map[string]any), "metadata.name") != "n1" || fmt.Sprint(path(items[0].(map[string]any), "usage")) != "map[cpu:250m memory:1Gi]" {
		t.Errorf("list NodeMetrics (n2 silent): %d %v", code, out)
	}
	// Items carry their object's labels, as metrics-server's; a reading of
	// a pod the store does not hold (other/p2) is no item.
	if got := fmt.Sprint(path(items[0].(map[string]any), "metadata.labels")); got != "map[app:web]" {
		t.Errorf("PodMetrics p1 labels: %s", got)
	}
	if items, _ := out["items"].([]any); len(items) == 1 && fmt.Sprint(path(items[0].(map[string]any), "metadata.labels")) != "map[zone:a]" {
		t.Errorf("NodeMetrics n1 labels: %v", items[0])
	}
	code, out, _ = do(t, admin, "GET", m+"pods", "", "")
	if items, _ := out["items"].([]any); code != 200 || len(items) != 1 || path(items[0].(map[string]any), "metadata.name") != "p1" {
		t.Errorf("PodMetrics of every namespace (other/p2 not stored): %d %v", code, out)
	}
	if code, out, _ := do(t, admin, "GET", m+"nodes/n1", "", ""); code != 200 || fmt.Sprint(path(out, "metadata.labels")) != "map[zone:a]" {
		t.Errorf("get NodeMetrics n1: %d %v", code, out)
	}
	if code, out, _ := do(t, admin, "GET", m+"namespaces/default/pods/p1", "", ""); code != 200 || out["kind"] != "PodMetrics" || path(out, "window") != "15s" {
		t.Errorf("get PodMetrics p1: %d %v", code, out)
	}
	for _, p := range []string{"nodes/n2", "namespaces/default/pods/nope"} {
		if code, out, _ := do(t, admin, "GET", m+p, "", ""); code != 404 {
			t.Errorf("get %s: %d %v (want 404)", p, code, out)
		}
	}
	// A selector selects by the stored pods' (nodes') labels.
	for _, c := range []struct {
		path string
		n    int
	}{
		{"namespaces/default/pods?labelSelector=app%3Dweb", 1},
		{"namespaces/default/pods?labelSelector=app%3Ddb", 0},
		{"nodes?labelSelector=zone%3Da", 1},
		{"nodes?labelSelector=zone%3Db", 0},
	} {
		code, out, _ := do(t, admin, "GET", m+c.path, "", "")
		if items, _ := out["items"].([]any); code != 200 || len(items) != c.n {
			t.Errorf("%s: %d, %v (want %d items)", c.path, code, out, c.n)
		}
	}
	if code, out, _ := do(t, admin, "GET", m+"namespaces/default/pods?labelSelector=%3D%3D%3D", "", ""); code != 400 {
		t.Errorf("a malformed labelSelector: %d %v (want 400)", code, out)
	}
	if code, out, _ := do(t, admin, "POST", m+"namespaces/default/pods", "application/json", "{}"); code != 405 {
		t.Errorf("POST PodMetrics: %d %v", code, out)
	}

	// alice may list pods (once the api stage's RBAC cache has her
	// binding), not their metrics.
	for {
		code, _, _ := do(t, alice, "GET", s.url+"/api/v1/namespaces/default/pods", "", "")
		if code == 200 {
			break
		}
		if code != 403 || ctx.Err() != nil {
			t.Fatalf("alice list pods: %d", code)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code, out, _ := do(t, alice, "GET", m+"namespaces/default/pods", "", ""); code != 403 {
		t.Errorf("alice lists PodMetrics with only core pods: %d %v", code, out)
	}
}
