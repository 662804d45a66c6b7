package rootcacert_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/bus/bustest"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore/raftstoretest"
	"github.com/podflow/podflow/services/apiserver/pki"
	"github.com/podflow/podflow/services/nslifecycle"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/stages/rootcacert"
)

func caPEM(t *testing.T) []byte {
	t.Helper()
	ca, err := pki.NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	return ca.CertPEM
}

// run starts replicas of the publisher stage over a real store and bus.
func run(t *testing.T, replicas int, ca []byte) *objects.Store {
	t.Helper()
	c := raftstoretest.MakeCluster(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()
	cfg := bus.DefaultConfig()
	cfg.URLs, cfg.Name = []string{c.NATS.ClientURL()}, "rootca-test"
	conn, err := bus.Connect(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	st := objects.New(c.Client(t))
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, replicas)
	for i := range replicas {
		env := stage.NewEnv(conn, st, pipeline.RootCACert, "rootcacert-"+string(rune('1'+i)), log)
		pc := rootcacert.DefaultConfig()
		pc.RootCA = ca
		h, err := rootcacert.New(env, pc)
		if err != nil {
			t.Fatal(err)
		}
		rc, _ := pipeline.RunnerConfig(pipeline.RootCACert, env.Replica)
		go func() {
			done <- stage.Run(runCtx, conn, env, h, stage.Config{Runner: rc, NoConsumer: true, ResyncPeriod: 200 * time.Millisecond})
		}()
	}
	t.Cleanup(func() {
		stop()
		for range replicas {
			if err := <-done; err != nil {
				t.Errorf("publisher: %v", err)
			}
		}
	})
	return st
}

func namespace(name string, terminating bool) *corev1.Namespace {
	ns := &corev1.Namespace{Metadata: &corev1.ObjectMeta{Name: name, Uid: "ns-" + name}}
	nslifecycle.PrepareForCreate(ns)
	if terminating {
		ns.Metadata.DeletionTimestamp = timestamppb.Now()
		ns.Status.Phase = nslifecycle.PhaseTerminating
	}
	return ns
}

// TestPublisher: two replicas publish kube-root-ca.crt with the CA in
// every namespace, with kube's description annotation; an edited one is
// repaired, a deleted one re-created; a terminating namespace gets none.
func TestPublisher(t *testing.T) {
	ca := caPEM(t)
	st := run(t, 2, ca)
	ctx := context.Background()
	for _, ns := range []*corev1.Namespace{namespace("a", false), namespace("doomed", true)} {
		if _, err := st.Create(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	get := func(ns string) (*corev1.ConfigMap, bool) {
		cm, err := objects.Get[*corev1.ConfigMap](ctx, st, ns, rootcacert.ConfigMapName)
		return cm, err == nil
	}
	published := func(ns string) func() bool {
		return func() bool {
			cm, ok := get(ns)
			return ok && cm.GetData()[rootcacert.CAKey] == string(ca) && len(cm.GetData()) == 1 &&
				cm.GetMetadata().GetAnnotations()[rootcacert.DescriptionAnnotation] == rootcacert.Description
		}
	}
	raftstoretest.WaitFor(t, 10*time.Second, "kube-root-ca.crt in a", published("a"))
	if _, err := st.Create(ctx, namespace("b", false)); err != nil {
		t.Fatal(err)
	}
	raftstoretest.WaitFor(t, 10*time.Second, "kube-root-ca.crt in the new namespace b", published("b"))

	cm, _ := get("a")
	cm.Data = map[string]string{rootcacert.CAKey: "forged", "extra": "x"}
	delete(cm.Metadata.Annotations, rootcacert.DescriptionAnnotation)
	if _, err := st.Update(ctx, cm); err != nil {
		t.Fatal(err)
	}
	raftstoretest.WaitFor(t, 10*time.Second, "the edited configmap repaired", published("a"))

	if _, err := st.Delete(ctx, objects.ConfigMaps, "b", rootcacert.ConfigMapName, 0); err != nil {
		t.Fatal(err)
	}
	raftstoretest.WaitFor(t, 10*time.Second, "the deleted configmap re-created", published("b"))
	time.Sleep(500 * time.Millisecond) // resyncs of both replicas
	if _, ok := get("doomed"); ok {
		t.Error("a terminating namespace got kube-root-ca.crt")
	}
}

// TestConfig: the publisher refuses a RootCA that holds no certificate.
func TestConfig(t *testing.T) {
	for _, bad := range [][]byte{nil, []byte("not PEM"), []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")} {
		c := rootcacert.DefaultConfig()
		c.RootCA = bad
		if err := c.Validate(); err == nil {
			t.Errorf("RootCA %q accepted", bad)
		}
	}
	c := rootcacert.DefaultConfig()
	c.RootCA = caPEM(t)
	if err := c.Validate(); err != nil {
		t.Error(err)
	}
}
