package scheduler

import (
	"testing"

	"github.com/podflow/podflow/services/stages/scheduler/cache"
	"github.com/podflow/podflow/services/stages/scheduler/framework"
	"github.com/podflow/podflow/services/stages/scheduler/schedulertest"

	"github.com/podflow/podflow/proto/corev1"
)

// Builders for test objects.

// The builders of schedulertest, by their short names here.
type (
	nodeOpt = schedulertest.NodeOpt
	podOpt  = schedulertest.PodOpt
)

var (
	mkNode       = schedulertest.Node
	maxPods      = schedulertest.MaxPods
	labels       = schedulertest.Labels
	taints       = schedulertest.Taints
	tnt          = schedulertest.Taint
	ready        = schedulertest.Ready
	cordoned     = schedulertest.Cordoned
	images       = schedulertest.Images
	mkPod        = schedulertest.Pod
	onNode       = schedulertest.OnNode
	hostPort     = schedulertest.HostPort
	tolerate     = schedulertest.Tolerate
	nodeSelector = schedulertest.NodeSelector
	expr         = schedulertest.Expr
	term         = schedulertest.Term
	required     = schedulertest.Required
	preferred    = schedulertest.Preferred
	image        = schedulertest.Image
	nodeNames    = schedulertest.NodeNames
)

// cacheWith returns a cache holding the nodes and bound pods.
func cacheWith(t testing.TB, nodes []*corev1.Node, pods ...*corev1.Pod) *cache.Cache {
	t.Helper()
	c := cache.NewCache()
	for _, n := range nodes {
		if err := c.AddNode(n); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range pods {
		if err := c.AddPod(p); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// infoOf returns the NodeInfo of node with the bound pods.
func infoOf(t testing.TB, node *corev1.Node, pods ...*corev1.Pod) *framework.NodeInfo {
	t.Helper()
	n, ok := cacheWith(t, []*corev1.Node{node}, pods...).NodeInfo(node.Metadata.Name)
	if !ok {
		t.Fatalf("node %q not in cache", node.Metadata.Name)
	}
	return n
}

func newTestScheduler(t testing.TB, mutate ...func(*Config)) *Scheduler {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Seed = 1
	for _, m := range mutate {
		m(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// ctr is a container with requests and limits.
func ctr(name string, reqs, lims map[string]string) *corev1.Container {
	return &corev1.Container{Name: name, Resources: &corev1.ResourceRequirements{Requests: reqs, Limits: lims}}
}
