package cache

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/podflow/podflow/services/stages/scheduler/framework"

	"github.com/podflow/podflow/proto/corev1"
)

func TestMergeAndReleaseAllocation(t *testing.T) {
	pod := mkPod("web", "250m", "64Mi", hostPort(8080, "TCP", ""))
	a, changed, err := MergeAllocation(nil, "n1", pod)
	if err != nil || !changed {
		t.Fatalf("merge into nil: %v, changed %v", err, changed)
	}
	want := &corev1.AllocatedPod{Namespace: "default", Name: "web", MilliCpu: 250, MemoryBytes: 64 << 20,
		HostPorts: []*corev1.ContainerPort{{HostPort: 8080, ContainerPort: 8080, Protocol: "TCP"}}}
	if a.GetMetadata().GetName() != "n1" || len(a.Pods) != 1 || a.Pods["uid-web"].String() != want.String() {
		t.Fatalf("record %v, want n1 with %v", a, want)
	}
	a.Metadata.ResourceVersion = "7"

	// Idempotent: a repeated bind changes nothing.
	again, changed, err := MergeAllocation(a, "n1", pod)
	if err != nil || changed || again != a {
		t.Fatalf("repeat merge: changed %v err %v", changed, err)
	}
	// A second pod gives a new record; the old one is untouched.
	b, changed, err := MergeAllocation(a, "n1", mkPod("db", "1", "1Gi"))
	if err != nil || !changed || len(b.Pods) != 2 || len(a.Pods) != 1 || b.Metadata.ResourceVersion != "7" || b.Metadata == a.Metadata {
		t.Fatalf("second merge: %v (old %v), changed %v err %v", b, a, changed, err)
	}
	c, changed := ReleaseAllocation(b, "uid-web")
	if !changed || len(c.Pods) != 1 || c.Pods["uid-db"] == nil || len(b.Pods) != 2 {
		t.Fatalf("release: %v (old %v) changed %v", c, b, changed)
	}
	if d, changed := ReleaseAllocation(c, "uid-web"); changed || d != c {
		t.Fatal("releasing an absent pod changed the record")
	}
}

// TestAllocationCountsOverhead: the node's record, which binds check and
// update in one transaction, holds a pod's requests with its overhead, so
// that a pod whose overhead does not fit is refused.
func TestAllocationCountsOverhead(t *testing.T) {
	withOverhead := func(p *corev1.Pod) { p.Spec.Overhead = map[string]string{"cpu": "250m", "memory": "64Mi"} }
	a, _, err := MergeAllocation(nil, "n1", mkPod("kata", "250m", "64Mi", withOverhead))
	if err != nil {
		t.Fatal(err)
	}
	if got := a.Pods["uid-kata"]; got.GetMilliCpu() != 500 || got.GetMemoryBytes() != 128<<20 {
		t.Fatalf("accounted %v, want 500m and 128Mi", got)
	}
	node := mkNode("n1", "1", "1Gi")
	got, err := CheckAllocationFit(node, a, mkPod("p", "400m", "", withOverhead))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"Insufficient cpu"}; !reflect.DeepEqual(got, want) {
		t.Errorf("CheckAllocationFit = %q, want %q", got, want)
	}
}

func TestCheckAllocationFit(t *testing.T) {
	node := mkNode("n1", "2", "4Gi", maxPods("3"))
	alloc, _, _ := MergeAllocation(nil, "n1", mkPod("a", "1500m", "1Gi", hostPort(80, "TCP", "")))
	alloc, _, _ = MergeAllocation(alloc, "n1", mkPod("b", "", "2Gi"))
	tests := []struct {
		name  string
		alloc *corev1.NodeAllocation
		pod   *corev1.Pod
		want  []string
	}{
		{"fits what is left", alloc, mkPod("p", "500m", "1Gi"), nil},
		{"insufficient cpu", alloc, mkPod("p", "501m", ""), []string{"Insufficient cpu"}},
		{"insufficient cpu and memory", alloc, mkPod("p", "1", "2Gi"), []string{"Insufficient cpu", "Insufficient memory"}},
		{"host port taken", alloc, mkPod("p", "", "", hostPort(80, "", "")), []string{"node(s) didn't have free ports for the requested pod ports"}},
		{"already accounted (a repeated bind) fits", alloc, mkPod("a", "1500m", "1Gi", hostPort(80, "TCP", "")), nil},
		{"empty record", nil, mkPod("p", "2", "4Gi"), nil},
		{"too many pods", func() *corev1.NodeAllocation {
			x, _, _ := MergeAllocation(alloc, "n1", mkPod("c", "", ""))
			return x
		}(), mkPod("p", "", ""), []string{"Too many pods"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := CheckAllocationFit(node, tt.alloc, tt.pod)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("CheckAllocationFit = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestReservations: the room a preemption reserves for its nominee in the
// node's record counts, in CheckAllocationFit, for pods of no higher
// priority — not for a pod of higher priority (kube-scheduler counts
// nominated pods of equal or higher priority), nor for the nominee
// itself; Reserve and Unreserve are idempotent and copy the record.
func TestReservations(t *testing.T) {
	node := mkNode("n1", "4", "8Gi", maxPods("3"))
	prio := func(p *corev1.Pod, v int32) *corev1.Pod { p.Spec.Priority = &v; return p }
	alloc, _, _ := MergeAllocation(nil, "n1", mkPod("a", "2", "1Gi"))
	alloc.Metadata.ResourceVersion = "7"
	nominee := prio(mkPod("nominee", "2", "1Gi", hostPort(80, "TCP", "")), 1000)
	r, changed, err := ReserveAllocation(alloc, "n1", nominee)
	if err != nil || !changed || len(alloc.GetMetadata().GetAnnotations()) != 0 || r.Metadata.ResourceVersion != "7" {
		t.Fatalf("reserve: changed %v err %v; old record %v", changed, err, alloc)
	}
	if again, changed, err := ReserveAllocation(r, "n1", nominee); err != nil || changed || again != r {
		t.Fatalf("repeated reserve: changed %v err %v", changed, err)
	}
	res, err := Reservations(r)
	if err != nil || len(res) != 1 || res["uid-nominee"].Priority != 1000 || res["uid-nominee"].Pod.GetMilliCpu() != 2000 || len(res["uid-nominee"].Pod.GetHostPorts()) != 1 {
		t.Fatalf("reservations %v, %v", res, err)
	}
	tests := []struct {
		name string
		pod  *corev1.Pod
		want []string
	}{
		{"equal priority: the room is taken", prio(mkPod("p", "1", ""), 1000), []string{"Insufficient cpu"}},
		{"lower priority: the room is taken", mkPod("p", "1", ""), []string{"Insufficient cpu"}},
		{"lower priority: the reserved port is taken", mkPod("p", "", "", hostPort(80, "TCP", "")), []string{"node(s) didn't have free ports for the requested pod ports"}},
		{"higher priority: the room is free", prio(mkPod("p", "2", ""), 1001), nil},
		{"the nominee: the room is its own", nominee, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := CheckAllocationFit(node, r, tt.pod)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("CheckAllocationFit = %q, want %q", got, tt.want)
			}
		})
	}
	full, _, _ := MergeAllocation(r, "n1", mkPod("b", "", ""))
	if got, _ := CheckAllocationFit(node, full, mkPod("p", "", "")); !reflect.DeepEqual(got, []string{"Too many pods"}) {
		t.Errorf("two pods and a reservation on a 3-pod node: %q, want Too many pods", got)
	}
	u, changed := Unreserve(r, "uid-nominee")
	if !changed || len(u.GetMetadata().GetAnnotations()) != 0 || len(r.GetMetadata().GetAnnotations()) != 1 {
		t.Fatalf("unreserve: changed %v, %v (old %v)", changed, u, r)
	}
	if again, changed := Unreserve(u, "uid-nominee"); changed || again != u {
		t.Fatal("unreserving an absent reservation changed the record")
	}
	if got, _ := CheckAllocationFit(node, u, mkPod("p", "2", "")); got != nil {
		t.Errorf("released: %q, want fits", got)
	}
}

// TestAllocationCountsScalarResources: the node's record holds what each
// pod requests of the scalar resources (an extended resource, hugepages),
// so that the bind's re-check refuses the pod that would take more than
// the node offers, also of the room reserved for a nominee.
func TestAllocationCountsScalarResources(t *testing.T) {
	const dongle = "example.com/dongle"
	wants := func(q string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Requests[dongle] = q
			p.Spec.Containers[0].Resources.Limits = map[string]string{dongle: q}
		}
	}
	offers := func(q string) func(*corev1.Node) {
		return func(n *corev1.Node) { n.Status.Allocatable[dongle] = q }
	}
	node := mkNode("n1", "8", "32Gi", offers("2"))
	a, _, err := MergeAllocation(nil, "n1", mkPod("a", "100m", "", wants("1")))
	if err != nil {
		t.Fatal(err)
	}
	if got := a.Pods["uid-a"].GetScalarResources(); !reflect.DeepEqual(got, map[string]int64{dongle: 1}) {
		t.Fatalf("accounted %v, want 1 %s", got, dongle)
	}
	full, _, _ := MergeAllocation(a, "n1", mkPod("b", "100m", "", wants("1")))
	prio := func(p *corev1.Pod, v int32) *corev1.Pod { p.Spec.Priority = &v; return p }
	reserved, _, err := ReserveAllocation(a, "n1", prio(mkPod("nominee", "", "", wants("1")), 1000))
	if err != nil {
		t.Fatal(err)
	}
	insufficient := []string{"Insufficient " + dongle}
	tests := []struct {
		name  string
		node  *corev1.Node
		alloc *corev1.NodeAllocation
		pod   *corev1.Pod
		want  []string
	}{
		{"the last unit fits", node, a, mkPod("p", "", "", wants("1")), nil},
		{"one more than is left", node, a, mkPod("p", "", "", wants("2")), insufficient},
		{"every unit taken", node, full, mkPod("p", "", "", wants("1")), insufficient},
		{"a pod wanting none fits", node, full, mkPod("p", "", ""), nil},
		{"a node that offers none has none", mkNode("n1", "8", "32Gi"), nil, mkPod("p", "", "", wants("1")), insufficient},
		{"the nominee's reserved unit is taken", node, reserved, mkPod("p", "", "", wants("1")), insufficient},
		{"already accounted (a repeated bind) fits", node, full, mkPod("b", "100m", "", wants("1")), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := CheckAllocationFit(tt.node, tt.alloc, tt.pod)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("CheckAllocationFit = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestReleaseTerminated: the pods of a record the cache saw finish
// (TerminatedIn, whichever of the two sets is smaller) are released in
// one copy; a pod deleted since is no longer among them, nor is a running
// one, and releasing the same pods again changes nothing.
func TestReleaseTerminated(t *testing.T) {
	node := mkNode("n1", "4", "8Gi")
	run, done, failed, gone := mkPod("run", "1", "", onNode("n1")), mkPod("done", "1", "", onNode("n1")),
		mkPod("failed", "1", "", onNode("n1")), mkPod("gone", "1", "", onNode("n1"))
	var alloc *corev1.NodeAllocation
	for _, p := range []*corev1.Pod{run, done, failed, gone} {
		var err error
		if alloc, _, err = MergeAllocation(alloc, "n1", p); err != nil {
			t.Fatal(err)
		}
	}
	c := cacheWith(t, []*corev1.Node{node}, run, done, failed, gone)
	done.Status = &corev1.PodStatus{Phase: "Succeeded"}
	failed.Status = &corev1.PodStatus{Phase: "Failed"}
	gone.Status = &corev1.PodStatus{Phase: "Succeeded"}
	for _, p := range []*corev1.Pod{done, failed, gone} {
		if err := c.UpdatePod(p); err != nil {
			t.Fatal(err)
		}
	}
	// Deleted: its entry went when it finished, its key goes now.
	if err := c.RemovePod(gone); !errors.Is(err, framework.ErrPodNotFound) {
		t.Fatalf("remove a finished pod: %v, want ErrPodNotFound", err)
	}
	// More finished pods elsewhere than the record holds: the other way round.
	for i := range 5 {
		p := mkPod(fmt.Sprintf("elsewhere-%d", i), "1", "", onNode("n2"))
		p.Status = &corev1.PodStatus{Phase: "Succeeded"}
		if err := c.AddPod(p); err != nil {
			t.Fatal(err)
		}
	}
	keys := c.TerminatedIn(alloc.GetPods())
	slices.Sort(keys)
	if want := []string{"uid-done", "uid-failed"}; !slices.Equal(keys, want) {
		t.Fatalf("TerminatedIn = %v, want %v", keys, want)
	}
	out, changed := ReleaseAllocation(alloc, keys...)
	if !changed || len(out.Pods) != 2 || out.Pods["uid-run"] == nil || out.Pods["uid-gone"] == nil || len(alloc.Pods) != 4 {
		t.Fatalf("release: %v (old %v) changed %v", out.Pods, alloc.Pods, changed)
	}
	if again, changed := ReleaseAllocation(out, keys...); changed || again != out {
		t.Error("releasing released pods changed the record")
	}
	if got := c.TerminatedIn(out.GetPods()); len(got) != 0 {
		t.Errorf("TerminatedIn of the released record = %v, want none", got)
	}
	if n, _ := c.NodeInfo("n1"); n.NumPods() != 1 {
		t.Errorf("n1 counts %d pods, want the running one only", n.NumPods())
	}
}

// TestCheckAllocationFitSums: sums grown pod by pod (WithAllocatedPod)
// answer as CheckAllocationFit does on each record, and growing them
// leaves the sums grown from (ports included) as they were.
func TestCheckAllocationFitSums(t *testing.T) {
	node := mkNode("n1", "2", "4Gi", maxPods("3"))
	probes := []*corev1.Pod{
		mkPod("p", "500m", "1Gi"), mkPod("p", "1", "2Gi"), mkPod("p", "", "", hostPort(80, "TCP", "")),
		mkPod("p", "", "", hostPort(81, "TCP", "")), mkPod("a", "1500m", "1Gi", hostPort(80, "TCP", "")), mkPod("p", "", ""),
	}
	answers := func(sums *framework.NodeInfo, alloc *corev1.NodeAllocation) [][]string {
		var out [][]string
		for _, p := range probes {
			got, err := CheckAllocationFitSums(sums, alloc, p)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, got)
		}
		return out
	}
	var alloc *corev1.NodeAllocation
	sums, err := AllocationSums(node, alloc)
	if err != nil {
		t.Fatal(err)
	}
	type step struct {
		sums  *framework.NodeInfo
		alloc *corev1.NodeAllocation
		want  [][]string
	}
	var steps []step
	for _, p := range []*corev1.Pod{mkPod("a", "1500m", "1Gi", hostPort(80, "TCP", "")), mkPod("b", "", "2Gi"), mkPod("c", "", "", hostPort(81, "TCP", ""))} {
		next, _, err := MergeAllocation(alloc, "n1", p)
		if err != nil {
			t.Fatal(err)
		}
		alloc, sums = next, WithAllocatedPod(sums, next.GetPods()[framework.PodKey(p)])
		var want [][]string
		for _, q := range probes {
			w, err := CheckAllocationFit(node, alloc, q)
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, w)
		}
		if got := answers(sums, alloc); !reflect.DeepEqual(got, want) {
			t.Errorf("after %s: grown sums answer %q, CheckAllocationFit %q", p.GetMetadata().GetName(), got, want)
		}
		steps = append(steps, step{sums, alloc, want})
	}
	for i, s := range steps {
		if got := answers(s.sums, s.alloc); !reflect.DeepEqual(got, s.want) {
			t.Errorf("step %d's sums changed since: they answer %q, want %q", i, got, s.want)
		}
	}
	// Two records grown from the same sums, each with a port of its own,
	// keep their own ports (a grown list has room for more in place).
	port := func(p int32) *corev1.AllocatedPod {
		return &corev1.AllocatedPod{HostPorts: []*corev1.ContainerPort{{HostPort: p, ContainerPort: p, Protocol: "TCP"}}}
	}
	if sums, err = AllocationSums(mkNode("n2", "2", "4Gi", maxPods("10")), nil); err != nil {
		t.Fatal(err)
	}
	for _, p := range []int32{80, 81, 82} {
		sums = WithAllocatedPod(sums, port(p))
	}
	x, y := WithAllocatedPod(sums, port(83)), WithAllocatedPod(sums, port(84))
	for _, tc := range []struct {
		name string
		sums *framework.NodeInfo
		port int32
		free bool
	}{{"x", x, 83, false}, {"x", x, 84, true}, {"y", y, 84, false}, {"y", y, 83, true}, {"base", sums, 83, true}} {
		got, err := CheckAllocationFitSums(tc.sums, nil, mkPod("q", "", "", hostPort(tc.port, "TCP", "")))
		if err != nil {
			t.Fatal(err)
		}
		if free := len(got) == 0; free != tc.free {
			t.Errorf("sums %s: port %d free = %v, want %v", tc.name, tc.port, free, tc.free)
		}
	}
}
