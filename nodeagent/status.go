package nodeagent

import (
	"fmt"
	"strings"
	"time"

	corev1 "github.com/podflow/podflow/proto/corev1"
	eventsv1 "github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/proto/podrules"
	"github.com/podflow/podflow/proto/vt"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// phase computes the pod phase as the kubelet's getPhase does. A sidecar
// holds the pod Pending until it has started, the first time; after that
// a running sidecar counts as running and an exited one not at all.
func (w *worker) phase() string {
	if w.failed != nil || w.rejected != nil {
		return "Failed"
	}
	if !w.deleting() {
		for _, c := range w.inits {
			if c.sidecar && (w.initialized || c.started) {
				continue
			}
			if !c.done {
				return "Pending"
			}
		}
	}
	var running, waiting, stopped, succeeded int
	for _, c := range w.inits {
		if c.sidecar && c.running() {
			running++
		}
	}
	for _, c := range w.apps {
		switch {
		case c.running():
			running++
		case c.state.GetTerminated() != nil:
			stopped++
			if c.state.GetTerminated().GetExitCode() == 0 {
				succeeded++
			}
		case c.lastTerm != nil:
			stopped++
		default:
			waiting++
		}
	}
	switch {
	case w.deleting() && running == 0:
		if stopped == succeeded && waiting == 0 {
			return "Succeeded"
		}
		return "Failed"
	case waiting > 0:
		return "Pending"
	case running > 0:
		return "Running"
	case stopped > 0:
		switch {
		case !w.allDone() || w.policy == policyAlways:
			return "Running"
		case stopped == succeeded:
			return "Succeeded"
		case w.policy == policyNever:
			return "Failed"
		}
		return "Running"
	}
	return "Pending"
}

func (w *worker) allDone() bool {
	for _, c := range w.apps {
		if !c.done {
			return false
		}
	}
	return true
}

// terminal reports whether the pod has finished for good (Succeeded or
// Failed, nothing left to restart).
func (w *worker) terminal() bool {
	if w.failed != nil || w.rejected != nil {
		return true
	}
	p := w.phase()
	return isTerminalPhase(p) && w.allDone()
}

func (w *worker) buildStatus(now time.Time) *corev1.PodStatus {
	phase := w.phase()
	st := &corev1.PodStatus{
		Phase:     phase,
		HostIp:    w.d.cfg.HostIP,
		StartTime: timestamppb.New(w.startTime),
		QosClass:  w.qos.String(),
	}
	if w.rejected != nil {
		st.Reason, st.Message = w.rejected.reason, w.rejected.message
	}
	if w.sandbox != nil {
		st.PodIp = w.sandbox.IP
		st.PodIps = []*corev1.PodIP{{Ip: w.sandbox.IP}}
	} else if last := w.rep.Reported(); last != nil { // keep the IP after teardown, as Kubernetes does
		// Decoded only here: a flush of a pod with a sandbox, most of
		// them, does not decode the last status it compares against.
		st.PodIp, st.PodIps = last.GetPodIp(), last.GetPodIps()
	}
	initsDone := true
	var incomplete, unready []string
	for _, c := range w.inits {
		st.InitContainerStatuses = append(st.InitContainerStatuses, w.containerStatus(c, eventsv1.ReasonPodInitializing))
		switch {
		case c.sidecar:
			if !w.initialized && !c.started {
				initsDone = false
				incomplete = append(incomplete, c.spec.GetName())
			}
			if !c.ready { // sidecars count for readiness, as app containers
				unready = append(unready, c.spec.GetName())
			}
		case !c.done || c.state.GetTerminated().GetExitCode() != 0:
			initsDone = false
			incomplete = append(incomplete, c.spec.GetName())
		}
	}
	defWaiting := eventsv1.ReasonContainerCreating
	if !initsDone {
		defWaiting = eventsv1.ReasonPodInitializing
	}
	for _, c := range w.apps {
		st.ContainerStatuses = append(st.ContainerStatuses, w.containerStatus(c, defWaiting))
		if !c.ready {
			unready = append(unready, c.spec.GetName())
		}
	}
	st.EphemeralContainerStatuses = w.ephemeralStatuses()
	w.setCond(now, "PodScheduled", true, "", "")
	w.setCond(now, "PodReadyToStartContainers", w.sandbox != nil, "", "")
	if initsDone {
		w.setCond(now, "Initialized", true, "", "")
	} else {
		w.setCond(now, "Initialized", false, "ContainersNotInitialized", containersMsg("incomplete", incomplete))
	}
	switch {
	case len(unready) == 0:
		w.setCond(now, "ContainersReady", true, "", "")
		w.setCond(now, "Ready", true, "", "")
	case isTerminalPhase(phase):
		w.setCond(now, "ContainersReady", false, "PodCompleted", "")
		w.setCond(now, "Ready", false, "PodCompleted", "")
	default:
		msg := containersMsg("unready", unready)
		w.setCond(now, "ContainersReady", false, eventsv1.ReasonContainersNotReady, msg)
		w.setCond(now, "Ready", false, eventsv1.ReasonContainersNotReady, msg)
	}
	st.Conditions = make([]*corev1.PodCondition, 0, len(condTypes))
	for _, t := range condTypes[:5] { // DisruptionTarget: below
		st.Conditions = append(st.Conditions, w.cond(t))
	}
	if w.rejected != nil && w.rejected.reason == eventsv1.ReasonEvicted {
		// kubelet's evictPod: the pod's disruption, with its message.
		w.setCond(now, "DisruptionTarget", true, "TerminationByKubelet", w.rejected.message)
		st.Conditions = append(st.Conditions, w.cond("DisruptionTarget"))
	}
	w.forgetPrior()
	return st
}

// forgetPrior drops the status the pod came with once nothing more is
// read of it: its startTime is taken (the first step) and each of its
// conditions the worker sets was set again (setCond reads a condition's
// lastTransitionTime only when it first sets it; the others, a readiness
// gate's, are not read). A prior condition the worker has not set yet (a
// DisruptionTarget, set only on eviction) keeps it.
func (w *worker) forgetPrior() {
	if w.prior == nil || !w.begun {
		return
	}
	for _, c := range w.prior.GetConditions() {
		if i := condIndex(c.GetType()); i >= 0 && (w.conds == nil || !w.conds[i].set) {
			return
		}
	}
	w.prior = nil
}

func containersMsg(what string, names []string) string {
	return fmt.Sprintf("containers with %s status: [%s]", what, strings.Join(names, " "))
}

// condTypes are the pod conditions the worker sets, in the order a
// status lists them.
var condTypes = [...]string{"PodScheduled", "PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready", "DisruptionTarget"}

// podConds are the pod's conditions as last set (setCond), by their
// index in condTypes.
type podConds [len(condTypes)]podCond

// podCond is one condition as last set: small, as the statuses built make
// their PodConditions from it (cond) and keep none (the reporter keeps
// the last one encoded): five PodConditions held a pod cost ~700 bytes,
// and their Timestamps ~64 bytes each.
type podCond struct {
	ts     int64    // lastTransitionTime, Unix nanoseconds; 0: none yet
	why    *condWhy // nil: neither reason nor message
	set    bool
	status bool
}

// condWhy is a condition's reason and message.
type condWhy struct{ reason, msg string }

func condIndex(typ string) int {
	for i, t := range condTypes {
		if t == typ {
			return i
		}
	}
	return -1
}

func conditionStatus(ok bool) string {
	if ok {
		return podrules.ConditionTrue
	}
	return "False"
}

// setCond sets the pod's condition typ (one of condTypes): its
// lastTransitionTime is now when its status changes; set first, it is the
// prior status's when that says the same.
func (w *worker) setCond(now time.Time, typ string, ok bool, reason, msg string) {
	i := condIndex(typ)
	if i < 0 {
		return
	}
	if w.conds == nil {
		w.conds = new(podConds)
	}
	c := &w.conds[i]
	if !c.set {
		c.set = true
		if old := podrules.PodCondition(w.prior, typ); old.GetStatus() == conditionStatus(ok) && old.GetLastTransitionTime() != nil {
			c.status, c.ts = ok, old.GetLastTransitionTime().AsTime().UnixNano()
		}
	}
	if c.status != ok || c.ts == 0 {
		c.status, c.ts = ok, now.UnixNano()
	}
	switch {
	case reason == "" && msg == "":
		c.why = nil
	case c.why == nil || c.why.reason != reason || c.why.msg != msg:
		c.why = &condWhy{reason: reason, msg: msg}
	}
}

// cond returns the pod's condition typ as last set (nil: never), a
// PodCondition of its own.
func (w *worker) cond(typ string) *corev1.PodCondition {
	i := condIndex(typ)
	if i < 0 || w.conds == nil || !w.conds[i].set {
		return nil
	}
	c := &w.conds[i]
	pc := &corev1.PodCondition{Type: condTypes[i], Status: conditionStatus(c.status), LastTransitionTime: timestamppb.New(time.Unix(0, c.ts))}
	if c.why != nil {
		pc.Reason, pc.Message = c.why.reason, c.why.msg
	}
	return pc
}

func (w *worker) containerStatus(c *ctr, defWaiting string) *corev1.ContainerStatus {
	state := c.state
	if state == nil {
		state = &corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: defWaiting}}
	}
	budget := w.podMessageBudget()
	// c.state and c.lastTerm are replaced, never modified: the status
	// shares them, but for a termination message cut to the budget.
	if t := state.GetTerminated(); len(t.GetMessage()) > budget {
		state = &corev1.ContainerState{Terminated: cutMessage(t, budget)}
	}
	cs := &corev1.ContainerStatus{
		Name:                 c.spec.GetName(),
		State:                state,
		LastTerminationState: noLastState,
		Ready:                c.ready,
		RestartCount:         c.restarts,
		Image:                c.spec.GetImage(),
		ImageId:              c.imageID,
		ContainerId:          string(c.id),
	}
	if c.lastTerm != nil {
		cs.LastTerminationState = &corev1.ContainerState{Terminated: cutMessage(c.lastTerm, budget)}
	}
	// kubelet's prober manager (UpdatePodStatus): every container, init
	// ones too, says whether it has started (running, its startup probe
	// passed); a regular init container is ready once it has succeeded.
	if !c.ephemeral {
		started := c.started
		cs.Started = &started
	}
	if c.init && !c.sidecar {
		t := c.state.GetTerminated()
		cs.Ready = t != nil && t.GetExitCode() == 0
	}
	return cs
}

// noLastState is the empty lastState of every container that has not
// terminated before, shared by the statuses built (never modified, as
// nothing of a built status is): most containers never restart, and one
// each cost ~64 bytes a pod.
var noLastState = &corev1.ContainerState{}

// cutMessage returns t with its message cut to budget bytes (headUTF8): t
// itself when it fits, else a copy.
func cutMessage(t *corev1.ContainerStateTerminated, budget int) *corev1.ContainerStateTerminated {
	if len(t.GetMessage()) <= budget {
		return t
	}
	t = vt.Clone(t)
	t.Message = headUTF8(t.Message, budget)
	return t
}

// qosClass is a pod's QoS class (podrules.QOSClass) in a byte.
type qosClass uint8

var qosClasses = [...]string{podrules.QOSBestEffort, podrules.QOSBurstable, podrules.QOSGuaranteed}

func qosOf(s string) qosClass {
	for i, c := range qosClasses {
		if c == s {
			return qosClass(i)
		}
	}
	return 0
}

func (q qosClass) String() string { return qosClasses[q] }

// restartPolicy is a pod's spec.restartPolicy in a byte ("" is Always).
type restartPolicy uint8

const (
	policyAlways restartPolicy = iota
	policyOnFailure
	policyNever
	policyOther // none of the three (validation rejects it)
)

func policyOf(s string) restartPolicy {
	switch s {
	case "", "Always":
		return policyAlways
	case "OnFailure":
		return policyOnFailure
	case "Never":
		return policyNever
	}
	return policyOther
}
