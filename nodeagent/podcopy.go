package nodeagent

import (
	"encoding/binary"
	"maps"
	"runtime"
	"slices"
	"sync"
	"unique"
	"weak"

	corev1 "github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/vt"
)

// workerCopy returns the agent's own copy of pod for its worker: what a
// node reads of a pod, never modified in place (a change replaces a part:
// onMeta, onDeadline), and sharing with the copies of the other pods the
// parts that are alike in most pods. BenchmarkPodMemory measures it.
//
//   - The scheduling fields of the spec no node reads (tolerations,
//     affinity, topology spread constraints, scheduling gates) are left out.
//   - Of the status, only what the worker takes over from an earlier
//     agent: startTime and the conditions (their lastTransitionTime).
//   - The labels are shared between the pods whose labels are equal (the
//     pods of one template: ~500 bytes a pod for the bench's one label;
//     sharedLabels).
//   - A projected volume's sources (the ServiceAccount token volume every
//     pod of a namespace has, ~1 KB) and a container's resources are
//     shared between the pods whose ones are equal (shared).
//   - The strings most pods have alike (namespace, owner, node, image,
//     paths, policies, condition types …) are canonical copies (intern),
//     not the ones each pod's decoding made: ~200 bytes a pod.
//
// Nothing may modify a worker's pod or what it holds: the parts are shared.
func workerCopy(pod *corev1.Pod) *corev1.Pod {
	out := &corev1.Pod{Metadata: vt.Clone(pod.GetMetadata()), Status: priorStatus(pod.GetStatus(), true)}
	if spec := pod.GetSpec(); spec != nil {
		// Clone without the fields left out: a shallow copy of the spec
		// would copy its lock-free message state, so nil them on the
		// clone instead (the clone of a few tolerations is garbage at
		// once).
		out.Spec = vt.Clone(spec)
	}
	return workerShape(out)
}

// workerTake is workerCopy of a pod the caller hands over (see
// Agent.TakePodBound): the same copy made of pod's own parts, which it
// modifies, instead of clones of them. The copy of a pod a node agent
// has just decoded for it was ~1.4 KB allocated per pod, garbage with the
// decoded pod at once.
func workerTake(pod *corev1.Pod) *corev1.Pod {
	return workerShape(&corev1.Pod{Metadata: pod.GetMetadata(), Spec: pod.GetSpec(), Status: priorStatus(pod.GetStatus(), false)})
}

// workerShape makes pod, of parts no one else holds, the worker's copy
// (see workerCopy) and returns it.
func workerShape(pod *corev1.Pod) *corev1.Pod {
	if spec := pod.Spec; spec != nil {
		spec.Tolerations, spec.Affinity, spec.TopologySpreadConstraints, spec.SchedulingGates = nil, nil, nil, nil
		for _, v := range spec.Volumes {
			if v.Projected != nil {
				v.Projected = sharedProjected.share(v.Projected)
			}
		}
		for _, cs := range [][]*corev1.Container{spec.InitContainers, spec.Containers} {
			for _, c := range cs {
				if c.Resources != nil {
					c.Resources = sharedResources.share(c.Resources)
				}
				internContainer(c)
			}
		}
		internSpec(spec)
	}
	if pod.Metadata != nil {
		sharedLabels.share(pod.Metadata)
		internMeta(pod.Metadata)
	}
	return pod
}

// priorStatus is what a worker's copy keeps of st: its startTime and
// conditions (nil when it has neither), cloned when clone is set, else
// st's own.
func priorStatus(st *corev1.PodStatus, clone bool) *corev1.PodStatus {
	if st.GetStartTime() == nil && len(st.GetConditions()) == 0 {
		return nil
	}
	out := &corev1.PodStatus{StartTime: st.GetStartTime(), Conditions: make([]*corev1.PodCondition, len(st.GetConditions()))}
	if clone && out.StartTime != nil {
		out.StartTime = vt.Clone(out.StartTime)
	}
	for i, c := range st.GetConditions() {
		if clone {
			c = vt.Clone(c)
		}
		c.Type, c.Status, c.Reason = intern(c.Type), intern(c.Status), intern(c.Reason)
		out.Conditions[i] = c
	}
	return out
}

// intern returns the canonical copy of s (package unique). The strings
// of a decoded pod are each an allocation of their own, the same bytes
// in most pods; a copy holding the canonical ones holds them once. Only
// the canonical string is kept, not its Handle: once no pod holds it, the
// next pod brings a new one.
func intern(s string) string {
	if s == "" {
		return s
	}
	return unique.Make(s).Value()
}

func internAll(ss []string) {
	for i, s := range ss {
		ss[i] = intern(s)
	}
}

// internMeta interns the metadata fields the pods of one namespace and
// owner have alike, and the annotations' keys (their values, a request
// id, a trace, are the pod's own). The name, uid and resourceVersion are
// the pod's own.
func internMeta(md *corev1.ObjectMeta) {
	md.Namespace, md.GenerateName = intern(md.Namespace), intern(md.GenerateName)
	internAll(md.Finalizers)
	for _, o := range md.OwnerReferences {
		o.ApiVersion, o.Kind, o.Name, o.Uid = intern(o.ApiVersion), intern(o.Kind), intern(o.Name), intern(o.Uid)
	}
	if len(md.Annotations) > 0 {
		ann := make(map[string]string, len(md.Annotations))
		for k, v := range md.Annotations {
			ann[intern(k)] = v
		}
		md.Annotations = ann
	}
}

// internSpec interns the spec's strings the pods of one template and
// node have alike. Volume names are left: admission names the token
// volume per pod.
func internSpec(spec *corev1.PodSpec) {
	spec.RestartPolicy, spec.ServiceAccountName, spec.NodeName = intern(spec.RestartPolicy), intern(spec.ServiceAccountName), intern(spec.NodeName)
	spec.Hostname, spec.SchedulerName, spec.PriorityClassName = intern(spec.Hostname), intern(spec.SchedulerName), intern(spec.PriorityClassName)
	spec.DnsPolicy, spec.Subdomain, spec.RuntimeClassName = intern(spec.DnsPolicy), intern(spec.Subdomain), intern(spec.RuntimeClassName)
	if spec.PreemptionPolicy != nil {
		p := intern(*spec.PreemptionPolicy)
		spec.PreemptionPolicy = &p
	}
}

// internContainer interns c's strings but its mounts' volume names (the
// token volume's is the pod's own).
func internContainer(c *corev1.Container) {
	c.Name, c.Image, c.WorkingDir = intern(c.Name), intern(c.Image), intern(c.WorkingDir)
	c.ImagePullPolicy, c.RestartPolicy = intern(c.ImagePullPolicy), intern(c.RestartPolicy)
	c.TerminationMessagePath, c.TerminationMessagePolicy = intern(c.TerminationMessagePath), intern(c.TerminationMessagePolicy)
	internAll(c.Command)
	internAll(c.Args)
	for _, m := range c.VolumeMounts {
		m.MountPath, m.SubPath, m.SubPathExpr = intern(m.MountPath), intern(m.SubPath), intern(m.SubPathExpr)
	}
	for _, p := range c.Ports {
		p.Name, p.Protocol, p.HostIp = intern(p.Name), intern(p.Protocol), intern(p.HostIp)
	}
	for _, e := range c.Env {
		e.Name, e.Value = intern(e.Name), intern(e.Value)
	}
}

// sharedProjected and sharedResources are the parts of the agent's pods
// shared between them (workerCopy).
var (
	sharedProjected = newSharing[corev1.ProjectedVolumeSource]()
	sharedResources = newSharing[corev1.ResourceRequirements]()
)

// sharing hands out one copy of equal messages (by their encoding), as
// package unique does for comparable values: it holds them weakly, so a
// message no pod holds any more is collected and its entry dropped.
type sharing[T any, P interface {
	*T
	MarshalVT() ([]byte, error)
}] struct {
	mu sync.Mutex
	m  map[string]weak.Pointer[T] // by encoding
}

func newSharing[T any, P interface {
	*T
	MarshalVT() ([]byte, error)
}]() *sharing[T, P] {
	return &sharing[T, P]{m: map[string]weak.Pointer[T]{}}
}

// share returns the held message equal to v, else holds v and returns it.
// Neither may be modified afterwards.
func (s *sharing[T, P]) share(v P) P {
	b, err := v.MarshalVT()
	if err != nil {
		return v
	}
	key := string(b)
	s.mu.Lock()
	defer s.mu.Unlock()
	if held := s.m[key].Value(); held != nil {
		return held
	}
	wp := weak.Make((*T)(v))
	s.m[key] = wp
	runtime.AddCleanup((*T)(v), s.drop, entry[T]{key: key, wp: wp})
	return v
}

// sharedLabels hands out one map of equal labels to the agent's pods.
var sharedLabels = &labelSharing{m: map[string]labelEntry{}}

// labelSharing shares label maps between ObjectMetas. A map cannot be
// held weakly, so each entry holds its map while the ObjectMeta that
// brought it (its holder) lives: the entry goes with the holder, the map
// with the last pod that has it. A worker's metadata may get other labels
// (onMeta replaces the map, never changes it), so the entry keeps the map
// itself, not its holder's current one.
type labelSharing struct {
	mu sync.Mutex
	m  map[string]labelEntry // by labelsKey
}

type labelEntry struct {
	labels map[string]string
	holder weak.Pointer[corev1.ObjectMeta]
}

// share sets md's labels to the held map equal to them, else holds them
// with md as their holder. Neither may be modified afterwards.
func (s *labelSharing) share(md *corev1.ObjectMeta) {
	if len(md.Labels) == 0 {
		return
	}
	key := labelsKey(md.Labels)
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.m[key]; ok && e.holder.Value() != nil {
		md.Labels = e.labels
		return
	}
	wp := weak.Make(md)
	s.m[key] = labelEntry{labels: md.Labels, holder: wp}
	runtime.AddCleanup(md, s.drop, entry[corev1.ObjectMeta]{key: key, wp: wp})
}

// drop forgets the labels of a collected holder, unless its key has
// another holder since.
func (s *labelSharing) drop(e entry[corev1.ObjectMeta]) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m[e.key].holder == e.wp {
		delete(s.m, e.key)
	}
}

// labelsKey is labels as one string, by key, each key and value after
// its length: equal keys for equal maps only, whatever bytes they hold.
func labelsKey(labels map[string]string) string {
	keys := slices.Sorted(maps.Keys(labels))
	n := 0
	for _, k := range keys {
		n += len(k) + len(labels[k]) + 2*binary.MaxVarintLen64
	}
	b := make([]byte, 0, n)
	for _, k := range keys {
		b = binary.AppendUvarint(b, uint64(len(k)))
		b = append(b, k...)
		b = binary.AppendUvarint(b, uint64(len(labels[k])))
		b = append(b, labels[k]...)
	}
	return string(b)
}

// entry is one held message's key and weak pointer, for its cleanup.
type entry[T any] struct {
	key string
	wp  weak.Pointer[T]
}

// drop forgets a collected message, unless its key holds another since.
func (s *sharing[T, P]) drop(e entry[T]) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m[e.key] == e.wp {
		delete(s.m, e.key)
	}
}
