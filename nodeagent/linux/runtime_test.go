package linux_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/podflow/podflow/nodeagent"
	"github.com/podflow/podflow/nodeagent/linux"
	corev1 "github.com/podflow/podflow/proto/corev1"
)

func TestNewRefusesBadConfig(t *testing.T) {
	cfg := linux.DefaultConfig("n", "10.244.1.0/24", "relative", "")
	if _, err := linux.New(cfg); !errors.Is(err, linux.ErrInvalidConfig) {
		t.Fatalf("New = %v, want ErrInvalidConfig", err)
	}
	if os.Geteuid() != 0 {
		cfg.DataDir = t.TempDir()
		_, err := linux.New(cfg)
		if !errors.Is(err, linux.ErrUnavailable) || !strings.Contains(err.Error(), "--runtime sim") {
			t.Fatalf("New without root = %v, want ErrUnavailable pointing at --runtime sim", err)
		}
	}
}

func intOrString(n int) *corev1.IntOrString {
	return &corev1.IntOrString{Value: &corev1.IntOrString_IntVal{IntVal: int32(n)}}
}

// One pod through the runtime by hand, each claim checked with the kernel:
// the memory limit its cgroup holds, eth0 with the pod IP inside, HTTP from
// the host to the pod IP, probes, volumes, and nothing left after removal.
func TestPodOnTheKernel(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, 60*time.Second)
	pd := newPod(e.cfg.NodeName, "web", "sh", "-c",
		`mkdir -p /www && cp /cfg/index.html /www/ && echo "$GREETING" && exec httpd -f -p 8080 -h /www`)
	c := pd.Spec.Containers[0]
	c.Resources = &corev1.ResourceRequirements{Limits: map[string]string{"memory": "64Mi", "cpu": "500m"}}
	// The runtime gets the environment as the agent resolved it and
	// expands nothing again (in Kubernetes HOSTNAME is the runtime's, not
	// a variable $(HOSTNAME) can refer to).
	c.Env = []*corev1.EnvVar{{Name: "GREETING", Value: "hello from $(HOSTNAME)"}}
	c.VolumeMounts = []*corev1.VolumeMount{{Name: "cfg", MountPath: "/cfg", ReadOnly: true}, {Name: "tok", MountPath: "/var/run/tok"}}
	pd.Spec.Volumes = []*corev1.Volume{
		{Name: "cfg", ConfigMap: &corev1.ConfigMapVolumeSource{Name: "web"}},
		{Name: "tok", Secret: &corev1.SecretVolumeSource{SecretName: "tok"}},
	}
	uid := pd.Metadata.Uid

	sb, err := e.rt.RunPodSandbox(ctx, pd)
	if err != nil {
		t.Fatalf("RunPodSandbox: %v", err)
	}
	if again, err := e.rt.RunPodSandbox(ctx, pd); err != nil || again != sb {
		t.Fatalf("RunPodSandbox again = %+v, %v; want %+v", again, err, sb)
	}
	err = e.rt.MountVolumes(ctx, pd, []nodeagent.VolumeData{
		{Volume: pd.Spec.Volumes[0], Files: map[string][]byte{"index.html": []byte("served by podflow\n")}},
		{Volume: pd.Spec.Volumes[1], Files: map[string][]byte{"token": []byte("s3cret")}},
	})
	if err != nil {
		t.Fatalf("MountVolumes: %v", err)
	}
	if _, err := e.rt.PullImage(ctx, pd, busyboxImage, "IfNotPresent"); err != nil {
		t.Fatalf("PullImage: %v", err)
	}
	id, err := e.rt.StartContainer(ctx, pd, c, sb)
	if err != nil {
		t.Fatalf("StartContainer: %v", err)
	}

	t.Run("memory limit is what the cgroups hold", func(t *testing.T) {
		matches, _ := filepath.Glob("/sys/fs/cgroup/memory/" + e.cgroups + "/*/pod" + uid + "/memory.limit_in_bytes")
		if len(matches) != 1 {
			t.Fatalf("pod memory cgroup: %v", matches)
		}
		if got := readFile(matches[0]); got != strconv.Itoa(64<<20) {
			t.Errorf("pod memory.limit_in_bytes = %s, want %d", got, 64<<20)
		}
		if got := readFile(filepath.Join(filepath.Dir(matches[0]), "main", "memory.limit_in_bytes")); got != strconv.Itoa(64<<20) {
			t.Errorf("container memory.limit_in_bytes = %s, want %d", got, 64<<20)
		}
	})
	t.Run("container sees eth0 with the pod IP", func(t *testing.T) {
		res, err := e.rt.Probe(ctx, pd, c, id, nodeagent.ProbeLiveness, &corev1.Probe{
			Exec: &corev1.ExecAction{Command: []string{"ip", "-o", "-4", "addr", "show", "eth0"}}, TimeoutSeconds: 30})
		if err != nil || !res.OK {
			t.Fatalf("exec ip addr: %+v %v", res, err)
		}
		if !strings.Contains(res.Message, "inet "+sb.IP+"/24") {
			t.Fatalf("eth0 = %q, want %s", res.Message, sb.IP)
		}
	})
	t.Run("HTTP GET from the host reaches the container", func(t *testing.T) {
		var body string
		eventually(t, "GET http://"+sb.IP+":8080/index.html", func() (bool, string) {
			resp, err := (&http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}).Get("http://" + sb.IP + ":8080/index.html")
			if err != nil {
				return false, err.Error()
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			body = string(b)
			return resp.StatusCode == 200, resp.Status
		})
		if body != "served by podflow\n" {
			t.Fatalf("body = %q", body)
		}
	})
	t.Run("probes", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			p    *corev1.Probe
			ok   bool
		}{
			{"httpGet", &corev1.Probe{HttpGet: &corev1.HTTPGetAction{Path: "/index.html", Port: intOrString(8080)}}, true},
			{"httpGet 404", &corev1.Probe{HttpGet: &corev1.HTTPGetAction{Path: "/missing", Port: intOrString(8080)}}, false},
			{"tcpSocket", &corev1.Probe{TcpSocket: &corev1.TCPSocketAction{Port: intOrString(8080)}}, true},
			{"tcpSocket closed port", &corev1.Probe{TcpSocket: &corev1.TCPSocketAction{Port: intOrString(8081)}}, false},
			// The exec probes that must finish get 30s, not kube's default
			// of 1s: entering the container can take longer than that on a
			// machine under load, and what these cases test is the
			// command's outcome (the timeout has its own case).
			{"exec", &corev1.Probe{TimeoutSeconds: 30, Exec: &corev1.ExecAction{Command: []string{"test", "-f", "/www/index.html"}}}, true},
			{"exec fails", &corev1.Probe{TimeoutSeconds: 30, Exec: &corev1.ExecAction{Command: []string{"test", "-f", "/nope"}}}, false},
			{"exec times out", &corev1.Probe{TimeoutSeconds: 1, Exec: &corev1.ExecAction{Command: []string{"sleep", "5"}}}, false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				res, err := e.rt.Probe(ctx, pd, c, id, nodeagent.ProbeReadiness, tc.p)
				if err != nil || res.OK != tc.ok {
					t.Fatalf("Probe = %+v, %v; want OK=%v", res, err, tc.ok)
				}
			})
		}
	})
	t.Run("volumes", func(t *testing.T) {
		res, err := e.rt.Probe(ctx, pd, c, id, nodeagent.ProbeLiveness, &corev1.Probe{Exec: &corev1.ExecAction{Command: []string{"sh", "-c",
			`stat -L -c '%a %n' /cfg/index.html /var/run/tok/token; grep -c tmpfs /proc/mounts; (echo x > /cfg/new) 2>&1 | grep -q Read-only && echo ro`}}, TimeoutSeconds: 30})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(res.Message, "644 /cfg/index.html") || !strings.Contains(res.Message, "400 /var/run/tok/token") || !strings.HasSuffix(res.Message, "ro") {
			t.Fatalf("volumes in the container: %q", res.Message)
		}
	})
	t.Run("logs", func(t *testing.T) {
		matches, _ := filepath.Glob(filepath.Join(e.cfg.DataDir, "pods", uid, "logs", "main", "0.log"))
		if len(matches) != 1 || !strings.Contains(readFile(matches[0]), "stdout F hello from $(HOSTNAME)") {
			t.Fatalf("log: %v %q", matches, readFile(filepath.Join(e.cfg.DataDir, "pods", uid, "logs", "main", "0.log")))
		}
	})

	ex, err := e.rt.StopContainer(ctx, id, 100*time.Millisecond)
	if err != nil {
		t.Fatalf("StopContainer: %v", err)
	}
	if ex.Signal != 15 && ex.Signal != 9 {
		t.Fatalf("exit = %+v, want killed by a signal", ex)
	}
	if err := e.rt.StopPodSandbox(ctx, uid); err != nil {
		t.Fatal(err)
	}
	if err := e.rt.RemovePodSandbox(ctx, uid); err != nil {
		t.Fatalf("RemovePodSandbox: %v", err)
	}
	if err := e.rt.RemovePodSandbox(ctx, uid); err != nil {
		t.Fatalf("RemovePodSandbox again: %v", err)
	}
	e.assertNoLeaks(uid)
	if out, _ := exec.Command("ip", "-o", "addr").Output(); strings.Contains(string(out), " "+sb.IP+"/") {
		t.Errorf("pod IP %s still on an interface", sb.IP)
	}
	if sbs, _ := e.rt.ListSandboxes(ctx); len(sbs) != 0 {
		t.Errorf("sandboxes after removal: %+v", sbs)
	}
	_ = context.Background
}
