package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podflow/podflow/ops/client"
	"github.com/podflow/podflow/ops/processes/plan"
)

// TestConfigShows (issue 39, item 2): podflow config prints a role's bus
// configuration, the admin's kubeconfig and the seal key's public half
// from the data directory of the client configuration; an unknown role
// names the roles there.
func TestConfigShows(t *testing.T) {
	dir := t.TempDir()
	l := plan.Layout{Dir: dir}
	if err := os.MkdirAll(filepath.Dir(l.RoleConfig("x")), 0o700); err != nil {
		t.Fatal(err)
	}
	role := `{"urls":["nats://10.0.0.1:4222"],"user":"stage-scheduler","password":"pw"}`
	for path, content := range map[string]string{
		l.RoleConfig("stage-scheduler"):  role,
		filepath.Join(dir, "kubeconfig"): "apiVersion: v1\nkind: Config\n",
	} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg := filepath.Join(dir, "config.json")
	if err := client.WriteConfig(cfg, client.Config{NATS: l.NATSClientConfig(), Token: "t", DataDir: dir, SealKey: "ab12"}); err != nil {
		t.Fatal(err)
	}
	show := func(args ...string) (string, error) {
		root := newRoot()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetArgs(append(append([]string{"config"}, args...), "--config", cfg))
		err := root.Execute()
		return out.String(), err
	}
	for _, tc := range []struct{ args []string }{{[]string{"role", "stage-scheduler"}}, {[]string{"kubeconfig"}}, {[]string{"seal-key"}}} {
		out, err := show(tc.args...)
		want := map[string]string{"role": role, "kubeconfig": "kind: Config", "seal-key": "ab12\n"}[tc.args[0]]
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("config %v = %q, %v; want %q", tc.args, out, err, want)
		}
	}
	if _, err := show("role", "stage-nope"); err == nil || !strings.Contains(err.Error(), "stage-scheduler") {
		t.Errorf("an unknown role: %v, want the roles named", err)
	}
}
