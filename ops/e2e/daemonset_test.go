package e2e

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestKubectlDaemonSet: against `podflow up` with three simulated nodes,
// the stock kubectl's DaemonSet workflow: a DaemonSet runs one pod per
// node, each bound to its node through node affinity as kube's controller
// binds it, its trace beginning with the daemonset stage's PodRequested,
// and `rollout status` completes with the status numbers kube computes; a node added (a Node object) gets its pod, a node tainted
// NoSchedule that the pods do not tolerate gets none, and the pod of a
// node removed goes; `set image` rolls out one node at a time
// (maxUnavailable 1) to a second ControllerRevision, `rollout history`
// lists both and `rollout undo` goes back; `delete daemonset` leaves no
// pod or ControllerRevision of it (the garbage collector).
func TestKubectlDaemonSet(t *testing.T) {
	parallel(t, simulated)
	c := startCluster(t, "--nodes", "3")
	k := newKubectl(t, filepath.Join(c.dir, "kubeconfig"))
	nodes := strings.Fields(k.must("get", "nodes", "-o", "jsonpath={.items[*].metadata.name}"))
	if len(nodes) != 3 {
		t.Fatalf("nodes: %v, want 3", nodes)
	}
	k.mustIn(`apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      containers: [{name: agent, image: busybox, command: [sleep, "3600"]}]
`, "apply", "-f", "-")
	rolledOut := func() {
		t.Helper()
		out, errOut, code := k.run("rollout", "status", "daemonset/agent", "--timeout=120s")
		if code != 0 || !strings.Contains(out, `daemon set "agent" successfully rolled out`) {
			st, _, _ := k.run("get", "ds", "agent", "-o", "jsonpath={.status}")
			pods, _, _ := k.run("get", "pods", "-o", "wide")
			t.Fatalf("rollout status: exit %d: %s %s\nstatus %s\n%s", code, out, errOut, st, pods)
		}
	}
	podNodes := func() string {
		t.Helper()
		return k.must("get", "pods", "-l", "app=agent", "-o",
			`jsonpath={range .items[?(@.metadata.deletionTimestamp)]}-{end}{range .items[*]}{.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchFields[0].values[0]}={.spec.nodeName} {end}`)
	}
	rolledOut()
	eventually(t, 60*time.Second, "one running pod per node", func() (bool, string) {
		out, _, _ := k.run("get", "pods", "-l", "app=agent", "--field-selector", "status.phase=Running", "-o", "jsonpath={range .items[*]}{.spec.nodeName} {end}")
		got := strings.Fields(out)
		if len(got) != 3 {
			return false, out
		}
		for _, n := range nodes {
			if !strings.Contains(" "+out, " "+n+" ") {
				return false, out
			}
		}
		return true, out
	})
	for _, n := range nodes {
		if pn := podNodes(); !strings.Contains(pn, n+"="+n) {
			t.Errorf("no pod bound to %s by node affinity: %s", n, pn)
		}
	}
	fields := strings.Fields(k.must("get", "ds", "agent", "--no-headers"))
	// NAME DESIRED CURRENT READY UP-TO-DATE AVAILABLE
	if len(fields) < 6 || strings.Join(fields[:6], " ") != "agent 3 3 3 3 3" {
		t.Errorf("get ds: %v, want agent 3 3 3 3 3", fields)
	}
	// A daemon pod travels the pipeline as a ReplicaSet's: its trace
	// begins with the controller's PodRequested.
	first := strings.Fields(k.must("get", "pods", "-l", "app=agent", "-o", "jsonpath={.items[0].metadata.name}"))[0]
	if tr := c.mustPodflow("trace", "pod", first); !strings.Contains(tr, "daemonset") || !strings.Contains(tr, "PodRequested") || !strings.Contains(tr, "PodScheduled") {
		t.Errorf("trace of %s lacks the daemonset stage's PodRequested or the scheduling:\n%s", first, tr)
	}
	tolerations := k.must("get", "pods", "-l", "app=agent", "-o", "jsonpath={.items[0].spec.tolerations[*].key}")
	for _, want := range []string{"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable", "node.kubernetes.io/disk-pressure",
		"node.kubernetes.io/memory-pressure", "node.kubernetes.io/pid-pressure", "node.kubernetes.io/unschedulable"} {
		if !strings.Contains(tolerations, want) {
			t.Errorf("daemon pod tolerations %q lack kube's default %s", tolerations, want)
		}
	}

	// A node tainted NoSchedule gets no pod; a node added without taints
	// gets one; a node removed loses its pod.
	k.mustIn(`apiVersion: v1
kind: Node
metadata: {name: pf-ds-tainted}
spec:
  taints: [{key: dedicated, value: db, effect: NoSchedule}]
---
apiVersion: v1
kind: Node
metadata: {name: pf-ds-extra}
`, "apply", "-f", "-")
	eventually(t, 60*time.Second, "a pod for the added node", func() (bool, string) {
		pn := podNodes()
		return strings.Contains(pn, "pf-ds-extra="), pn
	})
	eventually(t, 30*time.Second, "desiredNumberScheduled 4", func() (bool, string) {
		out, _, _ := k.run("get", "ds", "agent", "-o", "jsonpath={.status.desiredNumberScheduled}")
		return out == "4", out
	})
	if pn := podNodes(); strings.Contains(pn, "pf-ds-tainted") {
		t.Errorf("a pod for the tainted node: %s", pn)
	}
	k.must("delete", "node", "pf-ds-extra", "pf-ds-tainted")
	eventually(t, 60*time.Second, "the removed node's pod gone", func() (bool, string) {
		pn := podNodes()
		return !strings.Contains(pn, "pf-ds-extra") && len(strings.Fields(pn)) == 3, pn
	})
	rolledOut()

	// A rolling update, one node at a time, to a second revision.
	k.must("set", "image", "daemonset/agent", "agent=busybox:1.36")
	rolledOut()
	eventually(t, 60*time.Second, "three pods of the new image", func() (bool, string) {
		out := k.must("get", "pods", "-l", "app=agent", "-o", "jsonpath={range .items[*]}{.spec.containers[0].image} {end}")
		return strings.Count(out, "busybox:1.36") == 3 && len(strings.Fields(out)) == 3, out
	})
	revs := k.must("get", "controllerrevisions", "-l", "app=agent", "-o", "jsonpath={range .items[*]}{.revision} {end}")
	if f := strings.Fields(revs); len(f) != 2 || !strings.Contains(revs, "1") || !strings.Contains(revs, "2") {
		t.Errorf("ControllerRevisions: revisions %q, want 1 and 2", revs)
	}
	history := k.must("rollout", "history", "daemonset/agent")
	if !strings.Contains(history, "1 ") || !strings.Contains(history, "2 ") {
		t.Errorf("rollout history: %s", history)
	}
	if out := k.must("rollout", "undo", "daemonset/agent"); !strings.Contains(out, "daemonset.apps/agent rolled back") {
		t.Fatalf("rollout undo: %q", out)
	}
	rolledOut()
	eventually(t, 60*time.Second, "three pods of the first image", func() (bool, string) {
		out := k.must("get", "pods", "-l", "app=agent", "-o", "jsonpath={range .items[*]}{.spec.containers[0].image} {end}")
		return strings.Count(out, "busybox ") == 3 && len(strings.Fields(out)) == 3, out
	})
	st := k.must("get", "ds", "agent", "-o", "jsonpath={.metadata.generation}/{.status.observedGeneration} {.status.updatedNumberScheduled} {.status.numberMisscheduled}")
	if f := strings.Fields(st); len(f) != 3 || strings.Split(f[0], "/")[0] != strings.Split(f[0], "/")[1] || f[1] != "3" || f[2] != "0" {
		t.Errorf("status generation/observed updated misscheduled: %q", st)
	}

	// Deleting the DaemonSet deletes its pods and history.
	k.must("delete", "daemonset", "agent")
	eventually(t, 60*time.Second, "the DaemonSet's pods and ControllerRevisions gone", func() (bool, string) {
		pods, _, _ := k.run("get", "pods", "-l", "app=agent", "-o", "name")
		crs, _, _ := k.run("get", "controllerrevisions", "-l", "app=agent", "-o", "name")
		return strings.TrimSpace(pods+crs) == "", pods + crs
	})
}
