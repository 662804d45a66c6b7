package scheduler

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"github.com/podflow/podflow/services/stages/scheduler/framework"
	"github.com/podflow/podflow/services/stages/scheduler/plugins/podtopologyspread"

	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/proto/corev1"
)

// Zone-wide rules across replicas: the guard registry and the domain
// records (doc.go, "Spread over a domain wider than a node").
//
// Both are NodeAllocations under names no node can have (a node's name is
// a DNS subdomain: no "~"), with no pods, so that the scheduler writes
// them with the kinds it may write and every reader of NodeAllocations
// (Verify, chaos's checks, the status stage) finds nothing to account:
//
//   - the registry (GuardRegistryName) lists, one annotation each, the
//     zone-wide rules of every pod ever bound with one: the topology key
//     and which pods the rule counts (namespaces and label selector, made
//     wider where that is simpler: matchLabelKeys and mismatchLabelKeys
//     dropped, a namespaceSelector read as every namespace). Every bind
//     compares it, so a bind always knows the rules that were listed
//     before it committed;
//   - a domain record per (topology key, value) and writer (a scheduler
//     process, listed in the registry too; DomainRecordName), which every
//     bind of that writer into the domain of a pod that a listed rule of
//     that key selects, or that has such a rule itself, rewrites, and
//     every other writer's such bind compares.

// GuardRegistryName is the NodeAllocation that lists the zone-wide rules.
const GuardRegistryName = "~zone-guards"

// guardAnnotationPrefix prefixes each rule's annotation in the registry
// (the rest is a hash of the rule; the value the rule as a base64
// protobuf PodAffinityTerm).
const guardAnnotationPrefix = "podflow.io/guard."

// writerAnnotationPrefix prefixes each writer's annotation in the
// registry (the rest is the writer's name).
const writerAnnotationPrefix = "podflow.io/writer."

// DomainRecordName is the NodeAllocation that writer's guarded binds into
// the domain key=value rewrite (a "/" in the key becomes "|": a name is
// one path segment). Two domains sharing a record would only make more
// binds conflict.
func DomainRecordName(key, value, writer string) string {
	return "~domain:" + strings.ReplaceAll(key, "/", "|") + "=" + value + "@" + writer
}

// newWriterName names a scheduler process's domain records: its replica's
// name and a random suffix.
func newWriterName(replica string) string {
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return replica + "." + hex.EncodeToString(b[:])
}

// guardEntry is a listed rule: which pods it counts, in which key's
// domains.
type guardEntry struct {
	key        string
	namespaces []string // nil: every namespace
	selector   framework.LabelSelector
}

func (e *guardEntry) selects(pod *corev1.Pod) bool {
	md := pod.GetMetadata()
	return (e.namespaces == nil || framework.Contains(e.namespaces, md.GetNamespace())) && e.selector.Matches(md.GetLabels())
}

// guardRegistry is the registry record as this replica knows it, parsed.
type guardRegistry struct {
	rev     int64
	record  *corev1.NodeAllocation // never nil (an empty one at revision 0)
	entries []guardEntry
	writers []string // sorted
}

// parseRegistry parses the registry record a at revision rev (nil: none).
func parseRegistry(a *corev1.NodeAllocation, rev int64) (*guardRegistry, error) {
	if a == nil {
		a = &corev1.NodeAllocation{Metadata: &corev1.ObjectMeta{Name: GuardRegistryName}}
	}
	r := &guardRegistry{rev: rev, record: a}
	for k, v := range a.GetMetadata().GetAnnotations() {
		if w, ok := strings.CutPrefix(k, writerAnnotationPrefix); ok {
			r.writers = append(r.writers, w)
			continue
		}
		if !strings.HasPrefix(k, guardAnnotationPrefix) {
			continue
		}
		b, err := base64.StdEncoding.DecodeString(v)
		t := &corev1.PodAffinityTerm{}
		if err == nil {
			err = proto.Unmarshal(b, t)
		}
		if err != nil {
			return nil, fmt.Errorf("scheduler: guard registry %q: rule %q: %w", GuardRegistryName, k, err)
		}
		e := guardEntry{key: t.GetTopologyKey(), selector: framework.NewLabelSelector(t.GetLabelSelector(), nil, nil, nil)}
		if t.GetNamespaceSelector() == nil {
			e.namespaces = t.GetNamespaces()
		}
		r.entries = append(r.entries, e)
	}
	slices.Sort(r.writers)
	return r, nil
}

// missing returns the rules of rules (annotation -> value) the registry
// does not list.
func (r *guardRegistry) missing(rules map[string]string) map[string]string {
	var out map[string]string
	for k, v := range rules {
		if _, ok := r.record.GetMetadata().GetAnnotations()[k]; !ok {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}

// with returns a copy of the registry record listing rules too.
func (r *guardRegistry) with(rules map[string]string) *corev1.NodeAllocation {
	out := proto.CloneOf(r.record)
	if out.Metadata.Annotations == nil {
		out.Metadata.Annotations = map[string]string{}
	}
	for k, v := range rules {
		out.Metadata.Annotations[k] = v
	}
	return out
}

// zoneRules returns pod's zone-wide rules as registry annotations: its
// DoNotSchedule spread constraints and required pod anti-affinity terms
// on a topology key other than the hostname (nil: none). Required pod
// affinity is not one: a bind only adds pods, which cannot break it.
func zoneRules(pod *corev1.Pod) map[string]string {
	var out map[string]string
	add := func(t *corev1.PodAffinityTerm) {
		hash, b := termHash(t)
		if out == nil {
			out = map[string]string{}
		}
		out[guardAnnotationPrefix+hash] = base64.StdEncoding.EncodeToString(b)
	}
	ns := pod.GetMetadata().GetNamespace()
	for _, c := range pod.GetSpec().GetTopologySpreadConstraints() {
		if c.GetWhenUnsatisfiable() == "DoNotSchedule" && c.GetTopologyKey() != podtopologyspread.LabelHostname {
			add(&corev1.PodAffinityTerm{LabelSelector: c.GetLabelSelector(), Namespaces: []string{ns}, TopologyKey: c.GetTopologyKey()})
		}
	}
	for _, t := range pod.GetSpec().GetAffinity().GetPodAntiAffinity().GetRequiredDuringSchedulingIgnoredDuringExecution() {
		if t.GetTopologyKey() == podtopologyspread.LabelHostname || t.GetTopologyKey() == "" {
			continue
		}
		add(widenedTerm(t, ns))
	}
	return out
}

// widenedTerm is which pods term t of a pod in namespace ns selects, made
// wider where that is simpler: its label selector and topology key, its
// namespaces sorted (ns when it names none), a namespaceSelector read as
// every namespace (the namespaces' labels a replica knows may be
// behind), matchLabelKeys and mismatchLabelKeys dropped.
func widenedTerm(t *corev1.PodAffinityTerm, ns string) *corev1.PodAffinityTerm {
	e := &corev1.PodAffinityTerm{LabelSelector: t.GetLabelSelector(), TopologyKey: t.GetTopologyKey()}
	switch {
	case t.GetNamespaceSelector() != nil:
		e.NamespaceSelector = &corev1.LabelSelector{}
	case len(t.GetNamespaces()) > 0:
		e.Namespaces = slices.Sorted(slices.Values(t.GetNamespaces()))
	default:
		e.Namespaces = []string{ns}
	}
	return e
}

// termHash names a term by a hash of its deterministic encoding, and
// returns that encoding.
func termHash(t *corev1.PodAffinityTerm) (string, []byte) {
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(t) // a PodAffinityTerm always marshals
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:12]), b
}

// ClusterKey is the topology key of the one cluster-wide pseudo domain
// (value ClusterValue, on every node): the first-pod exemption's premise,
// no pod anywhere matches, is a rule over the whole cluster. A node label
// key cannot start with "~".
const (
	ClusterKey   = "~cluster"
	ClusterValue = "all"
)

// firstPodRules returns, as registry annotations, the required pod
// affinity terms of pod, each over ClusterKey: the rules a bind relying on
// the first-pod exemption (Result.FirstOfGroup) lists (affinityanchor.go).
// A pod a listed such term selects then guards the cluster domain.
func firstPodRules(pod *corev1.Pod) map[string]string {
	var out map[string]string
	ns := pod.GetMetadata().GetNamespace()
	for _, t := range pod.GetSpec().GetAffinity().GetPodAffinity().GetRequiredDuringSchedulingIgnoredDuringExecution() {
		e := widenedTerm(t, ns)
		e.TopologyKey = ClusterKey
		hash, b := termHash(e)
		if out == nil {
			out = map[string]string{}
		}
		out[guardAnnotationPrefix+hash] = base64.StdEncoding.EncodeToString(b)
	}
	return out
}

// domainValue is the value of the domain of key a node with labels is in.
func domainValue(key string, labels map[string]string) (string, bool) {
	if key == ClusterKey {
		return ClusterValue, true
	}
	v, ok := labels[key]
	return v, ok
}

// ruleKeys are the topology keys of rules (zoneRules' annotations).
func ruleKeys(pod *corev1.Pod) []string {
	var keys []string
	for _, c := range pod.GetSpec().GetTopologySpreadConstraints() {
		if c.GetWhenUnsatisfiable() == "DoNotSchedule" && c.GetTopologyKey() != podtopologyspread.LabelHostname {
			keys = append(keys, c.GetTopologyKey())
		}
	}
	for _, t := range pod.GetSpec().GetAffinity().GetPodAntiAffinity().GetRequiredDuringSchedulingIgnoredDuringExecution() {
		if t.GetTopologyKey() != podtopologyspread.LabelHostname && t.GetTopologyKey() != "" {
			keys = append(keys, t.GetTopologyKey())
		}
	}
	return keys
}

// guardedKeys returns the topology keys (sorted, once each) whose domain
// record pod's bind to a node with labels must rewrite: the keys of its
// own zone-wide rules (ClusterKey too when first, its decision relied on
// the first-pod exemption) and of the listed rules that select it, that
// the node has (every node is in ClusterKey's domain).
func guardedKeys(pod *corev1.Pod, first bool, labels map[string]string, reg *guardRegistry) []string {
	keys := ruleKeys(pod)
	if first {
		keys = append(keys, ClusterKey)
	}
	for i := range reg.entries {
		if e := &reg.entries[i]; !slices.Contains(keys, e.key) && e.selects(pod) {
			keys = append(keys, e.key)
		}
	}
	keys = slices.DeleteFunc(keys, func(k string) bool { _, ok := domainValue(k, labels); return !ok })
	if len(keys) > 1 {
		slices.Sort(keys)
		keys = slices.Compact(keys)
	}
	return keys
}
