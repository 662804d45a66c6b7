package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podflow/podflow/proto/corev1"
)

// TestLinuxPodReachesAPI: a pod reaches the API server as Kubernetes
// pods do — https://kubernetes.default.svc (cluster DNS, then the
// kubernetes Service's ClusterIP, DNATed by the node proxy to the api
// replicas' address on the node's bridge) and https://10.96.0.1 —
// verifying the server with kube-root-ca.crt's ca.crt and authenticating
// with its ServiceAccount's projected token: with a RoleBinding to view,
// listing the namespace's pods is allowed (200); without a token the
// answer is 401. The client is the podflow/http image's fetch mode (a Go
// client that verifies TLS; busybox's wget does not).
func TestLinuxPodReachesAPI(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for cgroups, network namespaces, nftables and port 53 (CI runs as root)")
	}
	c := startCluster(t, "--runtime", "linux")
	k := newKubectl(t, filepath.Join(c.dir, "kubeconfig"))
	k.must("create", "rolebinding", "default-view", "--clusterrole=view", "--serviceaccount=default:default")
	const dir = "/var/run/secrets/kubernetes.io/serviceaccount"
	pod := func(name, url string, token bool) string {
		args := fmt.Sprintf("[fetch, %q, -ca, %s/ca.crt", url, dir)
		if token {
			args += ", -token-file, " + dir + "/token"
		}
		return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  restartPolicy: Never
  containers:
  - name: c
    image: podflow/http:1
    args: %s]
    volumeMounts: [{name: kube-api-access, mountPath: %s, readOnly: true}]
  volumes:
  - name: kube-api-access
    projected:
      sources:
      - serviceAccountToken: {path: token, expirationSeconds: 3607}
      - configMap: {name: kube-root-ca.crt, items: [{key: ca.crt, path: ca.crt}]}
---
`, name, args, dir)
	}
	c.mustPodflow("apply", "-f", writeTemp(t,
		pod("by-name", "https://kubernetes.default.svc/api/v1/namespaces/default/pods", true)+
			pod("by-ip", "https://10.96.0.1/api", true)+
			pod("no-token", "https://kubernetes.default.svc/api", false)))
	for _, tc := range []struct{ pod, status, body string }{
		{"by-name", "HTTP 200", `"kind":"PodList"`},
		{"by-ip", "HTTP 200", `"kind":"APIVersions"`},
		{"no-token", "HTTP 401", `"reason":"Unauthorized"`},
	} {
		c.waitPodFor(90*time.Second, "default", tc.pod, "Succeeded", func(p *corev1.Pod) bool {
			if p.GetStatus().GetPhase() == "Failed" {
				out, _, _ := k.run("logs", tc.pod)
				t.Fatalf("pod %s failed:\n%s", tc.pod, out)
			}
			return p.GetStatus().GetPhase() == "Succeeded"
		})
		out := k.must("logs", tc.pod)
		if !strings.HasPrefix(out, tc.status+"\n") || !strings.Contains(out, tc.body) {
			t.Errorf("pod %s: %q, want %s with %s", tc.pod, out, tc.status, tc.body)
		}
	}
}
