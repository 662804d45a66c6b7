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
// listing the namespace's pods is allowed (200), kube-system's Secrets
// are not (403); without a token the answer is 401. The client is the
// podflow/http image's fetch mode (a Go client that verifies TLS, which
// busybox's wget does not), whose exit code says whether it got the
// status expected.
func TestLinuxPodReachesAPI(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for cgroups, network namespaces, nftables and port 53 (CI runs as root)")
	}
	parallel(t, linuxRuntime)
	c := startCluster(t, "--runtime", "linux")
	k := newKubectl(t, filepath.Join(c.dir, "kubeconfig"))
	k.must("create", "rolebinding", "default-view", "--clusterrole=view", "--serviceaccount=default:default")
	// The api replica serves the node's bridge gateway once the node is up,
	// and the kubernetes Service's endpoint follows within a second.
	eventually(t, 30*time.Second, "the kubernetes endpoint on the node's bridge", func() (bool, string) {
		out, _, _ := k.run("get", "endpoints", "kubernetes", "-o", "jsonpath={.subsets[0].addresses[0].ip}")
		return strings.HasPrefix(out, "10.244.") && strings.HasSuffix(out, ".1"), out
	})
	const dir = "/var/run/secrets/kubernetes.io/serviceaccount"
	// Each pod runs the image's client once: it exits 0 with the status it
	// expects, 1 with another, 2 without an answer (no route, or a server
	// it cannot verify).
	pod := func(name, url string, token bool, expect int) string {
		args := fmt.Sprintf("[fetch, %q, -ca, %s/ca.crt, -expect, \"%d\"", url, dir, expect)
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
		pod("by-name", "https://kubernetes.default.svc/api/v1/namespaces/default/pods", true, 200)+
			pod("by-ip", "https://10.96.0.1/api", true, 200)+
			pod("no-token", "https://kubernetes.default.svc/api", false, 401)+
			pod("forbidden", "https://kubernetes.default.svc/api/v1/namespaces/kube-system/secrets", true, 403)+
			pod("control", "https://kubernetes.default.svc/api", false, 200))) // must fail: the check is real
	for _, tc := range []struct {
		pod, phase string
	}{{"by-name", "Succeeded"}, {"by-ip", "Succeeded"}, {"no-token", "Succeeded"}, {"forbidden", "Succeeded"}, {"control", "Failed"}} {
		p := c.waitPodFor(90*time.Second, "default", tc.pod, "finished", func(p *corev1.Pod) bool {
			ph := p.GetStatus().GetPhase()
			return ph == "Succeeded" || ph == "Failed"
		})
		if ph := p.GetStatus().GetPhase(); ph != tc.phase {
			out, _, _ := k.run("describe", "pod", tc.pod)
			t.Errorf("pod %s %s, want %s:\n%s", tc.pod, ph, tc.phase, out)
		}
	}
}
