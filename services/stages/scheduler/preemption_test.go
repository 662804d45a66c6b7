package scheduler

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/podflow/podflow/services/stages/scheduler/cache"
	"github.com/podflow/podflow/services/stages/scheduler/framework"

	"google.golang.org/protobuf/types/known/timestamppb"
	klabels "k8s.io/apimachinery/pkg/labels"

	"github.com/podflow/podflow/proto/corev1"
)

func prio(v int32) podOpt { return func(p *corev1.Pod) { p.Spec.Priority = &v } }

func started(sec int64) podOpt {
	return func(p *corev1.Pod) {
		p.Status = &corev1.PodStatus{StartTime: timestamppb.New(time.Unix(1_700_000_000+sec, 0))}
	}
}

func policy(v string) podOpt { return func(p *corev1.Pod) { p.Spec.PreemptionPolicy = &v } }

func nominatedTo(node string) podOpt {
	return func(p *corev1.Pod) {
		if p.Status == nil {
			p.Status = &corev1.PodStatus{}
		}
		p.Status.NominatedNodeName = node
	}
}

// preemptionOf schedules pod over the cache and returns the FitError.
func preemptionOf(t *testing.T, c *cache.Cache, pod *corev1.Pod) *framework.FitError {
	t.Helper()
	_, err := newTestScheduler(t).Schedule(pod, c.Snapshot())
	var fe *framework.FitError
	if !errors.As(err, &fe) {
		t.Fatalf("Schedule = %v, want a FitError", err)
	}
	return fe
}

func victimNames(res *framework.PostFilterResult) []string {
	var out []string
	for _, v := range res.Victims {
		out = append(out, v.Name)
	}
	return out
}

// TestDefaultPreemption follows kube-scheduler's DefaultPreemption on
// two-node clusters of 4-cpu nodes: only lower-priority pods are victims,
// the fewest (reprieving the most important first), and the node is
// chosen by the lowest highest-priority victim, then the lowest sum of
// priorities, then the fewest victims, then the latest start.
func TestDefaultPreemption(t *testing.T) {
	nodes := []*corev1.Node{mkNode("n1", "4", "16Gi"), mkNode("n2", "4", "16Gi")}
	tests := []struct {
		name        string
		pods        []*corev1.Pod
		pod         *corev1.Pod
		wantNode    string
		wantVictims []string
		wantMsg     string // with no nomination: the FailedScheduling message
	}{
		{
			name: "lowest highest-priority victim",
			pods: []*corev1.Pod{
				mkPod("a", "4", "", onNode("n1"), prio(10)),
				mkPod("b", "4", "", onNode("n2"), prio(5)),
			},
			pod: mkPod("p", "2", "", prio(100)), wantNode: "n2", wantVictims: []string{"b"},
		},
		{
			name: "fewest victims: the most important are reprieved first",
			pods: []*corev1.Pod{
				mkPod("a1", "1", "", onNode("n1"), prio(1)), mkPod("a2", "1", "", onNode("n1"), prio(3)),
				mkPod("a3", "1", "", onNode("n1"), prio(2)), mkPod("a4", "1", "", onNode("n1"), prio(4)),
				mkPod("b", "4", "", onNode("n2"), prio(50)),
			},
			pod: mkPod("p", "2", "", prio(10)), wantNode: "n1", wantVictims: []string{"a3", "a1"},
		},
		{
			name: "same highest priority: the lower sum of priorities",
			pods: []*corev1.Pod{
				mkPod("a1", "2", "", onNode("n1"), prio(5)), mkPod("a2", "2", "", onNode("n1"), prio(5)),
				mkPod("b1", "2", "", onNode("n2"), prio(5)), mkPod("b2", "2", "", onNode("n2"), prio(1)),
			},
			pod: mkPod("p", "4", "", prio(10)), wantNode: "n2", wantVictims: []string{"b1", "b2"},
		},
		{
			name: "same highest priority and sum: the fewest victims",
			pods: []*corev1.Pod{
				// n1: 0 and MinInt32 add up (shifted by 2^31) to n2's one 0.
				mkPod("a1", "2", "", onNode("n1"), prio(0)), mkPod("a2", "2", "", onNode("n1"), prio(math.MinInt32)),
				mkPod("b1", "4", "", onNode("n2"), prio(0)),
			},
			pod: mkPod("p", "4", "", prio(10)), wantNode: "n2", wantVictims: []string{"b1"},
		},
		{
			name: "priorities shifted by 2^31: negative ones do not make more victims cheaper",
			pods: []*corev1.Pod{
				mkPod("a1", "1", "", onNode("n1"), prio(-5)), mkPod("a2", "1", "", onNode("n1"), prio(-5)),
				mkPod("a3", "2", "", onNode("n1"), prio(0)),
				mkPod("b1", "2", "", onNode("n2"), prio(0)), mkPod("b2", "2", "", onNode("n2"), prio(0)),
			},
			// n1: a3 and both -5 pods would go (sum with 2^31 shifts is
			// larger than n2's two); n2: b1 and b2.
			pod: mkPod("p", "4", "", prio(10)), wantNode: "n2", wantVictims: []string{"b1", "b2"},
		},
		{
			name: "all else equal: the latest started",
			pods: []*corev1.Pod{
				mkPod("a", "4", "", onNode("n1"), prio(1), started(100)),
				mkPod("b", "4", "", onNode("n2"), prio(1), started(200)),
			},
			pod: mkPod("p", "4", "", prio(10)), wantNode: "n2", wantVictims: []string{"b"},
		},
		{
			name: "equal priority is never a victim",
			pods: []*corev1.Pod{mkPod("a", "4", "", onNode("n1"), prio(10)), mkPod("b", "4", "", onNode("n2"), prio(10))},
			pod:  mkPod("p", "1", "", prio(10)),
			wantMsg: "0/2 nodes are available: 2 Insufficient cpu. " +
				"preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod..",
		},
		{
			name: "preemptionPolicy Never",
			pods: []*corev1.Pod{mkPod("a", "4", "", onNode("n1"), prio(1)), mkPod("b", "4", "", onNode("n2"), prio(1))},
			pod:  mkPod("p", "1", "", prio(10), policy("Never")),
			wantMsg: "0/2 nodes are available: 2 Insufficient cpu. " +
				"preemption: not eligible due to preemptionPolicy=Never..",
		},
		{
			name: "too big even for an empty node",
			pods: []*corev1.Pod{mkPod("a", "4", "", onNode("n1"), prio(1)), mkPod("b", "4", "", onNode("n2"), prio(1))},
			pod:  mkPod("p", "5", "", prio(10)),
			wantMsg: "0/2 nodes are available: 2 Insufficient cpu. " +
				"preemption: 0/2 nodes are available: 2 Insufficient cpu..",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fe := preemptionOf(t, cacheWith(t, nodes, tc.pods...), tc.pod)
			if tc.wantMsg != "" {
				if fe.Nomination != nil {
					t.Fatalf("nominated to %s (victims %v), want none", fe.Nomination.NominatedNode, victimNames(fe.Nomination))
				}
				if got := fe.Error(); got != tc.wantMsg {
					t.Errorf("message\n%q, want\n%q", got, tc.wantMsg)
				}
				return
			}
			if fe.Nomination == nil {
				t.Fatalf("no nomination: %v", fe)
			}
			if got := fe.Nomination.NominatedNode; got != tc.wantNode {
				t.Errorf("node %s, want %s", got, tc.wantNode)
			}
			if got := victimNames(fe.Nomination); !slices.Equal(got, tc.wantVictims) {
				t.Errorf("victims %v, want %v", got, tc.wantVictims)
			}
		})
	}
}

// TestPreemptionTaintedNodeNotHelpful: a node the pod cannot use whatever
// runs there (UnschedulableAndUnresolvable) is not a candidate.
func TestPreemptionTaintedNodeNotHelpful(t *testing.T) {
	nodes := []*corev1.Node{mkNode("n1", "4", "16Gi", taints(tnt("dedicated", "gpu", framework.EffectNoSchedule))), mkNode("n2", "4", "16Gi")}
	c := cacheWith(t, nodes, mkPod("a", "4", "", onNode("n1"), prio(1)), mkPod("b", "4", "", onNode("n2"), prio(50)))
	fe := preemptionOf(t, c, mkPod("p", "1", "", prio(10)))
	const want = "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint {dedicated: gpu}. " +
		"preemption: 0/2 nodes are available: 1 No preemption victims found for incoming pod, 1 Preemption is not helpful for scheduling.."
	if fe.Nomination != nil || fe.Error() != want {
		t.Errorf("nomination %v, message\n%q, want\n%q", fe.Nomination, fe.Error(), want)
	}
}

// TestNominatedPodsReserveTheirNode: the room a preemption made is kept
// for the nominated pod — a pod of lower priority does not fit there, one
// of higher priority does — and the nominated pod itself fits there.
func TestNominatedPodsReserveTheirNode(t *testing.T) {
	nodes := []*corev1.Node{mkNode("n1", "4", "16Gi")}
	c := cacheWith(t, nodes)
	nom := mkPod("nom", "3", "", prio(100), nominatedTo("n1"))
	if err := c.Nominate(nom, "n1"); err != nil {
		t.Fatal(err)
	}
	s := newTestScheduler(t)
	_, err := s.Schedule(mkPod("low", "2", "", prio(10), policy("Never")), c.Snapshot())
	if !errors.Is(err, framework.ErrUnschedulable) || !strings.HasPrefix(err.Error(), "0/1 nodes are available: 1 Insufficient cpu.") {
		t.Errorf("lower-priority pod: %v, want Insufficient cpu (the nominated pod's room)", err)
	}
	if res, err := s.Schedule(mkPod("high", "2", "", prio(1000)), c.Snapshot()); err != nil || res.Node != "n1" {
		t.Errorf("higher-priority pod: %v %v, want n1", res.Node, err)
	}
	if res, err := s.Schedule(nom, c.Snapshot()); err != nil || res.Node != "n1" {
		t.Errorf("nominated pod itself: %v %v, want n1", res.Node, err)
	}
	c.Unnominate(nom)
	if res, err := s.Schedule(mkPod("low", "2", "", prio(10)), c.Snapshot()); err != nil || res.Node != "n1" {
		t.Errorf("after Unnominate: %v %v, want n1", res.Node, err)
	}
}

// TestNominatedPodWaitsForItsVictims: while pods its preemption is
// terminating still hold the nominated node, the preemptor does not
// preempt again (kube-scheduler's PodEligibleToPreemptOthers).
func TestNominatedPodWaitsForItsVictims(t *testing.T) {
	nodes := []*corev1.Node{mkNode("n1", "4", "16Gi"), mkNode("n2", "4", "16Gi")}
	victim := mkPod("a", "4", "", onNode("n1"), prio(1))
	victim.Metadata.DeletionTimestamp = timestamppb.Now()
	victim.Status = &corev1.PodStatus{Conditions: []*corev1.PodCondition{{Type: framework.ConditionDisruptionTarget, Status: "True", Reason: framework.ReasonPreemptionByScheduler}}}
	c := cacheWith(t, nodes, victim, mkPod("b", "4", "", onNode("n2"), prio(1)))
	fe := preemptionOf(t, c, mkPod("p", "4", "", prio(10), nominatedTo("n1")))
	const want = "0/2 nodes are available: 2 Insufficient cpu. preemption: not eligible due to a terminating pod on the nominated node.."
	if fe.Nomination != nil || fe.Error() != want {
		t.Errorf("nomination %v, message\n%q, want\n%q", fe.Nomination, fe.Error(), want)
	}
	// Once the victim is gone the nominated node fits.
	if err := c.RemovePod(victim); err != nil {
		t.Fatal(err)
	}
	if res, err := newTestScheduler(t).Schedule(mkPod("p", "4", "", prio(10), nominatedTo("n1")), c.Snapshot()); err != nil || res.Node != "n1" {
		t.Errorf("after the victim left: %v %v, want n1", res.Node, err)
	}
}

// budget is a PodDisruptionBudget of namespace "default" selecting
// app=<app> with allowed disruptions left.
func budget(app string, allowed int32, disrupted ...string) *framework.PDB {
	b := &framework.PDB{Namespace: "default", Name: app, Selector: klabels.SelectorFromSet(klabels.Set{"app": app}), DisruptionsAllowed: allowed}
	for _, d := range disrupted {
		if b.DisruptedPods == nil {
			b.DisruptedPods = map[string]bool{}
		}
		b.DisruptedPods[d] = true
	}
	return b
}

// TestPreemptionPodDisruptionBudgets follows kube-scheduler's
// DefaultPreemption with PodDisruptionBudgets: the node with the fewest
// victims that violate a budget wins before any priority criterion; on a
// node, the victims that would violate a budget are reprieved first; a
// budget's allowed disruptions are spent by the most important pods it
// guards first, a pod it already counts as disrupted spends none; and a
// budget is best effort — a violating victim is still taken when nothing
// else makes room.
func TestPreemptionPodDisruptionBudgets(t *testing.T) {
	nodes := []*corev1.Node{mkNode("n1", "4", "16Gi"), mkNode("n2", "4", "16Gi")}
	tests := []struct {
		name        string
		pods        []*corev1.Pod
		pdbs        []*framework.PDB
		nodes       []*corev1.Node
		pod         *corev1.Pod
		wantNode    string
		wantVictims []string
	}{
		{
			name: "fewest budget violations before the lowest priority",
			pods: []*corev1.Pod{
				mkPod("guarded", "4", "", onNode("n1"), prio(0), podLabels("app", "db")),
				mkPod("free", "4", "", onNode("n2"), prio(5), podLabels("app", "web")),
			},
			pdbs: []*framework.PDB{budget("db", 0)},
			pod:  mkPod("p", "4", "", prio(100)), wantNode: "n2", wantVictims: []string{"free"},
		},
		{
			name: "a budget with disruptions allowed is not violated",
			pods: []*corev1.Pod{
				mkPod("guarded", "4", "", onNode("n1"), prio(0), podLabels("app", "db")),
				mkPod("free", "4", "", onNode("n2"), prio(5), podLabels("app", "web")),
			},
			pdbs: []*framework.PDB{budget("db", 1)},
			pod:  mkPod("p", "4", "", prio(100)), wantNode: "n1", wantVictims: []string{"guarded"},
		},
		{
			name: "a pod the budget counts as disrupted already spends nothing",
			pods: []*corev1.Pod{
				mkPod("guarded", "4", "", onNode("n1"), prio(0), podLabels("app", "db")),
				mkPod("free", "4", "", onNode("n2"), prio(5), podLabels("app", "web")),
			},
			pdbs: []*framework.PDB{budget("db", 0, "guarded")},
			pod:  mkPod("p", "4", "", prio(100)), wantNode: "n1", wantVictims: []string{"guarded"},
		},
		{
			name: "a budget of another namespace guards nothing here",
			pods: []*corev1.Pod{
				mkPod("guarded", "4", "", onNode("n1"), prio(0), podLabels("app", "db")),
				mkPod("free", "4", "", onNode("n2"), prio(5), podLabels("app", "web")),
			},
			pdbs: []*framework.PDB{{Namespace: "other", Name: "db", Selector: klabels.SelectorFromSet(klabels.Set{"app": "db"})}},
			pod:  mkPod("p", "4", "", prio(100)), wantNode: "n1", wantVictims: []string{"guarded"},
		},
		{
			name:  "on a node the violating victims are reprieved first",
			nodes: []*corev1.Node{mkNode("n1", "4", "16Gi")},
			pods: []*corev1.Pod{
				mkPod("guarded", "2", "", onNode("n1"), prio(1), podLabels("app", "db")),
				mkPod("free", "2", "", onNode("n1"), prio(2), podLabels("app", "web")),
			},
			pdbs: []*framework.PDB{budget("db", 0)},
			pod:  mkPod("p", "2", "", prio(100)), wantNode: "n1", wantVictims: []string{"free"},
		},
		{
			name:  "the allowance goes to the most important guarded pod",
			nodes: []*corev1.Node{mkNode("n1", "4", "16Gi")},
			pods: []*corev1.Pod{
				mkPod("db-high", "2", "", onNode("n1"), prio(3), podLabels("app", "db")),
				mkPod("db-low", "2", "", onNode("n1"), prio(1), podLabels("app", "db")),
			},
			// db-high spends the one disruption allowed; db-low violates,
			// so it is reprieved first and db-high goes.
			pdbs: []*framework.PDB{budget("db", 1)},
			pod:  mkPod("p", "2", "", prio(100)), wantNode: "n1", wantVictims: []string{"db-high"},
		},
		{
			name:  "best effort: a violating victim goes when nothing else makes room",
			nodes: []*corev1.Node{mkNode("n1", "4", "16Gi")},
			pods: []*corev1.Pod{
				mkPod("guarded", "4", "", onNode("n1"), prio(0), podLabels("app", "db")),
			},
			pdbs: []*framework.PDB{budget("db", 0)},
			pod:  mkPod("p", "4", "", prio(100)), wantNode: "n1", wantVictims: []string{"guarded"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ns := nodes
			if tc.nodes != nil {
				ns = tc.nodes
			}
			c := cacheWith(t, ns, tc.pods...)
			for _, b := range tc.pdbs {
				c.SetPDB(b)
			}
			fe := preemptionOf(t, c, tc.pod)
			if fe.Nomination == nil {
				t.Fatalf("no nomination: %v", fe)
			}
			if got := fe.Nomination.NominatedNode; got != tc.wantNode {
				t.Errorf("node %s, want %s", got, tc.wantNode)
			}
			if got := victimNames(fe.Nomination); !slices.Equal(got, tc.wantVictims) {
				t.Errorf("victims %v, want %v", got, tc.wantVictims)
			}
		})
	}
	// A budget removed from the cache no longer counts.
	c := cacheWith(t, nodes, mkPod("guarded", "4", "", onNode("n1"), prio(0), podLabels("app", "db")),
		mkPod("free", "4", "", onNode("n2"), prio(5), podLabels("app", "web")))
	c.SetPDB(budget("db", 0))
	c.RemovePDB("default", "db")
	if fe := preemptionOf(t, c, mkPod("p", "4", "", prio(100))); fe.Nomination == nil || fe.Nomination.NominatedNode != "n1" {
		t.Errorf("after RemovePDB: %v, want n1", fe.Nomination)
	}
}
