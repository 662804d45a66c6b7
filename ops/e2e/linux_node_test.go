package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/objects"
)

// TestLinuxNodeKubelet drives, with the stock kubectl, what the node does
// as kubelet does on real containers (`podflow up --runtime linux`):
// kubectl logs of a Succeeded pod and --previous after a restart, kubelet's
// words for a container still waiting, a pod named longer than a hostname
// may be, Service environment variables, busybox's wget to a Service by
// name, and `kubectl run --image=busybox` to the example's Service as the
// README has a newcomer type it after `make run`.
func TestLinuxNodeKubelet(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for cgroups, network namespaces and mounts (CI runs as root)")
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(binary), "busybox")); err != nil {
		t.Skip("needs bin/busybox, the busybox of the busybox images: make busybox (make test builds it)")
	}
	parallel(t, linuxRuntime)
	c := startCluster(t, "--runtime", "linux", "--example") // as make run: the example pod and its Service
	k := newKubectl(t, filepath.Join(c.dir, "kubeconfig"))
	// A Service and its server first: the pods after it get its variables.
	c.mustPodflow("apply", "-f", writeTemp(t, `apiVersion: v1
kind: Pod
metadata: {name: web, labels: {app: web}}
spec:
  containers:
  - {name: http, image: podflow/http:1, readinessProbe: {httpGet: {path: /readyz, port: 8080}, periodSeconds: 1}}
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: 8080}]
`))
	c.waitPod("default", "web", "Ready", ready)
	svc, err := objects.Get[*corev1.Service](context.Background(), c.store, "default", "web")
	if err != nil {
		t.Fatal(err)
	}
	cip := svc.GetSpec().GetClusterIp()
	eventually(t, 20*time.Second, "web in the Service's slice", func() (bool, string) {
		got := c.sliceAddrs("default", "web")
		return len(got) == 1, fmt.Sprint(got)
	})
	long := "a-pod-whose-name-is-longer-than-a-hostname-may-be-" + strings.Repeat("x", 20) // 70 characters
	c.mustPodflow("apply", "-f", writeTemp(t, busyboxPod("done", `echo done; echo "web $WEB_SERVICE_HOST:$WEB_SERVICE_PORT $WEB_PORT_80_TCP_PROTO"`)+`---
`+busyboxPod("fetch", `wget -T 5 -q -O- http://web/ || echo "wget exited $?"`)+`---
`+busyboxPod(long, `hostname; echo $HOSTNAME`)+`---
apiVersion: v1
kind: Pod
metadata: {name: again}
spec:
  restartPolicy: OnFailure
  volumes: [{name: d, emptyDir: {}}]
  containers:
  - name: sh
    image: podflow/busybox:1
    volumeMounts: [{name: d, mountPath: /d}]
    command: [sh, -c, 'n=$(cat /d/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /d/n; echo run $n; [ $n -ge 2 ] && exec sleep 1000; exit 1']
---
apiVersion: v1
kind: Pod
metadata: {name: nopull}
spec:
  containers: [{name: c, image: podflow/no-such-image:1}]
`))

	t.Run("logs of a Succeeded pod", func(t *testing.T) {
		c.waitPodFor(60*time.Second, "default", "done", "Succeeded", func(p *corev1.Pod) bool { return p.GetStatus().GetPhase() == "Succeeded" })
		want := "done\nweb " + cip + ":80 tcp\n" // and its Service variables
		if out := k.must("logs", "done"); out != want {
			t.Fatalf("kubectl logs of a Succeeded pod: %q, want %q", out, want)
		}
	})
	t.Run("logs --previous after a restart", func(t *testing.T) {
		c.waitPodFor(90*time.Second, "default", "again", "restarted and running", func(p *corev1.Pod) bool {
			cs := p.GetStatus().GetContainerStatuses()
			return len(cs) == 1 && cs[0].GetRestartCount() == 1 && cs[0].GetState().GetRunning() != nil
		})
		eventually(t, 20*time.Second, "the current instance's log", func() (bool, string) {
			out, errs, _ := k.run("logs", "again")
			return out == "run 2\n", out + errs
		})
		if out := k.must("logs", "again", "--previous"); out != "run 1\n" {
			t.Fatalf("kubectl logs --previous: %q, want run 1", out)
		}
		_, errs, code := k.run("logs", "done", "--previous")
		if code == 0 || !strings.Contains(errs, `previous terminated container "sh" in pod "done" not found`) {
			t.Fatalf("--previous of a container that ran once: exit %d, %s", code, errs)
		}
	})
	t.Run("logs of a container waiting to start", func(t *testing.T) {
		eventually(t, 60*time.Second, "kubelet's words for an image it cannot pull", func() (bool, string) {
			_, errs, code := k.run("logs", "nopull")
			return code != 0 && strings.Contains(errs, "Error from server (BadRequest)") &&
				(strings.Contains(errs, `container "c" in pod "nopull" is waiting to start: image can't be pulled`) ||
					strings.Contains(errs, `container "c" in pod "nopull" is waiting to start: trying and failing to pull image`)), errs
		})
	})
	t.Run("a 70-character pod name", func(t *testing.T) {
		c.waitPodFor(60*time.Second, "default", long, "Succeeded", func(p *corev1.Pod) bool { return p.GetStatus().GetPhase() == "Succeeded" })
		if out, want := k.must("logs", long), long[:63]+"\n"+long[:63]+"\n"; out != want {
			t.Fatalf("hostname and HOSTNAME: %q, want the name's first 63 characters", out)
		}
	})
	t.Run("busybox wget to a Service by name", func(t *testing.T) {
		c.waitPodFor(60*time.Second, "default", "fetch", "Succeeded", func(p *corev1.Pod) bool { return p.GetStatus().GetPhase() == "Succeeded" })
		if out := k.must("logs", "fetch"); !strings.Contains(out, "podflow httpserver on web") {
			t.Fatalf("wget -T 5 http://web/: %q", out)
		}
	})
	t.Run("the README's kubectl run --image=busybox", func(t *testing.T) {
		c.waitPodFor(60*time.Second, "default", "my-nginx-pod", "Ready", ready)
		k.must("run", "t1", "--image=busybox", "--restart=Never", "--", "wget", "-T", "2", "-qO-", "http://my-nginx/")
		c.waitPodFor(60*time.Second, "default", "t1", "Succeeded", func(p *corev1.Pod) bool { return p.GetStatus().GetPhase() == "Succeeded" })
		if out := k.must("logs", "t1"); !strings.Contains(out, "podflow httpserver on my-nginx-pod") {
			t.Fatalf("kubectl logs t1: %q, want the example's answer", out)
		}
	})
}
