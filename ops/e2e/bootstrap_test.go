package e2e

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestClusterBootstrap: what a fresh cluster has comes from controllers,
// not from `podflow up`: the system namespaces and the bootstrap RBAC
// (the api process), a default ServiceAccount and kube-root-ca.crt in
// every namespace (the serviceaccount and rootcacert stages: with the
// serviceaccount stage scaled to 0 a new namespace gets no account, and it
// comes once the stage runs again), default/kubernetes with the API's
// address; and the e2e suite's first request,
// `kubectl get nodes --field-selector spec.unschedulable=false`, finds the
// nodes.
func TestClusterBootstrap(t *testing.T) {
	parallel(t, simulated)
	c := startCluster(t, "--nodes", "2")
	k := newKubectl(t, filepath.Join(c.dir, "kubeconfig"))

	out := k.must("get", "namespaces", "-o", "name")
	for _, ns := range []string{"default", "kube-system", "kube-public", "kube-node-lease"} {
		if !strings.Contains(out, "namespace/"+ns+"\n") {
			t.Errorf("no namespace %s:\n%s", ns, out)
		}
	}
	out = k.must("get", "clusterroles", "-o", "name")
	for _, r := range []string{"cluster-admin", "admin", "edit", "view"} {
		if !strings.Contains(out, "clusterrole.rbac.authorization.k8s.io/"+r+"\n") {
			t.Errorf("no clusterrole %s:\n%s", r, out)
		}
	}
	out = k.must("get", "nodes", "--field-selector", "spec.unschedulable=false", "-o", "name")
	if strings.Count(out, "node/") != 2 {
		t.Errorf("schedulable nodes:\n%s", out)
	}
	out = k.must("get", "service", "kubernetes", "-n", "default", "-o", "jsonpath={.spec.clusterIP} {.spec.ports[0].port}")
	if out != "10.96.0.1 443" {
		t.Errorf("default/kubernetes: %q", out)
	}
	eventually(t, 20*time.Second, "the kubernetes endpoints", func() (bool, string) {
		out, _, _ := k.run("get", "endpoints", "kubernetes", "-n", "default", "-o", "jsonpath={.subsets[0].addresses[0].ip}")
		return out == "127.0.0.1", out
	})

	k.must("create", "namespace", "team")
	eventually(t, 20*time.Second, "team's default ServiceAccount and kube-root-ca.crt", func() (bool, string) {
		sa, _, code1 := k.run("get", "serviceaccount", "default", "-n", "team", "-o", "name")
		cm, _, code2 := k.run("get", "configmap", "kube-root-ca.crt", "-n", "team", "-o", "jsonpath={.data.ca\\.crt}")
		return code1 == 0 && code2 == 0 && strings.Contains(cm, "BEGIN CERTIFICATE"), sa + cm
	})
	k.must("delete", "serviceaccount", "default", "-n", "team")
	eventually(t, 20*time.Second, "team's default ServiceAccount re-created", func() (bool, string) {
		out, errOut, code := k.run("get", "serviceaccount", "default", "-n", "team", "-o", "name")
		return code == 0, out + errOut
	})
	k.must("patch", "configmap", "kube-root-ca.crt", "-n", "team", "--type", "merge", "-p", `{"data":{"ca.crt":"forged"}}`)
	eventually(t, 20*time.Second, "kube-root-ca.crt repaired", func() (bool, string) {
		out, _, _ := k.run("get", "configmap", "kube-root-ca.crt", "-n", "team", "-o", "jsonpath={.data.ca\\.crt}")
		return strings.Contains(out, "BEGIN CERTIFICATE"), out
	})

	// Only the serviceaccount stage makes accounts.
	c.mustPodflow("scale", "serviceaccount=0")
	k.must("create", "namespace", "quiet")
	time.Sleep(2 * time.Second)
	if out, _, code := k.run("get", "serviceaccount", "default", "-n", "quiet", "-o", "name"); code == 0 {
		t.Fatalf("a default ServiceAccount without the serviceaccount stage: %s", out)
	}
	c.mustPodflow("scale", "serviceaccount=1")
	eventually(t, 30*time.Second, "quiet's default ServiceAccount once the stage runs", func() (bool, string) {
		out, errOut, code := k.run("get", "serviceaccount", "default", "-n", "quiet", "-o", "name")
		return code == 0, out + errOut
	})
}
