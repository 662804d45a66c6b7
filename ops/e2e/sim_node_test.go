package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// testSimNode drives each kubectl verb of a node against `podflow up`'s
// simulated runtime, each bounded in time (runIn gives up after 60s): a
// simulated node answers as a node does, or refuses at once.
func testSimNode(t *testing.T, k *kubectl) {
	t.Run("logs", func(t *testing.T) {
		k.mustIn(`apiVersion: v1
kind: Pod
metadata:
  name: crash
  annotations: {sim.podflow.io/exit-after: 1s, sim.podflow.io/exit-code: "3", sim.podflow.io/log: "serving\n"}
spec:
  containers:
  - {name: app, image: nginx, args: ["--port", "80"], readinessProbe: {httpGet: {path: /healthz, port: 80}}}
`, "apply", "-f", "-")
		eventually(t, 60*time.Second, "crash to restart", func() (bool, string) {
			out, _, _ := k.run("get", "pod", "crash", "-o", "jsonpath={.status.containerStatuses[0].restartCount}")
			return out != "" && out != "0", out
		})
		out, errs, code := k.run("logs", "crash", "--previous")
		for _, want := range []string{`podflow-sim: container "app" started from image "nginx" running the image's entrypoint with args "--port 80"`,
			"serving\n", "podflow-sim: readiness probe httpGet /healthz succeeded", "podflow-sim: exited with code 3 (sim.podflow.io/exit-after=1s, sim.podflow.io/exit-code=3)"} {
			if code != 0 || !strings.Contains(out, want) {
				t.Fatalf("logs --previous: exit %d, %q %s; want %q in it", code, out, errs, want)
			}
		}
		out, _, _ = k.run("logs", "crash", "--timestamps", "--tail", "1")
		if !regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z podflow-sim: `).MatchString(out) || strings.Count(out, "\n") != 1 {
			t.Fatalf("logs --timestamps --tail 1: %q", out)
		}
		// -f follows the running instance until it exits (1s).
		out, errs, code = k.runIn("", "logs", "-f", "crash")
		if code != 0 || !strings.Contains(out, "podflow-sim: exited with code 3") {
			t.Fatalf("logs -f: exit %d, %q %s", code, out, errs)
		}
		k.must("delete", "pod", "crash", "--wait=false")
	})

	t.Run("run -i --rm", func(t *testing.T) {
		out, errs, code := k.runIn("", "run", "-i", "--rm", "echo", "--image=busybox", "--restart=Never", "--", "echo", "hi")
		if code != 0 || !strings.HasPrefix(out, "hi\n") || !strings.Contains(out, `pod "echo" deleted`) {
			t.Fatalf("run -i --rm echo hi: exit %d, %q %s", code, out, errs)
		}
		// sh reads what kubectl sends; its exit code is kubectl's.
		out, errs, code = k.runIn("echo typed\nhostname\nexit 5\n", "run", "-i", "--rm", "shell", "--image=busybox", "--restart=Never", "--", "sh")
		if code != 5 || !strings.HasPrefix(out, "typed\nshell\n") {
			t.Fatalf("run -i --rm sh: exit %d (want 5), %q %s", code, out, errs)
		}
	})

	t.Run("attach", func(t *testing.T) {
		k.mustIn(`apiVersion: v1
kind: Pod
metadata: {name: waiter}
spec:
  restartPolicy: Never
  containers: [{name: c, image: busybox, command: [sh], stdin: true}]
`, "apply", "-f", "-")
		eventually(t, 30*time.Second, "waiter to run", func() (bool, string) {
			out, _, _ := k.run("get", "pod", "waiter", "-o", "jsonpath={.status.phase}")
			return out == "Running", out
		})
		out, errs, code := k.runIn("echo attached\nexit 0\n", "attach", "-i", "waiter")
		if code != 0 || !strings.Contains(out, "attached\n") {
			t.Fatalf("attach -i: exit %d, %q %s", code, out, errs)
		}
		eventually(t, 30*time.Second, "waiter to succeed", func() (bool, string) {
			out, _, _ := k.run("get", "pod", "waiter", "-o", "jsonpath={.status.phase}")
			return out == "Succeeded", out
		})
		k.must("delete", "pod", "waiter", "--wait=false")
	})

	t.Run("debug", func(t *testing.T) {
		k.must("run", "target", "--image=nginx")
		eventually(t, 30*time.Second, "target to run", func() (bool, string) {
			out, _, _ := k.run("get", "pod", "target", "-o", "jsonpath={.status.phase}")
			return out == "Running", out
		})
		out, errs, code := k.runIn("echo from-debug\nexit\n", "debug", "-i", "target", "--image=busybox", "--container=dbg")
		if code != 0 || !strings.Contains(out, "from-debug") {
			t.Fatalf("debug -i: exit %d, %q %s", code, out, errs)
		}
		eventually(t, 30*time.Second, "the ephemeral container to have run", func() (bool, string) {
			out, _, _ := k.run("get", "pod", "target", "-o", "jsonpath={.status.ephemeralContainerStatuses[0].state.terminated.reason}")
			return out == "Completed", out
		})
	})

	t.Run("exec and cp", func(t *testing.T) {
		out, errs, code := k.run("exec", "target", "--", "ls", "/")
		if code != 0 || !strings.Contains(out, "etc\n") || !strings.Contains(out, "tmp\n") {
			t.Fatalf("exec ls /: exit %d, %q %s", code, out, errs)
		}
		f := filepath.Join(t.TempDir(), "note.txt")
		if err := os.WriteFile(f, []byte("copied in\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		k.must("cp", f, "target:/tmp/note.txt")
		if out := k.must("exec", "target", "--", "cat", "/tmp/note.txt"); out != "copied in\n" {
			t.Fatalf("cat after cp: %q", out)
		}
		if _, errs, code := k.run("exec", "target", "--", "vi"); code != 127 || !strings.Contains(errs, "vi: command not found (podflow's simulated runtime runs:") {
			t.Fatalf("exec vi: exit %d, %s", code, errs)
		}
	})

	t.Run("wget to a Service", func(t *testing.T) {
		k.must("label", "pod", "target", "app=target")
		k.must("expose", "pod", "target", "--port", "8080", "--target-port", "80")
		eventually(t, 30*time.Second, "wget to reach the Service", func() (bool, string) {
			out, errs, _ := k.run("exec", "target", "--", "wget", "-qO-", "http://target:8080/hello")
			return strings.Contains(out, "podflow-sim: pod default/target") && strings.Contains(out, "answered GET /hello on port 80"), out + errs
		})
		if _, errs, code := k.run("exec", "target", "--", "wget", "-qO-", "http://nowhere/"); code != 1 || !strings.Contains(errs, "wget: bad address 'nowhere'") {
			t.Fatalf("wget nowhere: exit %d %s", code, errs)
		}
		k.must("delete", "service", "target")
		k.must("delete", "pod", "target", "--wait=false")
	})
}

// mustIn runs kubectl with stdin and fails the test on a non-zero exit.
func (k *kubectl) mustIn(stdin string, args ...string) string {
	k.t.Helper()
	out, errs, code := k.runIn(stdin, args...)
	if code != 0 {
		k.t.Fatalf("kubectl %v: exit %d: %s%s", args, code, out, errs)
	}
	return out
}
