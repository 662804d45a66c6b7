package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore"
	"github.com/podflow/podflow/services/objects"
)

func (c *cluster) pod(ns, name string) (*corev1.Pod, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return objects.Get[*corev1.Pod](ctx, c.store, ns, name)
}

func condition(p *corev1.Pod, t string) *corev1.PodCondition {
	for _, cd := range p.GetStatus().GetConditions() {
		if cd.GetType() == t {
			return cd
		}
	}
	return nil
}

func ready(p *corev1.Pod) bool { return condition(p, "Ready").GetStatus() == "True" }

// waitPod waits until the stored pod satisfies cond.
func (c *cluster) waitPod(ns, name, what string, cond func(*corev1.Pod) bool) *corev1.Pod {
	c.t.Helper()
	return c.waitPodFor(30*time.Second, ns, name, what, cond)
}

func (c *cluster) waitPodFor(limit time.Duration, ns, name, what string, cond func(*corev1.Pod) bool) *corev1.Pod {
	c.t.Helper()
	var got *corev1.Pod
	eventually(c.t, limit, fmt.Sprintf("pod %s/%s %s", ns, name, what), func() (bool, string) {
		p, err := c.pod(ns, name)
		if err != nil {
			return false, err.Error()
		}
		got = p
		return cond(p), fmt.Sprintf("phase %s, conditions %v, containers %v", p.GetStatus().GetPhase(), p.GetStatus().GetConditions(), p.GetStatus().GetContainerStatuses())
	})
	return got
}

func (c *cluster) sliceAddrs(ns, svc string) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sl, err := objects.Get[*corev1.EndpointSlice](ctx, c.store, ns, svc)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range sl.GetEndpoints() {
		out = append(out, e.GetAddresses()...)
	}
	return out
}

func (c *cluster) events(ns, podName string) []*corev1.Event {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	evs, _, err := objects.List[*corev1.Event](ctx, c.store, ns)
	if err != nil {
		c.t.Fatal(err)
	}
	var out []*corev1.Event
	for _, e := range evs {
		if e.GetInvolvedObject().GetName() == podName {
			out = append(out, e)
		}
	}
	return out
}

func hasEvent(evs []*corev1.Event, reason, msgPart string) bool {
	for _, e := range evs {
		if e.GetReason() == reason && strings.Contains(e.GetMessage(), msgPart) {
			return true
		}
	}
	return false
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

const podYAML = `apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: %s
  labels: {app: %s}
  annotations: {%s}
spec:
  containers:
  - name: app
    image: podflow/http:1
    ports: [{containerPort: 8080}]
%s`

func pod(name, ns, app, annotations, extra string) string {
	return fmt.Sprintf(podYAML, name, ns, app, annotations, extra)
}

// TestLifecycle walks the seeds' journey and each of their five failure
// scenarios against one running system.
func TestLifecycle(t *testing.T) {
	parallel(t, simulated)
	c := startCluster(t, "--nodes", "3")

	t.Run("the seed pod runs, is Ready and joins its Service", func(t *testing.T) {
		c.t = t
		out := c.mustPodflow("apply", "-f", filepath.Join("examples", "nginx-service.yaml"), "-f", filepath.Join("examples", "nginx-pod.yaml"))
		if !strings.Contains(out, "pod/my-nginx-pod created") || !strings.Contains(out, "service/my-nginx created") {
			t.Fatalf("apply output:\n%s", out)
		}
		p := c.waitPod("default", "my-nginx-pod", "Running and Ready", func(p *corev1.Pod) bool {
			return p.GetStatus().GetPhase() == "Running" && ready(p) && p.GetStatus().GetPodIp() != ""
		})
		ip := p.GetStatus().GetPodIp()
		if !strings.HasPrefix(ip, "10.244.") || p.GetSpec().GetNodeName() == "" || p.GetStatus().GetQosClass() != "BestEffort" {
			t.Fatalf("pod ip %q node %q qos %q", ip, p.GetSpec().GetNodeName(), p.GetStatus().GetQosClass())
		}
		eventually(t, 20*time.Second, "the pod IP in the Service's EndpointSlice", func() (bool, string) {
			a := c.sliceAddrs("default", "my-nginx")
			return contains(a, ip), fmt.Sprint(a)
		})
		desc := c.mustPodflow("describe", "pod", "my-nginx-pod")
		for _, want := range []string{"Status:           Running", "Ready                        True", "Scheduled", "Started"} {
			if !strings.Contains(desc, want) {
				t.Errorf("describe lacks %q:\n%s", want, desc)
			}
		}
		get := c.mustPodflow("get", "pods", "-o", "wide")
		if !strings.Contains(get, "my-nginx-pod") || !strings.Contains(get, "1/1") || !strings.Contains(get, ip) {
			t.Errorf("get pods -o wide:\n%s", get)
		}
		// The scheduler's metrics, under kube-scheduler's names, saw it.
		metrics := c.scrape("scheduler-1")
		for _, want := range []string{`scheduler_schedule_attempts_total{result="scheduled"} `, `scheduler_pending_pods{queue="unschedulable"} `,
			`podflow_stage_events_total{event="PodPersisted",outcome="Acked",stage="scheduler"} `} {
			if !strings.Contains(metrics, want) {
				t.Errorf("scheduler metrics lack %q", want)
			}
		}
		if na := c.scrape("nodeagent-sim"); !strings.Contains(na, "kubelet_pod_start_sli_duration_seconds_count 1") &&
			!strings.Contains(na, "kubelet_pod_start_sli_duration_seconds_count 2") {
			t.Errorf("node agent metrics lack the pod start:\n%s", grepLines(na, "kubelet_"))
		}
		// Applying the same pod again changes nothing.
		out = c.mustPodflow("apply", "-f", filepath.Join("examples", "nginx-pod.yaml"))
		if !strings.Contains(out, "pod/my-nginx-pod unchanged") {
			t.Errorf("re-apply: %s", out)
		}
	})

	t.Run("failure 1: Forbidden by RBAC", func(t *testing.T) {
		c.t = t
		_, _ = c.applyYAML(`apiVersion: v1
kind: ServiceAccount
metadata: {name: intern}
---
apiVersion: v1
kind: Secret
metadata:
  name: intern-token
  annotations: {kubernetes.io/service-account.name: intern}
type: kubernetes.io/service-account-token
`)
		var token string
		eventually(t, 10*time.Second, "the ServiceAccount token", func() (bool, string) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			s, err := objects.Get[*corev1.Secret](ctx, c.store, "default", "intern-token")
			if err != nil {
				return false, err.Error()
			}
			token = string(s.GetData()["token"])
			return token != "", "no token yet"
		})
		// The api stage learns of the token through its watch.
		var out string
		eventually(t, 10*time.Second, "a Forbidden answer", func() (bool, string) {
			var code int
			out, code = c.applyYAML(pod("forbidden-pod", "default", "x", "", ""), "--token", token)
			return code == 1 && strings.Contains(out, "Error from server (Forbidden)"), out
		})
		if !strings.Contains(out, `User "system:serviceaccount:default:intern" cannot create resource "pods"`) {
			t.Errorf("message: %s", out)
		}
		if _, err := c.pod("default", "forbidden-pod"); !errors.Is(err, raftstore.ErrNotFound) {
			t.Fatalf("forbidden pod stored: %v", err)
		}
		out, code := c.applyYAML(pod("anon-pod", "default", "x", "", ""), "--token", "not-a-real-token-at-all")
		if code != 1 || !strings.Contains(out, "Error from server (Unauthorized)") {
			t.Fatalf("bad token: exit %d: %s", code, out)
		}
	})

	t.Run("a Secret is ciphertext in the store's files, which are its owner's", func(t *testing.T) {
		c.t = t
		value := fmt.Sprintf("e2e-secret-%d", time.Now().UnixNano())
		if out, code := c.applyYAML(fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata: {name: at-rest}\ndata: {password: %s}\n",
			base64.StdEncoding.EncodeToString([]byte(value)))); code != 0 {
			t.Fatalf("apply a Secret: %s", out)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s, err := objects.Get[*corev1.Secret](ctx, c.store, "default", "at-rest")
		if err != nil || string(s.GetData()["password"]) != value {
			t.Fatalf("the Secret reads back: %v, %v", s.GetData(), err)
		}
		if info, err := os.Stat(filepath.Join(c.dir, "encryption-config.yaml")); err != nil || info.Mode().Perm() != 0o600 {
			t.Fatalf("up's key file: %v, %v; want mode 0600", info, err)
		}
		dirs, _ := filepath.Glob(filepath.Join(c.dir, "store-*"))
		if len(dirs) == 0 {
			t.Fatal("no store data directory")
		}
		var files int
		for _, d := range dirs {
			_ = filepath.WalkDir(d, func(path string, e fs.DirEntry, err error) error {
				if err != nil {
					return nil // a snapshot replaced meanwhile
				}
				if info, err := e.Info(); err == nil && info.Mode().Perm()&0o077 != 0 {
					t.Errorf("%s: mode %04o, open to other users", path, info.Mode().Perm())
				}
				if !e.Type().IsRegular() {
					return nil
				}
				files++
				if b, err := os.ReadFile(path); err == nil && bytes.Contains(b, []byte(value)) {
					t.Errorf("%s holds the Secret's value in clear", path)
				}
				return nil
			})
		}
		if files == 0 {
			t.Fatal("no file in the store's data directories")
		}
	})

	t.Run("failure 2: rejected by admission, naming the policy", func(t *testing.T) {
		c.t = t
		c.mustPodflow("apply", "-f", writeTemp(t, `apiVersion: v1
kind: Namespace
metadata:
  name: locked
  labels: {pod-security.kubernetes.io/enforce: restricted}
`))
		out, code := c.applyYAML(pod("priv", "locked", "x", "", "    securityContext: {privileged: true}\n"))
		if code != 1 || !strings.Contains(out, "PolicyViolation") || !strings.Contains(out, `violates PodSecurity "restricted:latest"`) || !strings.Contains(out, "privileged") {
			t.Fatalf("exit %d: %s", code, out)
		}
		out, code = c.applyYAML(pod("Bad_Name", "default", "x", "", ""))
		if code != 1 || !strings.Contains(out, "(Invalid)") || !strings.Contains(out, "metadata.name") {
			t.Fatalf("invalid name: exit %d: %s", code, out)
		}
		if _, err := c.pod("locked", "priv"); !errors.Is(err, raftstore.ErrNotFound) {
			t.Fatalf("rejected pod stored: %v", err)
		}
	})

	t.Run("refused fields", func(t *testing.T) { podflowApplyRefusedFields(t, c) })

	t.Run("failure 3: Pending with a FailedScheduling message", func(t *testing.T) {
		c.t = t
		c.mustPodflow("apply", "-f", writeTemp(t, pod("huge", "default", "huge", "", "    resources: {requests: {cpu: \"1000\"}}\n")))
		p := c.waitPod("default", "huge", "Unschedulable", func(p *corev1.Pod) bool {
			return condition(p, "PodScheduled").GetReason() == "Unschedulable"
		})
		// kube-scheduler's words, its preemption verdict included.
		want := "0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod.."
		if got := condition(p, "PodScheduled").GetMessage(); got != want || p.GetStatus().GetPhase() != "Pending" || p.GetSpec().GetNodeName() != "" {
			t.Fatalf("phase %s node %q message %q", p.GetStatus().GetPhase(), p.GetSpec().GetNodeName(), got)
		}
		eventually(t, 10*time.Second, "a FailedScheduling event", func() (bool, string) {
			return hasEvent(c.events("default", "huge"), "FailedScheduling", want), ""
		})
	})

	t.Run("failure 4: stuck in ContainerCreating", func(t *testing.T) {
		c.t = t
		cases := []struct{ name, annotation, reason string }{
			{"pull", `sim.podflow.io/image-pull: fail`, "ImagePull"}, // ErrImagePull, then ImagePullBackOff
			{"sandbox", `sim.podflow.io/sandbox: fail`, "FailedCreatePodSandBox"},
			{"mount", `sim.podflow.io/mount: fail`, "FailedMount"},
		}
		for _, tc := range cases {
			c.mustPodflow("apply", "-f", writeTemp(t, pod("stuck-"+tc.name, "default", "stuck", tc.annotation, "")))
		}
		for _, tc := range cases {
			name := "stuck-" + tc.name
			eventually(t, 30*time.Second, name+" stuck with "+tc.reason, func() (bool, string) {
				p, err := c.pod("default", name)
				if err != nil {
					return false, err.Error()
				}
				st := c.mustPodflow("get", "pod", name)
				evs := c.events("default", name)
				stuck := p.GetStatus().GetPhase() == "Pending" && !ready(p)
				switch tc.name {
				case "pull":
					return stuck && (strings.Contains(st, "ErrImagePull") || strings.Contains(st, "ImagePullBackOff")), st
				default:
					return stuck && hasEvent(evs, tc.reason, ""), fmt.Sprintf("%s %v", st, evs)
				}
			})
		}
	})

	t.Run("failure 5: Running but not Ready is absent from endpoints", func(t *testing.T) {
		c.t = t
		c.mustPodflow("apply", "-f", writeTemp(t, `apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
`))
		c.mustPodflow("apply", "-f", writeTemp(t, pod("web-ok", "default", "web", "", "")))
		probe := "    readinessProbe: {httpGet: {path: /healthz, port: 8080}, periodSeconds: 1}\n"
		c.mustPodflow("apply", "-f", writeTemp(t, pod("web-sick", "default", "web", `sim.podflow.io/readiness: fail`, probe)))
		c.mustPodflow("apply", "-f", writeTemp(t, pod("other", "default", "other", "", "")))
		ok := c.waitPod("default", "web-ok", "Ready", ready)
		sick := c.waitPod("default", "web-sick", "Running, not Ready", func(p *corev1.Pod) bool {
			return p.GetStatus().GetPhase() == "Running" && condition(p, "Ready").GetStatus() == "False" && p.GetStatus().GetPodIp() != ""
		})
		other := c.waitPod("default", "other", "Ready", ready)
		eventually(t, 20*time.Second, "web's EndpointSlice to list only the Ready matching pod", func() (bool, string) {
			a := c.sliceAddrs("default", "web")
			return len(a) == 1 && a[0] == ok.GetStatus().GetPodIp(), fmt.Sprint(a)
		})
		a := c.sliceAddrs("default", "web")
		if contains(a, sick.GetStatus().GetPodIp()) || contains(a, other.GetStatus().GetPodIp()) {
			t.Fatalf("slice %v lists a not-ready or unmatched pod", a)
		}
	})

	t.Run("delete: graceful termination, then gone from store and endpoints", func(t *testing.T) {
		c.t = t
		p, err := c.pod("default", "web-ok")
		if err != nil {
			t.Fatal(err)
		}
		out := c.mustPodflow("delete", "pod", "web-ok")
		if !strings.Contains(out, `pod "web-ok" deleted`) {
			t.Fatalf("delete: %s", out)
		}
		if _, err := c.pod("default", "web-ok"); !errors.Is(err, raftstore.ErrNotFound) {
			t.Fatalf("pod still stored after delete --wait: %v", err)
		}
		eventually(t, 20*time.Second, "web-ok gone from the EndpointSlice", func() (bool, string) {
			a := c.sliceAddrs("default", "web")
			return !contains(a, p.GetStatus().GetPodIp()), fmt.Sprint(a)
		})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		alloc, err := objects.Get[*corev1.NodeAllocation](ctx, c.store, "", p.GetSpec().GetNodeName())
		if err != nil {
			t.Fatal(err)
		}
		if _, held := alloc.GetPods()[p.GetMetadata().GetUid()]; held {
			t.Fatalf("node %s still accounts for the deleted pod", p.GetSpec().GetNodeName())
		}
		out, code := c.podflow("delete", "pod", "web-ok")
		if code != 1 || !strings.Contains(out, "NotFound") {
			t.Fatalf("second delete: exit %d %s", code, out)
		}
	})
}

func writeTemp(t *testing.T, content string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "m.yaml")
	if err := writeFile(f, content); err != nil {
		t.Fatal(err)
	}
	return f
}
