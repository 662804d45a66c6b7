package resourcequota_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	k8scorev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/bus/bustest"
	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore/raftstoretest"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
	"github.com/podflow/podflow/services/quota"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/stages/resourcequota"
)

// replica is one running controller replica; stop kills it.
type replica struct {
	stop func()
	done chan error
}

// start runs one replica of the controller stage over a real store and
// bus, as `podflow stage resourcequota` runs it.
func start(t *testing.T, c *raftstoretest.Cluster, conn *bus.Conn, i int) replica {
	return startWith(t, c, conn, i, resourcequota.DefaultConfig())
}

func startWith(t *testing.T, c *raftstoretest.Cluster, conn *bus.Conn, i int, cfg resourcequota.Config) replica {
	t.Helper()
	st := objects.New(c.Client(t))
	env := stage.NewEnv(conn, st, pipeline.ResourceQuota, fmt.Sprintf("resourcequota-%d", i), slog.New(slog.NewTextHandler(io.Discard, nil)))
	h, err := resourcequota.New(env, cfg)
	if err != nil {
		t.Fatal(err)
	}
	rc, _ := pipeline.RunnerConfig(pipeline.ResourceQuota, env.Replica)
	ctx, stop := context.WithCancel(context.Background())
	r := replica{stop: stop, done: make(chan error, 1)}
	go func() {
		r.done <- stage.Run(ctx, conn, env, h, stage.Config{Runner: rc, NoConsumer: true, ResyncPeriod: time.Second})
	}()
	return r
}

// connect is a bus connection to c's NATS server, closed at the end.
func connect(t *testing.T, ctx context.Context, c *raftstoretest.Cluster, name string) *bus.Conn {
	t.Helper()
	cfg := bus.DefaultConfig()
	cfg.URLs, cfg.Name = []string{c.NATS.ClientURL()}, name
	conn, err := bus.Connect(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	return conn
}

// createQuota stores the quota team/q: 10 ConfigMaps and 5 pods.
func createQuota(t *testing.T, ctx context.Context, st *objects.Store) {
	t.Helper()
	hard := k8scorev1.ResourceList{"count/configmaps": resource.MustParse("10"), "pods": resource.MustParse("5")}
	u, err := quota.FromKube(&k8scorev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "q", Namespace: "team"}, Spec: k8scorev1.ResourceQuotaSpec{Hard: hard}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Create(ctx, u); err != nil {
		t.Fatal(err)
	}
}

func (r replica) kill(t *testing.T) {
	r.stop()
	if err := <-r.done; err != nil {
		t.Errorf("controller: %v", err)
	}
}

func status(t *testing.T, st *objects.Store, ns, name string) k8scorev1.ResourceQuotaStatus {
	t.Helper()
	o, err := st.GetKind(context.Background(), objects.ResourceQuotas, ns, name)
	if err != nil {
		t.Fatal(err)
	}
	rq, err := quota.ToKubeQuota(o.(*corev1.Unstructured))
	if err != nil {
		t.Fatal(err)
	}
	return rq.Status
}

func usedIs(t *testing.T, st *objects.Store, want map[string]int64) func() bool {
	return func() bool {
		s := status(t, st, "team", "q")
		if len(s.Hard) != 2 || len(s.Used) != len(want) {
			return false
		}
		for r, v := range want {
			if q := s.Used[k8scorev1.ResourceName(r)]; q.Value() != v {
				return false
			}
		}
		return true
	}
}

// TestControllerRecountsAndReleases: two replicas fill a new quota's
// status from the store, release the usage of deleted objects, correct a
// status.used that lies (a charge whose object was never written), and
// one replica killed leaves the other doing all of it; resyncs of a right
// status write nothing.
func TestControllerRecountsAndReleases(t *testing.T) {
	c := raftstoretest.MakeCluster(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()
	conn := connect(t, ctx, c, "rq-test")
	st := objects.New(c.Client(t))
	for i := range 3 {
		if _, err := st.Create(ctx, &corev1.ConfigMap{Metadata: &corev1.ObjectMeta{Name: fmt.Sprintf("c%d", i), Namespace: "team"}}); err != nil {
			t.Fatal(err)
		}
	}
	r1, r2 := start(t, c, conn, 1), start(t, c, conn, 2)
	defer r2.kill(t)
	createQuota(t, ctx, st)
	raftstoretest.WaitFor(t, 10*time.Second, "status of the new quota", usedIs(t, st, map[string]int64{"count/configmaps": 3, "pods": 0}))

	if _, err := st.Delete(ctx, objects.ConfigMaps, "team", "c0", 0); err != nil {
		t.Fatal(err)
	}
	raftstoretest.WaitFor(t, 10*time.Second, "the delete released", usedIs(t, st, map[string]int64{"count/configmaps": 2, "pods": 0}))

	// Resyncs (every second, both replicas) of a right status write nothing.
	o, _ := st.GetKind(ctx, objects.ResourceQuotas, "team", "q")
	time.Sleep(2500 * time.Millisecond)
	if again, _ := st.GetKind(ctx, objects.ResourceQuotas, "team", "q"); objects.Revision(again) != objects.Revision(o) {
		t.Fatalf("a right status was written again: revision %d, was %d", objects.Revision(again), objects.Revision(o))
	}

	// One replica killed; the other corrects a leaked charge on resync.
	r1.kill(t)
	rq, _ := quota.ToKubeQuota(o.(*corev1.Unstructured))
	rq.Status.Used["count/configmaps"] = resource.MustParse("7")
	leaked, _ := quota.FromKube(rq)
	if _, err := st.Update(ctx, leaked); err != nil {
		t.Fatal(err)
	}
	raftstoretest.WaitFor(t, 10*time.Second, "the leaked charge released", usedIs(t, st, map[string]int64{"count/configmaps": 2, "pods": 0}))
	if _, err := st.Delete(ctx, objects.ConfigMaps, "team", "c1", 0); err != nil {
		t.Fatal(err)
	}
	raftstoretest.WaitFor(t, 10*time.Second, "a delete with one replica", usedIs(t, st, map[string]int64{"count/configmaps": 1, "pods": 0}))
}

// TestControllerWatchesWritesOnlyWithQuotas: with no ResourceQuota the
// controller receives none of the store's writes (red when its watch of
// every write runs regardless); a quota created after objects exist is
// counted and a delete then releases its usage; once the last quota is
// gone for WatchIdle the watch stops again.
func TestControllerWatchesWritesOnlyWithQuotas(t *testing.T) {
	c := raftstoretest.MakeCluster(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), bustest.Timeout)
	defer cancel()
	conn := connect(t, ctx, c, "rq-lazy-test")
	st := objects.New(c.Client(t))
	rcfg := resourcequota.DefaultConfig()
	rcfg.WatchIdle = 300 * time.Millisecond
	r := startWith(t, c, conn, 1, rcfg)
	defer r.kill(t)
	sent := func() uint64 { return c.Node(0).Stats().WatchEventsSent }
	configMaps := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			if _, err := st.Create(ctx, &corev1.ConfigMap{Metadata: &corev1.ObjectMeta{Name: fmt.Sprintf("c%d", i), Namespace: "team"}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The controller's quota informer has started by now (Run returns
	// only after start's informers synced; give it the time to): every
	// event sent from here on would be the watch of every write.
	time.Sleep(500 * time.Millisecond)
	base := sent()
	configMaps(0, 5)
	time.Sleep(500 * time.Millisecond)
	if n := sent() - base; n != 0 {
		t.Fatalf("with no quota the store sent %d watch events for 5 writes, want 0", n)
	}

	createQuota(t, ctx, st)
	raftstoretest.WaitFor(t, 10*time.Second, "status of the new quota", usedIs(t, st, map[string]int64{"count/configmaps": 5, "pods": 0}))
	if _, err := st.Delete(ctx, objects.ConfigMaps, "team", "c0", 0); err != nil {
		t.Fatal(err)
	}
	raftstoretest.WaitFor(t, 10*time.Second, "the delete released", usedIs(t, st, map[string]int64{"count/configmaps": 4, "pods": 0}))

	if _, err := st.Delete(ctx, objects.ResourceQuotas, "team", "q", 0); err != nil {
		t.Fatal(err)
	}
	// WatchIdle after the quota went, the watch ends: writes reach no one.
	raftstoretest.WaitFor(t, 10*time.Second, "the watch of every write stopped", func() bool {
		before := sent()
		configMaps(100, 101)
		time.Sleep(200 * time.Millisecond)
		if _, err := st.Delete(ctx, objects.ConfigMaps, "team", "c100", 0); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
		return sent() == before
	})
}
