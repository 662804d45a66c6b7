package e2e

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/podflow/podflow/bus"
)

// TestTrust drives issue 38's boundaries through a real `podflow up`
// started with --pod-security-default=baseline:
//
//   - a hostNetwork pod in a namespace without a Pod Security label is
//     refused with kube-apiserver's message (the cluster's default level);
//   - `podflow config bus-user` gives a ServiceAccount its own bus
//     identity, which the running NATS server takes without a restart:
//     podflow's CLI with that configuration and the account's token gets
//     its answer (403: the account may do nothing), and another user's
//     bus identity may not subscribe to its inbox.
func TestTrust(t *testing.T) {
	parallel(t, simulated)
	c := startCluster(t, "--pod-security-default", "baseline")
	k := newKubectl(t, filepath.Join(c.dir, "kubeconfig"))

	pod := `apiVersion: v1
kind: Pod
metadata: {name: hostnet}
spec:
  hostNetwork: true
  containers: [{name: c, image: busybox}]
`
	_, stderr, code := k.runIn(pod, "create", "-f", "-")
	if code == 0 || !strings.Contains(stderr, `pods "hostnet" is forbidden: violates PodSecurity "baseline:latest": host namespaces (hostNetwork=true)`) {
		t.Fatalf("a hostNetwork pod in the default namespace: exit %d, %s", code, stderr)
	}

	k.must("create", "serviceaccount", "robot")
	token := strings.TrimSpace(k.must("create", "token", "robot"))
	robot := "system:serviceaccount:default:robot"
	out := c.mustPodflow("config", "bus-user", robot)
	userConfig := filepath.Join(c.dir, "nats", "users", bus.UserRole(robot)+".config.json")
	if !strings.Contains(out, userConfig) {
		t.Fatalf("config bus-user: %s", out)
	}
	cm := filepath.Join(t.TempDir(), "cm.yaml")
	if err := writeFile(cm, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: robots}\ndata: {a: b}\n"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the robot's own bus identity to get the api stage's answer", func() (bool, string) {
		out, code := c.podflowTimeout(15*time.Second, "apply", "--config", userConfig, "--token", token, "-f", cm)
		return code != 0 && strings.Contains(out, "Forbidden") && strings.Contains(out, robot), out
	})

	c.mustPodflow("config", "bus-user", "bob")
	bc, err := bus.ReadClientConfig(filepath.Join(c.dir, "nats", "users", bus.UserRole("bob")+".json"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bc.Name = "bob"
	bob, err := bus.Connect(ctx, bc)
	if err != nil {
		t.Fatal(err)
	}
	defer bob.Close()
	if _, err := bob.NATS().SubscribeSync(bus.UserInbox(robot) + ".>"); err != nil {
		t.Fatal(err)
	}
	if err := bob.NATS().FlushTimeout(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the server to refuse bob's subscription to the robot's inbox", func() (bool, string) {
		err := bob.NATS().LastError()
		return errors.Is(err, nats.ErrPermissionViolation), "last error: " + errString(err)
	})
}

func errString(err error) string {
	if err == nil {
		return "none"
	}
	return err.Error()
}
