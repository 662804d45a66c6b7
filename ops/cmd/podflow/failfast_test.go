package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/ops/client"
	"github.com/podflow/podflow/ops/client/clienttest"
)

// run runs one podflow command in-process, as main does.
func run(t *testing.T, args ...string) (time.Duration, error) {
	t.Helper()
	root := newRoot()
	root.SetArgs(args)
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	// No deadline, as main: the command's own timeouts must end it.
	start := time.Now()
	err := root.ExecuteContext(context.Background())
	requestTimeout = "0" // the flag's variable outlives the root
	return time.Since(start), err
}

func writeConfig(t *testing.T, urls []string, u bus.UserCredential) string {
	t.Helper()
	dir := t.TempDir()
	if err := bus.WriteClientConfig(filepath.Join(dir, "client.json"), urls, u); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "config.json")
	if err := client.WriteConfig(path, client.Config{NATS: "client.json", Token: "tok"}); err != nil {
		t.Fatal(err)
	}
	t.Setenv(client.NATSConfigEnv, "")
	return path
}

// TestClientCommandsFailFast: with nothing listening on the bus's port,
// every client command gives up within a few seconds and says what to
// check, instead of reconnecting forever.
func TestClientCommandsFailFast(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "nats://" + l.Addr().String()
	l.Close()
	cfg := writeConfig(t, []string{url}, bus.UserCredential{User: "admin", Password: "x"})
	want := "cannot reach podflow at " + url + ": is `podflow up` running?"
	pod := filepath.Join(t.TempDir(), "pod.yaml")
	if err := os.WriteFile(pod, []byte("apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {containers: [{name: c, image: nginx}]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"get", "nodes"},
		{"get", "pods", "-n", "kube-system"},
		{"describe", "pod", "x"},
		{"logs", "x"},
		{"streams"},
		{"streams", "-o", "json"},
		{"events"},
		{"trace", "pod", "x"},
		{"store", "status"},
		{"console", "--listen", "127.0.0.1:0"},
		{"version"},
		{"publish", "-f", pod, "--wait"},
		{"bench", "pipeline"},
		{"chaos"},
		{"--request-timeout", "1s", "get", "nodes"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			took, err := run(t, append(args, "--config", cfg)...)
			if err == nil || !strings.HasPrefix(err.Error(), want) {
				t.Fatalf("error %v, want %q", err, want)
			}
			if took > client.DefaultConnectTimeout+2*time.Second {
				t.Fatalf("gave up after %s, want within %s", took, client.DefaultConnectTimeout)
			}
		})
	}
}

// TestRequestTimeoutFlag: --request-timeout bounds a request the system
// never answers (a bus with no store replica and no api stage), and a
// value kubectl would refuse is refused.
func TestRequestTimeoutFlag(t *testing.T) {
	cfg := clienttest.Config(t, t.TempDir(), client.Config{Token: "tok"})
	for _, tc := range []struct {
		name  string
		args  []string
		bound time.Duration
	}{
		{"store read", []string{"--request-timeout", "1s", "get", "nodes"}, 3 * time.Second},
		{"bare seconds", []string{"--request-timeout=1", "get", "pods"}, 3 * time.Second},
		{"api request", []string{"--request-timeout", "1s", "delete", "configmap", "x"}, 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			took, err := run(t, append(tc.args, "--config", cfg)...)
			if err == nil {
				t.Fatal("a request nobody answers succeeded")
			}
			if took > tc.bound {
				t.Fatalf("gave up after %s (%v), want within %s", took, err, tc.bound)
			}
		})
	}
	if _, err := run(t, "--request-timeout", "soon", "get", "nodes", "--config", cfg); err == nil || !strings.Contains(err.Error(), "invalid timeout value") {
		t.Fatalf("--request-timeout soon: %v", err)
	}
}
