package nodewire_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"runtime"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/nodeagent/linux/network/networktest"
	"github.com/podflow/podflow/nodeagent/linux/proxy"
	"github.com/podflow/podflow/ops/processes/nodewire"
	corev1 "github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/raftstore/raftstoretest"
	"github.com/podflow/podflow/services/objects"
)

// programmed is a ServiceSyncer over a real proxy that tells, after each
// programming, how many endpoints the kernel's rules now spread over.
type programmed struct {
	*proxy.Proxy
	done chan int
}

func (p programmed) Sync(ctx context.Context, svcs []*corev1.Service, slices []*corev1.EndpointSlice) (bool, error) {
	changed, err := p.Proxy.Sync(ctx, svcs, slices)
	if changed && err == nil {
		n := 0
		if ports := p.Plan().Ports; len(ports) > 0 {
			n = len(ports[0].Endpoints)
		}
		select {
		case p.done <- n:
		default: // the test reads every one; never block the watch
		}
	}
	return changed, err
}

// TestStoreToRulesFigures measures the issue's "slice change → rule
// programmed" end to end on one node: an EndpointSlice update written to
// a 3-replica raft store, seen by the node's watch (WatchServices), and
// programmed into nftables by a real proxy (in a network namespace of its
// own, with nothing in it: no packet is sent). It logs p50/p99 over 100
// changes, split into the store write (until the store acknowledged it)
// and the rest (watch + plan + nftables transaction); it asserts no time.
func TestStoreToRulesFigures(t *testing.T) {
	networktest.RequireRoot(t)
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs iproute2's ip")
	}
	ns := fmt.Sprintf("pfnw-%06x", rand.Uint32N(1<<24))
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cluster := raftstoretest.MakeCluster(t, 3)
	st := objects.New(cluster.Client(t))

	cfg := proxy.DefaultConfig("figures-"+ns, "pfnwbr0", "10.250.0.1")
	cfg.NetNS = "/run/netns/" + ns
	px, err := proxy.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	p := programmed{Proxy: px, done: make(chan int, 1024)}

	svc := &corev1.Service{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: &corev1.ServiceSpec{ClusterIp: "10.96.0.10", Ports: []*corev1.ServicePort{{Port: 80, Protocol: "TCP"}}}}
	if _, err := st.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	port := int32(8080)
	slice := &corev1.EndpointSlice{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "web-1",
		Labels: map[string]string{proxy.LabelServiceName: "web"}}, AddressType: "IPv4",
		Ports: []*corev1.EndpointPort{{Port: &port, Protocol: proto.String("TCP")}},
		Endpoints: []*corev1.Endpoint{
			{Addresses: []string{"10.250.0.11"}, Conditions: &corev1.EndpointConditions{Ready: proto.Bool(true)}},
			{Addresses: []string{"10.250.0.12"}, Conditions: &corev1.EndpointConditions{Ready: proto.Bool(true)}}}}
	if _, err := st.Create(ctx, slice); err != nil {
		t.Fatal(err)
	}

	done := make(chan error, 1)
	go func() { done <- nodewire.WatchServices(ctx, st, p, nodewire.ServiceWatchConfig{}) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("WatchServices = %v", err)
		}
	}()
	wait := func(want int) {
		t.Helper()
		deadline := time.After(10 * time.Second) // a hang, not a speed check
		for {
			select {
			case n := <-p.done:
				if n == want {
					return
				}
			case <-deadline:
				t.Fatalf("the rules never spread over %d endpoints", want)
			}
		}
	}
	wait(2)

	var total, write []time.Duration
	for i := range 100 {
		ready := i%2 == 1 // 1 endpoint, then 2, ...
		slice.Endpoints[1].Conditions.Ready = proto.Bool(ready)
		want := 1
		if ready {
			want = 2
		}
		start := time.Now()
		if _, err := st.Update(ctx, slice); err != nil { // sets the new resourceVersion
			t.Fatal(err)
		}
		write = append(write, time.Since(start))
		wait(want)
		total = append(total, time.Since(start))
	}
	slices.Sort(total)
	slices.Sort(write)
	t.Logf("store write → rules programmed on the node, 100 slice changes (3 store replicas, GOMAXPROCS %d): p50 %v, p99 %v; of which the store write p50 %v, p99 %v",
		runtime.GOMAXPROCS(0), total[49], total[98], write[49], write[98])
}
