package manifest

import (
	"testing"

	pf "github.com/podflow/podflow/proto/corev1"
)

// schedulingPod uses every scheduling field beyond node affinity:
// topology spread, pod affinity and anti-affinity, gates and priority.
const schedulingPod = `
apiVersion: v1
kind: Pod
metadata: {name: spread, namespace: prod, labels: {app: web}}
spec:
  priorityClassName: high
  schedulingGates: [{name: example.com/quota}]
  topologySpreadConstraints:
  - maxSkew: 1
    topologyKey: topology.kubernetes.io/zone
    whenUnsatisfiable: DoNotSchedule
    labelSelector: {matchLabels: {app: web}}
    matchLabelKeys: [pod-template-hash]
    minDomains: 3
    nodeAffinityPolicy: Ignore
    nodeTaintsPolicy: Honor
  affinity:
    podAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
      - labelSelector:
          matchExpressions: [{key: app, operator: In, values: [cache]}]
        topologyKey: kubernetes.io/hostname
        namespaces: [prod, cache]
    podAntiAffinity:
      preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 50
        podAffinityTerm:
          labelSelector: {matchLabels: {app: web}}
          namespaceSelector: {matchLabels: {team: a}}
          topologyKey: kubernetes.io/hostname
  containers:
  - {name: web, image: web:1}
`

func TestSchedulingFields(t *testing.T) {
	obj := decodeOne(t, []byte(schedulingPod))
	if len(obj.Warnings) != 0 {
		t.Errorf("warnings %q, want none", obj.Warnings)
	}
	spec := obj.Message.(*pf.Pod).GetSpec()
	tsc := spec.GetTopologySpreadConstraints()
	if len(tsc) != 1 {
		t.Fatalf("topologySpreadConstraints = %v", tsc)
	}
	aff := spec.GetAffinity().GetPodAffinity().GetRequiredDuringSchedulingIgnoredDuringExecution()
	anti := spec.GetAffinity().GetPodAntiAffinity().GetPreferredDuringSchedulingIgnoredDuringExecution()
	if len(aff) != 1 || len(anti) != 1 {
		t.Fatalf("affinity = %v", spec.GetAffinity())
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"maxSkew", tsc[0].GetMaxSkew(), int32(1)},
		{"topologyKey", tsc[0].GetTopologyKey(), "topology.kubernetes.io/zone"},
		{"whenUnsatisfiable", tsc[0].GetWhenUnsatisfiable(), "DoNotSchedule"},
		{"labelSelector", tsc[0].GetLabelSelector().GetMatchLabels()["app"], "web"},
		{"matchLabelKeys", tsc[0].GetMatchLabelKeys()[0], "pod-template-hash"},
		{"minDomains", tsc[0].GetMinDomains(), int32(3)},
		{"nodeAffinityPolicy", tsc[0].GetNodeAffinityPolicy(), "Ignore"},
		{"nodeTaintsPolicy", tsc[0].GetNodeTaintsPolicy(), "Honor"},
		{"podAffinity expression", aff[0].GetLabelSelector().GetMatchExpressions()[0].GetValues()[0], "cache"},
		{"podAffinity namespaces", len(aff[0].GetNamespaces()), 2},
		{"podAffinity topologyKey", aff[0].GetTopologyKey(), "kubernetes.io/hostname"},
		{"podAntiAffinity weight", anti[0].GetWeight(), int32(50)},
		{"podAntiAffinity namespaceSelector", anti[0].GetPodAffinityTerm().GetNamespaceSelector().GetMatchLabels()["team"], "a"},
		{"schedulingGates", spec.GetSchedulingGates()[0].GetName(), "example.com/quota"},
		{"priorityClassName", spec.GetPriorityClassName(), "high"},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			if c.got != c.want {
				t.Errorf("got %v, want %v", c.got, c.want)
			}
		})
	}
	roundTrip(t, obj.Message, FormatYAML)
	roundTrip(t, obj.Message, FormatJSON)
}

func TestPriorityClassKind(t *testing.T) {
	obj := decodeOne(t, []byte(`
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 1000000
globalDefault: false
preemptionPolicy: Never
description: "for the important pods"
`))
	if len(obj.Warnings) != 0 {
		t.Errorf("warnings %q, want none", obj.Warnings)
	}
	pc := obj.Message.(*pf.PriorityClass)
	if pc.GetMetadata().GetName() != "high" || pc.GetValue() != 1000000 || pc.GetPreemptionPolicy() != "Never" || pc.GetDescription() == "" {
		t.Errorf("PriorityClass = %v", pc)
	}
	roundTrip(t, pc, FormatYAML)
}
