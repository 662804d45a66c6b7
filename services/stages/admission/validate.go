package admission

import (
	"cmp"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/api/validate/content"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/validate"
)

// Enumerations validated by ValidatePod.
var (
	restartPolicies     = []string{"Always", "OnFailure", "Never"}
	dnsPolicies         = []string{"", "ClusterFirst", "ClusterFirstWithHostNet", "Default", "None"}
	pullPolicies        = []string{"Always", "IfNotPresent", "Never"}
	protocols           = []string{"TCP", "UDP", "SCTP"}
	schemes             = []string{"HTTP", "HTTPS"}
	tolerationOperators = []string{"Equal", "Exists"}
	taintEffects        = []string{"NoSchedule", "PreferNoSchedule", "NoExecute"}
	selectorOperators   = []string{"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"}
	procMounts          = []string{"Default", "Unmasked"}
	seccompTypes        = []string{"RuntimeDefault", "Localhost", "Unconfined"}
	emptyDirMedia       = []string{"", "Memory"}

	// seLinuxChangePolicies as validateSELinuxChangePolicy lists them.
	seLinuxChangePolicies = []string{"MountOption", "Recursive"}
)

// standardResources skip the qualified-name check (a regexp) on the hot path.
var standardResources = map[string]bool{"cpu": true, "memory": true, "ephemeral-storage": true}

// ValidatePod checks the pod against the schema: names, required fields,
// quantities, ports, probes, volumes and enumerations, as Kubernetes' pod
// validation does for the fields podflow models. It expects a defaulted pod
// (Admit calls it after mutation): empty enumerations that defaulting would
// fill are reported as unsupported. It returns nil when the pod is valid,
// else a 422 Invalid Status with one cause per problem and Kubernetes'
// message, e.g.
//
//	Pod "web" is invalid: [spec.containers[0].image: Required value, spec.restartPolicy: Unsupported value: "Sometimes": supported values: "Always", "OnFailure", "Never"]
func ValidatePod(pod *corev1.Pod) *corev1.Status {
	errs := validatePod(pod)
	if len(errs) == 0 {
		return nil
	}
	return validate.InvalidStatus("Pod", pod.GetMetadata().GetName(), errs)
}

func validatePod(pod *corev1.Pod) field.ErrorList {
	var errs field.ErrorList
	md := field.NewPath("metadata")
	meta := pod.GetMetadata()
	switch {
	case meta.GetName() != "":
		errs = append(errs, validate.DNS1123Subdomain(md.Child("name"), meta.GetName())...)
	case meta.GetGenerateName() != "":
		// A generateName prefix may end in "-": the suffix follows it.
		errs = append(errs, validate.DNS1123Subdomain(md.Child("generateName"), strings.TrimSuffix(meta.GetGenerateName(), "-")+"a")...)
	default:
		errs = append(errs, field.Required(md.Child("name"), "name or generateName is required"))
	}
	if meta.GetNamespace() == "" {
		errs = append(errs, field.Required(md.Child("namespace"), ""))
	} else {
		errs = append(errs, validate.DNS1123Label(md.Child("namespace"), meta.GetNamespace())...)
	}
	errs = append(errs, labels(md.Child("labels"), meta.GetLabels())...)
	for _, k := range slices.Sorted(maps.Keys(meta.GetAnnotations())) {
		for _, msg := range content.IsLabelKey(strings.ToLower(k)) {
			errs = append(errs, field.Invalid(md.Child("annotations"), k, msg))
		}
	}
	return append(errs, validateSpec(field.NewPath("spec"), pod.GetSpec())...)
}

func validateSpec(p *field.Path, spec *corev1.PodSpec) field.ErrorList {
	var errs field.ErrorList
	if spec == nil {
		spec = &corev1.PodSpec{}
	}
	volumes, verrs := validateVolumes(p.Child("volumes"), spec.GetVolumes())
	errs = append(errs, verrs...)

	if len(spec.GetContainers()) == 0 {
		errs = append(errs, field.Required(p.Child("containers"), ""))
	}
	if len(spec.GetEphemeralContainers()) > 0 { // added later, through pods/ephemeralcontainers
		errs = append(errs, field.Forbidden(p.Child("ephemeralContainers"), "cannot be set on create"))
	}
	names := map[string]bool{}
	for i, c := range spec.GetInitContainers() {
		errs = append(errs, validateContainer(p.Child("initContainers").Index(i), c, volumes, names, spec.GetHostNetwork(), true)...)
	}
	for i, c := range spec.GetContainers() {
		errs = append(errs, validateContainer(p.Child("containers").Index(i), c, volumes, names, spec.GetHostNetwork(), false)...)
	}
	errs = append(errs, hostPortConflicts(p.Child("containers"), spec.GetContainers())...)

	errs = append(errs, oneOf(p, spec.GetRestartPolicy(), restartPolicies, "restartPolicy")...)
	errs = append(errs, validateDNS(p, spec)...)
	if g := spec.TerminationGracePeriodSeconds; g != nil && *g < 0 {
		errs = append(errs, field.Invalid(p.Child("terminationGracePeriodSeconds"), *g, "must be greater than or equal to 0"))
	}
	if sa := spec.GetServiceAccountName(); sa != "" {
		errs = append(errs, validate.DNS1123Subdomain(p.Child("serviceAccountName"), sa)...)
	}
	if n := spec.GetNodeName(); n != "" {
		errs = append(errs, validate.DNS1123Subdomain(p.Child("nodeName"), n)...)
	}
	if h := spec.GetHostname(); h != "" {
		errs = append(errs, validate.DNS1123Label(p.Child("hostname"), h)...)
	}
	if sd := spec.GetSubdomain(); sd != "" {
		errs = append(errs, validate.DNS1123Label(p.Child("subdomain"), sd)...)
	}
	for i, ha := range spec.GetHostAliases() { // ValidateHostAliases
		hp := p.Child("hostAliases").Index(i)
		errs = append(errs, validation.IsValidIPForLegacyField(hp.Child("ip"), ha.GetIp(), false, nil)...)
		for j, h := range ha.GetHostnames() {
			errs = append(errs, validate.DNS1123Subdomain(hp.Child("hostnames").Index(j), h)...)
		}
	}
	errs = append(errs, labels(p.Child("nodeSelector"), spec.GetNodeSelector())...)
	errs = append(errs, validatePodSecurityContext(p.Child("securityContext"), spec.GetSecurityContext())...)
	for i, t := range spec.GetTolerations() {
		errs = append(errs, validateToleration(p.Child("tolerations").Index(i), t)...)
	}
	errs = append(errs, validateAffinity(p.Child("affinity"), spec.GetAffinity())...)
	errs = append(errs, validateSchedulingFields(p, spec)...)
	return errs
}

func validateVolumes(p *field.Path, vols []*corev1.Volume) (map[string]bool, field.ErrorList) {
	var errs field.ErrorList
	names := map[string]bool{}
	for i, v := range vols {
		vp := p.Index(i)
		switch {
		case v.GetName() == "":
			errs = append(errs, field.Required(vp.Child("name"), ""))
		case names[v.GetName()]:
			errs = append(errs, field.Duplicate(vp.Child("name"), v.GetName()))
		default:
			errs = append(errs, validate.DNS1123Label(vp.Child("name"), v.GetName())...)
		}
		names[v.GetName()] = true

		var sources []string
		if s := v.GetEmptyDir(); s != nil {
			sources = append(sources, "emptyDir")
			errs = append(errs, oneOf(vp, s.GetMedium(), emptyDirMedia, "emptyDir", "medium")...)
			if s.GetSizeLimit() != "" {
				errs = append(errs, quantity(vp.Child("emptyDir", "sizeLimit"), s.GetSizeLimit())...)
			}
		}
		if s := v.GetConfigMap(); s != nil {
			sources = append(sources, "configMap")
			errs = append(errs, requiredName(vp.Child("configMap", "name"), s.GetName())...)
			errs = append(errs, objectVolumeItems(vp.Child("configMap"), s.DefaultMode, s.GetItems())...)
		}
		if s := v.GetSecret(); s != nil {
			sources = append(sources, "secret")
			errs = append(errs, requiredName(vp.Child("secret", "secretName"), s.GetSecretName())...)
			errs = append(errs, objectVolumeItems(vp.Child("secret"), s.DefaultMode, s.GetItems())...)
		}
		if s := v.GetDownwardApi(); s != nil {
			sources = append(sources, "downwardAPI")
			errs = append(errs, validateDownwardAPIVolume(vp.Child("downwardAPI"), s)...)
		}
		if s := v.GetProjected(); s != nil {
			sources = append(sources, "projected")
			errs = append(errs, validateProjectedVolume(vp.Child("projected"), s)...)
		}
		if s := v.GetHostPath(); s != nil {
			sources = append(sources, "hostPath")
			if s.GetPath() == "" {
				errs = append(errs, field.Required(vp.Child("hostPath", "path"), ""))
			}
		}
		if s := v.GetCsi(); s != nil {
			sources = append(sources, "csi")
			errs = append(errs, validateCSIVolumeSource(vp.Child("csi"), s)...)
		}
		if s := v.GetPersistentVolumeClaim(); s != nil {
			sources = append(sources, "persistentVolumeClaim")
			errs = append(errs, requiredName(vp.Child("persistentVolumeClaim", "claimName"), s.GetClaimName())...)
		}
		switch {
		case len(sources) == 0:
			errs = append(errs, field.Required(vp, "must specify a volume type"))
		case len(sources) > 1:
			errs = append(errs, field.Forbidden(vp.Child(sources[1]), "may not specify more than 1 volume type"))
		}
	}
	return names, errs
}

// validateCSIVolumeSource is kube's: the driver's name (ValidateCSIDriverName)
// and the nodePublishSecretRef's (a Secret's name; kube names its error
// csi.name).
func validateCSIVolumeSource(p *field.Path, csi *corev1.CSIVolumeSource) field.ErrorList {
	errs := validateCSIDriverName(p.Child("driver"), csi.GetDriver())
	if ref := csi.GetNodePublishSecretRef(); ref != nil {
		if ref.GetName() == "" {
			errs = append(errs, field.Required(p.Child("nodePublishSecretRef", "name"), ""))
		} else {
			for _, msg := range validation.IsDNS1123Subdomain(ref.GetName()) {
				errs = append(errs, field.Invalid(p.Child("name"), ref.GetName(), msg))
			}
		}
	}
	return errs
}

// validateCSIDriverName is kube's ValidateCSIDriverName: required, at most
// 63 characters, a DNS subdomain in any case.
func validateCSIDriverName(p *field.Path, name string) field.ErrorList {
	var errs field.ErrorList
	if name == "" {
		errs = append(errs, field.Required(p, ""))
	}
	if len(name) > 63 {
		errs = append(errs, field.TooLong(p, "", 63))
	}
	for _, msg := range validation.IsDNS1123Subdomain(strings.ToLower(name)) {
		errs = append(errs, field.Invalid(p, name, msg))
	}
	return errs
}

func validateContainer(p *field.Path, c *corev1.Container, volumes, names map[string]bool, hostNetwork, init bool) field.ErrorList {
	var errs field.ErrorList
	switch name := c.GetName(); {
	case name == "":
		errs = append(errs, field.Required(p.Child("name"), ""))
	case names[name]:
		errs = append(errs, field.Duplicate(p.Child("name"), name))
	default:
		errs = append(errs, validate.DNS1123Label(p.Child("name"), name)...)
	}
	names[c.GetName()] = true
	if strings.TrimSpace(c.GetImage()) == "" {
		errs = append(errs, field.Required(p.Child("image"), ""))
	}
	errs = append(errs, oneOf(p, c.GetImagePullPolicy(), pullPolicies, "imagePullPolicy")...)
	if init {
		if rp := c.GetRestartPolicy(); rp != "" {
			errs = append(errs, oneOf(p, rp, []string{"Always"}, "restartPolicy")...)
		}
	} else if c.GetRestartPolicy() != "" {
		errs = append(errs, field.Forbidden(p.Child("restartPolicy"), "may not be set for non-init containers"))
	}

	portNames := map[string]bool{}
	for i, port := range c.GetPorts() {
		pp := p.Child("ports").Index(i)
		if n := port.GetName(); n != "" {
			for _, msg := range validation.IsValidPortName(n) {
				errs = append(errs, field.Invalid(pp.Child("name"), n, msg))
			}
			if portNames[n] {
				errs = append(errs, field.Duplicate(pp.Child("name"), n))
			}
			portNames[n] = true
		}
		if port.GetContainerPort() == 0 {
			errs = append(errs, field.Required(pp.Child("containerPort"), ""))
		} else {
			errs = append(errs, portNum(pp.Child("containerPort"), port.GetContainerPort())...)
		}
		if hp := port.GetHostPort(); hp != 0 {
			errs = append(errs, portNum(pp.Child("hostPort"), hp)...)
			if hostNetwork && hp != port.GetContainerPort() {
				errs = append(errs, field.Invalid(pp.Child("hostPort"), hp, "must match `containerPort` when `hostNetwork` is true"))
			}
		}
		errs = append(errs, oneOf(pp, port.GetProtocol(), protocols, "protocol")...)
	}

	for i, e := range c.GetEnv() {
		ep := p.Child("env").Index(i)
		if e.GetName() == "" {
			errs = append(errs, field.Required(ep.Child("name"), ""))
		} else {
			for _, msg := range validation.IsEnvVarName(e.GetName()) {
				errs = append(errs, field.Invalid(ep.Child("name"), e.GetName(), msg))
			}
		}
		errs = append(errs, validateEnvVarValueFrom(ep.Child("valueFrom"), e)...)
	}

	errs = append(errs, validateResources(p.Child("resources"), c.GetResources())...)

	mountPaths := map[string]bool{}
	for i, vm := range c.GetVolumeMounts() {
		mp := p.Child("volumeMounts").Index(i)
		switch {
		case vm.GetName() == "":
			errs = append(errs, field.Required(mp.Child("name"), ""))
		case !volumes[vm.GetName()]:
			errs = append(errs, field.NotFound(mp.Child("name"), vm.GetName()))
		}
		switch {
		case vm.GetMountPath() == "":
			errs = append(errs, field.Required(mp.Child("mountPath"), ""))
		case mountPaths[vm.GetMountPath()]:
			errs = append(errs, field.Invalid(mp.Child("mountPath"), vm.GetMountPath(), "must be unique"))
		}
		mountPaths[vm.GetMountPath()] = true
		if sp := vm.GetSubPath(); sp != "" && (strings.HasPrefix(sp, "/") || slices.Contains(strings.Split(sp, "/"), "..")) {
			errs = append(errs, field.Invalid(mp.Child("subPath"), sp, "must be a relative path without '..'"))
		}
		if se := vm.GetSubPathExpr(); se != "" { // validateVolumeMounts' words
			if vm.GetSubPath() != "" {
				errs = append(errs, field.Invalid(mp.Child("subPathExpr"), se, "subPathExpr and subPath are mutually exclusive"))
			}
			if strings.HasPrefix(se, "/") {
				errs = append(errs, field.Invalid(mp.Child("subPathExpr"), se, "must be a relative path"))
			}
			if slices.Contains(strings.Split(se, "/"), "..") {
				errs = append(errs, field.Invalid(mp.Child("subPathExpr"), se, "must not contain '..'"))
			}
		}
	}

	if c.LivenessProbe != nil {
		errs = append(errs, validateProbe(p.Child("livenessProbe"), c.LivenessProbe, true)...)
	}
	if c.ReadinessProbe != nil {
		errs = append(errs, validateProbe(p.Child("readinessProbe"), c.ReadinessProbe, false)...)
	}
	if c.StartupProbe != nil {
		errs = append(errs, validateProbe(p.Child("startupProbe"), c.StartupProbe, true)...)
	}
	if init && c.GetRestartPolicy() != "Always" {
		for _, probe := range []struct {
			name string
			set  bool
		}{{"livenessProbe", c.LivenessProbe != nil}, {"readinessProbe", c.ReadinessProbe != nil}, {"startupProbe", c.StartupProbe != nil}} {
			if probe.set {
				errs = append(errs, field.Forbidden(p.Child(probe.name), "may not be set for init containers without restartPolicy=Always"))
			}
		}
	}
	if c.SecurityContext != nil {
		errs = append(errs, validateSecurityContext(p.Child("securityContext"), c.SecurityContext)...)
	}
	return errs
}

// validateEnvVarValueFrom is Kubernetes' validateEnvVarValueFrom: exactly
// one source (fieldRef, resourceFieldRef, configMapKeyRef or secretKeyRef)
// and no value beside it, with Kubernetes' three messages; an env
// resourceFieldRef is checked as Kubernetes checks it (the containerName
// may be left out: the container itself).
func validateEnvVarValueFrom(p *field.Path, e *corev1.EnvVar) field.ErrorList {
	vf := e.GetValueFrom()
	if vf == nil {
		return nil
	}
	var errs field.ErrorList
	n := 0
	if vf.GetFieldRef() != nil {
		n++
	}
	if r := vf.GetResourceFieldRef(); r != nil {
		n++
		errs = append(errs, resourceSelector(p.Child("resourceFieldRef"), r, false)...)
	}
	if vf.GetConfigMapKeyRef() != nil {
		n++
	}
	if vf.GetSecretKeyRef() != nil {
		n++
	}
	switch {
	case n == 0:
		errs = append(errs, field.Invalid(p, "", "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`"))
	case e.GetValue() != "":
		errs = append(errs, field.Invalid(p, "", "may not be specified when `value` is not empty"))
	case n > 1:
		errs = append(errs, field.Invalid(p, "", "may not have more than one field specified at a time"))
	}
	return errs
}

// validateResources checks resource names and quantities, and that no
// request exceeds its limit.
func validateResources(p *field.Path, r *corev1.ResourceRequirements) field.ErrorList {
	var errs field.ErrorList
	parsed := func(kind string, m map[string]string) map[string]resource.Quantity {
		out := map[string]resource.Quantity{}
		for _, name := range slices.Sorted(maps.Keys(m)) {
			kp := func() *field.Path { return p.Child(kind).Key(name) }
			if !standardResources[name] {
				for _, msg := range content.IsLabelKey(name) {
					errs = append(errs, field.Invalid(kp(), name, msg))
				}
			}
			q, err := resource.ParseQuantity(m[name])
			switch {
			case err != nil:
				errs = append(errs, field.Invalid(kp(), m[name], "must be a valid quantity, e.g. 100m or 128Mi"))
			case q.Sign() < 0:
				errs = append(errs, field.Invalid(kp(), m[name], "must be greater than or equal to 0"))
			default:
				out[name] = q
			}
		}
		return out
	}
	limits := parsed("limits", r.GetLimits())
	requests := parsed("requests", r.GetRequests())
	for _, name := range slices.Sorted(maps.Keys(requests)) {
		req := requests[name]
		if lim, ok := limits[name]; ok && req.Cmp(lim) > 0 {
			errs = append(errs, field.Invalid(p.Child("requests").Key(name), req.String(),
				fmt.Sprintf("must be less than or equal to %s limit of %s", name, lim.String())))
		}
	}
	return errs
}

func validateProbe(p *field.Path, probe *corev1.Probe, successMustBeOne bool) field.ErrorList {
	if probe == nil {
		return nil
	}
	var errs field.ErrorList
	var handlers []string
	if probe.GetExec() != nil {
		handlers = append(handlers, "exec")
		if len(probe.GetExec().GetCommand()) == 0 {
			errs = append(errs, field.Required(p.Child("exec", "command"), ""))
		}
	}
	if h := probe.GetHttpGet(); h != nil {
		handlers = append(handlers, "httpGet")
		errs = append(errs, portNumOrName(p.Child("httpGet", "port"), h.GetPort())...)
		errs = append(errs, oneOf(p, h.GetScheme(), schemes, "httpGet", "scheme")...)
		for i, hdr := range h.GetHttpHeaders() {
			for _, msg := range validation.IsHTTPHeaderName(hdr.GetName()) {
				errs = append(errs, field.Invalid(p.Child("httpGet", "httpHeaders").Index(i).Child("name"), hdr.GetName(), msg))
			}
		}
	}
	if t := probe.GetTcpSocket(); t != nil {
		handlers = append(handlers, "tcpSocket")
		errs = append(errs, portNumOrName(p.Child("tcpSocket", "port"), t.GetPort())...)
	}
	if g := probe.GetGrpc(); g != nil { // as Kubernetes' validateGRPCAction
		handlers = append(handlers, "grpc")
		errs = append(errs, portNum(p.Child("grpc", "port"), g.GetPort())...)
	}
	switch {
	case len(handlers) == 0:
		errs = append(errs, field.Required(p, "must specify a handler type"))
	case len(handlers) > 1:
		errs = append(errs, field.Forbidden(p.Child(handlers[1]), "may not specify more than 1 handler type"))
	}
	nonNeg := func(name string, v int32) {
		if v < 0 {
			errs = append(errs, field.Invalid(p.Child(name), v, "must be greater than or equal to 0"))
		}
	}
	nonNeg("initialDelaySeconds", probe.GetInitialDelaySeconds())
	for _, f := range []struct {
		name string
		v    int32
	}{{"timeoutSeconds", probe.GetTimeoutSeconds()}, {"periodSeconds", probe.GetPeriodSeconds()},
		{"successThreshold", probe.GetSuccessThreshold()}, {"failureThreshold", probe.GetFailureThreshold()}} {
		if f.v < 1 {
			errs = append(errs, field.Invalid(p.Child(f.name), f.v, "must be greater than or equal to 1"))
		}
	}
	if successMustBeOne && probe.GetSuccessThreshold() > 1 {
		errs = append(errs, field.Invalid(p.Child("successThreshold"), probe.GetSuccessThreshold(), "must be 1"))
	}
	if g := probe.TerminationGracePeriodSeconds; g != nil && *g <= 0 {
		errs = append(errs, field.Invalid(p.Child("terminationGracePeriodSeconds"), *g, "must be greater than 0"))
	}
	return errs
}

func validateSecurityContext(p *field.Path, sc *corev1.SecurityContext) field.ErrorList {
	if sc == nil {
		return nil
	}
	var errs field.ErrorList
	if pm := sc.GetProcMount(); pm != "" {
		errs = append(errs, oneOf(p, pm, procMounts, "procMount")...)
	}
	errs = append(errs, validateSeccomp(p.Child("seccompProfile"), sc.GetSeccompProfile())...)
	errs = append(errs, ids(p, sc.RunAsUser, sc.RunAsGroup)...)
	if sc.GetPrivileged() && sc.AllowPrivilegeEscalation != nil && !sc.GetAllowPrivilegeEscalation() {
		errs = append(errs, field.Invalid(p, "", "cannot set `allowPrivilegeEscalation` to false and `privileged` to true"))
	}
	return errs
}

func validatePodSecurityContext(p *field.Path, sc *corev1.PodSecurityContext) field.ErrorList {
	if sc == nil {
		return nil
	}
	var errs field.ErrorList
	errs = append(errs, validateSeccomp(p.Child("seccompProfile"), sc.GetSeccompProfile())...)
	errs = append(errs, ids(p, sc.RunAsUser, sc.RunAsGroup)...)
	if g := sc.FsGroup; g != nil {
		for _, msg := range validation.IsValidGroupID(*g) {
			errs = append(errs, field.Invalid(p.Child("fsGroup"), *g, msg))
		}
	}
	for i, g := range sc.GetSupplementalGroups() {
		for _, msg := range validation.IsValidGroupID(g) {
			errs = append(errs, field.Invalid(p.Child("supplementalGroups").Index(i), g, msg))
		}
	}
	if v := sc.SeLinuxChangePolicy; v != nil && !slices.Contains(seLinuxChangePolicies, *v) {
		errs = append(errs, field.NotSupported(p.Child("seLinuxChangePolicy"), *v, seLinuxChangePolicies))
	}
	seen := map[string]bool{}
	for i, s := range sc.GetSysctls() {
		sp := p.Child("sysctls").Index(i)
		switch {
		case s.GetName() == "":
			errs = append(errs, field.Required(sp.Child("name"), ""))
		case seen[s.GetName()]:
			errs = append(errs, field.Duplicate(sp.Child("name"), s.GetName()))
		case !sysctlName(s.GetName()):
			errs = append(errs, field.Invalid(sp.Child("name"), s.GetName(), "must have at most 253 characters and match regex ^([a-z0-9]([-_a-z0-9]*[a-z0-9])?[./])*[a-z0-9]([-_a-z0-9]*[a-z0-9])?$"))
		}
		seen[s.GetName()] = true
	}
	return errs
}

func validateSeccomp(p *field.Path, sp *corev1.SeccompProfile) field.ErrorList {
	if sp == nil {
		return nil
	}
	errs := oneOf(p, sp.GetType(), seccompTypes, "type")
	switch {
	case sp.GetType() == "Localhost" && sp.GetLocalhostProfile() == "":
		errs = append(errs, field.Required(p.Child("localhostProfile"), "must be set when seccomp type is Localhost"))
	case sp.GetType() != "Localhost" && sp.GetLocalhostProfile() != "":
		errs = append(errs, field.Invalid(p.Child("localhostProfile"), sp.GetLocalhostProfile(), "can only be set when seccomp type is Localhost"))
	}
	return errs
}

func ids(p *field.Path, user, group *int64) field.ErrorList {
	var errs field.ErrorList
	if user != nil {
		for _, msg := range validation.IsValidUserID(*user) {
			errs = append(errs, field.Invalid(p.Child("runAsUser"), *user, msg))
		}
	}
	if group != nil {
		for _, msg := range validation.IsValidGroupID(*group) {
			errs = append(errs, field.Invalid(p.Child("runAsGroup"), *group, msg))
		}
	}
	return errs
}

func validateToleration(p *field.Path, t *corev1.Toleration) field.ErrorList {
	var errs field.ErrorList
	if t.GetKey() != "" {
		for _, msg := range content.IsLabelKey(t.GetKey()) {
			errs = append(errs, field.Invalid(p.Child("key"), t.GetKey(), msg))
		}
	}
	switch op := t.GetOperator(); op {
	case "", "Equal":
		if t.GetKey() == "" {
			errs = append(errs, field.Invalid(p.Child("operator"), op, "operator must be Exists when `key` is empty, which means \"match all values and all keys\""))
		}
		for _, msg := range content.IsLabelValue(t.GetValue()) {
			errs = append(errs, field.Invalid(p.Child("value"), t.GetValue(), msg))
		}
	case "Exists":
		if t.GetValue() != "" {
			errs = append(errs, field.Invalid(p.Child("operator"), t.GetValue(), "value must be empty when `operator` is 'Exists'"))
		}
	default:
		errs = append(errs, field.NotSupported(p.Child("operator"), op, tolerationOperators))
	}
	if e := t.GetEffect(); e != "" {
		errs = append(errs, oneOf(p, e, taintEffects, "effect")...)
	}
	if t.TolerationSeconds != nil && t.GetEffect() != "NoExecute" {
		errs = append(errs, field.Invalid(p.Child("effect"), t.GetEffect(), "effect must be 'NoExecute' when `tolerationSeconds` is set"))
	}
	return errs
}

func validateAffinity(p *field.Path, a *corev1.Affinity) field.ErrorList {
	na := a.GetNodeAffinity()
	if na == nil {
		return nil
	}
	var errs field.ErrorList
	p = p.Child("nodeAffinity")
	if req := na.GetRequiredDuringSchedulingIgnoredDuringExecution(); req != nil {
		rp := p.Child("requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms")
		if len(req.GetNodeSelectorTerms()) == 0 {
			errs = append(errs, field.Required(rp, "must have at least one node selector term"))
		}
		for i, term := range req.GetNodeSelectorTerms() {
			errs = append(errs, validateTerm(rp.Index(i), term)...)
		}
	}
	for i, pref := range na.GetPreferredDuringSchedulingIgnoredDuringExecution() {
		pp := p.Child("preferredDuringSchedulingIgnoredDuringExecution").Index(i)
		if w := pref.GetWeight(); w < 1 || w > 100 {
			errs = append(errs, field.Invalid(pp.Child("weight"), w, validation.InclusiveRangeError(1, 100)))
		}
		errs = append(errs, validateTerm(pp.Child("preference"), pref.GetPreference())...)
	}
	return errs
}

func validateTerm(p *field.Path, term *corev1.NodeSelectorTerm) field.ErrorList {
	var errs field.ErrorList
	for i, r := range term.GetMatchExpressions() {
		rp := p.Child("matchExpressions").Index(i)
		for _, msg := range content.IsLabelKey(r.GetKey()) {
			errs = append(errs, field.Invalid(rp.Child("key"), r.GetKey(), msg))
		}
		errs = append(errs, validateRequirement(rp, r)...)
	}
	for i, r := range term.GetMatchFields() {
		rp := p.Child("matchFields").Index(i)
		if r.GetKey() != "metadata.name" {
			errs = append(errs, field.NotSupported(rp.Child("key"), r.GetKey(), []string{"metadata.name"}))
		}
		if op := r.GetOperator(); op != "In" && op != "NotIn" {
			errs = append(errs, field.NotSupported(rp.Child("operator"), op, []string{"In", "NotIn"}))
		} else if len(r.GetValues()) != 1 {
			errs = append(errs, field.Required(rp.Child("values"), "must be only one value when `operator` is 'In' or 'NotIn' for node field selector"))
		}
	}
	return errs
}

func validateRequirement(p *field.Path, r *corev1.NodeSelectorRequirement) field.ErrorList {
	var errs field.ErrorList
	vp := p.Child("values")
	switch r.GetOperator() {
	case "In", "NotIn":
		if len(r.GetValues()) == 0 {
			errs = append(errs, field.Required(vp, "must be specified when `operator` is 'In' or 'NotIn'"))
		}
	case "Exists", "DoesNotExist":
		if len(r.GetValues()) > 0 {
			errs = append(errs, field.Forbidden(vp, "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"))
		}
	case "Gt", "Lt":
		if len(r.GetValues()) != 1 {
			errs = append(errs, field.Required(vp, "must be specified single value when `operator` is 'Lt' or 'Gt'"))
		} else if _, err := strconv.ParseInt(r.GetValues()[0], 10, 64); err != nil {
			errs = append(errs, field.Invalid(vp.Index(0), r.GetValues()[0], "must be an integer when `operator` is 'Lt' or 'Gt'"))
		}
	default:
		errs = append(errs, field.NotSupported(p.Child("operator"), r.GetOperator(), selectorOperators))
	}
	return errs
}

// ---------------------------------------------------------------- helpers

func requiredName(p *field.Path, v string) field.ErrorList {
	if v == "" {
		return field.ErrorList{field.Required(p, "")}
	}
	return validate.DNS1123Subdomain(p, v)
}

func labels(p *field.Path, m map[string]string) field.ErrorList {
	var errs field.ErrorList
	for _, k := range slices.Sorted(maps.Keys(m)) {
		for _, msg := range content.IsLabelKey(k) {
			errs = append(errs, field.Invalid(p, k, msg))
		}
		for _, msg := range content.IsLabelValue(m[k]) {
			errs = append(errs, field.Invalid(p, m[k], msg))
		}
	}
	return errs
}

// oneOf checks an enumeration; the field path (parent plus names) is
// built only on error, as validation runs on every admitted pod.
func oneOf(parent *field.Path, v string, allowed []string, names ...string) field.ErrorList {
	if slices.Contains(allowed, v) {
		return nil
	}
	p := parent.Child(names[0], names[1:]...)
	if v == "" {
		return field.ErrorList{field.Required(p, "")}
	}
	return field.ErrorList{field.NotSupported(p, v, allowed)}
}

func quantity(p *field.Path, v string) field.ErrorList {
	q, err := resource.ParseQuantity(v)
	if err != nil {
		return field.ErrorList{field.Invalid(p, v, "must be a valid quantity, e.g. 100m or 128Mi")}
	}
	if q.Sign() < 0 {
		return field.ErrorList{field.Invalid(p, v, "must be greater than or equal to 0")}
	}
	return nil
}

func portNum(p *field.Path, port int32) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range validation.IsValidPortNum(int(port)) {
		errs = append(errs, field.Invalid(p, port, msg))
	}
	return errs
}

func portNumOrName(p *field.Path, port *corev1.IntOrString) field.ErrorList {
	switch v := port.GetValue().(type) {
	case *corev1.IntOrString_IntVal:
		return portNum(p, v.IntVal)
	case *corev1.IntOrString_StrVal:
		var errs field.ErrorList
		for _, msg := range validation.IsValidPortName(v.StrVal) {
			errs = append(errs, field.Invalid(p, v.StrVal, msg))
		}
		return errs
	}
	return field.ErrorList{field.Required(p, "")}
}

// sysctlName matches Kubernetes' sysctl name format (dots or slashes as
// separators).
func sysctlName(name string) bool {
	if len(name) > 253 {
		return false
	}
	for _, seg := range strings.FieldsFunc(name, func(r rune) bool { return r == '.' || r == '/' }) {
		if seg == "" || seg[0] == '-' || seg[0] == '_' || seg[len(seg)-1] == '-' || seg[len(seg)-1] == '_' {
			return false
		}
		for _, r := range seg {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return false
			}
		}
	}
	return name != "" && !strings.ContainsAny(name[:1], "./") && !strings.ContainsAny(name[len(name)-1:], "./") &&
		!strings.Contains(name, "..") && !strings.Contains(name, "//")
}

// validateDNS checks dnsPolicy and dnsConfig as Kubernetes does: a known
// policy, None with a dnsConfig naming at least one nameserver, at most 3
// nameservers (IP addresses) and 32 search domains.
func validateDNS(p *field.Path, spec *corev1.PodSpec) field.ErrorList {
	errs := oneOf(p, spec.GetDnsPolicy(), dnsPolicies, "dnsPolicy")
	dc := spec.GetDnsConfig()
	if spec.GetDnsPolicy() == "None" {
		if dc == nil {
			return append(errs, field.Required(p.Child("dnsConfig"), "must provide `dnsConfig` when `dnsPolicy` is None"))
		}
		if len(dc.GetNameservers()) == 0 {
			errs = append(errs, field.Required(p.Child("dnsConfig", "nameservers"), "must provide at least one DNS nameserver when `dnsPolicy` is None"))
		}
	}
	ns := p.Child("dnsConfig", "nameservers")
	if n := len(dc.GetNameservers()); n > 3 {
		errs = append(errs, field.Invalid(ns, dc.GetNameservers(), "must not have more than 3 nameservers"))
	}
	for i, s := range dc.GetNameservers() {
		if net.ParseIP(s) == nil {
			errs = append(errs, field.Invalid(ns.Index(i), s, "must be valid IP address"))
		}
	}
	if n := len(dc.GetSearches()); n > 32 {
		errs = append(errs, field.Invalid(p.Child("dnsConfig", "searches"), dc.GetSearches(), "must not have more than 32 search paths"))
	}
	return errs
}

// hostPortConflicts refuses two ports of the pod's containers on one
// protocol, host IP and host port (kube's AccumulateUniqueHostPorts).
func hostPortConflicts(p *field.Path, containers []*corev1.Container) field.ErrorList {
	var errs field.ErrorList
	seen := map[string]bool{}
	for ci, c := range containers {
		for pi, port := range c.GetPorts() {
			if port.GetHostPort() == 0 {
				continue
			}
			key := fmt.Sprintf("%s/%s/%d", cmp.Or(port.GetProtocol(), "TCP"), port.GetHostIp(), port.GetHostPort())
			if seen[key] {
				errs = append(errs, field.Duplicate(p.Index(ci).Child("ports").Index(pi).Child("hostPort"), key))
			}
			seen[key] = true
		}
	}
	return errs
}
