package console

import (
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/podflow/podflow/ops/trace"
	"github.com/podflow/podflow/proto/corev1"
)

// Snapshot is what a Source reads at each poll. Its pods stay on the
// server (Hub.Pods pages them); viewers get the rest, then deltas.
type Snapshot struct {
	Time   time.Time `json:"time"`
	Stages []Stage   `json:"stages"`
	Pods   []Pod     `json:"pods,omitempty"`
	// PodsTotal counts every pod, Summary counts them by namespace,
	// stage, phase and reason, and PodsVersion changes when they do (the
	// Hub sets the three).
	PodsTotal   int         `json:"podsTotal"`
	Summary     *PodSummary `json:"summary,omitempty"`
	PodsVersion int64       `json:"podsVersion"`
	Nodes       []Node      `json:"nodes"`
	// Marks are the replicas that stopped or resumed answering the
	// polls' ping in the last MarksKeep (the timeline's own history is
	// read from the stream: /api/timeline).
	Marks []Mark `json:"marks"`
	// Errors are the sources that could not be read this time.
	Errors []string `json:"errors,omitempty"`
}

// Stage is one step of the pipeline, in lifecycle order.
type Stage struct {
	Name        string  `json:"name"`
	Consumer    string  `json:"consumer"`
	Replicas    int     `json:"replicas"`    // answering the ping now
	Handling    int     `json:"handling"`    // replicas with a pull waiting or work in flight
	Pending     uint64  `json:"pending"`     // not yet delivered
	AckPending  int     `json:"ackPending"`  // delivered, not yet acknowledged
	Redelivered int     `json:"redelivered"` // delivered more than once, unacknowledged
	Waiting     int     `json:"waiting"`     // pull requests waiting
	DeadLetters uint64  `json:"deadLetters"` // records on the dead-letter stream
	Handled     int64   `json:"handled"`     // settled by the replicas, in total
	InPerSec    float64 `json:"inPerSec"`    // deliveries per second since the last poll
	OutPerSec   float64 `json:"outPerSec"`   // events settled per second since the last poll
	P50Millis   float64 `json:"p50Ms"`       // handling time (Prometheus histogram)
	P99Millis   float64 `json:"p99Ms"`       //
	BackingUp   bool    `json:"backingUp"`   // backlog above BacklogLimit
	NoReplica   bool    `json:"noReplica"`   // work waiting, nobody pulling
	Peers       []Peer  `json:"peers"`       // who answers
	Missing     bool    `json:"missing"`     // no such consumer
}

// Peer is one replica answering the ping.
type Peer struct {
	Name         string `json:"name"`
	Handled      int64  `json:"handled"`
	Redelivered  int64  `json:"redelivered"`
	DeadLettered int64  `json:"deadLettered"`
}

// Pod is one row of the pods table.
type Pod struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Phase     string `json:"phase"`
	Stage     string `json:"stage"`   // the stage it is in (or stopped in)
	Reason    string `json:"reason"`  // Kubernetes' reason: FailedScheduling, ErrImagePull, ...
	Verdict   string `json:"verdict"` // ops/trace's words
	Node      string `json:"node"`
	AgeSec    int64  `json:"ageSec"`
	Created   int64  `json:"created,omitempty"` // Unix seconds: the browser ages it
	Stuck     bool   `json:"stuck"`
	Ready     bool   `json:"ready"`
}

// Node is one row of the nodes table.
type Node struct {
	Name         string  `json:"name"`
	Ready        string  `json:"ready"` // Ready, NotReady, Unknown
	CPU          string  `json:"cpu"`   // allocated / capacity
	Memory       string  `json:"memory"`
	CPUFrac      float64 `json:"cpuFrac"`
	MemFrac      float64 `json:"memFrac"`
	Pods         int     `json:"pods"`
	MaxPods      string  `json:"maxPods"`
	HeartbeatSec int64   `json:"-"`         // -1: never
	Heartbeat    int64   `json:"heartbeat"` // Unix seconds of the last; 0: never
	Unschedul    bool    `json:"unschedulable"`
}

// BacklogLimit is the backlog (pending + ack pending) above which a stage
// is shown as backing up.
const BacklogLimit = 100

// StuckAfter is how long a pod may wait in one place, without having
// settled, before it is shown as stuck.
const StuckAfter = 10 * time.Second

// where is what the events stream says of one pod.
type where struct {
	Stage, Verdict string
	At             time.Time
}

// buildPods joins the stored pods with where the stream says they are:
// stuck first (longest stuck first), then by namespace and name. Pods the
// stream knows but the store does not (in admission, rejected) are listed
// too; deleted ones are not.
func buildPods(stored []*corev1.Pod, seen map[string]where, now time.Time) []Pod {
	out := make([]Pod, 0, len(stored))
	inStore := make(map[string]bool, len(stored))
	for _, p := range stored {
		md := p.GetMetadata()
		key := md.GetNamespace() + "/" + md.GetName()
		inStore[key] = true
		row := Pod{Namespace: md.GetNamespace(), Name: md.GetName(), Phase: p.GetStatus().GetPhase(), Node: p.GetSpec().GetNodeName()}
		if t := md.GetCreationTimestamp(); t != nil {
			row.AgeSec = int64(now.Sub(t.AsTime()) / time.Second)
			row.Created = t.AsTime().Unix()
		}
		row.Ready = podReady(p)
		w, ok := seen[key]
		if ok {
			row.Stage, row.Verdict = w.Stage, w.Verdict
		} else {
			row.Stage, row.Verdict = stageFromStatus(p)
		}
		row.Reason = podReason(p, row.Verdict)
		row.Stuck = stuck(row.Reason, row.Verdict, w.At, ok, row.Ready, now)
		if md.GetDeletionTimestamp() != nil {
			row.Phase, row.Stuck = "Terminating", false
		}
		out = append(out, row)
	}
	for key, w := range seen {
		if inStore[key] || w.Verdict == "deleted" {
			continue
		}
		ns, name, _ := strings.Cut(key, "/")
		row := Pod{Namespace: ns, Name: name, Phase: "(not stored)", Stage: w.Stage, Verdict: w.Verdict, AgeSec: int64(now.Sub(w.At) / time.Second)}
		row.Reason = reasonFromVerdict(w.Verdict)
		row.Stuck = stuck(row.Reason, w.Verdict, w.At, true, false, now)
		out = append(out, row)
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Stuck != b.Stuck {
			return a.Stuck
		}
		if a.Stuck && a.AgeSec != b.AgeSec {
			return a.AgeSec > b.AgeSec
		}
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})
	return out
}

// failing are the reasons that mean a pod will not get further by itself.
var failing = map[string]bool{
	"FailedScheduling": true, "ErrImagePull": true, "ImagePullBackOff": true, "CrashLoopBackOff": true,
	"CreateContainerError": true, "InvalidImageName": true, "Rejected": true, "Failed": true, "Error": true,
}

func stuck(reason, verdict string, at time.Time, known, ready bool, now time.Time) bool {
	if ready || trace.Settled(verdict) && !strings.HasPrefix(verdict, "rejected") {
		return false
	}
	if failing[reason] {
		return true
	}
	return known && !trace.Settled(verdict) && now.Sub(at) > StuckAfter
}

// podReason is the Kubernetes reason a pod shows: a container's waiting or
// terminated reason, the pod's, or FailedScheduling.
func podReason(p *corev1.Pod, verdict string) string {
	st := p.GetStatus()
	for _, cs := range append(append([]*corev1.ContainerStatus{}, st.GetInitContainerStatuses()...), st.GetContainerStatuses()...) {
		if w := cs.GetState().GetWaiting(); w != nil && w.GetReason() != "" && w.GetReason() != "PodInitializing" {
			return w.GetReason()
		}
		if t := cs.GetState().GetTerminated(); t != nil && t.GetReason() != "" && t.GetExitCode() != 0 {
			return t.GetReason()
		}
	}
	for _, c := range st.GetConditions() {
		if c.GetType() == "PodScheduled" && c.GetStatus() == "False" {
			return "FailedScheduling"
		}
	}
	if st.GetReason() != "" {
		return st.GetReason()
	}
	return reasonFromVerdict(verdict)
}

// reasonFromVerdict picks the Kubernetes reason out of ops/trace's words.
func reasonFromVerdict(v string) string {
	switch {
	case strings.Contains(v, "FailedScheduling"):
		return "FailedScheduling"
	case strings.HasPrefix(v, "rejected"):
		return "Rejected"
	case strings.Contains(v, "ContainerCreating"):
		return "ContainerCreating"
	case strings.HasPrefix(v, "Terminating"):
		return "Terminating"
	}
	if r, _, ok := strings.Cut(v, ":"); ok && !strings.Contains(r, " ") {
		return r // PodFailed: "<Reason>: <message>"
	}
	return ""
}

// stageFromStatus guesses the stage of a pod the stream window does not
// cover, from its stored status.
func stageFromStatus(p *corev1.Pod) (string, string) {
	switch {
	case podReady(p):
		return "endpoints", "Running and Ready"
	case p.GetSpec().GetNodeName() == "":
		return "scheduler", "stored (Pending); waiting for a node"
	case p.GetStatus().GetPhase() == "Running":
		return "nodeagent", "Running; waiting for readiness"
	}
	return "nodeagent", p.GetStatus().GetPhase()
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.GetStatus().GetConditions() {
		if c.GetType() == "Ready" {
			return c.GetStatus() == "True"
		}
	}
	return false
}

// buildNodes sums the requests of the pods bound to each node.
func buildNodes(nodes []*corev1.Node, pods []*corev1.Pod, now time.Time) []Node {
	type use struct {
		cpu, mem resource.Quantity
		n        int
	}
	used := map[string]*use{}
	for _, p := range pods {
		n := p.GetSpec().GetNodeName()
		if ph := p.GetStatus().GetPhase(); n == "" || ph == "Succeeded" || ph == "Failed" {
			continue
		}
		u := used[n]
		if u == nil {
			u = &use{}
			used[n] = u
		}
		u.n++
		for _, c := range p.GetSpec().GetContainers() {
			r := c.GetResources().GetRequests()
			if q, err := resource.ParseQuantity(r["cpu"]); err == nil {
				u.cpu.Add(q)
			}
			if q, err := resource.ParseQuantity(r["memory"]); err == nil {
				u.mem.Add(q)
			}
		}
	}
	out := make([]Node, 0, len(nodes))
	for _, n := range nodes {
		name := n.GetMetadata().GetName()
		u := used[name]
		if u == nil {
			u = &use{}
		}
		capa := n.GetStatus().GetAllocatable()
		if len(capa) == 0 {
			capa = n.GetStatus().GetCapacity()
		}
		row := Node{Name: name, Ready: "Unknown", Pods: u.n, MaxPods: capa["pods"], HeartbeatSec: -1, Unschedul: n.GetSpec().GetUnschedulable()}
		row.CPU, row.CPUFrac = fraction(u.cpu, capa["cpu"], true)
		row.Memory, row.MemFrac = fraction(u.mem, capa["memory"], false)
		for _, c := range n.GetStatus().GetConditions() {
			if c.GetType() != "Ready" {
				continue
			}
			row.Ready = map[string]string{"True": "Ready", "False": "NotReady"}[c.GetStatus()]
			if row.Ready == "" {
				row.Ready = "NotReady"
			}
			if hb := c.GetLastHeartbeatTime(); hb != nil {
				row.HeartbeatSec = int64(now.Sub(hb.AsTime()) / time.Second)
				row.Heartbeat = hb.AsTime().Unix()
			}
		}
		out = append(out, row)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// fraction renders "allocated / capacity" and the share allocated.
func fraction(used resource.Quantity, capacity string, cpu bool) (string, float64) {
	c, err := resource.ParseQuantity(capacity)
	if err != nil || c.IsZero() {
		return used.String() + " / ?", 0
	}
	var f float64
	if cpu {
		f = float64(used.MilliValue()) / float64(c.MilliValue())
	} else {
		f = float64(used.Value()) / float64(c.Value())
	}
	u := used.String()
	if used.IsZero() {
		u = "0"
	}
	return u + " / " + c.String(), f
}
