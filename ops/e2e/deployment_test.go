package e2e

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestKubectlDeployment: against `podflow up`, the stock kubectl's
// Deployment workflow: `create deployment` makes a ReplicaSet and its pods,
// `rollout status` completes, `get deploy` shows READY, UP-TO-DATE and
// AVAILABLE, `set image` rolls out a second ReplicaSet, `rollout undo`
// (kubectl's client-side rollback from the old ReplicaSet's template)
// rolls back to the first image as revision 3, and `scale deployment`
// scales it; `rollout pause`, `resume` and `restart` work as kube's, with
// two replicas of the deployment stage (`podflow scale deployment=2`);
// a stuck rollout exceeds its progress deadline; `delete deployment`
// leaves no ReplicaSet or pod of it (the garbage collector).
func TestKubectlDeployment(t *testing.T) {
	parallel(t, simulated)
	c := startCluster(t)
	k := newKubectl(t, filepath.Join(c.dir, "kubeconfig"))
	if out := k.must("create", "deployment", "web", "--image=busybox", "--replicas=3", "--", "sleep", "3600"); !strings.Contains(out, "deployment.apps/web created") {
		t.Fatalf("create: %q", out)
	}
	rolledOut := func() {
		t.Helper()
		out, errOut, code := k.run("rollout", "status", "deployment/web", "--timeout=120s")
		if code != 0 || !strings.Contains(out, `deployment "web" successfully rolled out`) {
			st, _, _ := k.run("get", "deploy", "web", "-o", "jsonpath={.status}")
			rs, _, _ := k.run("get", "rs", "-o", "wide")
			t.Fatalf("rollout status: exit %d: %s %s\nstatus %s\n%s", code, out, errOut, st, rs)
		}
	}
	rolledOut()
	fields := strings.Fields(k.must("get", "deploy", "web", "--no-headers"))
	if len(fields) < 4 || fields[0] != "web" || fields[1] != "3/3" || fields[2] != "3" || fields[3] != "3" {
		t.Errorf("get deploy: %v, want web 3/3 3 3 (READY UP-TO-DATE AVAILABLE)", fields)
	}
	images := func() string {
		return k.must("get", "rs", "-l", "app=web", "-o", "jsonpath={range .items[*]}{.metadata.name}={.spec.replicas}:{.spec.template.spec.containers[0].image} {end}")
	}
	runningPods := func(n int) {
		t.Helper()
		eventually(t, 60*time.Second, "running pods of web", func() (bool, string) {
			out, _, _ := k.run("get", "pods", "-l", "app=web", "--field-selector", "status.phase=Running", "-o", "name")
			return len(strings.Fields(out)) == n, out
		})
	}
	runningPods(3)

	// Two replicas of the stage share the work through their Leases.
	c.mustPodflow("scale", "deployment=2")
	eventually(t, 60*time.Second, "two deployment controller Leases", func() (bool, string) {
		out, _, _ := k.run("get", "lease", "-n", "kube-system", "-l", "podflow.io/controller=deployment", "-o", "name")
		return len(strings.Fields(out)) == 2, out
	})
	k.must("set", "image", "deployment/web", "busybox=busybox:1.36")
	rolledOut()
	if rs := images(); strings.Count(rs, ":busybox:1.36") != 1 || strings.Count(rs, "=3:busybox:1.36") != 1 || strings.Count(rs, "=0:busybox ") != 1 {
		t.Errorf("ReplicaSets after set image: %s", rs)
	}

	if out := k.must("rollout", "undo", "deployment/web"); !strings.Contains(out, "deployment.apps/web rolled back") {
		t.Fatalf("rollout undo: %q", out)
	}
	rolledOut()
	if img := k.must("get", "deploy", "web", "-o", "jsonpath={.spec.template.spec.containers[0].image} {.metadata.annotations.deployment\\.kubernetes\\.io/revision}"); img != "busybox 3" {
		t.Errorf("after undo: image and revision %q, want busybox 3", img)
	}
	if rs := images(); strings.Count(rs, "=3:busybox ") != 1 || strings.Count(rs, "=0:busybox:1.36") != 1 {
		t.Errorf("ReplicaSets after undo: %s", rs)
	}
	history := k.must("rollout", "history", "deployment/web")
	if !strings.Contains(history, "2 ") || !strings.Contains(history, "3 ") {
		t.Errorf("rollout history: %s", history)
	}

	if out := k.must("scale", "deployment", "web", "--replicas=5"); !strings.Contains(out, "deployment.apps/web scaled") {
		t.Fatalf("scale: %q", out)
	}
	rolledOut()
	runningPods(5)
	fields = strings.Fields(k.must("get", "deploy", "web", "--no-headers"))
	if len(fields) < 4 || fields[1] != "5/5" || fields[2] != "5" || fields[3] != "5" {
		t.Errorf("get deploy after scale: %v, want web 5/5 5 5", fields)
	}

	// Paused, a template change makes no ReplicaSet; resumed, it rolls out.
	k.must("rollout", "pause", "deployment/web")
	k.must("set", "image", "deployment/web", "busybox=busybox:1.37")
	eventually(t, 30*time.Second, "the paused Deployment observed", func() (bool, string) {
		out, _, _ := k.run("get", "deploy", "web", "-o", "jsonpath={.metadata.generation}/{.status.observedGeneration}/{.status.conditions[?(@.type==\"Progressing\")].reason}")
		g := strings.Split(out, "/")
		return len(g) == 3 && g[0] == g[1] && g[2] == "DeploymentPaused", out
	})
	if rs := images(); strings.Contains(rs, "busybox:1.37") {
		t.Errorf("a paused Deployment made a ReplicaSet: %s", rs)
	}
	k.must("rollout", "resume", "deployment/web")
	rolledOut()
	if rs := images(); strings.Count(rs, "=5:busybox:1.37") != 1 {
		t.Errorf("ReplicaSets after resume: %s", rs)
	}
	// rollout restart: the same image, a new template (an annotation).
	before := len(strings.Fields(images()))
	k.must("rollout", "restart", "deployment/web")
	rolledOut()
	if after := len(strings.Fields(images())); after != before+1 {
		t.Errorf("%d ReplicaSets after rollout restart, want %d: %s", after, before+1, images())
	}

	// A template whose pods never become ready (the simulated runtime fails
	// their readiness probe) exceeds progressDeadlineSeconds, and
	// `kubectl rollout status` says so.
	k.must("patch", "deployment", "web", "-p", `{"spec":{"progressDeadlineSeconds":3,"template":{"metadata":{"annotations":{"sim.podflow.io/readiness":"fail"}},`+
		`"spec":{"containers":[{"name":"busybox","readinessProbe":{"exec":{"command":["true"]},"periodSeconds":1}}]}}}}`)
	out, errOut, code := k.run("rollout", "status", "deployment/web", "--timeout=90s")
	if code == 0 || !strings.Contains(errOut, `deployment "web" exceeded its progress deadline`) {
		t.Errorf("rollout status of a stuck rollout: exit %d: %s %s", code, out, errOut)
	}

	// `kubectl delete deployment`: the garbage collector deletes its
	// ReplicaSets (every revision's), then their pods.
	if out := k.must("delete", "deployment", "web"); !strings.Contains(out, `deployment.apps "web" deleted`) {
		t.Fatalf("delete: %q", out)
	}
	eventually(t, 120*time.Second, "the ReplicaSets and pods of web gone", func() (bool, string) {
		rs, _, _ := k.run("get", "rs", "-l", "app=web", "-o", "name")
		pods, _, _ := k.run("get", "pods", "-l", "app=web", "-o", "name")
		return strings.TrimSpace(rs+pods) == "", rs + pods
	})
}
