// Package nodemetrics measures a node agent the way kubelet's metrics do:
// kubelet_runtime_operations_duration_seconds{operation_type} around every
// runtime call, and kubelet_pod_start_sli_duration_seconds from a pod's
// binding reaching the node to the pod Running (image pulls included, as
// podflow's simulated images are instant; kubelet's SLI excludes them).
package nodemetrics

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/nodeagent"
	corev1 "github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
)

// Metrics are a node agent's kubelet-style metrics.
type Metrics struct {
	ops      *prometheus.HistogramVec
	opErrs   *prometheus.CounterVec
	podStart prometheus.Histogram
	started  sync.Map // pod uid -> time its PodScheduled reached the node
}

// New registers the metrics in reg.
func New(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		ops: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "kubelet_runtime_operations_duration_seconds", Help: "Duration in seconds of runtime operations, by operation type.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18),
		}, []string{"operation_type"}),
		opErrs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kubelet_runtime_operations_errors_total", Help: "Cumulative number of runtime operation errors by operation type.",
		}, []string{"operation_type"}),
		podStart: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "kubelet_pod_start_sli_duration_seconds",
			Help:    "Duration in seconds to start a pod, from its binding reaching the node to Running.",
			Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2, 3, 4, 5, 6, 8, 10, 20, 30, 45, 60, 120, 300},
		}),
	}
	for _, c := range []prometheus.Collector{m.ops, m.opErrs, m.podStart} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *Metrics) observe(op string, start time.Time, err error) {
	m.ops.WithLabelValues(op).Observe(time.Since(start).Seconds())
	if err != nil {
		m.opErrs.WithLabelValues(op).Inc()
	}
}

// Handler wraps the node agent's bus handler to note when a pod's binding
// reached the node.
func (m *Metrics) Handler(h bus.Handler) bus.Handler {
	return func(ctx context.Context, d *bus.Delivery) error {
		if d.Envelope.GetPodScheduled() != nil {
			m.started.LoadOrStore(d.Envelope.GetPodUid(), time.Now())
		}
		return h(ctx, d)
	}
}

// Publisher wraps the agent's publisher to observe pod start when a pod's
// PodRunning goes out (a step of its PodStatusReport).
func (m *Metrics) Publisher(p nodeagent.Publisher) nodeagent.Publisher { return publisher{p, m} }

type publisher struct {
	nodeagent.Publisher
	m *Metrics
}

func (p publisher) Publish(ctx context.Context, env *eventsv1.Envelope) error {
	err := p.Publisher.Publish(ctx, env)
	if err == nil && running(env) {
		if t, ok := p.m.started.LoadAndDelete(env.GetPodUid()); ok {
			p.m.podStart.Observe(time.Since(t.(time.Time)).Seconds())
		}
	}
	if env.GetPodDeleted() != nil {
		p.m.started.Delete(env.GetPodUid())
	}
	return err
}

// running reports whether env is a PodRunning or a report carrying one.
func running(env *eventsv1.Envelope) bool {
	if env.GetPodRunning() != nil {
		return true
	}
	for _, s := range env.GetPodStatusReport().GetSteps() {
		if s.GetPodRunning() != nil {
			return true
		}
	}
	return false
}

// Runtime wraps rt to time every operation.
func (m *Metrics) Runtime(rt nodeagent.Runtime) nodeagent.Runtime { return runtime{rt, m} }

type runtime struct {
	nodeagent.Runtime
	m *Metrics
}

// The wrapper keeps every optional interface of a runtime (the agent finds
// them by type assertion, so one the wrapper lacked would silently switch
// the feature off on every wrapped node).
var (
	_ nodeagent.Runtime                  = runtime{}
	_ nodeagent.RuntimeVersioner         = runtime{}
	_ nodeagent.ImageLister              = runtime{}
	_ nodeagent.SecretPuller             = runtime{}
	_ nodeagent.TerminationMessageReader = runtime{}
	_ nodeagent.VolumeMeter              = runtime{}
	_ nodeagent.EphemeralStarter         = runtime{}
	_ nodeagent.SandboxReleaser          = runtime{}
	_ nodeagent.LogReader                = runtime{}
)

func (r runtime) RunPodSandbox(ctx context.Context, pod *corev1.Pod) (nodeagent.Sandbox, error) {
	t := time.Now()
	sb, err := r.Runtime.RunPodSandbox(ctx, pod)
	r.m.observe("run_podsandbox", t, err)
	return sb, err
}

func (r runtime) StopPodSandbox(ctx context.Context, uid string) error {
	t := time.Now()
	err := r.Runtime.StopPodSandbox(ctx, uid)
	r.m.observe("stop_podsandbox", t, err)
	return err
}

func (r runtime) RemovePodSandbox(ctx context.Context, uid string) error {
	t := time.Now()
	err := r.Runtime.RemovePodSandbox(ctx, uid)
	r.m.observe("remove_podsandbox", t, err)
	return err
}

// ReleasePodSandbox passes the optional release through, timed as
// release_podsandbox (the sandbox stopped and removed whole when the
// wrapped runtime keeps nothing of a finished pod, as the agent would).
func (r runtime) ReleasePodSandbox(ctx context.Context, uid string) error {
	rel, ok := r.Runtime.(nodeagent.SandboxReleaser)
	if !ok {
		if err := r.StopPodSandbox(ctx, uid); err != nil {
			return err
		}
		return r.RemovePodSandbox(ctx, uid)
	}
	t := time.Now()
	err := rel.ReleasePodSandbox(ctx, uid)
	r.m.observe("release_podsandbox", t, err)
	return err
}

// ReadLog passes the optional log reader through (an error when the
// wrapped runtime keeps no logs).
func (r runtime) ReadLog(req nodeagent.LogRequest, max int) (nodeagent.LogChunk, error) {
	if lr, ok := r.Runtime.(nodeagent.LogReader); ok {
		return lr.ReadLog(req, max)
	}
	return nodeagent.LogChunk{}, nodeagent.ErrNoLogReader
}

func (r runtime) MountVolumes(ctx context.Context, pod *corev1.Pod, vols []nodeagent.VolumeData) error {
	t := time.Now()
	err := r.Runtime.MountVolumes(ctx, pod, vols)
	r.m.observe("mount_volumes", t, err)
	return err
}

func (r runtime) PullImage(ctx context.Context, pod *corev1.Pod, image, policy string) (nodeagent.ImageRef, error) {
	t := time.Now()
	ref, err := r.Runtime.PullImage(ctx, pod, image, policy)
	r.m.observe("pull_image", t, err)
	return ref, err
}

func (r runtime) StartContainer(ctx context.Context, pod *corev1.Pod, c *corev1.Container, sb nodeagent.Sandbox) (nodeagent.ContainerID, error) {
	t := time.Now()
	id, err := r.Runtime.StartContainer(ctx, pod, c, sb)
	r.m.observe("start_container", t, err)
	return id, err
}

func (r runtime) StopContainer(ctx context.Context, id nodeagent.ContainerID, grace time.Duration) (nodeagent.ContainerExit, error) {
	t := time.Now()
	ex, err := r.Runtime.StopContainer(ctx, id, grace)
	r.m.observe("stop_container", t, err)
	return ex, err
}

func (r runtime) Probe(ctx context.Context, pod *corev1.Pod, c *corev1.Container, id nodeagent.ContainerID, kind nodeagent.ProbeKind, p *corev1.Probe) (nodeagent.ProbeResult, error) {
	t := time.Now()
	res, err := r.Runtime.Probe(ctx, pod, c, id, kind, p)
	r.m.observe("probe", t, err)
	return res, err
}

// NodeImages passes the optional image listing through.
func (r runtime) NodeImages() []*corev1.ContainerImage {
	if il, ok := r.Runtime.(nodeagent.ImageLister); ok {
		return il.NodeImages()
	}
	return nil
}

// RuntimeVersion passes the optional runtime version through.
func (r runtime) RuntimeVersion() string {
	if rv, ok := r.Runtime.(nodeagent.RuntimeVersioner); ok {
		return rv.RuntimeVersion()
	}
	return "podflow://" + nodeagent.Version()
}

// VolumeUsage passes the optional volume meter through (an error when
// the wrapped runtime has none: no stats, no emptyDir eviction).
func (r runtime) VolumeUsage(ctx context.Context, pod *corev1.Pod, volume string) (int64, error) {
	if vm, ok := r.Runtime.(nodeagent.VolumeMeter); ok {
		return vm.VolumeUsage(ctx, pod, volume)
	}
	return 0, nodeagent.ErrNoVolumeMeter
}

// PullImageWithSecrets passes the optional pull with registry credentials
// through, timed as pull_image (an anonymous PullImage when the wrapped
// runtime has none, as the agent would call it).
func (r runtime) PullImageWithSecrets(ctx context.Context, pod *corev1.Pod, image, policy string, secrets []*corev1.Secret) (nodeagent.ImageRef, error) {
	sp, ok := r.Runtime.(nodeagent.SecretPuller)
	if !ok {
		return r.PullImage(ctx, pod, image, policy)
	}
	t := time.Now()
	ref, err := sp.PullImageWithSecrets(ctx, pod, image, policy, secrets)
	r.m.observe("pull_image", t, err)
	return ref, err
}

// TerminationMessage passes the optional termination message reader
// through (no message when the wrapped runtime keeps none).
func (r runtime) TerminationMessage(ctx context.Context, podUID string, id nodeagent.ContainerID, max int) ([]byte, bool, error) {
	if tr, ok := r.Runtime.(nodeagent.TerminationMessageReader); ok {
		return tr.TerminationMessage(ctx, podUID, id, max)
	}
	return nil, false, nil
}

// LogTail passes the optional log tail through (none when the wrapped
// runtime keeps no logs).
func (r runtime) LogTail(ctx context.Context, podUID string, id nodeagent.ContainerID, lines, max int) ([]byte, error) {
	if tr, ok := r.Runtime.(nodeagent.TerminationMessageReader); ok {
		return tr.LogTail(ctx, podUID, id, lines, max)
	}
	return nil, nil
}

// StartEphemeralContainer passes the optional ephemeral container start
// through, timed as start_container (an error when the wrapped runtime
// runs none).
func (r runtime) StartEphemeralContainer(ctx context.Context, pod *corev1.Pod, c *corev1.Container, sb nodeagent.Sandbox, target nodeagent.ContainerID) (nodeagent.ContainerID, error) {
	es, ok := r.Runtime.(nodeagent.EphemeralStarter)
	if !ok {
		return "", nodeagent.Errorf(nodeagent.CodeCreateContainer, "the node's runtime does not run ephemeral containers")
	}
	t := time.Now()
	id, err := es.StartEphemeralContainer(ctx, pod, c, sb, target)
	r.m.observe("start_container", t, err)
	return id, err
}
