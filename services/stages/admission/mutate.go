package admission

import (
	"cmp"
	"crypto/sha256"
	"fmt"
	"maps"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/podrules"
)

// Defaults applied by mutating admission, as Kubernetes' API defaulting.
const (
	DefaultServiceAccount                = "default"
	DefaultRestartPolicy                 = "Always"
	DefaultTerminationGracePeriodSeconds = int64(30)
	DefaultProtocol                      = "TCP"
	DefaultProbeTimeoutSeconds           = int32(1)
	DefaultProbePeriodSeconds            = int32(10)
	DefaultProbeSuccessThreshold         = int32(1)
	DefaultProbeFailureThreshold         = int32(3)
	// A container's terminationMessagePath and terminationMessagePolicy
	// (SetDefaults_Container), stored so `get -o yaml` shows them.
	DefaultTerminationMessagePath   = "/dev/termination-log"
	DefaultTerminationMessagePolicy = "File"
	// DefaultVolumeMode is the defaultMode of a configMap, secret,
	// downwardAPI and projected volume (SetDefaults_ConfigMapVolumeSource
	// and its siblings: 0644, secrets too), stored so `get -o yaml` shows
	// it and the node applies it.
	DefaultVolumeMode = int32(0o644)
)

// mutator applies mutations to one pod copy and records them.
type mutator struct {
	pod     *corev1.Pod
	applied []string
}

func (m *mutator) record(format string, args ...any) {
	m.applied = append(m.applied, fmt.Sprintf(format, args...))
}

func (m *mutator) spec() *corev1.PodSpec {
	if m.pod.Spec == nil {
		m.pod.Spec = &corev1.PodSpec{}
	}
	return m.pod.Spec
}

// serviceAccount defaults spec.serviceAccountName and, when the pod names
// no imagePullSecrets, copies those of its ServiceAccount sa (nil: none,
// or not the pod's), as Kubernetes' ServiceAccount admission plugin does.
func (m *mutator) serviceAccount(sa *corev1.ServiceAccount) {
	spec := m.spec()
	if spec.ServiceAccountName == "" {
		spec.ServiceAccountName = DefaultServiceAccount
		m.record("serviceaccount: defaulted to %s", DefaultServiceAccount)
	}
	if sa.GetMetadata().GetName() != spec.ServiceAccountName || sa.GetMetadata().GetNamespace() != m.pod.GetMetadata().GetNamespace() ||
		len(spec.ImagePullSecrets) > 0 || len(sa.GetImagePullSecrets()) == 0 {
		return
	}
	var names []string
	for _, ref := range sa.GetImagePullSecrets() {
		spec.ImagePullSecrets = append(spec.ImagePullSecrets, &corev1.LocalObjectReference{Name: ref.GetName()})
		names = append(names, ref.GetName())
	}
	m.record("serviceaccount: set imagePullSecrets=%s from serviceaccount %s", strings.Join(names, ","), spec.ServiceAccountName)
}

// The token volume of Kubernetes' ServiceAccount admission plugin
// (plugin/pkg/admission/serviceaccount): a projected volume named
// ServiceAccountVolumePrefix plus a 5-character suffix with the pod's
// token, the cluster CA and its namespace, mounted read-only at
// DefaultAPITokenMountPath in every container.
const (
	ServiceAccountVolumePrefix = "kube-api-access-"
	DefaultAPITokenMountPath   = "/var/run/secrets/kubernetes.io/serviceaccount"
	// RootCAConfigMap is the ConfigMap the root CA publisher keeps in
	// every namespace (services/stages/rootcacert).
	RootCAConfigMap = "kube-root-ca.crt"
	// ServiceAccountTokenExpirationSeconds is the token's lifetime,
	// kube's WarnOnlyBoundTokenExpirationSeconds.
	ServiceAccountTokenExpirationSeconds = int64(3607)
)

// shouldAutomount is kube's: the pod's automountServiceAccountToken, else
// its ServiceAccount's, else true.
func shouldAutomount(sa *corev1.ServiceAccount, pod *corev1.Pod) bool {
	if v := pod.GetSpec().AutomountServiceAccountToken; v != nil {
		return *v
	}
	if v := sa.AutomountServiceAccountToken; v != nil {
		return *v
	}
	return true
}

// serviceAccountToken mounts the pod's API token, as Kubernetes'
// ServiceAccount admission plugin does, when the pod's ServiceAccount sa
// exists (nil: no such account; the pod is admitted without a token, as
// before accounts were mounted) and neither the pod nor the account opts
// out. A container that already mounts something at
// DefaultAPITokenMountPath is left alone; a pod that already has a
// kube-api-access- volume keeps it (so admitting twice changes nothing).
// The volume's suffix is derived from the pod's uid (else its name), so
// that a redelivered request admits the same pod.
func (m *mutator) serviceAccountToken(sa *corev1.ServiceAccount) {
	spec := m.spec()
	if sa.GetMetadata().GetName() != spec.ServiceAccountName || sa.GetMetadata().GetNamespace() != m.pod.GetMetadata().GetNamespace() ||
		!shouldAutomount(sa, m.pod) {
		return
	}
	name := ""
	for _, v := range spec.Volumes {
		if strings.HasPrefix(v.GetName(), ServiceAccountVolumePrefix) {
			name = v.GetName()
			break
		}
	}
	hasVolume := name != ""
	if !hasVolume {
		md := m.pod.GetMetadata()
		seed := md.GetUid()
		if seed == "" {
			seed = md.GetNamespace() + "/" + md.GetName() + "/" + md.GetGenerateName()
		}
		name = ServiceAccountVolumePrefix + nameSuffix(seed)
	}
	needed := false
	m.eachContainer(func(kind string, c *corev1.Container) {
		for _, vm := range c.VolumeMounts {
			if vm.GetMountPath() == DefaultAPITokenMountPath {
				return
			}
		}
		c.VolumeMounts = append(c.VolumeMounts, &corev1.VolumeMount{Name: name, ReadOnly: true, MountPath: DefaultAPITokenMountPath})
		needed = true
		m.record("serviceaccount: mounted volume %s at %s on %s %s", name, DefaultAPITokenMountPath, kind, c.GetName())
	})
	if hasVolume || !needed {
		return
	}
	spec.Volumes = append(spec.Volumes, TokenVolume(name))
	m.record("serviceaccount: added volume %s (token of serviceaccount %s)", name, spec.ServiceAccountName)
}

// TokenVolume is the projected volume name of a mounted ServiceAccount
// token, kube's TokenVolumeSource: the token (path "token"), ca.crt from
// RootCAConfigMap and the pod's namespace, mode 0644.
func TokenVolume(name string) *corev1.Volume {
	return &corev1.Volume{Name: name, Projected: &corev1.ProjectedVolumeSource{
		DefaultMode: proto.Int32(DefaultVolumeMode),
		Sources: []*corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: proto.Int64(ServiceAccountTokenExpirationSeconds)}},
			{ConfigMap: &corev1.ConfigMapProjection{Name: RootCAConfigMap, Items: []*corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
			{DownwardApi: &corev1.DownwardAPIProjection{Items: []*corev1.DownwardAPIVolumeFile{
				{Path: "namespace", FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.namespace"}}}}},
		},
	}}
}

// nameSuffix is a 5-character suffix in Kubernetes' generateName
// alphabet, derived from seed.
func nameSuffix(seed string) string {
	const alphabet = "bcdfghjklmnpqrstvwxz2456789"
	sum := sha256.Sum256([]byte(seed))
	var b strings.Builder
	for i := range 5 {
		b.WriteByte(alphabet[int(sum[i])%len(alphabet)])
	}
	return b.String()
}

// eachContainer visits init containers, then containers, with the word
// mutation messages use for each ("initContainer", "container").
func (m *mutator) eachContainer(f func(kind string, c *corev1.Container)) {
	spec := m.spec()
	for _, c := range spec.InitContainers {
		f("initContainer", c)
	}
	for _, c := range spec.Containers {
		f("container", c)
	}
}

// requestsFromLimits sets a missing request to the container's limit for
// the same resource, as Kubernetes' pod defaulting does.
func (m *mutator) requestsFromLimits() {
	m.eachContainer(func(kind string, c *corev1.Container) {
		lim := c.GetResources().GetLimits()
		for _, res := range slices.Sorted(maps.Keys(lim)) {
			if _, ok := c.GetResources().GetRequests()[res]; ok {
				continue
			}
			setResource(c, false, res, lim[res])
			m.record("defaults: set requests.%s=%s from limits on %s %s", res, lim[res], kind, c.GetName())
		}
	})
}

// limitRange applies the Container items of a LimitRange: missing limits
// from default, missing requests from defaultRequest. As Kubernetes'
// LimitRange defaulting does for the object, default falls back to max and
// defaultRequest to default, then to min.
func (m *mutator) limitRange(lr *corev1.LimitRange) {
	who := "limitrange/" + lr.GetMetadata().GetName()
	for _, item := range lr.GetSpec().GetLimits() {
		if item.GetType() != "Container" {
			continue
		}
		limits := maps.Clone(item.GetDefault())
		if limits == nil {
			limits = map[string]string{}
		}
		for k, v := range item.GetMax() {
			if _, ok := limits[k]; !ok {
				limits[k] = v
			}
		}
		requests := maps.Clone(item.GetDefaultRequest())
		if requests == nil {
			requests = map[string]string{}
		}
		for _, fallback := range []map[string]string{limits, item.GetMin()} {
			for k, v := range fallback {
				if _, ok := requests[k]; !ok {
					requests[k] = v
				}
			}
		}
		limitNames, requestNames := slices.Sorted(maps.Keys(limits)), slices.Sorted(maps.Keys(requests))
		m.eachContainer(func(kind string, c *corev1.Container) {
			for _, res := range limitNames {
				if _, ok := c.GetResources().GetLimits()[res]; !ok {
					setResource(c, true, res, limits[res])
					m.record("%s: set limits.%s=%s on %s %s", who, res, limits[res], kind, c.GetName())
				}
			}
			for _, res := range requestNames {
				if _, ok := c.GetResources().GetRequests()[res]; !ok {
					setResource(c, false, res, requests[res])
					m.record("%s: set requests.%s=%s on %s %s", who, res, requests[res], kind, c.GetName())
				}
			}
		})
	}
}

func setResource(c *corev1.Container, limit bool, res, qty string) {
	if c.Resources == nil {
		c.Resources = &corev1.ResourceRequirements{}
	}
	target := &c.Resources.Requests
	if limit {
		target = &c.Resources.Limits
	}
	if *target == nil {
		*target = map[string]string{}
	}
	(*target)[res] = qty
}

// defaults applies Kubernetes' field defaults to the pod and each
// container, recording one mutation for the pod and one per container.
func (m *mutator) defaults() {
	spec := m.spec()
	var set []string
	if spec.RestartPolicy == "" {
		spec.RestartPolicy = DefaultRestartPolicy
		set = append(set, "restartPolicy="+DefaultRestartPolicy)
	}
	if spec.TerminationGracePeriodSeconds == nil {
		spec.TerminationGracePeriodSeconds = proto.Int64(DefaultTerminationGracePeriodSeconds)
		set = append(set, fmt.Sprintf("terminationGracePeriodSeconds=%d", DefaultTerminationGracePeriodSeconds))
	}
	set = append(set, defaultVolumeModes(spec.Volumes)...)
	if len(set) > 0 {
		m.record("defaults: set %s", strings.Join(set, ", "))
	}
	m.eachContainer(func(kind string, c *corev1.Container) {
		var set []string
		if c.ImagePullPolicy == "" {
			c.ImagePullPolicy = podrules.DefaultPullPolicy(c.Image)
			set = append(set, "imagePullPolicy="+c.ImagePullPolicy)
		}
		if c.TerminationMessagePath == "" {
			c.TerminationMessagePath = DefaultTerminationMessagePath
			set = append(set, "terminationMessagePath="+DefaultTerminationMessagePath)
		}
		if c.TerminationMessagePolicy == "" {
			c.TerminationMessagePolicy = DefaultTerminationMessagePolicy
			set = append(set, "terminationMessagePolicy="+DefaultTerminationMessagePolicy)
		}
		for i, p := range c.Ports {
			if p.GetProtocol() == "" {
				p.Protocol = DefaultProtocol
				set = append(set, fmt.Sprintf("ports[%d].protocol=%s", i, DefaultProtocol))
			}
		}
		set = append(set, defaultProbe("livenessProbe", c.LivenessProbe)...)
		set = append(set, defaultProbe("readinessProbe", c.ReadinessProbe)...)
		set = append(set, defaultProbe("startupProbe", c.StartupProbe)...)
		if len(set) > 0 {
			m.record("defaults: set %s on %s %s", strings.Join(set, ", "), kind, c.GetName())
		}
	})
}

// The taints of a node that is not ready, or that the node lifecycle
// controller cannot reach (k8s.io/api/core/v1 TaintNodeNotReady,
// TaintNodeUnreachable).
const (
	TaintNodeNotReady    = "node.kubernetes.io/not-ready"
	TaintNodeUnreachable = "node.kubernetes.io/unreachable"
)

// defaultTolerationSeconds adds, as kube-apiserver's DefaultTolerationSeconds
// plugin, a toleration of the not-ready and of the unreachable NoExecute
// taints, each for notReady and unreachable seconds (nil: 300), unless the
// pod tolerates that taint already (a toleration of the key, or of every
// key, with effect NoExecute or every effect): so a pod on a node that
// died is evicted after five minutes, and the pod may say otherwise.
func (m *mutator) defaultTolerationSeconds(notReady, unreachable *int64) {
	spec := m.spec()
	tolerates := func(key string) bool {
		return slices.ContainsFunc(spec.Tolerations, func(t *corev1.Toleration) bool {
			return (t.GetKey() == key || t.GetKey() == "") && (t.GetEffect() == "NoExecute" || t.GetEffect() == "")
		})
	}
	for _, d := range []struct {
		key     string
		seconds *int64
	}{{TaintNodeNotReady, notReady}, {TaintNodeUnreachable, unreachable}} {
		if tolerates(d.key) {
			continue
		}
		secs := DefaultTolerationSeconds
		if d.seconds != nil {
			secs = *d.seconds
		}
		spec.Tolerations = append(spec.Tolerations, &corev1.Toleration{Key: d.key, Operator: "Exists", Effect: "NoExecute", TolerationSeconds: proto.Int64(secs)})
		m.record("defaulttolerationseconds: tolerate %s:NoExecute for %ds", d.key, secs)
	}
}

// defaultVolumeModes sets each file volume's missing defaultMode to
// DefaultVolumeMode and says which it set.
func defaultVolumeModes(vols []*corev1.Volume) []string {
	var set []string
	for i, v := range vols {
		var kind string
		var mode **int32
		switch {
		case v.GetConfigMap() != nil:
			kind, mode = "configMap", &v.ConfigMap.DefaultMode
		case v.GetSecret() != nil:
			kind, mode = "secret", &v.Secret.DefaultMode
		case v.GetDownwardApi() != nil:
			kind, mode = "downwardAPI", &v.DownwardApi.DefaultMode
		case v.GetProjected() != nil:
			kind, mode = "projected", &v.Projected.DefaultMode
		default:
			continue
		}
		if *mode == nil {
			*mode = proto.Int32(DefaultVolumeMode)
			set = append(set, fmt.Sprintf("volumes[%d].%s.defaultMode=%#o", i, kind, DefaultVolumeMode))
		}
	}
	return set
}

func defaultProbe(name string, p *corev1.Probe) []string {
	if p == nil {
		return nil
	}
	var set []string
	def := func(field string, v *int32, d int32) {
		if *v == 0 {
			*v = d
			set = append(set, fmt.Sprintf("%s.%s=%d", name, field, d))
		}
	}
	def("timeoutSeconds", &p.TimeoutSeconds, DefaultProbeTimeoutSeconds)
	def("periodSeconds", &p.PeriodSeconds, DefaultProbePeriodSeconds)
	def("successThreshold", &p.SuccessThreshold, DefaultProbeSuccessThreshold)
	def("failureThreshold", &p.FailureThreshold, DefaultProbeFailureThreshold)
	if h := p.HttpGet; h != nil {
		if h.Path == "" {
			h.Path = "/"
			set = append(set, name+".httpGet.path=/")
		}
		if h.Scheme == "" {
			h.Scheme = "HTTP"
			set = append(set, name+".httpGet.scheme=HTTP")
		}
	}
	if g := p.Grpc; g != nil && g.Service == nil { // Kubernetes' +default=""
		empty := ""
		g.Service = &empty
		set = append(set, name+`.grpc.service=""`)
	}
	return set
}

// qos records the pod's QoS class in status.qosClass.
func (m *mutator) qos() {
	class := podrules.QOSClass(m.pod)
	if m.pod.Status == nil {
		m.pod.Status = &corev1.PodStatus{}
	}
	if m.pod.Status.QosClass != class {
		m.pod.Status.QosClass = class
		m.record("qos: set status.qosClass=%s", class)
	}
}

type namedObject interface {
	comparable
	GetMetadata() *corev1.ObjectMeta
}

// sortedByName returns the non-nil objects of namespace ns (or with no
// namespace) sorted by name.
func sortedByName[T namedObject](objs []T, ns string) []T {
	var zero T
	out := make([]T, 0, len(objs))
	for _, o := range objs {
		if o == zero {
			continue
		}
		if n := o.GetMetadata().GetNamespace(); n != "" && n != ns {
			continue
		}
		out = append(out, o)
	}
	slices.SortStableFunc(out, func(a, b T) int {
		return cmp.Compare(a.GetMetadata().GetName(), b.GetMetadata().GetName())
	})
	return out
}
