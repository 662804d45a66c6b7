package chaos

import (
	"strings"
	"testing"

	"github.com/podflow/podflow/ops/nemesis"
	"github.com/podflow/podflow/raftstore"
)

func wantViolation(t *testing.T, what string, vs []string, substr string) {
	t.Helper()
	for _, v := range vs {
		if strings.Contains(v, substr) {
			return
		}
	}
	t.Errorf("%s: no violation with %q in %q", what, substr, vs)
}

func goodOutcomes() podOutcomes {
	return podOutcomes{
		stored:    map[string]storedPod{"p0": {"u0", "n1"}, "p1": {"u1", "n2"}},
		rejected:  map[string]bool{"p2": true},
		persisted: map[string]map[string]bool{"p0": {"u0": true}, "p1": {"u1": true}},
		scheduled: map[string]map[string]bool{"u0": {"n1": true}, "u1": {"n2": true}},
	}
}

// TestCheckRequested attacks each clause with a constructed bad outcome:
// an acknowledged pod neither stored nor rejected, a pod persisted under
// two uids, one scheduled to two nodes, one stored elsewhere than
// scheduled.
func TestCheckRequested(t *testing.T) {
	acked := []string{"p0", "p1", "p2"}
	if vs := checkRequested(acked, goodOutcomes()); len(vs) != 0 {
		t.Fatalf("a good run: %q", vs)
	}
	o := goodOutcomes()
	delete(o.rejected, "p2")
	wantViolation(t, "lost", checkRequested(acked, o), "PodRequested p2 lost")
	o = goodOutcomes()
	o.persisted["p1"]["u9"] = true
	wantViolation(t, "persisted twice", checkRequested(acked, o), "pod p1 persisted 2 times")
	o = goodOutcomes()
	o.scheduled["u0"]["n3"] = true
	wantViolation(t, "bound twice", checkRequested(acked, o), "pod p0 was bound to 2 nodes")
	o = goodOutcomes()
	o.stored["p1"] = storedPod{"u1", "n7"}
	wantViolation(t, "stored elsewhere", checkRequested(acked, o), `pod p1 is stored on "n7"`)
}

// TestCheckDrained: a consumer with an unacknowledged or an undelivered
// event is named.
func TestCheckDrained(t *testing.T) {
	cs := []consumerState{{stream: "EVENTS", name: "scheduler"}, {stream: "EVENTS", name: "persistence"}}
	if vs := checkDrained(cs); len(vs) != 0 {
		t.Fatalf("drained: %q", vs)
	}
	cs[1].ackPending = 1
	wantViolation(t, "ack pending", checkDrained(cs), "consumer EVENTS/persistence has 1 event(s) unacknowledged")
	cs[1].ackPending, cs[0].pending = 0, 3
	wantViolation(t, "pending", checkDrained(cs), "consumer EVENTS/scheduler has 0 event(s) unacknowledged and 3 undelivered")
}

// TestReplicasAgree: replicas at one revision and applied index that hold
// different content disagree; so does a missing replica.
func TestReplicasAgree(t *testing.T) {
	st := func(id string, hash uint64) *raftstore.Status {
		return &raftstore.Status{ID: id, Revision: 40, AppliedIndex: 90, ContentHash: hash, ContentHashRevision: 40}
	}
	if ok, desc := replicasAgree([]*raftstore.Status{st("s1", 7), st("s2", 7), st("s3", 7)}, 3); !ok {
		t.Fatalf("identical replicas disagree: %s", desc)
	}
	if ok, desc := replicasAgree([]*raftstore.Status{st("s1", 7), st("s2", 7), st("s3", 8)}, 3); ok {
		t.Fatalf("a replica with other content agrees: %s", desc)
	}
	if ok, _ := replicasAgree([]*raftstore.Status{st("s1", 7), st("s2", 7)}, 3); ok {
		t.Fatal("two of three replicas agree")
	}
}

// TestCheckWatch attacks the watch guarantees: a gap, a change twice,
// changes out of order, and a change the store never made.
func TestCheckWatch(t *testing.T) {
	put := func(k string, rev int64) watchRec { return watchRec{Rev: rev, Key: k, ModRev: rev} }
	del := func(k string, rev int64) watchRec { return watchRec{Rev: rev, Key: k, Delete: true, ModRev: rev} }
	initial := map[string]int64{"a": 3}
	history := []watchRec{put("b", 11), put("a", 12), del("b", 14), put("c", 15)}
	final := map[string]int64{"a": 12, "c": 15}
	if vs := checkWatch(10, history, history, initial, final); len(vs) != 0 {
		t.Fatalf("a good watch: %q", vs)
	}
	if vs := checkWatch(10, history, nil, initial, final); len(vs) != 0 {
		t.Fatalf("a good watch without the history: %q", vs)
	}
	gap := []watchRec{put("b", 11), del("b", 14), put("c", 15)}
	wantViolation(t, "gap", checkWatch(10, gap, history, initial, final), "gives a at revision 3")
	wantViolation(t, "gap against history", checkWatch(10, gap, history, initial, final), "store's history has PUT a@12")
	twice := []watchRec{put("b", 11), put("a", 12), put("a", 12), del("b", 14), put("c", 15)}
	wantViolation(t, "twice", checkWatch(10, twice, history, initial, final), "out of order or twice")
	swapped := []watchRec{put("b", 11), del("b", 14), put("a", 12), put("c", 15)}
	wantViolation(t, "out of order", checkWatch(10, swapped, history, initial, final), "PUT a@12) after revision 14")
	// A lost delete leaves no trace in the order, only in the state.
	lostDelete := []watchRec{put("b", 11), put("a", 12), put("c", 15)}
	wantViolation(t, "lost delete", checkWatch(10, lostDelete, nil, initial, final), "gives b at revision 11")
	extra := append(append([]watchRec{}, history...), put("d", 16))
	wantViolation(t, "extra", checkWatch(10, extra, history, initial, final), "does not have")
}

// TestSettled: a pod the pipeline rejected with a code has settled (it is
// never stored, so never Running); a rejection without a code, a stored
// pod not yet Running (even with a rejection for its name) and a pod
// neither stored nor rejected have not.
func TestSettled(t *testing.T) {
	acked := []string{"run", "rej", "slow", "gone", "nocode", "dup"}
	ready := map[string]bool{"run": true, "slow": false, "dup": false}
	rejected := map[string]int32{"rej": 409, "nocode": 0, "dup": 409}
	running, refused, unsettled := settled(acked, ready, rejected)
	if running != 1 || refused != 1 || strings.Join(unsettled, ",") != "slow,gone,nocode,dup" {
		t.Fatalf("settled = %d running, %d rejected, unsettled %q", running, refused, unsettled)
	}
	ready["slow"], ready["dup"], rejected["nocode"] = true, true, 422
	if running, refused, unsettled = settled(acked, ready, rejected); running != 3 || refused != 2 || strings.Join(unsettled, ",") != "gone" {
		t.Fatalf("settled = %d running, %d rejected, unsettled %q", running, refused, unsettled)
	}
}

// TestCutOff: the minority of a partition is the node cut from the most
// others; a healed network cuts none.
func TestCutOff(t *testing.T) {
	nodes := []string{"nats-1", "nats-2", "nats-3"}
	if got := cutOff(nemesis.Partition(nodes, []string{"nats-2"}, []string{"nats-1", "nats-3"}), nodes); got != "nats-2" {
		t.Fatalf("cutOff = %q, want nats-2", got)
	}
	if got := cutOff(nemesis.Fault{}, nodes); got != "" {
		t.Fatalf("healed: cutOff = %q", got)
	}
}
