package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/podflow/podflow/proto/corev1"
)

// TestLinuxFidelity proves from inside real containers (`podflow up
// --runtime linux`, the stock kubectl) that the Pod fields podflow
// accepts are honoured as kubelet honours them (issue 16): the pod of
// examples/fidelity.yaml prints its environment (value, configMapKeyRef,
// secretKeyRef with optional, fieldRef, resourceFieldRef, envFrom with
// prefix, $(VAR) expansion in env and args), its mounted files and their
// modes (configMap and secret items and defaultMode, downwardAPI,
// projected), a Memory emptyDir's size, its user and read-only root, the
// postStart hook's marker and what its native sidecar serves; the test
// reads `kubectl logs` line by line. The same manifest comes back from
// `kubectl get -o json` with every field it gave; a pod whose ConfigMap is
// missing waits in CreateContainerConfigError with kubelet's message; and
// `kubectl top` reads the pod's cgroups (issue 17).
func TestLinuxFidelity(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for cgroups, network namespaces and mounts (CI runs as root)")
	}
	parallel(t, linuxRuntime)
	before := kernelObjects(t, "linux-node-1")
	c := startCluster(t, "--runtime", "linux")
	k := newKubectl(t, filepath.Join(c.dir, "kubeconfig"))
	manifest := filepath.Join("examples", "fidelity.yaml")
	if out := k.must("apply", "-f", manifest); !strings.Contains(out, "pod/fidelity created") {
		t.Fatalf("kubectl apply: %q", out)
	}
	k.must("apply", "-f", writeTemp(t, `apiVersion: v1
kind: Pod
metadata: {name: fid-missing}
spec:
  containers:
  - name: app
    image: podflow/busybox:1
    command: [sleep, "3600"]
    env:
    - name: GONE
      valueFrom: {configMapKeyRef: {name: no-such-cfg, key: k}}
`))
	c.waitPodFor(60*time.Second, "default", "fidelity", "Running with its app ready to print", func(p *corev1.Pod) bool {
		return p.GetStatus().GetPhase() == "Running" && ready(p)
	})
	eventually(t, 20*time.Second, "the app's last line in kubectl logs", func() (bool, string) {
		out, errs, _ := k.run("logs", "fidelity")
		return strings.HasSuffix(out, "ready\n"), out + errs
	})

	t.Run("from inside", func(t *testing.T) {
		want := []string{
			"arg=plain-value", // $(VAR) in args
			"CFG_greeting.txt=hello from a configmap",
			"CFG_level=debug",
			"CFG_mode=fast",
			"CPU_REQ_M=50",
			"GREETING=level=debug pod=fidelity literal=$(LEVEL) undefined=$(NOPE)",
			"LEVEL=debug",
			"MEM_LIMIT_MI=64",
			"NODE=linux-node-1",
			"PASSWORD=s3cret",
			"PLAIN=plain-value",
			"POD_NAME=fidelity",
			"POD_NS=default",
			"SEC_password=s3cret",
			"SEC_token=t0k",
			"TIER=e2e",
			// A variable whose name is no shell identifier, as the shell's
			// env prints it (busybox's ash passes it on, as upstream's).
			"env: CFG_greeting.txt=hello from a configmap",
			"uid=1234 gid=2345",
			"touch: /rootfile: Read-only file system",
			"/etc/cfg/greet/hello.txt 604 hello from a configmap",
			"/etc/cfg/level 444 debug",
			"/etc/sec/tok 404 t0k",
			`/etc/podinfo/labels 644 app="fidelity",tier="e2e"`,
			"/etc/podinfo/name 644 fidelity",
			"/etc/podinfo/mem 644 64",
			"/etc/proj/cfg/level 444 debug",
			"/etc/proj/sec/password 404 s3cret",
			"/etc/proj/ns 444 default",
			"cfg: greet level sec: tok",
			"mem 16384K 777",
			"poststart=hooked-as-1234",
			"sidecar=sidecar-says-hi",
			"ready",
		}
		assertLines(t, "kubectl logs fidelity", k.must("logs", "fidelity"), want)
		assertLines(t, "kubectl logs fidelity -c init", k.must("logs", "fidelity", "-c", "init"), []string{"touch: /x: Read-only file system"})
		if out := k.must("get", "pod", "fidelity", "-o", `jsonpath={.status.initContainerStatuses[?(@.name=="init")].state.terminated.message}`); out != "init-done\n" {
			t.Errorf("the init container's termination message: %q (want %q)", out, "init-done\n")
		}
		// The init container finished, the sidecar runs beside the app.
		st := k.must("get", "pod", "fidelity", "-o", `jsonpath={range .status.initContainerStatuses[*]}{.name}:{.state.terminated.reason}{.state.running}|{end}`)
		if !regexp.MustCompile(`^init:Completed\|side:\{"startedAt":"[^"]+"\}\|$`).MatchString(st) {
			t.Errorf("init container states: %q (want init Completed, side running)", st)
		}
	})

	t.Run("round trip", func(t *testing.T) {
		// What kubectl sent (its last-applied annotation is the manifest as
		// JSON) must be in what the server returns, every field with its
		// value; the server may add defaults, never drop or change one.
		var got map[string]any
		if err := json.Unmarshal([]byte(k.must("get", "pod", "fidelity", "-o", "json")), &got); err != nil {
			t.Fatal(err)
		}
		applied, _ := lookup(got, "metadata", "annotations", "kubectl.kubernetes.io/last-applied-configuration").(string)
		var sent map[string]any
		if err := json.Unmarshal([]byte(applied), &sent); err != nil {
			t.Fatalf("the last-applied annotation %q: %v", applied, err)
		}
		if lookup(sent, "spec", "volumes") == nil || lookup(sent, "spec", "containers") == nil {
			t.Fatalf("the last-applied annotation is not the manifest: %s", applied)
		}
		var diffs []string
		subset("", sent, got, &diffs)
		if len(diffs) > 0 {
			t.Errorf("kubectl get -o json lost or changed %d field(s) given by the manifest:\n%s", len(diffs), strings.Join(diffs, "\n"))
		}
	})

	t.Run("missing ConfigMap", func(t *testing.T) {
		const msg = `configmap "no-such-cfg" not found`
		eventually(t, 30*time.Second, "fid-missing in CreateContainerConfigError", func() (bool, string) {
			out, errs, _ := k.run("get", "pod", "fid-missing", "-o", `jsonpath={.status.containerStatuses[0].state.waiting.reason}: {.status.containerStatuses[0].state.waiting.message}`)
			return out == "CreateContainerConfigError: "+msg, out + errs
		})
		if out := k.must("get", "pod", "fid-missing"); !regexpLine(out, "fid-missing", "0/1", "CreateContainerConfigError") {
			t.Errorf("kubectl get pod fid-missing:\n%s", out)
		}
		eventually(t, 20*time.Second, "kubectl describe to show the reason and kubelet's event", func() (bool, string) {
			out := k.must("describe", "pod", "fid-missing")
			return regexpLine(out, "Reason:", "CreateContainerConfigError") &&
				regexp.MustCompile(`(?m)Warning\s+Failed\s.*Error: `+regexp.QuoteMeta(msg)+`\s*$`).MatchString(out), out
		})
	})

	t.Run("top", func(t *testing.T) {
		// A Linux node answers from its cgroups, sampled every 10 s; a
		// container is in the reading from its second sample.
		eventually(t, 45*time.Second, "kubectl top pod fidelity --containers to show app and side", func() (bool, string) {
			out, errs, _ := k.run("top", "pod", "fidelity", "--containers")
			return regexp.MustCompile(`(?m)^fidelity\s+app\s+\d+m\s+\d+Mi\s*$`).MatchString(out) &&
				regexp.MustCompile(`(?m)^fidelity\s+side\s+\d+m\s+\d+Mi\s*$`).MatchString(out), out + errs
		})
		out := k.must("top", "pods")
		if !regexpLine(out, "NAME", "CPU(cores)", "MEMORY(bytes)") || !regexp.MustCompile(`(?m)^fidelity\s+\d+m\s+\d+Mi\s*$`).MatchString(out) {
			t.Errorf("kubectl top pods:\n%s", out)
		}
		if strings.Contains(out, "fid-missing") {
			t.Errorf("kubectl top pods shows a pod with no running container:\n%s", out)
		}
	})

	k.must("delete", "-f", manifest, "--grace-period", "2")
	k.must("delete", "pod", "fid-missing", "--grace-period", "1")
	c.stop()
	if after := kernelObjects(t, "linux-node-1"); after != before {
		t.Fatalf("kernel objects left behind:\nbefore: %s\nafter:  %s", before, after)
	}
}

// assertLines fails unless text is exactly the lines want, in order.
func assertLines(t *testing.T, what, text string, want []string) {
	t.Helper()
	got := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	n := max(len(got), len(want))
	var bad []string
	for i := range n {
		g, w := "<none>", "<none>"
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if g != w {
			bad = append(bad, fmt.Sprintf("line %d: %q, want %q", i+1, g, w))
		}
	}
	if len(bad) > 0 {
		t.Errorf("%s:\n%s\nfull output:\n%s", what, strings.Join(bad, "\n"), text)
	}
}

// lookup walks a decoded JSON object by keys.
func lookup(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// subset records in diffs every path of sent that is missing from got or
// has another value there: objects key by key, arrays index by index (the
// server may add keys, never elements or values of its own).
func subset(path string, sent, got any, diffs *[]string) {
	switch s := sent.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			*diffs = append(*diffs, fmt.Sprintf("%s: sent an object, got %v", path, got))
			return
		}
		keys := make([]string, 0, len(s))
		for key := range s {
			keys = append(keys, key)
		}
		sort.Strings(keys)
		for _, key := range keys {
			gv, ok := g[key]
			if !ok {
				*diffs = append(*diffs, fmt.Sprintf("%s.%s: missing (sent %v)", path, key, s[key]))
				continue
			}
			subset(path+"."+key, s[key], gv, diffs)
		}
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) < len(s) {
			*diffs = append(*diffs, fmt.Sprintf("%s: sent %d elements, got %v", path, len(s), got))
			return
		}
		// Only ServiceAccount admission adds elements, at the end, as
		// kube's does: the token volume and its mount in every container.
		for _, extra := range g[len(s):] {
			name, _ := lookup(extra, "name").(string)
			if !strings.HasPrefix(name, "kube-api-access-") {
				*diffs = append(*diffs, fmt.Sprintf("%s: sent %d elements, got %d: %v added", path, len(s), len(g), extra))
			}
		}
		for i := range s {
			subset(fmt.Sprintf("%s[%d]", path, i), s[i], g[i], diffs)
		}
	default:
		if !reflect.DeepEqual(sent, got) {
			*diffs = append(*diffs, fmt.Sprintf("%s: sent %v, got %v", path, sent, got))
		}
	}
}
