package up

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/ops/client"
	"github.com/podflow/podflow/ops/processes/plan"
	"github.com/podflow/podflow/services/pipeline"
)

// TestProcessConfigsHoldNoAdminToken: every stage and node agent process
// up starts reads a client configuration of its own, holding its role's
// bus credentials and the api stage's public key — never the admin's
// token nor the admin's bus credentials, which stay in config.json.
func TestProcessConfigsHoldNoAdminToken(t *testing.T) {
	dir := t.TempDir()
	n := 9000
	for _, runtime := range []string{plan.RuntimeSim, plan.RuntimeLinux} {
		t.Run(runtime, func(t *testing.T) {
			o := plan.Options{
				Exe: "/bin/podflow", DataDir: dir, NATSPort: 4222,
				StoreAddrs: []string{"127.0.0.1:7001"}, StoreUser: bus.UserCredential{User: "store", Password: "pw"},
				Replicas: map[string]int{pipeline.API: 1, pipeline.Admission: 1, pipeline.Persistence: 1,
					pipeline.Scheduler: 1, pipeline.Status: 1, pipeline.Endpoints: 1, pipeline.ServiceAccount: 1, pipeline.RootCACert: 1,
					pipeline.ReplicaSet: 1, pipeline.ReplicationController: 1, pipeline.ResourceQuota: 1, pipeline.Job: 1, pipeline.CronJob: 1, pipeline.Deployment: 1,
					pipeline.GarbageCollector: 1, pipeline.Disruption: 1, pipeline.TTLAfterFinished: 1},
				Runtime: runtime, Nodes: 1, NodeGrace: 40 * time.Second,
				FreeAddr: func() (string, error) { n++; return fmt.Sprintf("127.0.0.1:%d", n), nil },
			}
			p, err := plan.New(o)
			if err != nil {
				t.Fatal(err)
			}
			const adminToken = "admin-0123456789abcdef"
			if err := client.WriteConfig(p.Layout.ClientConfig(), client.Config{NATS: p.Layout.NATSClientConfig(), Token: adminToken, DataDir: dir}); err != nil {
				t.Fatal(err)
			}
			if err := writeProcessConfigs(p.Layout, p, "ab12"); err != nil {
				t.Fatal(err)
			}
			checked := 0
			for _, pr := range p.Processes() {
				if pr.Kind != plan.StageKind && pr.Kind != plan.NodeAgent {
					continue
				}
				i := slices.Index(pr.Args, "--config")
				if i < 0 || i+1 >= len(pr.Args) {
					t.Errorf("%s has no --config", pr.Name)
					continue
				}
				path := pr.Args[i+1]
				if path == p.Layout.ClientConfig() {
					t.Errorf("%s is given the user's configuration %s", pr.Name, path)
				}
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatalf("%s: %v", pr.Name, err)
				}
				cfg, err := client.LoadConfig(path)
				if err != nil {
					t.Fatal(err)
				}
				if strings.Contains(string(b), adminToken) || cfg.Token != "" {
					t.Errorf("%s's configuration %s holds a bearer token: %s", pr.Name, path, b)
				}
				if cfg.NATS == p.Layout.NATSClientConfig() || !strings.HasPrefix(cfg.NATS, p.Layout.Sub("nats", "roles")) {
					t.Errorf("%s's configuration names bus credentials %s, want its role's", pr.Name, cfg.NATS)
				}
				if cfg.SealKey != "ab12" {
					t.Errorf("%s's configuration has seal key %q", pr.Name, cfg.SealKey)
				}
				checked++
			}
			stages := 0
			for _, s := range pipeline.Stages {
				if p.Options.Replicas[s] > 0 {
					stages++
				}
			}
			if checked < stages+1 {
				t.Errorf("checked %d processes, want every stage and the node agent", checked)
			}
		})
	}
}
