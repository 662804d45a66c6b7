package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/objects"
)

// TestFiveThousandNodes: a system of 5,000 simulated nodes starts, and
// 20,000 pods are listed whole through the HTTPS API (client-go: one list,
// and pages of 500), through the bus (a store list, `podflow get`) and by a
// client-go informer, which then sees a change made after its list. The
// bound is the test's own timeout, not a speed goal: `podflow bench
// pipeline --nodes 5000` measures the speed.
//
// The pods are written straight into the store, 200 to a transaction, as
// the persistence stage stores them, for a scheduler nobody runs: no stage
// or node acts on them, so the test costs what listing costs, not what
// 20,000 pods through the pipeline cost.
func TestFiveThousandNodes(t *testing.T) {
	parallel(t, heavyLoad)
	const nodes, pods, perTxn = 5000, 20000, 200
	c := startCluster(t, "--nodes", fmt.Sprint(nodes))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	stored, _, err := objects.List[*corev1.Node](ctx, c.store, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(stored) != nodes {
		t.Fatalf("%d nodes registered, want %d", len(stored), nodes)
	}
	// Node i's pod CIDR is block i of a cluster CIDR sized for 5,000 /24s.
	cidrs := map[string]string{}
	for _, n := range stored {
		cidrs[n.GetMetadata().GetName()] = n.GetSpec().GetPodCidr()
	}
	if cidrs["sim-node-0001"] != "10.224.1.0/24" || cidrs["sim-node-5000"] != "10.243.136.0/24" {
		t.Errorf("pod CIDRs of the first and last node: %s, %s", cidrs["sim-node-0001"], cidrs["sim-node-5000"])
	}

	now := time.Now()
	for i := 0; i < pods; i += perTxn {
		txn := objects.Txn{}
		for j := i; j < i+perTxn; j++ {
			p := &corev1.Pod{
				Metadata: &corev1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("scale-%05d", j), Uid: fmt.Sprintf("00000000-0000-4000-8000-%012d", j),
					Labels: map[string]string{"app": "scale"}, CreationTimestamp: timestamppb.New(now)},
				Spec:   &corev1.PodSpec{SchedulerName: "nobody", Containers: []*corev1.Container{{Name: "app", Image: "podflow/http:1"}}},
				Status: &corev1.PodStatus{Phase: "Pending"},
			}
			txn = txn.Compare(p, objects.Absent).Put(p)
		}
		if _, err := c.store.Commit(ctx, txn); err != nil {
			t.Fatalf("store pods %d-%d: %v", i, i+perTxn-1, err)
		}
	}

	t.Run("bus", func(t *testing.T) {
		got, _, err := objects.List[*corev1.Pod](ctx, c.store, "default")
		if err != nil {
			t.Fatal(err)
		}
		if n := countScale(got, func(p *corev1.Pod) string { return p.GetMetadata().GetName() }); n != pods {
			t.Errorf("a store list over the bus: %d pods, want %d", n, pods)
		}
		out := c.mustPodflow("get", "pods", "-o", "name")
		if n := strings.Count(out, "pod/scale-"); n != pods {
			t.Errorf("podflow get pods: %d pods, want %d", n, pods)
		}
	})

	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(c.dir, "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 1000, 1000
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("https", func(t *testing.T) {
		l, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n := countKube(l.Items); n != pods {
			t.Errorf("one list: %d pods, want %d", n, pods)
		}
		// Pages of 500, as kubectl and informers list: each continues
		// where the last ended, all at the first page's revision.
		var paged []string
		var rv string
		opts := metav1.ListOptions{Limit: 500}
		for page := 0; ; page++ {
			l, err := cs.CoreV1().Pods("default").List(ctx, opts)
			if err != nil {
				t.Fatalf("page %d: %v", page, err)
			}
			if page == 0 {
				rv = l.ResourceVersion
			} else if l.ResourceVersion != rv {
				t.Fatalf("page %d at resourceVersion %s, the first at %s", page, l.ResourceVersion, rv)
			}
			for _, p := range l.Items {
				paged = append(paged, p.Name)
			}
			if l.Continue == "" {
				break
			}
			opts.Continue = l.Continue
		}
		if n := len(paged); n < pods || countNames(paged) != pods {
			t.Errorf("paged: %d pods (%d of ours), want %d once each", n, countNames(paged), pods)
		}
		nl, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(nl.Items) != nodes {
			t.Errorf("%d nodes listed, want %d", len(nl.Items), nodes)
		}
	})

	t.Run("informer", func(t *testing.T) {
		f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace("default"))
		inf := f.Core().V1().Pods().Informer()
		stop := make(chan struct{})
		defer func() { close(stop); f.Shutdown() }()
		f.Start(stop)
		if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			t.Fatal("the pod informer did not sync")
		}
		if n := countStore(inf.GetStore()); n != pods {
			t.Fatalf("informer: %d pods after its list, want %d", n, pods)
		}
		// A pod created after the list reaches it through its watch.
		late := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "scale-late"},
			Spec: v1.PodSpec{SchedulerName: "nobody", Containers: []v1.Container{{Name: "app", Image: "podflow/http:1"}}}}
		if _, err := cs.CoreV1().Pods("default").Create(ctx, late, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, time.Minute, "the informer to see the new pod", func() (bool, string) {
			n := countStore(inf.GetStore())
			return n == pods+1, fmt.Sprintf("%d pods", n)
		})
	})
	if t.Failed() {
		return
	}
	// No process restarted along the way.
	cpu := 0.0
	for _, ch := range c.children() {
		if ch.Restarts > 0 {
			t.Errorf("%s restarted %d times", ch.Name, ch.Restarts)
		}
		cpu += cpuSeconds(ch.PID)
	}
	t.Logf("the system's processes used %.1f s of CPU", cpu)
}

// countScale counts the items named scale-*.
func countScale[T any](items []T, name func(T) string) int {
	n := 0
	for _, it := range items {
		if strings.HasPrefix(name(it), "scale-") {
			n++
		}
	}
	return n
}

func countKube(items []v1.Pod) int {
	return countScale(items, func(p v1.Pod) string { return p.Name })
}

// countNames counts the distinct names scale-*.
func countNames(names []string) int {
	seen := map[string]bool{}
	for _, n := range names {
		seen[n] = true
	}
	return countScale(slices.Collect(maps.Keys(seen)), func(n string) string { return n })
}

func countStore(s cache.Store) int {
	return countScale(s.ListKeys(), func(k string) string { return strings.TrimPrefix(k, "default/") })
}

// cpuSeconds is the user and system CPU time pid has used (0 when it
// cannot be read).
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	i := strings.LastIndexByte(string(b), ')')
	if err != nil || i < 0 {
		return 0
	}
	f := strings.Fields(string(b)[i+1:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	s, _ := strconv.ParseFloat(f[12], 64)
	return (u + s) / 100 // USER_HZ
}
