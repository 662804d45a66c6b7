package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podflow/podflow/services/apiserver/pki"
)

// kubectl is the stock kubectl (1.32) driven against `podflow up`'s
// HTTPS front door with the kubeconfig it writes.
type kubectl struct {
	t          *testing.T
	path       string
	kubeconfig string
	cacheDir   string
	env        []string // more environment for each kubectl run
}

func newKubectl(t *testing.T, kubeconfig string) *kubectl {
	t.Helper()
	p, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatal("kubectl is not on the PATH: the Kubernetes API e2e tests drive the stock kubectl (v1.32) against podflow; install kubectl and run again")
	}
	return &kubectl{t: t, path: p, kubeconfig: kubeconfig, cacheDir: t.TempDir()}
}

func (k *kubectl) cmd(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, k.path, append([]string{"--kubeconfig", k.kubeconfig, "--cache-dir", k.cacheDir, "--request-timeout", "30s"}, args...)...)
	cmd.Env = append(append(os.Environ(), "HOME="+k.cacheDir, "KUBECONFIG="+k.kubeconfig), k.env...)
	cmd.Dir = repoRoot
	return cmd
}

// run returns kubectl's stdout, stderr and exit code.
func (k *kubectl) run(args ...string) (string, string, int) {
	k.t.Helper()
	return k.runIn("", args...)
}

func (k *kubectl) must(args ...string) string {
	k.t.Helper()
	out, errs, code := k.run(args...)
	if code != 0 {
		k.t.Fatalf("kubectl %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errs)
	}
	return out
}

// TestKubectl drives podflow with the real kubectl: create, watch,
// describe, apply, delete, RBAC and auth can-i. (client-go is exercised
// in services/apiserver, against the real api stage.)
func TestKubectl(t *testing.T) {
	parallel(t, simulated)
	// Two api replicas share the HTTPS port (SO_REUSEPORT).
	c := startCluster(t, "--replicas", "api=2")
	kubeconfig := filepath.Join(c.dir, "kubeconfig")
	if _, err := os.Stat(kubeconfig); err != nil {
		t.Fatalf("podflow up wrote no kubeconfig: %v", err)
	}
	k := newKubectl(t, kubeconfig)

	// kubectl get pods -w streams the pod from Pending to Running.
	watchCtx, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	var wout, werr syncBuffer
	// -v=6 logs each request once its response started: the watch is
	// established when its GET ...watch=true line appears.
	w := k.cmd(watchCtx, "get", "pods", "-w", "-v=6")
	w.Stdout, w.Stderr = &wout, &werr
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	watchDone := make(chan struct{})
	go func() { _ = w.Wait(); close(watchDone) }()
	defer func() { stopWatch(); <-watchDone }()
	eventually(t, 20*time.Second, "kubectl get pods -w to start watching", func() (bool, string) {
		return strings.Contains(werr.String(), "watch=true"), werr.String()
	})

	if out := k.must("create", "-f", "examples/nginx-pod.yaml"); !strings.Contains(out, "pod/my-nginx-pod created") {
		t.Fatalf("create: %q", out)
	}
	eventually(t, 30*time.Second, "the watch to show my-nginx-pod Pending then Running", func() (bool, string) {
		s := wout.String()
		p, r := -1, -1
		for i, l := range strings.Split(s, "\n") {
			f := strings.Fields(l)
			if len(f) >= 3 && f[0] == "my-nginx-pod" {
				if f[2] == "Pending" && p < 0 {
					p = i
				}
				if f[2] == "Running" && r < 0 {
					r = i
				}
			}
		}
		return p >= 0 && r > p, s
	})

	t.Run("get and describe", func(t *testing.T) {
		out := k.must("get", "pods")
		if !strings.Contains(out, "NAME") || !strings.Contains(out, "READY") || !regexpLine(out, "my-nginx-pod", "1/1", "Running") {
			t.Fatalf("get pods:\n%s", out)
		}
		out = k.must("get", "pods", "-o", "wide")
		if !strings.Contains(out, "NODE") || !strings.Contains(out, "sim-node-") {
			t.Fatalf("get pods -o wide:\n%s", out)
		}
		eventually(t, 20*time.Second, "describe to show conditions and events", func() (bool, string) {
			out, _, _ := k.run("describe", "pod", "my-nginx-pod")
			ok := strings.Contains(out, "Conditions:") && regexpLine(out, "Ready", "True") && regexpLine(out, "PodScheduled", "True") &&
				strings.Contains(out, "Events:") && regexpLine(out, "Normal", "Scheduled") && strings.Contains(out, "Started")
			return ok, out
		})
		out = k.must("events")
		if !strings.Contains(out, "Scheduled") {
			t.Fatalf("kubectl events:\n%s", out)
		}
		out = k.must("get", "nodes")
		if !regexpLine(out, "sim-node-0001", "Ready") {
			t.Fatalf("get nodes:\n%s", out)
		}
	})

	t.Run("expose", func(t *testing.T) {
		// kubectl expose reads the pod's labels for the selector and
		// creates the Service; the store hands it a ClusterIP from the
		// service CIDR and the endpoints stage puts the pod behind it.
		if out := k.must("expose", "pod", "my-nginx-pod", "--port", "8080", "--target-port", "80"); !strings.Contains(out, "service/my-nginx-pod exposed") {
			t.Fatalf("expose: %q", out)
		}
		ip := strings.TrimSpace(k.must("get", "service", "my-nginx-pod", "-o", "jsonpath={.spec.clusterIP}"))
		if addr, err := netip.ParseAddr(ip); err != nil || !netip.MustParsePrefix("10.96.0.0/16").Contains(addr) {
			t.Fatalf("the exposed Service's ClusterIP %q is not in 10.96.0.0/16", ip)
		}
		podIP := strings.TrimSpace(k.must("get", "pod", "my-nginx-pod", "-o", "jsonpath={.status.podIP}"))
		eventually(t, 20*time.Second, "the pod behind the exposed Service", func() (bool, string) {
			out, _, _ := k.run("get", "endpointslices", "-l", "kubernetes.io/service-name=my-nginx-pod",
				"-o", "jsonpath={.items[*].endpoints[*].addresses[*]} {.items[*].ports[*].port}")
			return podIP != "" && strings.TrimSpace(out) == podIP+" 80", out
		})
		k.must("delete", "service", "my-nginx-pod")
	})

	t.Run("the podflow CLI like kubectl", func(t *testing.T) { testPodflowLikeKubectl(t, c, k) })
	t.Run("publish --wait and stuck pods", func(t *testing.T) { testPodflowFates(t, c, k) })

	t.Run("auth", func(t *testing.T) {
		if out := k.must("auth", "can-i", "create", "pods"); strings.TrimSpace(out) != "yes" {
			t.Fatalf("admin can-i: %q", out)
		}
		ca, err := pki.LoadCA(filepath.Join(c.dir, "pki", "ca.crt"), filepath.Join(c.dir, "pki", "ca.key"))
		if err != nil {
			t.Fatal(err)
		}
		cert, key, err := ca.Issue(pki.Request{CommonName: "bob", Groups: []string{"devs"}})
		if err != nil {
			t.Fatal(err)
		}
		addr, err := os.ReadFile(filepath.Join(c.dir, "pki", "apiserver.json"))
		if err != nil {
			t.Fatal(err)
		}
		server := "https://" + strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(string(addr)), `{"addr":"`), `"}`)
		bobConfig := filepath.Join(t.TempDir(), "bob.kubeconfig")
		if err := os.WriteFile(bobConfig, pki.Kubeconfig(server, ca.CertPEM, cert, key, "bob"), 0o600); err != nil {
			t.Fatal(err)
		}
		bob := newKubectl(t, bobConfig)
		out, errs, code := bob.run("get", "pods")
		if code == 0 || !strings.Contains(errs, "Forbidden") || !strings.Contains(errs, `User "bob" cannot list resource "pods"`) {
			t.Fatalf("bob get pods: exit %d\n%s%s", code, out, errs)
		}
		out, errs, code = bob.run("create", "-f", "examples/nginx-pod.yaml")
		if code == 0 || !strings.Contains(errs, "Forbidden") {
			t.Fatalf("bob create: exit %d\n%s%s", code, out, errs)
		}
		if out := bob.must("auth", "whoami"); !regexpLine(out, "Username", "bob") || !strings.Contains(out, "devs") {
			t.Fatalf("bob whoami:\n%s", out)
		}
		out, _, code = bob.run("auth", "can-i", "create", "pods")
		if code == 0 || strings.TrimSpace(out) != "no" {
			t.Fatalf("bob can-i: exit %d %q", code, out)
		}

		// kubectl auth can-i --list (SelfSubjectRulesReview): everything
		// for the admin; for bob, the rules bound to his group once a
		// Role grants them.
		if out := k.must("auth", "can-i", "--list"); !regexpLine(out, "*.*", "[]", "[]", "[*]") {
			t.Fatalf("admin can-i --list:\n%s", out)
		}
		if out := bob.must("auth", "can-i", "--list"); strings.Contains(out, "pods") {
			t.Fatalf("bob can-i --list before any binding:\n%s", out)
		}
		rbacFile := filepath.Join(t.TempDir(), "rbac.yaml")
		if err := os.WriteFile(rbacFile, []byte(`apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: pod-reader, namespace: default}
rules:
- {apiGroups: [""], resources: [pods], verbs: [get, list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: devs-read-pods, namespace: default}
subjects:
- {kind: Group, name: devs, apiGroup: rbac.authorization.k8s.io}
roleRef: {kind: Role, name: pod-reader, apiGroup: rbac.authorization.k8s.io}
`), 0o644); err != nil {
			t.Fatal(err)
		}
		k.must("apply", "-f", rbacFile)
		eventually(t, 30*time.Second, "bob's rules to list pods", func() (bool, string) {
			out, _, _ := bob.run("auth", "can-i", "--list")
			return regexpLine(out, "pods", "[]", "[]", "[get", "list", "watch]"), out
		})
		if out := bob.must("auth", "can-i", "list", "pods"); strings.TrimSpace(out) != "yes" {
			t.Fatalf("bob can-i list pods after the binding: %q", out)
		}
		if out := bob.must("auth", "can-i", "--list", "-n", "kube-system"); strings.Contains(out, "pods") {
			t.Fatalf("bob's rules in kube-system include default's:\n%s", out)
		}
		// get pods is not exec: that is create on pods/exec.
		out, errs, code = bob.run("exec", "my-nginx-pod", "--", "echo", "hi")
		if code == 0 || !strings.Contains(errs, "forbidden") || !strings.Contains(errs, `"pods/exec"`) {
			t.Fatalf("bob exec: exit %d\n%s%s", code, out, errs)
		}
	})

	t.Run("apply", func(t *testing.T) {
		f := filepath.Join(t.TempDir(), "cm.yaml")
		write := func(v string) {
			if err := os.WriteFile(f, []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  level: "+v+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		write("one")
		if out := k.must("apply", "-f", f); !strings.Contains(out, "configmap/settings created") {
			t.Fatalf("apply: %q", out)
		}
		write("two")
		if out := k.must("apply", "-f", f); !strings.Contains(out, "configmap/settings configured") {
			t.Fatalf("apply again: %q", out)
		}
		if out := k.must("get", "configmap", "settings", "-o", "jsonpath={.data.level}"); out != "two" {
			t.Fatalf("applied value: %q", out)
		}
		ssa := filepath.Join(t.TempDir(), "ssa.yaml")
		_ = os.WriteFile(ssa, []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\ndata:\n  k: v\n"), 0o644)
		if out := k.must("apply", "--server-side", "-f", ssa); !strings.Contains(out, "configmap/ssa serverside-applied") {
			t.Fatalf("server-side apply: %q", out)
		}
		if out := k.must("get", "configmap", "ssa", "-o", "jsonpath={.data.k}"); out != "v" {
			t.Fatalf("server-side applied value: %q", out)
		}
		if out := k.must("apply", "-f", "examples/nginx-service.yaml"); !strings.Contains(out, "created") {
			t.Fatalf("apply service: %q", out)
		}
		eventually(t, 30*time.Second, "describe service to show the pod's endpoint", func() (bool, string) {
			out, errs, _ := k.run("describe", "service", "my-nginx")
			return regexpLine(out, "Endpoints:") && strings.Contains(out, ":80") && !strings.Contains(out, "<none>:80"), out + errs
		})
		if out := k.must("get", "endpointslices"); !regexpLine(out, "my-nginx", "IPv4", "80") {
			t.Fatalf("get endpointslices:\n%s", out)
		}
		bad := filepath.Join(t.TempDir(), "bad.yaml")
		_ = os.WriteFile(bad, []byte("apiVersion: v1\nkind: Pod\nmetadata:\n  name: bad\nspec:\n  containers:\n  - name: c\n    image: nginx\n    imagePullPolcy: Always\n"), 0o644)
		_, errs, code := k.run("create", "-f", bad)
		if code == 0 || !strings.Contains(errs, `unknown field "spec.containers[0].imagePullPolcy"`) {
			t.Fatalf("strict validation: exit %d %s", code, errs)
		}
	})

	t.Run("refused fields", func(t *testing.T) { kubectlRefusedFields(t, k) })

	t.Run("logs", func(t *testing.T) {
		// A container that runs no program logs the runtime's lines.
		out, errs, code := k.run("logs", "my-nginx-pod")
		if code != 0 || !strings.Contains(out, `podflow-sim: container "nginx-container" started from image "nginx"`) {
			t.Fatalf("logs: exit %d %q %s", code, out, errs)
		}
	})

	t.Run("exec", func(t *testing.T) { testKubectlExec(t, k, "my-nginx-pod") })
	t.Run("port-forward", func(t *testing.T) { testKubectlPortForward(t, k, "my-nginx-pod") })
	t.Run("cp", func(t *testing.T) { testKubectlCp(t, k, "my-nginx-pod") })
	t.Run("top", func(t *testing.T) { testKubectlTop(t, k, "my-nginx-pod") })
	t.Run("exec ends with its pod", func(t *testing.T) { testKubectlExecPodGone(t, k) })
	t.Run("sim node", func(t *testing.T) { testSimNode(t, k) })
	t.Run("apply -k, delete -k", func(t *testing.T) { testKustomize(t, c, k) })

	t.Run("paging and deletecollection", func(t *testing.T) {
		for i := range 5 {
			k.must("run", fmt.Sprintf("pg-%d", i), "--image=nginx", "--labels=app=pg")
		}
		// More pods are created while the list pages (a consistent
		// snapshot: the pages are read at the first page's revision, so
		// no pod is listed twice and none of the first five is missed).
		created := make(chan []string, 1)
		go func() {
			var failed []string
			for i := 5; i < 10; i++ {
				if out, errs, code := k.run("run", fmt.Sprintf("pg-%d", i), "--image=nginx", "--labels=app=pg"); code != 0 {
					failed = append(failed, out+errs)
				}
			}
			created <- failed
		}()
		// -v=6 logs each request: the list must take several pages.
		out, errs, code := k.run("get", "pods", "-l", "app=pg", "--chunk-size=2", "-v=6")
		if failed := <-created; len(failed) > 0 {
			t.Fatalf("kubectl run during the list: %v", failed)
		}
		if code != 0 || strings.Count(errs, "continue=") < 2 {
			t.Fatalf("get --chunk-size=2: exit %d, want more than one continue page:\n%s", code, errs)
		}
		for i := range 10 {
			n := len(regexp.MustCompile(`(?m)^pg-`+strconv.Itoa(i)+`\s`).FindAllString(out, -1))
			if n > 1 || i < 5 && n != 1 {
				t.Fatalf("get --chunk-size=2 lists pg-%d %d times:\n%s", i, n, out)
			}
		}
		out = k.must("delete", "pods", "-l", "app=pg", "--wait=false")
		if strings.Count(out, "deleted") != 10 {
			t.Fatalf("delete -l: %q", out)
		}
		eventually(t, 30*time.Second, "the selected pods to be gone", func() (bool, string) {
			out, errs, _ := k.run("get", "pods", "-l", "app=pg")
			return !strings.Contains(out, "pg-"), out + errs
		})
	})

	t.Run("explain", func(t *testing.T) {
		out := k.must("explain", "pod.spec.containers")
		if !strings.Contains(out, "KIND:") || !strings.Contains(out, "Container") || !regexpLine(out, "image", "<string>") || !strings.Contains(out, "FIELDS:") {
			t.Fatalf("explain pod.spec.containers:\n%s", out)
		}
		if out := k.must("explain", "role.rules"); !regexpLine(out, "verbs", "<[]string>") {
			t.Fatalf("explain role.rules:\n%s", out)
		}
		// The OpenAPI v2 path, which older kubectl takes (and this one
		// when asked): /openapi/v2 in protobuf.
		out = k.must("explain", "pod.spec.containers", "--output=plaintext-openapiv2")
		if !strings.Contains(out, "KIND:") || !strings.Contains(out, "Container") || !regexpLine(out, "image", "<string>") || !strings.Contains(out, "FIELDS:") {
			t.Fatalf("explain pod.spec.containers from OpenAPI v2:\n%s", out)
		}
		if out := k.must("explain", "role.rules", "--output=plaintext-openapiv2"); !regexpLine(out, "verbs", "<[]string>") {
			t.Fatalf("explain role.rules from OpenAPI v2:\n%s", out)
		}
	})

	t.Run("cordon", func(t *testing.T) {
		// Nodes report status all the time: a cordon's patch must retry
		// its conflicts on the server, never show them.
		node := strings.TrimSpace(strings.Split(k.must("get", "nodes", "-o", "name"), "\n")[0])
		if out := k.must("get", "nodes", "-o", "wide"); !strings.Contains(out, "CONTAINER-RUNTIME") || !strings.Contains(out, "podflow-sim://") {
			t.Fatalf("get nodes -o wide shows no container runtime:\n%s", out)
		}
		for range 3 {
			if out := k.must("cordon", node); !strings.Contains(out, "cordoned") {
				t.Fatalf("cordon: %q", out)
			}
			if out := k.must("uncordon", node); !strings.Contains(out, "uncordoned") {
				t.Fatalf("uncordon: %q", out)
			}
		}
	})

	t.Run("delete", func(t *testing.T) {
		if out := k.must("delete", "pod", "my-nginx-pod"); !strings.Contains(out, `pod "my-nginx-pod" deleted`) {
			t.Fatalf("delete: %q", out)
		}
		_, errs, code := k.run("get", "pod", "my-nginx-pod")
		if code == 0 || !strings.Contains(errs, "NotFound") {
			t.Fatalf("get after delete: exit %d %s", code, errs)
		}
	})
}

// regexpLine reports whether some line holds every field, in order.
func regexpLine(out string, fields ...string) bool {
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		i := 0
		for _, w := range f {
			if i < len(fields) && w == fields[i] {
				i++
			}
		}
		if i == len(fields) {
			return true
		}
	}
	return false
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// testKustomize applies a kustomization with podflow apply -k (kubectl's
// library builds it) and deletes it with kubectl delete -k, which deletes
// the namespace first and then each object in it: as with
// kube-apiserver, the namespace controller leaves the content alone for
// its grace period, so each delete finds its object and kubectl exits 0.
func testKustomize(t *testing.T, c *cluster, k *kubectl) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"kustomization.yaml": "namespace: kz\nresources: [ns.yaml, cm.yaml, pod.yaml]\ncommonLabels: {app: kz}\n",
		"ns.yaml":            "apiVersion: v1\nkind: Namespace\nmetadata: {name: kz}\n",
		"cm.yaml":            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\ndata: {a: b}\n",
		"pod.yaml":           "apiVersion: v1\nkind: Pod\nmetadata: {name: kzpod}\nspec: {containers: [{name: c, image: nginx}]}\n",
	} {
		if err := writeFile(filepath.Join(dir, name), body); err != nil {
			t.Fatal(err)
		}
	}
	out := c.mustPodflow("apply", "-k", dir)
	for _, want := range []string{"namespace/kz created", "configmap/cfg created", "pod/kzpod created"} {
		if !strings.Contains(out, want) {
			t.Fatalf("apply -k: %q lacks %q", out, want)
		}
	}
	if got := k.must("get", "configmap", "cfg", "-n", "kz", "-o", "jsonpath={.metadata.labels.app}"); got != "kz" {
		t.Fatalf("the kustomization's label: %q", got)
	}
	out, errs, code := k.run("delete", "-k", dir)
	if code != 0 || !strings.Contains(out, `configmap "cfg" deleted`) {
		t.Fatalf("delete -k: exit %d, %s%s", code, out, errs)
	}
}
