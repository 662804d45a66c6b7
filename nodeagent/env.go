package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	corev1 "github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/vt"
	"k8s.io/apimachinery/pkg/api/resource"
)

// The container's environment, as kubelet makes it
// (pkg/kubelet/kubelet_pods.go makeEnvironmentVariables) and hands it to
// the runtime: envFrom first (each key of the ConfigMap or Secret, with the
// prefix), then env in order, a later variable replacing an earlier one.
// A value may refer to variables defined before it, and to the Service
// variables, as $(NAME); a valueFrom (fieldRef, resourceFieldRef,
// configMapKeyRef, secretKeyRef) is taken as is. The Service variables
// (servicelinks.go) the container does not define follow. Command, args
// and subPathExpr are then expanded with the whole environment. A
// source that cannot be read, unless optional, fails the container with
// CreateContainerConfigError and kubelet's message.

// containerConfig returns c as the runtime is to run it: Env holds every
// variable with its final value (no valueFrom, no envFrom), Command and
// Args are expanded. c itself is not modified; it is the configuration
// when there is nothing to resolve (resolvedAsIs).
func (w *worker) containerConfig(ctx context.Context, c *corev1.Container) (*corev1.Container, error) {
	env, err := w.makeEnv(ctx, c)
	if err != nil {
		return nil, Errorf(CodeCreateContainerConfig, "%s", err.Error())
	}
	if resolvedAsIs(c, env) {
		return c, nil
	}
	out := vt.Clone(c)
	out.EnvFrom = nil
	out.Env = make([]*corev1.EnvVar, len(env.order))
	for i, k := range env.order {
		out.Env[i] = &corev1.EnvVar{Name: k, Value: env.vals[k]}
	}
	out.Command = expandAll(c.GetCommand(), env.vals)
	out.Args = expandAll(c.GetArgs(), env.vals)
	for _, vm := range out.GetVolumeMounts() {
		if vm.GetSubPathExpr() == "" {
			continue
		}
		sub, err := expandSubPath(vm.GetSubPathExpr(), env.vals)
		if err != nil {
			return nil, Errorf(CodeCreateContainerConfig, "%s", err.Error())
		}
		vm.SubPath, vm.SubPathExpr = sub, ""
	}
	return out, nil
}

// resolvedAsIs reports whether c's configuration is c itself: it has no
// variables (its own, from sources, the Services') and nothing to
// expand (no $ in its command or arguments, no subPathExpr). The runtime
// then gets c, shared with the worker and never modified, instead of a
// copy it would keep for the container's life (~500 bytes a pod).
func resolvedAsIs(c *corev1.Container, env *envList) bool {
	if len(env.order) > 0 || len(c.GetEnvFrom()) > 0 {
		return false
	}
	for _, ss := range [][]string{c.GetCommand(), c.GetArgs()} {
		for _, s := range ss {
			if strings.Contains(s, "$") {
				return false
			}
		}
	}
	for _, vm := range c.GetVolumeMounts() {
		if vm.GetSubPathExpr() != "" {
			return false
		}
	}
	return true
}

// expandSubPath is kubelet's subPathExpr (ExpandContainerVolumeMounts and
// makeMounts' checks): $(VAR) from the container's environment only, every
// variable named defined and not empty, and the result a relative path
// without "..".
func expandSubPath(expr string, vals map[string]string) (string, error) {
	missing := map[string]bool{}
	sub := expandFunc(expr, func(name string) (string, bool) {
		v, ok := vals[name]
		if !ok || v == "" {
			missing[name] = true
		}
		return v, true
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("missing value for %s", strings.Join(slices.Sorted(maps.Keys(missing)), ", "))
	}
	if strings.HasPrefix(sub, "/") {
		return "", fmt.Errorf("error SubPath `%s` must not be an absolute path", sub)
	}
	if slices.Contains(strings.Split(sub, "/"), "..") {
		return "", fmt.Errorf("unable to provision SubPath `%s`: must not contain '..'", sub)
	}
	return sub, nil
}

// envList is an ordered set of variables: the first definition fixes a
// name's place, the last its value.
type envList struct {
	order []string
	vals  map[string]string
}

func (e *envList) set(k, v string) {
	if _, ok := e.vals[k]; !ok {
		e.order = append(e.order, k)
	}
	e.vals[k] = v
}

// envSources caches the ConfigMaps and Secrets one container's environment
// reads, each read once (as kubelet does); a missing one is cached as nil.
type envSources struct {
	w       *worker
	ns      string
	cms     map[string]*corev1.ConfigMap
	secrets map[string]*corev1.Secret
}

func (s *envSources) configMap(ctx context.Context, name string) (*corev1.ConfigMap, error) {
	if cm, ok := s.cms[name]; ok {
		return cm, nil
	}
	cm, err := s.w.d.volumes.GetConfigMap(ctx, s.ns, name)
	switch {
	case errors.Is(err, ErrNotFound):
		return nil, missing{"configmap", name}
	case err != nil:
		return nil, fmt.Errorf("get configmap %s/%s: %w", s.ns, name, err)
	}
	s.cms[name] = cm
	return cm, nil
}

func (s *envSources) secret(ctx context.Context, name string) (*corev1.Secret, error) {
	if sec, ok := s.secrets[name]; ok {
		return sec, nil
	}
	sec, err := s.w.d.volumes.GetSecret(ctx, s.ns, name)
	switch {
	case errors.Is(err, ErrNotFound):
		return nil, missing{"secret", name}
	case err != nil:
		return nil, fmt.Errorf("get secret %s/%s: %w", s.ns, name, err)
	}
	s.secrets[name] = sec
	return sec, nil
}

// missing is a ConfigMap or Secret that does not exist, worded as the
// Kubernetes NotFound error kubelet reports; it matches ErrNotFound.
type missing struct{ kind, name string }

func (m missing) Error() string        { return fmt.Sprintf("%s %q not found", m.kind, m.name) }
func (m missing) Is(target error) bool { return target == ErrNotFound }

// skip reports whether err is a missing source that optional excuses.
func skip(err error, optional bool) bool { return optional && errors.Is(err, ErrNotFound) }

func (w *worker) makeEnv(ctx context.Context, c *corev1.Container) (*envList, error) {
	src := &envSources{w: w, ns: w.pod.GetMetadata().GetNamespace(),
		cms: map[string]*corev1.ConfigMap{}, secrets: map[string]*corev1.Secret{}}
	env := &envList{vals: map[string]string{}}
	for _, ef := range c.GetEnvFrom() {
		var data map[string]string
		switch {
		case ef.GetConfigMapRef() != nil:
			ref := ef.GetConfigMapRef()
			cm, err := src.configMap(ctx, ref.GetName())
			if skip(err, ref.GetOptional()) {
				continue
			}
			if err != nil {
				return nil, err
			}
			data = cm.GetData()
		case ef.GetSecretRef() != nil:
			ref := ef.GetSecretRef()
			sec, err := src.secret(ctx, ref.GetName())
			if skip(err, ref.GetOptional()) {
				continue
			}
			if err != nil {
				return nil, err
			}
			data = map[string]string{}
			for k, v := range sec.GetData() {
				data[k] = string(v)
			}
		}
		keys := make([]string, 0, len(data))
		for k := range data {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			env.set(ef.GetPrefix()+k, data[k])
		}
	}
	svc, err := w.serviceEnv(ctx)
	if err != nil {
		return nil, err
	}
	for _, e := range c.GetEnv() {
		v, ok, err := w.envValue(ctx, src, c, e, env.vals, svc)
		if err != nil {
			return nil, err
		}
		if ok {
			env.set(e.GetName(), v)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(svc)) { // the container's own win
		if _, ok := env.vals[k]; !ok {
			env.set(k, svc[k])
		}
	}
	return env, nil
}

// envValue is one variable's value; !ok means an optional source is
// missing and the variable is not set.
func (w *worker) envValue(ctx context.Context, src *envSources, c *corev1.Container, e *corev1.EnvVar, defined, services map[string]string) (string, bool, error) {
	from := e.GetValueFrom()
	if e.GetValue() != "" || from == nil {
		// kubelet's MappingFuncFor(tmpEnv, serviceEnv): the variables
		// defined so far, then the Service variables.
		return expandFunc(e.GetValue(), func(name string) (string, bool) {
			if v, ok := defined[name]; ok {
				return v, true
			}
			v, ok := services[name]
			return v, ok
		}), true, nil
	}
	switch {
	case from.GetFieldRef() != nil:
		v, err := w.podField(from.GetFieldRef().GetFieldPath())
		return v, err == nil, err
	case from.GetResourceFieldRef() != nil:
		v, err := w.resourceField(c, from.GetResourceFieldRef())
		return v, err == nil, err
	case from.GetConfigMapKeyRef() != nil:
		ref := from.GetConfigMapKeyRef()
		cm, err := src.configMap(ctx, ref.GetName())
		if skip(err, ref.GetOptional()) {
			return "", false, nil
		}
		if err != nil {
			return "", false, err
		}
		v, ok := cm.GetData()[ref.GetKey()]
		if !ok && !ref.GetOptional() {
			return "", false, fmt.Errorf("couldn't find key %s in ConfigMap %s/%s", ref.GetKey(), src.ns, ref.GetName())
		}
		return v, ok, nil
	case from.GetSecretKeyRef() != nil:
		ref := from.GetSecretKeyRef()
		sec, err := src.secret(ctx, ref.GetName())
		if skip(err, ref.GetOptional()) {
			return "", false, nil
		}
		if err != nil {
			return "", false, err
		}
		v, ok := sec.GetData()[ref.GetKey()]
		if !ok && !ref.GetOptional() {
			return "", false, fmt.Errorf("couldn't find key %s in Secret %s/%s", ref.GetKey(), src.ns, ref.GetName())
		}
		return string(v), ok, nil
	}
	return "", true, nil
}

// podField is kubelet's podFieldSelectorRuntimeValue: the downward API's
// pod fields. The pod IP is the sandbox's (it is not in the pod's status
// yet when the first container starts), the host IP the node's.
func (w *worker) podField(path string) (string, error) {
	md := w.pod.GetMetadata()
	if base, key, ok := subscript(path); ok {
		switch base {
		case "metadata.labels":
			return md.GetLabels()[key], nil
		case "metadata.annotations":
			return md.GetAnnotations()[key], nil
		}
		return "", fmt.Errorf("fieldPath %q does not support subscript", path)
	}
	var podIP string
	if w.sandbox != nil {
		podIP = w.sandbox.IP
	}
	switch path {
	case "metadata.name":
		return md.GetName(), nil
	case "metadata.namespace":
		return md.GetNamespace(), nil
	case "metadata.uid":
		return md.GetUid(), nil
	case "metadata.labels":
		return formatMap(md.GetLabels()), nil
	case "metadata.annotations":
		return formatMap(md.GetAnnotations()), nil
	case "spec.nodeName":
		return w.pod.GetSpec().GetNodeName(), nil
	case "spec.serviceAccountName":
		return w.pod.GetSpec().GetServiceAccountName(), nil
	case "status.hostIP", "status.hostIPs": // one host IP
		return w.d.cfg.HostIP, nil
	case "status.podIP", "status.podIPs": // one pod IP (single stack)
		return podIP, nil
	}
	return "", fmt.Errorf("unsupported fieldPath: %s", path)
}

// subscript splits "metadata.labels['k']" into its path and key.
func subscript(path string) (base, key string, ok bool) {
	s, found := strings.CutSuffix(path, "']")
	if !found {
		return "", "", false
	}
	base, key, found = strings.Cut(s, "['")
	return base, key, found && base != ""
}

// formatMap renders a map as the downward API does: sorted k="v" lines.
func formatMap(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "%s=%q", k, m[k])
	}
	return b.String()
}

// resourceField is kubelet's containerResourceRuntimeValue: a resource of
// this container (or the one named), limits that are not set defaulting to
// the node's allocatable (defaultPodLimitsForDownwardAPI), divided by the
// divisor and rounded up. c is nil for a volume's item, which must name
// its container.
func (w *worker) resourceField(c *corev1.Container, fs *corev1.ResourceFieldSelector) (string, error) {
	if n := fs.GetContainerName(); c == nil || n != "" && n != c.GetName() {
		c = nil
		for _, x := range append(w.pod.GetSpec().GetInitContainers(), w.pod.GetSpec().GetContainers()...) {
			if x.GetName() == n {
				c = x
			}
		}
		if c == nil {
			return "", fmt.Errorf("container %s not found", n)
		}
	}
	divisor := resource.MustParse("1")
	if d := fs.GetDivisor(); d != "" {
		q, err := resource.ParseQuantity(d)
		if err != nil {
			return "", fmt.Errorf("invalid divisor %q: %w", d, err)
		}
		if q.IsZero() {
			q = divisor
		}
		divisor = q
	}
	kind, name, _ := strings.Cut(fs.GetResource(), ".")
	cpu, huge := name == "cpu", strings.HasPrefix(name, "hugepages-")
	if kind != "limits" && kind != "requests" || !cpu && !huge && name != "memory" && name != "ephemeral-storage" {
		return "", fmt.Errorf("unsupported container resource : %s", fs.GetResource())
	}
	set := c.GetResources().GetRequests()
	if kind == "limits" {
		set = c.GetResources().GetLimits()
	}
	s, ok := set[name]
	if !ok && kind == "limits" && !huge && w.d.allocatable != nil {
		s, ok = w.d.allocatable(name)
	}
	var q resource.Quantity
	if ok {
		var err error
		if q, err = resource.ParseQuantity(s); err != nil {
			return "", fmt.Errorf("invalid quantity %q for %s: %w", s, fs.GetResource(), err)
		}
	}
	if cpu {
		return strconv.FormatInt(int64(math.Ceil(float64(q.MilliValue())/float64(divisor.MilliValue()))), 10), nil
	}
	return strconv.FormatInt(int64(math.Ceil(float64(q.Value())/float64(divisor.Value()))), 10), nil
}

func expandAll(in []string, vals map[string]string) []string {
	if len(in) == 0 {
		return nil
	}
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = expand(s, vals)
	}
	return out
}

// expand is Kubernetes' $(VAR) expansion (third_party/forked/golang/
// expansion): $(NAME) becomes NAME's value when NAME is defined and stays
// as written when not; $$ is a literal $ (so $$(NAME) is the text
// $(NAME)); a $ before anything else, or an unclosed $(, is kept.
func expand(s string, vals map[string]string) string {
	return expandFunc(s, func(name string) (string, bool) {
		v, ok := vals[name]
		return v, ok
	})
}

// expandFunc is expand with the values from mapping (ok false: the
// reference stays as written).
func expandFunc(s string, mapping func(name string) (string, bool)) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch next := s[i+1]; next {
		case '$': // escaped operator
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 { // incomplete reference: written as is
				b.WriteString("$(")
				i++
				continue
			}
			name := s[i+2 : i+2+end]
			if v, ok := mapping(name); ok {
				b.WriteString(v)
			} else {
				b.WriteString("$(" + name + ")")
			}
			i += 2 + end
		default: // not a reference: the operator and the byte after it
			b.WriteByte('$')
			b.WriteByte(next)
			i++
		}
	}
	return b.String()
}
