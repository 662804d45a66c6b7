package apiserver_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/bus/bustest"
	"github.com/podflow/podflow/proto/apiv1"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/services/ipalloc"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
)

// busRequest sends req on subject as the system's admin connection and
// returns the answer's Status.
func (s *system) busRequest(t *testing.T, subject string, req proto.Message) *corev1.Status {
	t.Helper()
	b, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.conn.NATS().Request(subject, b, 10*time.Second)
	if err != nil {
		t.Fatalf("request %s: %v", subject, err)
	}
	var resp apiv1.Response
	if err := proto.Unmarshal(m.Data, &resp); err != nil {
		t.Fatal(err)
	}
	return resp.GetStatus()
}

// busCreateConfigMap creates a ConfigMap over the bus object path.
func (s *system) busCreateConfigMap(t *testing.T, ns, name string) *corev1.Status {
	obj, _ := proto.Marshal(&corev1.ConfigMap{Metadata: &corev1.ObjectMeta{Name: name}})
	return s.busRequest(t, pipeline.ObjectSubject, &apiv1.ObjectRequest{Token: adminToken, Verb: "create", Kind: "configmaps", Namespace: ns, Object: obj})
}

// busCreatePod creates a pod over the bus (PodRequested, request-reply).
func (s *system) busCreatePod(t *testing.T, ns, name string) *corev1.Status {
	return s.busRequest(t, pipeline.CreatePodSubject, &eventsv1.PodRequested{Token: adminToken, Pod: &corev1.Pod{
		Metadata: &corev1.ObjectMeta{Namespace: ns, Name: name},
		Spec:     &corev1.PodSpec{Containers: []*corev1.Container{{Name: "c", Image: "nginx"}}},
	}})
}

// TestNamespaceDeletion attacks the namespace lifecycle on a running
// system (three store replicas): a DELETE marks the namespace
// Terminating; while it is, new content is refused with 403 on both
// front doors (HTTPS and the bus, objects and pods); the namespace
// controller deletes every kind of content, reports what remains in the
// namespace's conditions, and removes the namespace once it is empty. The
// built-in namespaces cannot be deleted.
func TestNamespaceDeletion(t *testing.T) {
	t.Parallel()
	s := startSystem(t, options{replicas: 3})
	admin := s.client(t, adminToken)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ns = "doomed"
	base := s.url + "/api/v1/namespaces/" + ns

	code, out, _ := do(t, admin, "POST", s.url+"/api/v1/namespaces", "application/json",
		`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"doomed"},"spec":{"finalizers":["mine"]}}`)
	if code != 201 {
		t.Fatalf("create namespace: %d %v", code, out)
	}
	if f := fmt.Sprint(path(out, "spec.finalizers")); f != "[kubernetes]" || path(out, "status.phase") != "Active" {
		t.Fatalf("new namespace: finalizers %s, phase %v; want [kubernetes], Active", f, path(out, "status.phase"))
	}

	// Content of every kind the front door creates, and a pod.
	content := map[string]string{
		"/api/v1/namespaces/doomed/configmaps":      `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm"},"data":{"k":"v"}}`,
		"/api/v1/namespaces/doomed/secrets":         `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s"},"data":{"k":"dg=="}}`,
		"/api/v1/namespaces/doomed/serviceaccounts": `{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"sa"}}`,
		"/api/v1/namespaces/doomed/services":        `{"apiVersion":"v1","kind":"Service","metadata":{"name":"svc"},"spec":{"selector":{"app":"web"},"ports":[{"port":80}]}}`,
		"/apis/rbac.authorization.k8s.io/v1/namespaces/doomed/roles": `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role","metadata":{"name":"r"},
"rules":[{"apiGroups":[""],"resources":["pods"],"verbs":["get"]}]}`,
		"/apis/rbac.authorization.k8s.io/v1/namespaces/doomed/rolebindings": `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"RoleBinding","metadata":{"name":"rb"},
"subjects":[{"kind":"User","name":"alice","apiGroup":"rbac.authorization.k8s.io"}],"roleRef":{"kind":"Role","name":"r","apiGroup":"rbac.authorization.k8s.io"}}`,
		"/api/v1/namespaces/doomed/pods": podJSON("pending", ""),
		"/apis/apps/v1/namespaces/doomed/deployments": `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"d"},
"spec":{"selector":{"matchLabels":{"app":"d"}},"template":{"metadata":{"labels":{"app":"d"}},"spec":{"containers":[{"name":"c","image":"nginx"}]}}}}`,
		"/apis/batch/v1/namespaces/doomed/jobs": `{"apiVersion":"batch/v1","kind":"Job","metadata":{"name":"j"},
"spec":{"template":{"spec":{"restartPolicy":"Never","containers":[{"name":"c","image":"busybox"}]}}}}`,
	}
	for p, body := range content {
		if code, out, _ := do(t, admin, "POST", s.url+p, "application/json", body); code != 201 {
			t.Fatalf("POST %s: %d %v", p, code, out)
		}
	}
	// A pod bound to a node: the namespace stays Terminating until the
	// node has stopped it (this system runs no node: the test stands in).
	if code, out, _ := do(t, admin, "POST", base+"/pods", "application/json", podJSON("running", "")); code != 201 {
		t.Fatalf("POST pod: %d %v", code, out)
	}
	if _, err := objects.Mutate(ctx, s.store, ns, "running", func(p *corev1.Pod) error { p.Spec.NodeName = "n1"; return nil }); err != nil {
		t.Fatal(err)
	}

	code, out, _ = do(t, admin, "DELETE", base, "", "")
	if code != 200 || path(out, "metadata.deletionTimestamp") == nil || path(out, "status.phase") != "Terminating" {
		t.Fatalf("DELETE namespace: %d %v; want 200, deletionTimestamp and Terminating", code, out)
	}
	if f := fmt.Sprint(path(out, "spec.finalizers")); f != "[kubernetes]" {
		t.Fatalf("terminating namespace's finalizers %s, want [kubernetes]", f)
	}
	if code, out, _ := do(t, admin, "DELETE", base, "", ""); code != 409 || !strings.Contains(fmt.Sprint(out["message"]), "ensuring all content is removed") {
		t.Fatalf("second DELETE: %d %v; want 409 Conflict", code, out)
	}

	t.Run("new content refused on both front doors", func(t *testing.T) {
		terminated := func(resource, name string) string {
			return fmt.Sprintf("%s %q is forbidden: unable to create new content in namespace doomed because it is being terminated", resource, name)
		}
		code, out, _ := do(t, admin, "POST", base+"/configmaps", "application/json", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"late"}}`)
		if code != 403 || out["message"] != terminated("configmaps", "late") {
			t.Errorf("HTTPS ConfigMap: %d %v", code, out["message"])
		}
		code, out, _ = do(t, admin, "POST", base+"/pods", "application/json", podJSON("late", ""))
		if code != 403 || out["message"] != terminated("pods", "late") {
			t.Errorf("HTTPS pod: %d %v", code, out["message"])
		}
		if st := s.busCreateConfigMap(t, ns, "late-bus"); st.GetCode() != 403 || st.GetMessage() != terminated("configmaps", "late-bus") {
			t.Errorf("bus ConfigMap: %v", st)
		}
		if st := s.busCreatePod(t, ns, "late-bus"); st.GetCode() != 403 || st.GetMessage() != terminated("pods", "late-bus") {
			t.Errorf("bus pod: %v", st)
		}
		// Nothing refused was stored.
		for _, name := range []string{"late", "late-bus"} {
			if code, _, _ := do(t, admin, "GET", base+"/configmaps/"+name, "", ""); code != 404 {
				t.Errorf("refused ConfigMap %s: GET %d, want 404", name, code)
			}
			if code, _, _ := do(t, admin, "GET", base+"/pods/"+name, "", ""); code != 404 {
				t.Errorf("refused pod %s: GET %d, want 404", name, code)
			}
		}
	})

	t.Run("the pods go first, the rest waits for the bound pod", func(t *testing.T) {
		// Kubernetes' OrderedNamespaceDeletion: nothing but pods is
		// deleted while a pod remains.
		bustest.Eventually(t, "the conditions saying the bound pod remains", func() bool {
			code, out, _ := do(t, admin, "GET", base, "", "")
			if code != 200 {
				return false
			}
			conds, _ := path(out, "status.conditions").([]any)
			for _, c := range conds {
				c := c.(map[string]any)
				if c["type"] == "NamespaceContentRemaining" {
					return c["status"] == "True" && c["reason"] == "SomeResourcesRemain" &&
						c["message"] == "Some resources are remaining: pods. has 1 resource instances"
				}
			}
			return false
		})
		for p := range content {
			if p == "/api/v1/namespaces/doomed/pods" {
				continue
			}
			if code, out, _ := do(t, admin, "GET", s.url+p, "", ""); code != 200 || len(out["items"].([]any)) == 0 {
				t.Errorf("%s deleted while a pod remains: %d %v", p, code, out)
			}
		}
		code, out, _ := do(t, admin, "GET", base+"/pods/running", "", "")
		if code != 200 || path(out, "metadata.deletionTimestamp") == nil {
			t.Fatalf("bound pod: %d, deletionTimestamp %v; want it terminating", code, path(out, "metadata.deletionTimestamp"))
		}
		if code, out, _ := do(t, admin, "GET", base+"/pods/pending", "", ""); code != 404 {
			t.Fatalf("unbound pod: %d %v, want deleted at once", code, out)
		}
	})

	t.Run("once the node is done, the namespace goes", func(t *testing.T) {
		// The node agent would stop the containers and the status stage
		// remove the pod; neither runs here.
		if _, err := s.store.Delete(ctx, objects.Pods, ns, "running", 0); err != nil {
			t.Fatal(err)
		}
		bustest.Eventually(t, "the namespace removed", func() bool {
			code, _, _ := do(t, admin, "GET", base, "", "")
			return code == 404
		})
		for _, k := range objects.Kinds() {
			if !k.Namespaced {
				continue
			}
			kvs, _, err := s.store.KV().List(ctx, k.Prefix(ns))
			if err != nil || len(kvs) != 0 {
				t.Errorf("%s left in the removed namespace: %d (%v)", k.Resource, len(kvs), err)
			}
		}
		ips, err := ipalloc.Allocated(ctx, s.store)
		if err != nil {
			t.Fatal(err)
		}
		for ip, svc := range ips {
			if strings.HasPrefix(svc, ns+"/") {
				t.Errorf("ClusterIP %s of the deleted Service %s still reserved", ip, svc)
			}
		}
		// Gone: creating there is 404 NotFound, as kube-apiserver.
		code, out, _ := do(t, admin, "POST", base+"/configmaps", "application/json", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"after"}}`)
		if code != 404 || out["message"] != `namespaces "doomed" not found` {
			t.Errorf("create in the removed namespace: %d %v", code, out["message"])
		}
		// A pod is admitted from the stages' namespace caches, which may
		// still show the namespace terminating: refused either way.
		if st := s.busCreatePod(t, ns, "after"); st.GetCode() != 404 && st.GetCode() != 403 {
			t.Errorf("bus pod in the removed namespace: %v", st)
		}
		// Recreated with the same name, it inherits nothing.
		if code, out, _ := do(t, admin, "POST", s.url+"/api/v1/namespaces", "application/json", `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"doomed"}}`); code != 201 {
			t.Fatalf("recreate: %d %v", code, out)
		}
		if code, out, _ := do(t, admin, "GET", s.url+"/apis/rbac.authorization.k8s.io/v1/namespaces/doomed/rolebindings", "", ""); code != 200 || len(out["items"].([]any)) != 0 {
			t.Errorf("recreated namespace's rolebindings: %d %v", code, out["items"])
		}
	})

	t.Run("the built-in namespaces cannot be deleted", func(t *testing.T) {
		for _, name := range []string{"default", "kube-system", "kube-public"} {
			want := fmt.Sprintf("namespaces %q is forbidden: this namespace may not be deleted", name)
			code, out, _ := do(t, admin, "DELETE", s.url+"/api/v1/namespaces/"+name, "", "")
			if code != 403 || out["message"] != want {
				t.Errorf("DELETE %s: %d %v", name, code, out["message"])
			}
			st := s.busRequest(t, pipeline.ObjectSubject, &apiv1.ObjectRequest{Token: adminToken, Verb: "delete", Kind: "namespaces", Name: name})
			if st.GetCode() != 403 || st.GetMessage() != want {
				t.Errorf("bus delete %s: %v", name, st)
			}
		}
		code, out, _ := do(t, admin, "GET", s.url+"/api/v1/namespaces/default", "", "")
		if code != 200 || path(out, "metadata.deletionTimestamp") != nil {
			t.Errorf("default after the refused DELETE: %d %v", code, out)
		}
	})
}
