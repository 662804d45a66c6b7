package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLinuxStatefulSetDNS: on real containers (`podflow up --runtime
// linux`), a StatefulSet's pods behind their headless Service have stable
// DNS names: from inside web-0, web-1.web.default.svc.cluster.local
// resolves to web-1's pod IP, and each pod's hostname is its name.
func TestLinuxStatefulSetDNS(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for cgroups, network namespaces and mounts (CI runs as root)")
	}
	parallel(t, linuxRuntime)
	before := kernelObjects(t, "linux-node-1")
	c := startCluster(t, "--runtime", "linux")
	k := newKubectl(t, filepath.Join(c.dir, "kubeconfig"))
	k.mustIn(`apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  clusterIP: None
  selector: {app: web}
  ports: [{name: http, port: 80}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: web}
spec:
  serviceName: web
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - {name: sh, image: podflow/busybox:1, command: [sh, -c, "trap 'exit 0' TERM; while :; do sleep 1; done"]}
`, "apply", "-f", "-")
	if out, errOut, code := k.run("rollout", "status", "statefulset/web", "--timeout=120s"); code != 0 {
		t.Fatalf("rollout status: exit %d: %s %s", code, out, errOut)
	}
	ip := strings.TrimSpace(k.must("get", "pod", "web-1", "-o", "jsonpath={.status.podIP}"))
	if ip == "" {
		t.Fatal("web-1 has no pod IP")
	}
	eventually(t, 30*time.Second, "web-1's name resolving from web-0", func() (bool, string) {
		out, errOut, _ := k.run("exec", "web-0", "--", "nslookup", "-type=a", "web-1.web.default.svc.cluster.local")
		return strings.Contains(out, "Address: "+ip) || strings.Contains(out, "Address 1: "+ip), out + errOut
	})
	if h := strings.TrimSpace(k.must("exec", "web-1", "--", "hostname")); h != "web-1" {
		t.Errorf("hostname in web-1: %q", h)
	}
	k.must("delete", "statefulset", "web")
	eventually(t, 60*time.Second, "the pods of web gone", func() (bool, string) {
		out, _, _ := k.run("get", "pods", "-l", "app=web", "-o", "name")
		return strings.TrimSpace(out) == "", out
	})
	c.stop()
	if after := kernelObjects(t, "linux-node-1"); after != before {
		t.Fatalf("kernel objects left behind:\nbefore: %s\nafter:  %s", before, after)
	}
}
