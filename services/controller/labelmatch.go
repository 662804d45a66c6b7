package controller

import (
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
)

// LabelMatcher matches a pod's labels against a selector as the
// selector's Matches does. A selector of equalities only (a matchLabels
// selector, or a template's labels as a selector: the common case) it
// matches with one lookup per label in the pod's map, not through
// labels.Labels' Has and Get per requirement: a controller's sync
// matches every pod of its object, and the generic matching was a large
// part of a ReplicaSet sync of 10,000 pods. The zero LabelMatcher matches
// nothing, as a nil selector does for kube's claim.
type LabelMatcher struct {
	sel   labels.Selector
	equal []labelPair // every requirement, when each is an equality
	fast  bool
}

type labelPair struct{ key, value string }

// NewLabelMatcher returns the matcher of sel; nil matches nothing.
func NewLabelMatcher(sel labels.Selector) LabelMatcher {
	if sel == nil {
		return LabelMatcher{}
	}
	m := LabelMatcher{sel: sel}
	reqs, selectable := sel.Requirements()
	if !selectable {
		return m // labels.Nothing: sel.Matches says no
	}
	for i := range reqs {
		r := &reqs[i]
		switch r.Operator() {
		case selection.Equals, selection.DoubleEquals, selection.In:
		default:
			return m
		}
		vs := r.ValuesUnsorted()
		if len(vs) != 1 {
			return m
		}
		m.equal = append(m.equal, labelPair{key: r.Key(), value: vs[0]})
	}
	m.fast = true
	return m
}

// Matches reports whether ls matches the selector (sel.Matches).
func (m LabelMatcher) Matches(ls map[string]string) bool {
	if !m.fast {
		return m.sel != nil && m.sel.Matches(labels.Set(ls))
	}
	for _, p := range m.equal {
		if v, ok := ls[p.key]; !ok || v != p.value {
			return false
		}
	}
	return true
}

// Selector returns the selector the matcher was made of (nil for none).
func (m LabelMatcher) Selector() labels.Selector { return m.sel }

// Usable reports whether the selector may claim pods: not nil and not
// empty (an empty selector matches every pod, and kube's claim adopts
// and keeps nothing with it).
func (m LabelMatcher) Usable() bool { return m.sel != nil && !m.sel.Empty() }
