package admission

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
)

// Level is a Pod Security Standards level.
type Level string

// Pod Security Standards levels and the namespace label choosing one.
const (
	LevelPrivileged Level = "privileged"
	LevelBaseline   Level = "baseline"
	LevelRestricted Level = "restricted"

	// LabelEnforce on a Namespace sets the level its pods must meet.
	LabelEnforce = "pod-security.kubernetes.io/enforce"
)

// LevelFor returns the level enforced in a namespace: its enforce label,
// or cfg.DefaultLevel (privileged if unset) without one. An unknown label
// value enforces restricted, as Kubernetes' PodSecurity admission does:
// a typo must not open the namespace up.
func LevelFor(ns *corev1.Namespace, cfg Config) Level {
	v, ok := ns.GetMetadata().GetLabels()[LabelEnforce]
	if !ok {
		if cfg.DefaultLevel == "" {
			return LevelPrivileged
		}
		return cfg.DefaultLevel
	}
	switch l := Level(v); l {
	case LevelPrivileged, LevelBaseline, LevelRestricted:
		return l
	}
	return LevelRestricted
}

// violation is one failed Pod Security check, in Kubernetes' terms: a short
// reason, a detail naming what to change, and the offending fields.
type violation struct {
	reason, detail string
	fields         []string
}

type psCheck struct {
	id    string
	level Level // lowest level enforcing the check
	// overrides is the id of the baseline check this restricted one
	// replaces at the restricted level.
	overrides string
	eval      func(*corev1.Pod) *violation
}

// psChecks are sorted by id, the order Kubernetes reports them in.
var psChecks = []psCheck{
	{id: "allowPrivilegeEscalation", level: LevelRestricted, eval: checkAllowPrivilegeEscalation},
	{id: "capabilities_baseline", level: LevelBaseline, eval: checkCapabilitiesBaseline},
	{id: "capabilities_restricted", level: LevelRestricted, overrides: "capabilities_baseline", eval: checkCapabilitiesRestricted},
	{id: "hostNamespaces", level: LevelBaseline, eval: checkHostNamespaces},
	{id: "hostPathVolumes", level: LevelBaseline, eval: checkHostPathVolumes},
	{id: "hostPorts", level: LevelBaseline, eval: checkHostPorts},
	{id: "privileged", level: LevelBaseline, eval: checkPrivileged},
	{id: "procMount", level: LevelBaseline, eval: checkProcMount},
	{id: "restrictedVolumes", level: LevelRestricted, overrides: "hostPathVolumes", eval: checkRestrictedVolumes},
	{id: "runAsNonRoot", level: LevelRestricted, eval: checkRunAsNonRoot},
	{id: "runAsUser", level: LevelRestricted, eval: checkRunAsUser},
	{id: "seLinuxOptions", level: LevelBaseline, eval: checkSELinuxOptions},
	{id: "seccompProfile_baseline", level: LevelBaseline, eval: checkSeccompBaseline},
	{id: "seccompProfile_restricted", level: LevelRestricted, overrides: "seccompProfile_baseline", eval: checkSeccompRestricted},
	{id: "sysctls", level: LevelBaseline, eval: checkSysctls},
}

// CheckPodSecurity evaluates the pod against the Pod Security Standards at
// level (latest version) and returns nil when it complies, else a 403
// PolicyViolation Status worded as Kubernetes' PodSecurity admission, e.g.
//
//	pods "web" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false (container "app" must set securityContext.allowPrivilegeEscalation=false)
//
// with one cause per offending field (type FieldValueForbidden, message
// naming the policy and the check).
func CheckPodSecurity(pod *corev1.Pod, level Level) *corev1.Status {
	if level != LevelBaseline && level != LevelRestricted {
		return nil
	}
	policy := fmt.Sprintf("%s:latest", level)
	var overridden []string
	if level == LevelRestricted {
		for _, c := range psChecks {
			if c.overrides != "" {
				overridden = append(overridden, c.overrides)
			}
		}
	}
	var details []string
	var causes []*corev1.StatusCause
	for _, c := range psChecks {
		if (c.level == LevelRestricted && level != LevelRestricted) || slices.Contains(overridden, c.id) {
			continue
		}
		v := c.eval(pod)
		if v == nil {
			continue
		}
		if v.detail == "" {
			details = append(details, v.reason)
		} else {
			details = append(details, fmt.Sprintf("%s (%s)", v.reason, v.detail))
		}
		for _, f := range v.fields {
			causes = append(causes, &corev1.StatusCause{
				Type:    "FieldValueForbidden",
				Message: fmt.Sprintf("PodSecurity %q: %s", policy, v.reason),
				Field:   f,
			})
		}
	}
	if len(details) == 0 {
		return nil
	}
	name := pod.GetMetadata().GetName()
	subject := "pods"
	if name != "" {
		subject = fmt.Sprintf("pods %q", name)
	}
	return &corev1.Status{
		Status:  "Failure",
		Code:    403,
		Reason:  eventsv1.ReasonPolicyViolation,
		Kind:    "Pod",
		Name:    name,
		Message: fmt.Sprintf("%s is forbidden: violates PodSecurity %q: %s", subject, policy, strings.Join(details, ", ")),
		Causes:  causes,
	}
}

// ---------------------------------------------------------------- checks

// containerAt is a container with its place in the pod spec.
type containerAt struct {
	c    *corev1.Container
	init bool
	i    int
}

// path returns the container's field path, e.g. "spec.containers[0]".
func (ca containerAt) path() string {
	if ca.init {
		return "spec.initContainers[" + strconv.Itoa(ca.i) + "]"
	}
	return "spec.containers[" + strconv.Itoa(ca.i) + "]"
}

func containers(p *corev1.Pod) []containerAt {
	spec := p.GetSpec()
	out := make([]containerAt, 0, len(spec.GetInitContainers())+len(spec.GetContainers()))
	for i, c := range spec.GetInitContainers() {
		out = append(out, containerAt{c, true, i})
	}
	for i, c := range spec.GetContainers() {
		out = append(out, containerAt{c, false, i})
	}
	return out
}

// collector gathers offending containers and fields of one check.
type collector struct {
	names  []string
	fields []string
}

func (c *collector) add(ca containerAt, field string) {
	if !slices.Contains(c.names, ca.c.GetName()) {
		c.names = append(c.names, ca.c.GetName())
	}
	c.fields = append(c.fields, ca.path()+"."+field)
}

// who renders `container "a"` or `containers "a", "b"`.
func (c *collector) who() string {
	return pluralize("container", "containers", len(c.names)) + " " + joinQuote(c.names)
}

func pluralize(one, many string, n int) string {
	if n == 1 {
		return one
	}
	return many
}

func joinQuote(items []string) string {
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = strconv.Quote(s)
	}
	return strings.Join(q, ", ")
}

// sortedSet returns the distinct items sorted.
func sortedSet(items []string) []string {
	out := slices.Clone(items)
	slices.Sort(out)
	return slices.Compact(out)
}

func checkAllowPrivilegeEscalation(p *corev1.Pod) *violation {
	var bad collector
	for _, ca := range containers(p) {
		if sc := ca.c.GetSecurityContext(); sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			bad.add(ca, "securityContext.allowPrivilegeEscalation")
		}
	}
	if len(bad.names) == 0 {
		return nil
	}
	return &violation{"allowPrivilegeEscalation != false",
		bad.who() + " must set securityContext.allowPrivilegeEscalation=false", bad.fields}
}

// baselineCapabilities may be added at the baseline level (the container
// runtime's default set).
var baselineCapabilities = []string{
	"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
	"NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}

func checkCapabilitiesBaseline(p *corev1.Pod) *violation {
	var bad collector
	var caps []string
	for _, ca := range containers(p) {
		for _, c := range ca.c.GetSecurityContext().GetCapabilities().GetAdd() {
			if !slices.Contains(baselineCapabilities, c) {
				bad.add(ca, "securityContext.capabilities.add")
				caps = append(caps, c)
			}
		}
	}
	if len(bad.names) == 0 {
		return nil
	}
	return &violation{"non-default capabilities",
		fmt.Sprintf("%s must not include %s in securityContext.capabilities.add", bad.who(), joinQuote(sortedSet(caps))),
		slices.Compact(bad.fields)}
}

func checkCapabilitiesRestricted(p *corev1.Pod) *violation {
	var noDrop, adding collector
	var caps []string
	for _, ca := range containers(p) {
		capsOf := ca.c.GetSecurityContext().GetCapabilities()
		if !slices.Contains(capsOf.GetDrop(), "ALL") {
			noDrop.add(ca, "securityContext.capabilities.drop")
		}
		for _, c := range capsOf.GetAdd() {
			if c != "NET_BIND_SERVICE" {
				adding.add(ca, "securityContext.capabilities.add")
				caps = append(caps, c)
			}
		}
	}
	var details []string
	if len(noDrop.names) > 0 {
		details = append(details, noDrop.who()+` must set securityContext.capabilities.drop=["ALL"]`)
	}
	if len(adding.names) > 0 {
		details = append(details, fmt.Sprintf("%s must not include %s in securityContext.capabilities.add",
			adding.who(), joinQuote(sortedSet(caps))))
	}
	if len(details) == 0 {
		return nil
	}
	return &violation{"unrestricted capabilities", strings.Join(details, "; "),
		append(noDrop.fields, slices.Compact(adding.fields)...)}
}

func checkHostNamespaces(p *corev1.Pod) *violation {
	var set, fields []string
	for _, ns := range []struct {
		name string
		on   bool
	}{{"hostNetwork", p.GetSpec().GetHostNetwork()}, {"hostPID", p.GetSpec().GetHostPid()}, {"hostIPC", p.GetSpec().GetHostIpc()}} {
		if ns.on {
			set = append(set, ns.name+"=true")
			fields = append(fields, "spec."+ns.name)
		}
	}
	if len(set) == 0 {
		return nil
	}
	return &violation{"host namespaces", strings.Join(set, ", "), fields}
}

func checkHostPathVolumes(p *corev1.Pod) *violation {
	var names, fields []string
	for i, v := range p.GetSpec().GetVolumes() {
		if v.GetHostPath() != nil {
			names = append(names, v.GetName())
			fields = append(fields, fmt.Sprintf("spec.volumes[%d].hostPath", i))
		}
	}
	if len(names) == 0 {
		return nil
	}
	return &violation{"hostPath volumes", pluralize("volume", "volumes", len(names)) + " " + joinQuote(names), fields}
}

func checkHostPorts(p *corev1.Pod) *violation {
	var bad collector
	var ports []string
	for _, ca := range containers(p) {
		for i, port := range ca.c.GetPorts() {
			if port.GetHostPort() != 0 {
				bad.add(ca, fmt.Sprintf("ports[%d].hostPort", i))
				ports = append(ports, strconv.Itoa(int(port.GetHostPort())))
			}
		}
	}
	if len(bad.names) == 0 {
		return nil
	}
	ports = sortedSet(ports)
	return &violation{"hostPort", fmt.Sprintf("%s %s %s %s", bad.who(), pluralize("uses", "use", len(bad.names)),
		pluralize("hostPort", "hostPorts", len(ports)), strings.Join(ports, ", ")), bad.fields}
}

func checkPrivileged(p *corev1.Pod) *violation {
	var bad collector
	for _, ca := range containers(p) {
		if ca.c.GetSecurityContext().GetPrivileged() {
			bad.add(ca, "securityContext.privileged")
		}
	}
	if len(bad.names) == 0 {
		return nil
	}
	return &violation{"privileged", bad.who() + " must not set securityContext.privileged=true", bad.fields}
}

func checkProcMount(p *corev1.Pod) *violation {
	var bad collector
	var values []string
	for _, ca := range containers(p) {
		if pm := ca.c.GetSecurityContext().GetProcMount(); pm != "" && pm != "Default" {
			bad.add(ca, "securityContext.procMount")
			values = append(values, pm)
		}
	}
	if len(bad.names) == 0 {
		return nil
	}
	return &violation{"procMount", fmt.Sprintf("%s must not set securityContext.procMount to %s",
		bad.who(), joinQuote(sortedSet(values))), bad.fields}
}

func checkRestrictedVolumes(p *corev1.Pod) *violation {
	// Of the volume sources podflow models, only hostPath is outside the
	// restricted set (configMap, emptyDir, secret, persistentVolumeClaim,
	// and csi, downwardAPI, ephemeral, projected in Kubernetes).
	var names, types, fields []string
	for i, v := range p.GetSpec().GetVolumes() {
		if v.GetHostPath() != nil {
			names = append(names, v.GetName())
			types = append(types, "hostPath")
			fields = append(fields, fmt.Sprintf("spec.volumes[%d].hostPath", i))
		}
	}
	if len(names) == 0 {
		return nil
	}
	types = sortedSet(types)
	return &violation{"restricted volume types", fmt.Sprintf("%s %s %s %s %s",
		pluralize("volume", "volumes", len(names)), joinQuote(names), pluralize("uses", "use", len(names)),
		pluralize("restricted volume type", "restricted volume types", len(types)), joinQuote(types)), fields}
}

func checkRunAsNonRoot(p *corev1.Pod) *violation {
	var setters, fields []string
	podNonRoot := false
	if psc := p.GetSpec().GetSecurityContext(); psc != nil && psc.RunAsNonRoot != nil {
		if psc.GetRunAsNonRoot() {
			podNonRoot = true
		} else {
			setters = append(setters, "pod")
			fields = append(fields, "spec.securityContext.runAsNonRoot")
		}
	}
	var explicit, implicit collector
	for _, ca := range containers(p) {
		sc := ca.c.GetSecurityContext()
		switch {
		case sc != nil && sc.RunAsNonRoot != nil:
			if !*sc.RunAsNonRoot {
				explicit.add(ca, "securityContext.runAsNonRoot")
			}
		case !podNonRoot:
			implicit.add(ca, "securityContext.runAsNonRoot")
		}
	}
	if len(explicit.names) > 0 {
		setters = append(setters, explicit.who())
		fields = append(fields, explicit.fields...)
	}
	if len(setters) > 0 {
		return &violation{"runAsNonRoot != true",
			strings.Join(setters, " and ") + " must not set securityContext.runAsNonRoot=false", fields}
	}
	if len(implicit.names) > 0 {
		return &violation{"runAsNonRoot != true",
			"pod or " + implicit.who() + " must set securityContext.runAsNonRoot=true", implicit.fields}
	}
	return nil
}

func checkRunAsUser(p *corev1.Pod) *violation {
	var setters, fields []string
	if psc := p.GetSpec().GetSecurityContext(); psc != nil && psc.RunAsUser != nil && *psc.RunAsUser == 0 {
		setters = append(setters, "pod")
		fields = append(fields, "spec.securityContext.runAsUser")
	}
	var bad collector
	for _, ca := range containers(p) {
		if sc := ca.c.GetSecurityContext(); sc != nil && sc.RunAsUser != nil && *sc.RunAsUser == 0 {
			bad.add(ca, "securityContext.runAsUser")
		}
	}
	if len(bad.names) > 0 {
		setters = append(setters, bad.who())
		fields = append(fields, bad.fields...)
	}
	if len(setters) == 0 {
		return nil
	}
	return &violation{"runAsUser=0", strings.Join(setters, " and ") + " must not set runAsUser=0", fields}
}

func checkSeccompBaseline(p *corev1.Pod) *violation {
	var details, fields []string
	if sp := p.GetSpec().GetSecurityContext().GetSeccompProfile(); sp != nil && sp.GetType() == "Unconfined" {
		details = append(details, `pod must not set securityContext.seccompProfile.type to "Unconfined"`)
		fields = append(fields, "spec.securityContext.seccompProfile.type")
	}
	var bad collector
	for _, ca := range containers(p) {
		if sp := ca.c.GetSecurityContext().GetSeccompProfile(); sp != nil && sp.GetType() == "Unconfined" {
			bad.add(ca, "securityContext.seccompProfile.type")
		}
	}
	if len(bad.names) > 0 {
		details = append(details, bad.who()+` must not set securityContext.seccompProfile.type to "Unconfined"`)
		fields = append(fields, bad.fields...)
	}
	if len(details) == 0 {
		return nil
	}
	return &violation{"seccompProfile", strings.Join(details, "; "), fields}
}

func checkSeccompRestricted(p *corev1.Pod) *violation {
	valid := func(t string) bool { return t == "RuntimeDefault" || t == "Localhost" }
	var setters, values, fields []string
	podSet := false
	if sp := p.GetSpec().GetSecurityContext().GetSeccompProfile(); sp != nil {
		if valid(sp.GetType()) {
			podSet = true
		} else {
			setters = append(setters, "pod")
			values = append(values, sp.GetType())
			fields = append(fields, "spec.securityContext.seccompProfile.type")
		}
	}
	var explicit, implicit collector
	for _, ca := range containers(p) {
		sp := ca.c.GetSecurityContext().GetSeccompProfile()
		switch {
		case sp != nil && !valid(sp.GetType()):
			explicit.add(ca, "securityContext.seccompProfile.type")
			values = append(values, sp.GetType())
		case sp == nil && !podSet:
			implicit.add(ca, "securityContext.seccompProfile.type")
		}
	}
	if len(explicit.names) > 0 {
		setters = append(setters, explicit.who())
		fields = append(fields, explicit.fields...)
	}
	if len(setters) > 0 {
		return &violation{"seccompProfile", fmt.Sprintf("%s must not set securityContext.seccompProfile.type to %s",
			strings.Join(setters, " and "), joinQuote(sortedSet(values))), fields}
	}
	if len(implicit.names) > 0 {
		return &violation{"seccompProfile", "pod or " + implicit.who() +
			` must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost"`, implicit.fields}
	}
	return nil
}

// safeSysctls are allowed at the baseline level (latest version).
var safeSysctls = []string{
	"kernel.shm_rmid_forced",
	"net.ipv4.ip_local_port_range",
	"net.ipv4.ip_local_reserved_ports",
	"net.ipv4.ip_unprivileged_port_start",
	"net.ipv4.ping_group_range",
	"net.ipv4.tcp_fin_timeout",
	"net.ipv4.tcp_keepalive_intvl",
	"net.ipv4.tcp_keepalive_probes",
	"net.ipv4.tcp_keepalive_time",
	"net.ipv4.tcp_rmem",
	"net.ipv4.tcp_syncookies",
	"net.ipv4.tcp_wmem",
}

// seLinuxTypes are the types baseline allows (pod-security-admission's
// selinuxAllowedTypes1_31).
var seLinuxTypes = []string{"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}

// checkSELinuxOptions is the baseline seLinuxOptions check: a type other
// than the container types, or a user or role, is forbidden, on the pod
// and on each container.
func checkSELinuxOptions(p *corev1.Pod) *violation {
	var badTypes, setters, fields []string
	user, role := false, false
	valid := func(o *corev1.SELinuxOptions, path string) bool {
		ok := true
		if !slices.Contains(seLinuxTypes, o.GetType()) {
			ok = false
			badTypes = append(badTypes, o.GetType())
			fields = append(fields, path+".type")
		}
		if o.GetUser() != "" {
			ok, user = false, true
			fields = append(fields, path+".user")
		}
		if o.GetRole() != "" {
			ok, role = false, true
			fields = append(fields, path+".role")
		}
		return ok
	}
	if o := p.GetSpec().GetSecurityContext().GetSeLinuxOptions(); o != nil && !valid(o, "spec.securityContext.seLinuxOptions") {
		setters = append(setters, "pod")
	}
	var bad collector
	for _, ca := range containers(p) {
		if o := ca.c.GetSecurityContext().GetSeLinuxOptions(); o != nil && !valid(o, ca.path()+".securityContext.seLinuxOptions") {
			bad.names = append(bad.names, ca.c.GetName())
		}
	}
	if len(bad.names) > 0 {
		setters = append(setters, bad.who())
	}
	if len(setters) == 0 {
		return nil
	}
	var data []string
	if types := sortedSet(badTypes); len(types) > 0 {
		data = append(data, pluralize("type", "types", len(types))+" "+joinQuote(types))
	}
	if user {
		data = append(data, "user may not be set")
	}
	if role {
		data = append(data, "role may not be set")
	}
	return &violation{"seLinuxOptions", strings.Join(setters, " and ") + " set forbidden securityContext.seLinuxOptions: " +
		strings.Join(data, "; "), fields}
}

func checkSysctls(p *corev1.Pod) *violation {
	var names, fields []string
	for i, s := range p.GetSpec().GetSecurityContext().GetSysctls() {
		if !slices.Contains(safeSysctls, s.GetName()) {
			names = append(names, s.GetName())
			fields = append(fields, fmt.Sprintf("spec.securityContext.sysctls[%d].name", i))
		}
	}
	if len(names) == 0 {
		return nil
	}
	return &violation{"forbidden sysctls", strings.Join(names, ", "), fields}
}
