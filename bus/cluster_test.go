package bus_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/bus/bustest"
	"github.com/podflow/podflow/proto/eventsv1"
)

// clusterServerConfig is the configuration of server i of a cluster on
// loopback whose servers take routes on ports and share the credentials
// file creds.
func clusterServerConfig(dir, creds string, ports []int, i int) bus.EmbeddedConfig {
	var routes []string
	for j, p := range ports {
		if j != i {
			routes = append(routes, "nats-route://127.0.0.1:"+strconv.Itoa(p))
		}
	}
	cfg := bus.DefaultEmbeddedConfig(filepath.Join(dir, fmt.Sprintf("n%d", i)))
	cfg.ServerName, cfg.ClusterName, cfg.ClusterPort, cfg.Routes, cfg.CredsPath = fmt.Sprintf("n%d", i), "podflow", ports[i], routes, creds
	return cfg
}

// TestClusterSurvivesAServer runs three embedded servers clustered over
// routes on loopback with R3 streams: with one server gone, publishing and
// consuming go on through the other two.
func TestClusterSurvivesAServer(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test in -short mode")
	}
	dir := t.TempDir()
	creds := filepath.Join(dir, "creds.json")
	ports, release := reservePorts(t, 3)
	var servers []*bus.Embedded
	started := make(chan *bus.Embedded, 3)
	errs := make(chan error, 3)
	for i := range 3 {
		cfg := clusterServerConfig(dir, creds, ports, i)
		cfg.StartTimeout = 30 * time.Second
		release[i]()
		go func() {
			e, err := bus.StartEmbedded(context.Background(), cfg)
			if err != nil {
				errs <- err
				return
			}
			started <- e
		}()
		if i == 0 {
			// The first server creates the shared credentials file.
			select {
			case e := <-started:
				servers = append(servers, e)
			case err := <-errs:
				t.Fatal(err)
			}
		}
	}
	for len(servers) < 3 {
		select {
		case e := <-started:
			servers = append(servers, e)
		case err := <-errs:
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, s := range servers {
			s.Shutdown()
		}
	})
	cc := servers[0].ClientConfig("cluster-test")
	cc.URLs = []string{servers[0].ClientURL(), servers[1].ClientURL(), servers[2].ClientURL()}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := bus.Connect(ctx, cc)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sc := bus.DefaultStreamsConfig()
	sc.Replicas = 3
	// JetStream needs a meta leader before it accepts streams.
	bustest.Eventually(t, "the R3 streams provisioned", func() bool {
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		err := bus.Provision(pctx, conn.JetStream(), bus.Topology{Streams: bus.DefaultStreams(sc)})
		if err != nil {
			t.Log(err)
		}
		return err == nil
	})
	publish := func(i int) error {
		env, _ := bus.NewEnvelope(&eventsv1.PodRequested{})
		env.RequestId, env.Namespace, env.PodName = fmt.Sprintf("r%d", i), "default", fmt.Sprintf("p%d", i)
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := conn.Publish(pctx, env)
		return err
	}
	for i := range 50 {
		if err := publish(i); err != nil {
			t.Fatal(err)
		}
	}
	// Lose a server: its streams' replicas are on the other two.
	servers[2].Shutdown()
	for i := 50; i < 100; i++ {
		var err error
		bustest.Eventually(t, "publish with a server down", func() bool { err = publish(i); return err == nil })
	}
	s, err := conn.JetStream().Stream(ctx, bus.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 100 || info.Config.Replicas != 3 {
		t.Fatalf("stream holds %d messages with %d replicas, want 100 and 3", info.State.Msgs, info.Config.Replicas)
	}
}
