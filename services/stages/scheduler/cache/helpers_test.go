package cache

import (
	"testing"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/stages/scheduler/schedulertest"
)

// The builders of schedulertest, by their short names here.
var (
	mkNode    = schedulertest.Node
	maxPods   = schedulertest.MaxPods
	cordoned  = schedulertest.Cordoned
	images    = schedulertest.Images
	mkPod     = schedulertest.Pod
	onNode    = schedulertest.OnNode
	hostPort  = schedulertest.HostPort
	nodeNames = schedulertest.NodeNames
)

// cacheWith returns a cache holding the nodes and bound pods.
func cacheWith(t testing.TB, nodes []*corev1.Node, pods ...*corev1.Pod) *Cache {
	t.Helper()
	c := NewCache()
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

// uniformCluster is a cache of nodes of 8 cpu and 32Gi named names.
func uniformCluster(t testing.TB, names []string, opts ...schedulertest.NodeOpt) *Cache {
	t.Helper()
	nodes := make([]*corev1.Node, len(names))
	for i, n := range names {
		nodes[i] = mkNode(n, "8", "32Gi", opts...)
	}
	return cacheWith(t, nodes)
}
