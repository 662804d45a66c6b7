package stage

import (
	"slices"

	"github.com/podflow/podflow/services/objects"
)

// The garbage collector's finalizers, kube's metav1.FinalizerOrphanDependents
// and metav1.FinalizerDeleteDependents: a DELETE with propagationPolicy
// Orphan or Foreground leaves its object marked with one of them, and the
// garbage collector removes it once the dependents are orphaned
// (FinalizerOrphan) or gone (FinalizerForeground).
const (
	FinalizerOrphan     = "orphan"
	FinalizerForeground = "foregroundDeletion"
)

// The propagation policies of DeleteOptions (metav1.DeletionPropagation).
const (
	PropagationOrphan     = "Orphan"
	PropagationBackground = "Background"
	PropagationForeground = "Foreground"
)

// GCPolicy is what a DELETE that names no policy does with an object's
// dependents: kube-apiserver's rest.GarbageCollectionPolicy, which each
// kind's strategy gives (DefaultGarbageCollectionPolicy).
type GCPolicy int

const (
	// GCDeleteDependents: background deletion, the default.
	GCDeleteDependents GCPolicy = iota
	// GCOrphanDependents: the orphan finalizer unless the request says
	// otherwise (ReplicationController v1 and Job batch/v1, for back
	// compatibility).
	GCOrphanDependents
	// GCUnsupported: the kind takes no garbage collection finalizers
	// (Event).
	GCUnsupported
)

// DeleteOptions are a DELETE's garbage collection options:
// DeleteOptions.propagationPolicy (one of the Propagation constants) and
// the deprecated orphanDependents; nil is unset.
type DeleteOptions struct {
	PropagationPolicy *string
	OrphanDependents  *bool
}

// DefaultGCPolicy is kind k's default garbage collection policy, as
// kube-apiserver's strategies give it for the version podflow serves:
// ReplicationController (v1) and Job (batch/v1) orphan, Event takes no
// finalizers, every other kind — CronJob batch/v1, the apps kinds, custom
// resources — deletes its dependents in the background.
func DefaultGCPolicy(k objects.Kind) GCPolicy {
	switch {
	case k.APIGroup == objects.ReplicationControllers.APIGroup && k.Name == objects.ReplicationControllers.Name,
		k.APIGroup == objects.Jobs.APIGroup && k.Name == objects.Jobs.Name:
		return GCOrphanDependents
	case k.APIGroup == objects.Events.APIGroup && k.Name == objects.Events.Name:
		return GCUnsupported
	}
	return GCDeleteDependents
}

// GCFinalizers is kube-apiserver's deletionFinalizersForGarbageCollection:
// the finalizers an object with finalizers fins is left with by a DELETE
// with o on a kind whose default policy is def, and whether they differ
// from fins (as sets). orphanDependents wins over propagationPolicy, both
// over the finalizers already there, and those over the default.
func GCFinalizers(def GCPolicy, fins []string, o DeleteOptions) (bool, []string) {
	if def == GCUnsupported {
		return false, fins
	}
	orphan, foreground := shouldOrphan(def, fins, o), shouldForeground(fins, o)
	out := make([]string, 0, len(fins)+1)
	for _, f := range fins {
		if f != FinalizerOrphan && f != FinalizerForeground {
			out = append(out, f)
		}
	}
	if orphan {
		out = append(out, FinalizerOrphan)
	}
	if foreground {
		out = append(out, FinalizerForeground)
	}
	if sameSet(fins, out) {
		return false, fins
	}
	return true, out
}

// shouldOrphan is kube-apiserver's shouldOrphanDependents.
func shouldOrphan(def GCPolicy, fins []string, o DeleteOptions) bool {
	if o.OrphanDependents != nil {
		return *o.OrphanDependents
	}
	if o.PropagationPolicy != nil {
		switch *o.PropagationPolicy {
		case PropagationOrphan:
			return true
		case PropagationBackground, PropagationForeground:
			return false
		}
	}
	for _, f := range fins {
		switch f {
		case FinalizerOrphan:
			return true
		case FinalizerForeground:
			return false
		}
	}
	return def == GCOrphanDependents
}

// shouldForeground is kube-apiserver's shouldDeleteDependentsInForeground.
func shouldForeground(fins []string, o DeleteOptions) bool {
	if o.OrphanDependents != nil {
		return false
	}
	if o.PropagationPolicy != nil {
		switch *o.PropagationPolicy {
		case PropagationForeground:
			return true
		case PropagationBackground, PropagationOrphan:
			return false
		}
	}
	for _, f := range fins {
		switch f {
		case FinalizerForeground:
			return true
		case FinalizerOrphan:
			return false
		}
	}
	return false
}

func sameSet(a, b []string) bool {
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	for _, x := range b {
		if !slices.Contains(a, x) {
			return false
		}
	}
	return true
}
