package scheduler

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/podflow/podflow/proto/corev1"
)

// Filter reasons, in kube-scheduler's words.
const (
	ReasonUnschedulable                = "node(s) were unschedulable"
	ReasonNodeName                     = "node(s) didn't match the requested node name"
	ReasonNodeAffinity                 = "node(s) didn't match Pod's node affinity/selector"
	ReasonNodePorts                    = "node(s) didn't have free ports for the requested pod ports"
	ReasonTooManyPods                  = "Too many pods"
	ReasonInsufficientCPU              = "Insufficient cpu"
	ReasonInsufficientMemory           = "Insufficient memory"
	ReasonInsufficientEphemeralStorage = "Insufficient ephemeral-storage"
)

// verdict is a filter outcome: zero passes, otherwise the reasons of the
// first filter that failed, as bits.
type verdict uint16

const (
	vUnschedulable verdict = 1 << iota
	vNodeName
	vTaint
	vNodeAffinity
	vNodePorts
	vTooManyPods
	vCPU
	vMemory
	vEphemeralStorage
)

// reasons spells a verdict out, in filter order; t is the untolerated
// taint of vTaint.
func (v verdict) reasons(t *taint) []string {
	var out []string
	for bit := vUnschedulable; bit <= vEphemeralStorage; bit <<= 1 {
		if v&bit == 0 {
			continue
		}
		if bit == vTaint {
			out = append(out, t.reason)
		} else {
			out = append(out, verdictReasons[bit])
		}
	}
	return out
}

var verdictReasons = map[verdict]string{
	vUnschedulable:    ReasonUnschedulable,
	vNodeName:         ReasonNodeName,
	vNodeAffinity:     ReasonNodeAffinity,
	vNodePorts:        ReasonNodePorts,
	vTooManyPods:      ReasonTooManyPods,
	vCPU:              ReasonInsufficientCPU,
	vMemory:           ReasonInsufficientMemory,
	vEphemeralStorage: ReasonInsufficientEphemeralStorage,
}

// podState is what a cycle needs to know about the pod, computed once per
// cycle so that the per-node filters and scores do no parsing.
type podState struct {
	name                   string
	req, nonZero           Resources
	ports                  []HostPort
	nodeName               string
	tolerations            []*corev1.Toleration
	preferTolerations      []*corev1.Toleration // effect "" or PreferNoSchedule
	toleratesUnschedulable bool
	selector               []labelPair
	required               []selectorTerm // ORed
	hasRequired            bool
	preferred              []preferredTerm
	images                 []podImage // pod images present on some node
	numContainers          int
}

type labelPair struct{ key, value string }

type podImage struct {
	id     int32
	spread float64 // fraction of the snapshot's nodes that have the image
}

func newPodState(pod *corev1.Pod, snap *Snapshot) (*podState, error) {
	req, nonZero, err := PodRequests(pod)
	if err != nil {
		return nil, fmt.Errorf("pod %q: %w", podName(pod), err)
	}
	spec := pod.GetSpec()
	p := &podState{
		name:        podName(pod),
		req:         req,
		nonZero:     nonZero,
		ports:       podHostPorts(pod),
		nodeName:    spec.GetNodeName(),
		tolerations: spec.GetTolerations(),
	}
	for _, t := range p.tolerations {
		if e := t.GetEffect(); e == "" || e == EffectPreferNoSchedule {
			p.preferTolerations = append(p.preferTolerations, t)
		}
	}
	unsched := newTaint(TaintNodeUnschedulable, "", EffectNoSchedule)
	p.toleratesUnschedulable = tolerates(p.tolerations, &unsched)
	for k, v := range spec.GetNodeSelector() {
		p.selector = append(p.selector, labelPair{k, v})
	}
	na := spec.GetAffinity().GetNodeAffinity()
	if req := na.GetRequiredDuringSchedulingIgnoredDuringExecution(); req != nil {
		p.hasRequired = true
		for _, t := range req.GetNodeSelectorTerms() {
			p.required = append(p.required, newSelectorTerm(t))
		}
	}
	for _, t := range na.GetPreferredDuringSchedulingIgnoredDuringExecution() {
		if t.GetWeight() == 0 {
			continue
		}
		p.preferred = append(p.preferred, preferredTerm{weight: int64(t.GetWeight()), term: newSelectorTerm(t.GetPreference())})
	}
	if snap != nil && len(snap.nodes) > 0 {
		total := float64(len(snap.nodes))
		addImages := func(cs []*corev1.Container) {
			for _, c := range cs {
				p.numContainers++
				name := normalizedImageName(c.GetImage())
				if ic := snap.image(name); ic.nodes > 0 {
					p.images = append(p.images, podImage{id: ic.id, spread: float64(ic.nodes) / total})
				}
			}
		}
		addImages(spec.GetInitContainers())
		addImages(spec.GetContainers())
	}
	return p, nil
}

// normalizedImageName appends ":latest" to an image without a tag, as
// kube-scheduler's ImageLocality does.
func normalizedImageName(name string) string {
	if strings.LastIndex(name, ":") <= strings.LastIndex(name, "/") {
		name += ":latest"
	}
	return name
}

// filter runs the filters in kube-scheduler's order — NodeUnschedulable,
// NodeName, TaintToleration, NodeAffinity, NodePorts, NodeResourcesFit —
// and stops at the first that fails.
func (p *podState) filter(n *NodeInfo) (verdict, *taint) {
	if n.unschedulable && !p.toleratesUnschedulable {
		return vUnschedulable, nil
	}
	if p.nodeName != "" && p.nodeName != n.name {
		return vNodeName, nil
	}
	for i := range n.taints {
		t := &n.taints[i]
		if (t.effect == EffectNoSchedule || t.effect == EffectNoExecute) && !tolerates(p.tolerations, t) {
			return vTaint, t
		}
	}
	if !p.matchesRequired(n) {
		return vNodeAffinity, nil
	}
	for _, hp := range p.ports {
		if hp.conflicts(n.usedPorts) {
			return vNodePorts, nil
		}
	}
	return p.fitsResources(n), nil
}

// fitsResources is NodeResourcesFit: the pod's requests against allocatable
// minus requested, and the pod count.
func (p *podState) fitsResources(n *NodeInfo) verdict {
	var v verdict
	if int64(n.numPods)+1 > n.allocatable.Pods {
		v |= vTooManyPods
	}
	r := &p.req
	if r.MilliCPU == 0 && r.Memory == 0 && r.EphemeralStorage == 0 {
		return v
	}
	if r.MilliCPU > 0 && r.MilliCPU > n.allocatable.MilliCPU-n.requested.MilliCPU {
		v |= vCPU
	}
	if r.Memory > 0 && r.Memory > n.allocatable.Memory-n.requested.Memory {
		v |= vMemory
	}
	if r.EphemeralStorage > 0 && r.EphemeralStorage > n.allocatable.EphemeralStorage-n.requested.EphemeralStorage {
		v |= vEphemeralStorage
	}
	return v
}

// tolerates reports whether any toleration tolerates the taint.
func tolerates(tols []*corev1.Toleration, t *taint) bool {
	for _, tol := range tols {
		if toleratesTaint(tol, t) {
			return true
		}
	}
	return false
}

// toleratesTaint is Kubernetes' Toleration.ToleratesTaint: an empty effect
// matches every effect, an empty key (with Exists) every key, and an empty
// operator means Equal.
func toleratesTaint(tol *corev1.Toleration, t *taint) bool {
	if e := tol.GetEffect(); e != "" && e != t.effect {
		return false
	}
	if k := tol.GetKey(); k != "" && k != t.key {
		return false
	}
	switch tol.GetOperator() {
	case "", OpEqual:
		return tol.GetValue() == t.value
	case OpExists:
		return true
	default:
		return false
	}
}

// matchesRequired is NodeAffinity's filter: spec.nodeSelector and the
// required node affinity must both match.
func (p *podState) matchesRequired(n *NodeInfo) bool {
	for _, kv := range p.selector {
		if v, ok := n.labels[kv.key]; !ok || v != kv.value {
			return false
		}
	}
	if !p.hasRequired {
		return true
	}
	for i := range p.required {
		if p.required[i].matches(n) {
			return true
		}
	}
	return false
}

type preferredTerm struct {
	weight int64
	term   selectorTerm
}

// selectorTerm is a parsed NodeSelectorTerm: its expressions are ANDed. An
// empty or invalid term matches no node, as in Kubernetes.
type selectorTerm struct {
	exprs, fields []requirement
	invalid       bool
}

type requirement struct {
	key    string
	op     string
	values []string
	num    int64 // Gt, Lt
}

func newSelectorTerm(t *corev1.NodeSelectorTerm) selectorTerm {
	var st selectorTerm
	for _, r := range t.GetMatchExpressions() {
		req := requirement{key: r.GetKey(), op: r.GetOperator(), values: r.GetValues()}
		switch req.op {
		case "In", "NotIn":
			st.invalid = st.invalid || len(req.values) == 0
		case "Exists", "DoesNotExist":
			st.invalid = st.invalid || len(req.values) != 0
		case "Gt", "Lt":
			if len(req.values) != 1 {
				st.invalid = true
				break
			}
			num, err := strconv.ParseInt(req.values[0], 10, 64)
			st.invalid = st.invalid || err != nil
			req.num = num
		default:
			st.invalid = true
		}
		st.exprs = append(st.exprs, req)
	}
	for _, r := range t.GetMatchFields() {
		req := requirement{key: r.GetKey(), op: r.GetOperator(), values: r.GetValues()}
		// Kubernetes supports metadata.name with In or NotIn and one value.
		if req.key != "metadata.name" || (req.op != "In" && req.op != "NotIn") || len(req.values) != 1 {
			st.invalid = true
		}
		st.fields = append(st.fields, req)
	}
	return st
}

func (t *selectorTerm) matches(n *NodeInfo) bool {
	if t.invalid || (len(t.exprs) == 0 && len(t.fields) == 0) {
		return false
	}
	for i := range t.exprs {
		r := &t.exprs[i]
		v, ok := n.labels[r.key]
		if !r.matches(v, ok) {
			return false
		}
	}
	for i := range t.fields {
		if !t.fields[i].matches(n.name, true) {
			return false
		}
	}
	return true
}

// matches applies the requirement to a label value (ok: the label exists),
// with Kubernetes' label selector semantics.
func (r *requirement) matches(v string, ok bool) bool {
	switch r.op {
	case "In":
		return ok && contains(r.values, v)
	case "NotIn":
		return !ok || !contains(r.values, v)
	case "Exists":
		return ok
	case "DoesNotExist":
		return !ok
	case "Gt", "Lt":
		if !ok {
			return false
		}
		num, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return false
		}
		return (r.op == "Gt" && num > r.num) || (r.op == "Lt" && num < r.num)
	}
	return false
}

func contains(values []string, v string) bool {
	for _, x := range values {
		if x == v {
			return true
		}
	}
	return false
}

// Filter runs the filters for pod against one node and returns why the
// node cannot run the pod, in Kubernetes' words; none when it can. It is
// for describe and trace; Schedule does not call it.
func Filter(pod *corev1.Pod, n *NodeInfo) ([]string, error) {
	p, err := newPodState(pod, nil)
	if err != nil {
		return nil, err
	}
	v, t := p.filter(n)
	return v.reasons(t), nil
}
