package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

const statefulSetYAML = `apiVersion: v1
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
  replicas: 0
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: busybox
        image: busybox
        command: [sleep, "3600"]
        readinessProbe: {exec: {command: ["true"]}, initialDelaySeconds: 1, periodSeconds: 1}
`

// watchedPod is one event of `kubectl get pods -w --output-watch-events`.
type watchedPod struct {
	Type   string `json:"type"`
	Object struct {
		Metadata struct {
			Name              string  `json:"name"`
			DeletionTimestamp *string `json:"deletionTimestamp"`
		} `json:"metadata"`
		Status struct {
			Conditions []struct {
				Type   string `json:"type"`
				Status string `json:"status"`
			} `json:"conditions"`
		} `json:"status"`
	} `json:"object"`
}

func (w watchedPod) ready() bool {
	for _, c := range w.Object.Status.Conditions {
		if c.Type == "Ready" {
			return c.Status == "True"
		}
	}
	return false
}

// orderViolations replays a watch of set's pods and returns every event
// breaking OrderedReady: <set>-<i+1> added while a lower ordinal is not
// Ready, or <set>-<i> marked terminating while <set>-<i+1> exists.
func orderViolations(set string, events []watchedPod) []string {
	type state struct{ ready, deleting bool }
	pods := map[int]*state{}
	var out []string
	for n, e := range events {
		var i int
		name := e.Object.Metadata.Name
		if !strings.HasPrefix(name, set+"-") {
			continue
		}
		if _, err := fmt.Sscanf(strings.TrimPrefix(name, set+"-"), "%d", &i); err != nil {
			continue
		}
		deleting := e.Object.Metadata.DeletionTimestamp != nil
		prev := pods[i]
		switch e.Type {
		case "DELETED":
			delete(pods, i)
			continue
		case "ADDED":
			if prev == nil {
				for j := 0; j < i; j++ {
					if p := pods[j]; p == nil || !p.ready || p.deleting {
						out = append(out, fmt.Sprintf("event %d: %s created while %s-%d is not Ready", n, name, set, j))
					}
				}
			}
		}
		if deleting && (prev == nil || !prev.deleting) {
			if _, ok := pods[i+1]; ok {
				out = append(out, fmt.Sprintf("event %d: %s marked terminating while %s-%d exists", n, name, set, i+1))
			}
		}
		pods[i] = &state{ready: e.ready(), deleting: deleting}
	}
	return out
}

// TestKubectlStatefulSet: against `podflow up` on simulated nodes, the
// stock kubectl's StatefulSet workflow. A set behind a headless Service
// scales 0→3→1 in order — checked on kubectl's own watch of the pods:
// web-(i+1) appears only once web-i is Ready (their readiness probes
// take a second), and the scale down marks web-2 terminating before
// web-1, each after the one above is gone; `rollout status` succeeds;
// the pods' hostnames are their names under the Service (the
// EndpointSlice's hostnames, which DNS serves as web-0.web.<ns>.svc);
// `set image` with a partition updates web-2 and web-1 only (`rollout
// status` reports the partitioned roll out), `rollout history` lists
// both ControllerRevisions and `rollout undo` goes back; deleting the set
// deletes its pods and revisions; a set with volumeClaimTemplates is
// refused naming the field.
func TestKubectlStatefulSet(t *testing.T) {
	parallel(t, simulated)
	c := startCluster(t)
	k := newKubectl(t, filepath.Join(c.dir, "kubeconfig"))
	k.mustIn(statefulSetYAML, "apply", "-f", "-")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var events []watchedPod
	watch := k.cmd(ctx, "get", "pods", "-l", "app=web", "-w", "--output-watch-events", "-o", "json", "--request-timeout", "0")
	out, err := watch.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		dec := json.NewDecoder(out)
		for {
			var e watchedPod
			if err := dec.Decode(&e); err != nil {
				if err != io.EOF && ctx.Err() == nil {
					t.Logf("watch: %v", err)
				}
				return
			}
			mu.Lock()
			events = append(events, e)
			mu.Unlock()
		}
	}()
	defer func() { cancel(); _ = watch.Wait(); <-watchDone }()
	time.Sleep(time.Second) // the watch is listening before the first pod

	rolledOut := func(want string) {
		t.Helper()
		out, errOut, code := k.run("rollout", "status", "statefulset/web", "--timeout=120s")
		if code != 0 || !strings.Contains(out, want) {
			st, _, _ := k.run("get", "sts", "web", "-o", "jsonpath={.status}")
			t.Fatalf("rollout status: exit %d: %s %s\nstatus %s", code, out, errOut, st)
		}
	}
	pods := func(n int) {
		t.Helper()
		eventually(t, 90*time.Second, fmt.Sprintf("%d pods of web", n), func() (bool, string) {
			out, _, _ := k.run("get", "pods", "-l", "app=web", "-o", "jsonpath={range .items[*]}{.metadata.name} {end}")
			return len(strings.Fields(out)) == n, out
		})
	}

	if out := k.must("scale", "statefulset", "web", "--replicas=3"); !strings.Contains(out, "statefulset.apps/web scaled") {
		t.Fatalf("scale: %q", out)
	}
	rolledOut("partitioned roll out complete: 3 new pods have been updated")
	if out := k.must("get", "pods", "-l", "app=web", "-o", "jsonpath={range .items[*]}{.metadata.name}={.spec.hostname}.{.spec.subdomain} {end}"); strings.TrimSpace(out) != "web-0=web-0.web web-1=web-1.web web-2=web-2.web" {
		t.Errorf("pods and hostnames: %q", out)
	}
	eventually(t, 60*time.Second, "the Service's endpoints named by hostname", func() (bool, string) {
		out, _, _ := k.run("get", "endpointslices", "-l", "kubernetes.io/service-name=web", "-o", "jsonpath={.items[*].endpoints[*].hostname}")
		f := strings.Fields(out)
		return len(f) == 3 && strings.Contains(out, "web-0") && strings.Contains(out, "web-2"), out
	})
	if fields := strings.Fields(k.must("get", "sts", "web", "--no-headers")); len(fields) < 2 || fields[1] != "3/3" {
		t.Errorf("get sts: %v, want web 3/3", fields)
	}

	k.must("scale", "statefulset", "web", "--replicas=1")
	pods(1)
	// The list shows one pod before the watch (another stream) may have
	// delivered the last deletion: wait for the watch to see both.
	var seen []watchedPod
	var deleted []string
	eventually(t, 30*time.Second, "the watch to see the scale-down's deletions", func() (bool, string) {
		mu.Lock()
		seen = append([]watchedPod(nil), events...)
		mu.Unlock()
		deleted = deleted[:0]
		for _, e := range seen {
			if e.Type == "DELETED" {
				deleted = append(deleted, e.Object.Metadata.Name)
			}
		}
		return len(deleted) >= 2, strings.Join(deleted, ",")
	})
	for _, v := range orderViolations("web", seen) {
		t.Error(v)
	}
	if strings.Join(deleted, ",") != "web-2,web-1" {
		t.Errorf("deleted %v, want web-2,web-1 (%d events)", deleted, len(seen))
	}

	// A partitioned rolling update, its history and an undo.
	k.must("scale", "statefulset", "web", "--replicas=3")
	rolledOut("partitioned roll out complete: 3 new pods have been updated")
	k.must("patch", "statefulset", "web", "-p", `{"spec":{"updateStrategy":{"type":"RollingUpdate","rollingUpdate":{"partition":1}}}}`)
	k.must("set", "image", "statefulset/web", "busybox=busybox:1.36")
	rolledOut("partitioned roll out complete: 2 new pods have been updated")
	if out := k.must("get", "pods", "-l", "app=web", "-o", "jsonpath={range .items[*]}{.metadata.name}={.spec.containers[0].image} {end}"); strings.TrimSpace(out) != "web-0=busybox web-1=busybox:1.36 web-2=busybox:1.36" {
		t.Errorf("images after a partitioned update: %q", out)
	}
	if h := k.must("rollout", "history", "statefulset/web"); !strings.Contains(h, "1 ") || !strings.Contains(h, "2 ") {
		t.Errorf("rollout history: %s", h)
	}
	k.must("patch", "statefulset", "web", "-p", `{"spec":{"updateStrategy":{"rollingUpdate":{"partition":0}}}}`)
	if out := k.must("rollout", "undo", "statefulset/web"); !strings.Contains(out, "statefulset.apps/web rolled back") {
		t.Fatalf("rollout undo: %q", out)
	}
	rolledOut("partitioned roll out complete: 3 new pods have been updated")
	if out := k.must("get", "pods", "-l", "app=web", "-o", "jsonpath={range .items[*]}{.spec.containers[0].image} {end}"); strings.TrimSpace(out) != "busybox busybox busybox" {
		t.Errorf("images after undo: %q", out)
	}

	// Deleting the set: the garbage collector deletes its pods and its
	// ControllerRevisions.
	k.must("delete", "statefulset", "web")
	eventually(t, 120*time.Second, "the pods and ControllerRevisions of web gone", func() (bool, string) {
		pods, _, _ := k.run("get", "pods", "-l", "app=web", "-o", "name")
		revs, _, _ := k.run("get", "controllerrevisions", "-l", "app=web", "-o", "name")
		return strings.TrimSpace(pods+revs) == "", pods + revs
	})

	claims := strings.Replace(strings.Split(statefulSetYAML, "---\n")[1], "name: web}", "name: db}", 1) +
		"  volumeClaimTemplates:\n  - metadata: {name: data}\n    spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}\n"
	if out, errOut, code := k.runIn(claims, "apply", "-f", "-"); code == 0 || !strings.Contains(errOut, "spec.volumeClaimTemplates: Forbidden: podflow does not support PersistentVolumeClaims") {
		t.Errorf("a set with volumeClaimTemplates: exit %d: %s %s", code, out, errOut)
	}
}
