package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	corev1 "github.com/podflow/podflow/proto/corev1"
	eventsv1 "github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/proto/podrules"
)

// VolumeMeter is a Runtime that measures a pod's volumes (kubelet's volume
// stats, what its eviction manager reads): VolumeUsage is the bytes the
// volume's files take, counted as du counts them. A Runtime without it
// has no emptyDir sizeLimit eviction, nor one whose VolumeUsage answers
// ErrNoVolumeMeter (a wrapper over a runtime without it).
type VolumeMeter interface {
	VolumeUsage(ctx context.Context, pod *corev1.Pod, volume string) (int64, error)
}

// ErrNoVolumeMeter: the Runtime measures no volumes after all.
var ErrNoVolumeMeter = errors.New("nodeagent: the runtime measures no volumes")

// emptyDirMemorySize is kubelet's calculateEmptyDirMemorySize (the
// SizeMemoryBackedVolumes behaviour): a memory emptyDir's tmpfs is the
// node's allocatable memory, or the pod's memory limit when it has one no
// larger (podrules.PodLimits, the limit of the pod's cgroup), or the
// volume's sizeLimit when it is set and no larger still. Zero: nothing
// known, the kernel's default size. allocatable is the node's allocatable
// memory ("": unknown).
func emptyDirMemorySize(pod *corev1.Pod, src *corev1.EmptyDirVolumeSource, allocatable string) int64 {
	size := podrules.QuantityValue(allocatable)
	if lim := podrules.PodLimits(pod).Memory; lim > 0 && (size == 0 || lim <= size) {
		size = lim
	}
	if sl := podrules.QuantityValue(src.GetSizeLimit()); sl > 0 && (size == 0 || sl <= size) {
		size = sl
	}
	return size
}

// emptyDirEvictionGrace is kubelet's immediateEvictionGracePeriodSeconds:
// the grace, in spec seconds, of a pod evicted for its emptyDir.
const emptyDirEvictionGrace = 1

// msgEmptyDirLimit is kubelet's emptyDirMessageFmt, its final space
// included (pkg/kubelet/eviction/helpers.go).
const msgEmptyDirLimit = "Usage of EmptyDir volume %q exceeds the limit %q. "

// checkEmptyDirs is kubelet's eviction manager's emptyDirLimitEviction,
// run every Config.EvictionPeriod while the pod's volumes are mounted:
// the first emptyDir with a sizeLimit whose usage is above it evicts the
// pod (see evict). It returns when to check again (zero: never).
func (w *worker) checkEmptyDirs(ctx context.Context) time.Time {
	meter, ok := w.d.rt.(VolumeMeter)
	if !ok || !w.mounted || w.terminal() || w.deleting() {
		return time.Time{}
	}
	now := w.now()
	if now.Before(w.usageCheck) {
		return w.usageCheck
	}
	msg, limited := emptyDirOverLimit(w.pod, func(name string) (int64, error) { return meter.VolumeUsage(ctx, w.pod, name) })
	if msg != "" {
		w.evict(ctx, msg)
		return time.Time{}
	}
	if !limited {
		return time.Time{}
	}
	w.usageCheck = now.Add(w.d.cfg.EvictionPeriod)
	return w.usageCheck
}

// evict is kubelet's evictPod: a Warning Evicted event with the message,
// the containers killed with emptyDirEvictionGrace (preStop hooks within
// it), and the pod Failed with reason Evicted and that message; nothing
// restarts, the sandbox is released, the pod stays until deleted.
func (w *worker) evict(ctx context.Context, msg string) {
	w.rep.Warn(eventsv1.ReasonEvicted, msg)
	w.rejected = &podFailure{reason: eventsv1.ReasonEvicted, message: msg}
	w.killing()
	w.stopAll(ctx, emptyDirEvictionGrace*w.d.cfg.SpecSecond)
}

// emptyDirOverLimit is emptyDirLimitEviction's decision: the eviction
// message of the pod's first emptyDir with a positive sizeLimit whose
// usage is above it ("" when none is), and whether the pod has any such
// volume. A volume whose usage cannot be read is skipped, as kubelet
// skips a volume without stats.
func emptyDirOverLimit(pod *corev1.Pod, usage func(volume string) (int64, error)) (msg string, limited bool) {
	for _, v := range pod.GetSpec().GetVolumes() {
		lim := v.GetEmptyDir().GetSizeLimit()
		if lim == "" {
			continue
		}
		q, err := resource.ParseQuantity(lim)
		if err != nil || q.Sign() <= 0 {
			continue
		}
		used, err := usage(v.GetName())
		if errors.Is(err, ErrNoVolumeMeter) {
			return "", false // nothing to measure with: never check again
		}
		limited = true
		if err == nil && used > q.Value() {
			return fmt.Sprintf(msgEmptyDirLimit, v.GetName(), q.String()), true
		}
	}
	return "", limited
}

// allocatableMemory is the node's allocatable memory ("": unknown).
func (w *worker) allocatableMemory() string {
	if w.d.allocatable == nil {
		return ""
	}
	m, _ := w.d.allocatable(podrules.ResourceMemory)
	return m
}
