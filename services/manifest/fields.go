package manifest

// The Pod field rule (issue 16): every field of a core/v1 Pod, as
// k8s.io/api has it, is on exactly one of two lists — honoured (podflow
// implements it; the value names the test that proves it) or refused (a
// pod that sets it is refused 422 naming its path, "spec.x: Forbidden:
// podflow does not support …"). A path covers everything below it unless
// a longer path is listed. TestEveryPodFieldIsListed walks the k8s.io/api
// types by reflection, so a field a new k8s.io/api adds fails the build of
// the lists until it is placed on one.
//
// Two doors check the rule:
//   - Decode and FromKube (the HTTPS decode path and `podflow apply`) refuse
//     the fields the proto cannot hold, which would otherwise be dropped;
//   - RefusedPodFields (called by admission, which every pod passes
//     whatever door it came in by) refuses the fields the proto holds but
//     the node, scheduler or admission does not implement.

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"google.golang.org/protobuf/reflect/protoreflect"
	kcorev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	pf "github.com/podflow/podflow/proto/corev1"
)

// ErrUnsupportedField: a Pod sets a field podflow refuses (see
// RefusedPodFields); *Error.Field names it, Detail says what is not
// supported.
var ErrUnsupportedField = errors.New("manifest: field not supported by podflow")

// refusal is why podflow refuses a field, and the values it still accepts.
type refusal struct {
	// what completes "podflow does not support …".
	what string
	// allow lists scalar values (as JSON renders them, strings unquoted)
	// that mean the same as leaving the field unset in Kubernetes — its
	// default — and are therefore accepted, so that manifests exported
	// from a cluster apply.
	allow []string
	// okIf, when set, accepts the field in pods for which it returns true
	// (checked on the proto only).
	okIf func(*pf.Pod) bool
}

// Test pointers of the honoured list: the test files (from the repository
// root) that prove the field is honoured. TestHonouredFieldsNameTheirTests
// checks that each file exists.
const (
	testRoundTrip   = "services/manifest/manifest_test.go services/stages/api/api_test.go"
	testSchema      = "services/stages/admission/validate_test.go services/stages/admission/mutate_test.go"
	testEnv         = "nodeagent/env_test.go nodeagent/linux/fidelity_test.go"
	testHooks       = "nodeagent/hooks_test.go nodeagent/linux/fidelity_test.go"
	testSidecar     = "nodeagent/sidecar_test.go"
	testProbes      = "nodeagent/agent_test.go nodeagent/linux/agent_test.go nodeagent/linux/grpcprobe_internal_test.go nodeagent/linux/grpcprobe_kernel_test.go"
	testPullSecrets = "nodeagent/pullsecrets_test.go nodeagent/linux/image/keyring_test.go nodeagent/linux/pullsecret_kernel_test.go services/pipeline/nodegraph_test.go"
	testSecurity    = "nodeagent/linux/security_internal_test.go nodeagent/linux/security_kernel_test.go nodeagent/linux/hostns_kernel_test.go nodeagent/linux/sysctl_kernel_test.go services/stages/admission/podsecurity_test.go"
	testVolumes     = "nodeagent/agent_test.go nodeagent/linux/runtime_test.go nodeagent/linux/subpath_kernel_test.go"
	testDownwardAPI = "nodeagent/volumes_internal_test.go nodeagent/linux/atomicwriter_internal_test.go nodeagent/linux/downwardapi_kernel_test.go"
	testVolumeModes = "services/stages/admission/mutate_test.go services/apiserver/volumemode_test.go nodeagent/linux/volumesize_kernel_test.go"
	testEmptyDir    = "nodeagent/emptydir_internal_test.go nodeagent/emptydir_test.go nodeagent/linux/emptydir_kernel_test.go"
	testProjected   = "nodeagent/projected_internal_test.go nodeagent/propagate_test.go nodeagent/linux/projected_kernel_test.go services/manifest/fields_test.go"
	testSAToken     = "nodeagent/satoken_test.go nodeagent/satoken_internal_test.go services/apiserver/nodetoken_test.go services/apiserver/nodetoken_internal_test.go services/pipeline/access_token_test.go services/stages/admission/validate_volumes_test.go ops/processes/nodewire/satoken_test.go"
	testScheduler   = "services/stages/scheduler/filters_test.go services/stages/scheduler/cache/allocation_test.go"
	testSpread      = "services/stages/scheduler/podtopologyspread_test.go services/stages/admission/validate_scheduling_test.go"
	testAffinity    = "services/stages/scheduler/interpodaffinity_test.go services/stages/admission/validate_scheduling_test.go"
	testGates       = "services/stages/scheduler/gates_test.go services/apiserver/gates_test.go"
	testPriority    = "services/stages/admission/priority_test.go services/stages/scheduler/queue_test.go"
	testPreemption  = "services/stages/admission/priority_test.go services/stages/scheduler/preemption_test.go"
	testDNS         = "nodeagent/linux/dns/dns_test.go ops/e2e/linux_services_test.go services/stages/admission/validate_test.go"
	testRuntime     = "nodeagent/agent_test.go nodeagent/linux/fidelity_test.go"
	testAttach      = "nodeagent/linux/container/attach_test.go services/manifest/fields_test.go ops/e2e/linux_kubectl_test.go"
	testEphemeral   = "services/apiserver/ephemeral_test.go services/stages/admission/validate_test.go"
	testTermination = "nodeagent/termination_test.go nodeagent/linux/termination_kernel_test.go"
	testStatus      = "services/stages/persistence/persistence_test.go nodeagent/reporter_test.go" // the system's: replaced on create, written by the node
	testSELinux     = "nodeagent/linux/selinux_internal_test.go services/podsecurity/podsecurity_test.go services/stages/admission/validate_test.go"
	testHostname    = "nodeagent/linux/hosts_internal_test.go nodeagent/linux/hostname_kernel_test.go services/stages/admission/validate_test.go"
	testSubPathExpr = "nodeagent/subpathexpr_internal_test.go nodeagent/linux/subpath_kernel_test.go services/stages/admission/validate_test.go"
	testServiceEnv  = "nodeagent/servicelinks_internal_test.go nodeagent/servicelinks_test.go"
	testCSI         = "services/manifest/fields_test.go services/stages/admission/validate_volumes_test.go services/pipeline/nodegraph_test.go services/podsecurity/podsecurity_test.go nodeagent/csi_test.go"
	testHostPort    = "nodeagent/linux/network/hostports_test.go nodeagent/linux/hostports_test.go services/stages/scheduler/filters_test.go ops/e2e/linux_nodeport_test.go"
)

// containerHonoured and containerRefused are relative to a container; they
// apply to spec.containers[*] and spec.initContainers[*].
var containerHonoured = map[string]string{
	"name":            testSchema,
	"image":           testRuntime + " nodeagent/images_test.go nodeagent/linux/imageupdate_kernel_test.go",
	"imagePullPolicy": testRuntime,
	"command":         testEnv,
	"args":            testEnv,
	"workingDir":      testRuntime,
	"restartPolicy":   testSidecar,

	"stdin":     testAttach,
	"stdinOnce": testAttach,
	"tty":       testAttach,

	"terminationMessagePath":   testTermination,
	"terminationMessagePolicy": testTermination,

	"ports":                  testSchema,
	"ports[*].containerPort": testSchema,
	"ports[*].name":          testSchema,
	"ports[*].protocol":      testSchema,
	"ports[*].hostPort":      testHostPort,
	"ports[*].hostIP":        testHostPort,

	"env":                                      testEnv,
	"env[*].name":                              testEnv,
	"env[*].value":                             testEnv,
	"env[*].valueFrom.configMapKeyRef":         testEnv,
	"env[*].valueFrom.secretKeyRef":            testEnv,
	"env[*].valueFrom.fieldRef.fieldPath":      testEnv,
	"env[*].valueFrom.resourceFieldRef":        testEnv + " services/stages/admission/validate_env_test.go services/apiserver/envvalue_test.go",
	"envFrom":                                  testEnv,
	"resources.limits":                         testScheduler,
	"resources.requests":                       testScheduler,
	"volumeMounts":                             testVolumes,
	"volumeMounts[*].name":                     testVolumes,
	"volumeMounts[*].mountPath":                testVolumes,
	"volumeMounts[*].readOnly":                 testVolumes,
	"volumeMounts[*].subPath":                  testVolumes,
	"lifecycle.postStart":                      testHooks,
	"lifecycle.preStop":                        testHooks,
	"securityContext.allowPrivilegeEscalation": testSecurity,
	"securityContext.capabilities":             testSecurity,
	"securityContext.privileged":               testSecurity,
	"securityContext.procMount":                testSecurity,
	"securityContext.readOnlyRootFilesystem":   testSecurity,
	"securityContext.runAsGroup":               testSecurity,
	"securityContext.runAsNonRoot":             testSecurity,
	"securityContext.runAsUser":                testSecurity,
	"securityContext.seccompProfile":           testSecurity,
	"securityContext.seLinuxOptions":           testSELinux,
	"volumeMounts[*].subPathExpr":              testSubPathExpr,
}

var containerRefused = map[string]refusal{
	"env[*].valueFrom.fieldRef.apiVersion": {what: "fieldRef apiVersions other than v1", allow: []string{"v1"}},
	"env[*].valueFrom.fileKeyRef":          {what: "environment variables from files (fileKeyRef)"},
	"lifecycle.stopSignal":                 {what: "a custom stop signal (lifecycle.stopSignal)"},
	"resizePolicy":                         {what: "in-place resize (resizePolicy)"},
	"resources.claims":                     {what: "dynamic resource allocation (resources.claims)"},
	"restartPolicyRules":                   {what: "container restart rules (restartPolicyRules)"},
	"securityContext.appArmorProfile":      {what: "AppArmor profiles"},
	"securityContext.windowsOptions":       {what: "Windows containers"},
	"volumeDevices":                        {what: "raw block devices (volumeDevices)"},
	"volumeMounts[*].mountPropagation":     {what: "mount propagation", allow: []string{"None"}},
	"volumeMounts[*].recursiveReadOnly":    {what: "recursive read-only mounts", allow: []string{"Disabled"}},
	"volumeMounts[*].bindMountOptions":     {what: "bind mount options"},
}

// probeHonoured and probeRefused are relative to a probe.
var probeHonoured = []string{"exec", "httpGet", "tcpSocket", "initialDelaySeconds", "periodSeconds",
	"timeoutSeconds", "successThreshold", "failureThreshold", "terminationGracePeriodSeconds", "grpc"}

var probeRefused = map[string]refusal{
	"grpc.mode":        {what: "gRPC probes over TLS (grpc.mode)", allow: []string{"Plaintext"}},
	"httpGet.protocol": {what: "HTTP probe protocols"},
}

// podHonoured is the honoured list, container, probe and handler fields
// expanded by init.
var podHonoured = map[string]string{
	"metadata":                                                                     testRoundTrip,
	"status":                                                                       testStatus,
	"spec.volumes":                                                                 testVolumes,
	"spec.imagePullSecrets":                                                        testPullSecrets + " services/stages/admission/mutate_test.go services/apiserver/sapullsecrets_test.go",
	"spec.volumes[*].name":                                                         testVolumes,
	"spec.volumes[*].configMap.name":                                               testVolumes,
	"spec.volumes[*].configMap.items":                                              testVolumes,
	"spec.volumes[*].configMap.defaultMode":                                        testVolumes + " " + testVolumeModes,
	"spec.volumes[*].configMap.optional":                                           testVolumes,
	"spec.volumes[*].secret.secretName":                                            testVolumes,
	"spec.volumes[*].secret.items":                                                 testVolumes,
	"spec.volumes[*].secret.defaultMode":                                           testVolumes + " " + testVolumeModes,
	"spec.volumes[*].secret.optional":                                              testVolumes,
	"spec.volumes[*].emptyDir.medium":                                              testVolumes,
	"spec.volumes[*].emptyDir.sizeLimit":                                           testEmptyDir,
	"spec.volumes[*].hostPath":                                                     testVolumes,
	"spec.volumes[*].csi":                                                          testCSI,
	"spec.volumes[*].downwardAPI.defaultMode":                                      testDownwardAPI + " " + testVolumeModes,
	"spec.volumes[*].downwardAPI.items[*].path":                                    testDownwardAPI,
	"spec.volumes[*].downwardAPI.items[*].mode":                                    testDownwardAPI,
	"spec.volumes[*].downwardAPI.items[*].fieldRef.fieldPath":                      testDownwardAPI,
	"spec.volumes[*].downwardAPI.items[*].resourceFieldRef":                        testDownwardAPI,
	"spec.volumes[*].projected.defaultMode":                                        testProjected + " " + testVolumeModes,
	"spec.volumes[*].projected.sources":                                            testProjected,
	"spec.volumes[*].projected.sources[*].configMap.name":                          testProjected,
	"spec.volumes[*].projected.sources[*].configMap.items":                         testProjected,
	"spec.volumes[*].projected.sources[*].configMap.optional":                      testProjected,
	"spec.volumes[*].projected.sources[*].secret.name":                             testProjected,
	"spec.volumes[*].projected.sources[*].secret.items":                            testProjected,
	"spec.volumes[*].projected.sources[*].secret.optional":                         testProjected,
	"spec.volumes[*].projected.sources[*].downwardAPI.items[*].path":               testProjected,
	"spec.volumes[*].projected.sources[*].downwardAPI.items[*].mode":               testProjected,
	"spec.volumes[*].projected.sources[*].downwardAPI.items[*].fieldRef.fieldPath": testProjected,
	"spec.volumes[*].projected.sources[*].downwardAPI.items[*].resourceFieldRef":   testProjected,
	"spec.volumes[*].projected.sources[*].serviceAccountToken.path":                testSAToken,
	"spec.volumes[*].projected.sources[*].serviceAccountToken.audience":            testSAToken,
	"spec.volumes[*].projected.sources[*].serviceAccountToken.expirationSeconds":   testSAToken,
	"spec.containers":                                                              testSchema,
	"spec.initContainers":                                                          testSidecar,
	"spec.restartPolicy":                                                           testRuntime,
	"spec.terminationGracePeriodSeconds":                                           testRuntime,
	"spec.activeDeadlineSeconds":                                                   "nodeagent/deadline_test.go services/stages/status/once_test.go ops/processes/nodewire/deadline_test.go",
	"spec.nodeSelector":                                                            testScheduler,
	"spec.nodeName":                                                                testScheduler,
	"spec.affinity.nodeAffinity":                                                   testScheduler,
	"spec.affinity.podAffinity":                                                    testAffinity,
	"spec.affinity.podAntiAffinity":                                                testAffinity,
	"spec.topologySpreadConstraints":                                               testSpread,
	"spec.schedulingGates":                                                         testGates,
	"spec.priorityClassName":                                                       testPriority,
	"spec.priority":                                                                testPriority,
	"spec.preemptionPolicy":                                                        testPreemption,
	"spec.dnsPolicy":                                                               testDNS,
	"spec.dnsConfig":                                                               testDNS,
	"spec.tolerations":                                                             testScheduler,
	"spec.schedulerName":                                                           testScheduler,
	"spec.serviceAccountName":                                                      testSchema,
	"spec.runtimeClassName":                                                        "services/stages/admission/runtimeclass_test.go",
	"spec.overhead":                                                                "services/stages/admission/runtimeclass_test.go",
	"spec.automountServiceAccountToken":                                            "services/stages/admission/satoken_test.go",
	"spec.hostNetwork":                                                             testSecurity,
	"spec.hostPID":                                                                 testSecurity,
	"spec.hostIPC":                                                                 testSecurity,
	"spec.shareProcessNamespace":                                                   "nodeagent/linux/hostns_kernel_test.go nodeagent/linux/container/pidns_test.go",
	"spec.securityContext.fsGroupChangePolicy":                                     "nodeagent/linux/security_internal_test.go",
	"spec.securityContext.fsGroup":                                                 testSecurity,
	"spec.securityContext.runAsGroup":                                              testSecurity,
	"spec.securityContext.runAsNonRoot":                                            testSecurity,
	"spec.securityContext.runAsUser":                                               testSecurity,
	"spec.securityContext.seccompProfile":                                          testSecurity,
	"spec.securityContext.supplementalGroups":                                      testSecurity,
	"spec.securityContext.sysctls":                                                 testSecurity,
	"spec.securityContext.seLinuxOptions":                                          testSELinux,
	"spec.securityContext.seLinuxChangePolicy":                                     testSELinux,
	"spec.hostname":                                                                testHostname,
	"spec.subdomain":                                                               testHostname,
	"spec.hostAliases":                                                             testHostname,
	"spec.enableServiceLinks":                                                      testServiceEnv,
}

// podRefused is the refused list, container and probe fields expanded by
// init.
var podRefused = map[string]refusal{
	"metadata.selfLink": {what: "selfLink"},

	"spec.evictionResponders": {what: "eviction responders"},
	"spec.hostUsers":          {what: "user namespaces (hostUsers: false)", allow: []string{"true"}},
	"spec.hostnameOverride":   {what: "hostnameOverride"},
	"spec.os.name":            {what: "operating systems other than linux", allow: []string{"linux"}},
	"spec.readinessGates":     {what: "readiness gates"},
	"spec.resourceClaims":     {what: "dynamic resource allocation (resourceClaims)"},
	"spec.resources":          {what: "pod-level resources"},
	"spec.schedulingGroup":    {what: "scheduling groups"},
	"spec.serviceAccount":     {what: "the deprecated spec.serviceAccount: use serviceAccountName"},
	"spec.setHostnameAsFQDN":  {what: "setHostnameAsFQDN", allow: []string{"false"}},

	"spec.securityContext.appArmorProfile":          {what: "AppArmor profiles"},
	"spec.securityContext.supplementalGroupsPolicy": {what: "supplementalGroupsPolicy other than Merge", allow: []string{"Merge"}},
	"spec.securityContext.windowsOptions":           {what: "Windows pods"},

	"spec.volumes[*].persistentVolumeClaim":                                         {what: "PersistentVolumeClaims: podflow has no storage provisioner"},
	"spec.volumes[*].ephemeral":                                                     {what: "ephemeral volumes: podflow has no storage provisioner"},
	"spec.volumes[*].emptyDir.mode":                                                 {what: "emptyDir modes"},
	"spec.volumes[*].configMap.defaultUser":                                         {what: "volume file owners"},
	"spec.volumes[*].configMap.items[*].user":                                       {what: "volume file owners"},
	"spec.volumes[*].secret.defaultUser":                                            {what: "volume file owners"},
	"spec.volumes[*].secret.items[*].user":                                          {what: "volume file owners"},
	"spec.volumes[*].downwardAPI.defaultUser":                                       {what: "volume file owners"},
	"spec.volumes[*].downwardAPI.items[*].user":                                     {what: "volume file owners"},
	"spec.volumes[*].downwardAPI.items[*].fieldRef.apiVersion":                      {what: "fieldRef apiVersions other than v1", allow: []string{"v1"}},
	"spec.volumes[*].projected.defaultUser":                                         {what: "volume file owners"},
	"spec.volumes[*].projected.sources[*].configMap.items[*].user":                  {what: "volume file owners"},
	"spec.volumes[*].projected.sources[*].secret.items[*].user":                     {what: "volume file owners"},
	"spec.volumes[*].projected.sources[*].downwardAPI.items[*].user":                {what: "volume file owners"},
	"spec.volumes[*].projected.sources[*].serviceAccountToken.user":                 {what: "volume file owners"},
	"spec.volumes[*].projected.sources[*].downwardAPI.items[*].fieldRef.apiVersion": {what: "fieldRef apiVersions other than v1", allow: []string{"v1"}},
	"spec.volumes[*].projected.sources[*].clusterTrustBundle":                       {what: "clusterTrustBundle projections (ClusterTrustBundles)"},
	"spec.volumes[*].projected.sources[*].podCertificate":                           {what: "podCertificate projections (pod certificates)"},
	"spec.volumes[*].image":                                                         {what: "image volumes"},
}

// networkVolumes are the volume sources of network storage and cloud disks.
var networkVolumes = []string{"awsElasticBlockStore", "azureDisk", "azureFile", "cephfs", "cinder",
	"fc", "flexVolume", "flocker", "gcePersistentDisk", "gitRepo", "glusterfs", "iscsi", "nfs",
	"photonPersistentDisk", "portworxVolume", "quobyte", "rbd", "scaleIO", "storageos", "vsphereVolume"}

func init() {
	for _, s := range networkVolumes {
		podRefused["spec.volumes[*]."+s] = refusal{what: s + " volumes: podflow has no storage drivers"}
	}
	// Ephemeral containers are stored as sent through the subresource
	// (what a container may not set refused as for the others); the node
	// does not run them yet.
	podHonoured["spec.ephemeralContainers"] = testEphemeral
	for _, c := range []string{"spec.containers[*].", "spec.initContainers[*].", "spec.ephemeralContainers[*]."} {
		for p, t := range containerHonoured {
			if !strings.HasPrefix(c, "spec.ephemeralContainers") {
				podHonoured[c+p] = t
			}
		}
		for p, r := range containerRefused {
			podRefused[c+p] = r
		}
		for _, probe := range []string{"livenessProbe", "readinessProbe", "startupProbe"} {
			for _, p := range probeHonoured {
				if !strings.HasPrefix(c, "spec.ephemeralContainers") {
					podHonoured[c+probe+"."+p] = testProbes
				}
			}
			for p, r := range probeRefused {
				podRefused[c+probe+"."+p] = r
			}
		}
		for _, hook := range []string{"lifecycle.postStart.", "lifecycle.preStop."} {
			for p, r := range probeRefused {
				if !strings.HasPrefix(p, "grpc") { // handlers have no grpc
					podRefused[c+hook+p] = r
				}
			}
		}
	}
}

// fieldRule is the list entry that decides path (normalised: "[*]" for
// every index and map key), found by longest listed prefix.
type fieldRule struct {
	path     string
	honoured bool
	refusal  refusal
}

func ruleFor(path string) (fieldRule, bool) {
	for p := path; p != ""; p = parentPath(p) {
		if _, ok := podHonoured[p]; ok {
			return fieldRule{path: p, honoured: true}, true
		}
		if r, ok := podRefused[p]; ok {
			return fieldRule{path: p, refusal: r}, true
		}
	}
	return fieldRule{}, false
}

// parentPath cuts the last ".x" or "[*]" off p.
func parentPath(p string) string {
	i := strings.LastIndexAny(p, ".[")
	if i < 0 {
		return ""
	}
	return p[:i]
}

// concretePrefix cuts concrete path p (indices and keys as given) to the
// depth of the normalised rule path it falls under:
// ("metadata.managedFields[0].manager", "metadata.managedFields") is
// "metadata.managedFields".
func concretePrefix(p, rule string) string {
	for n := normalPath(p); n != rule && n != ""; n = parentPath(n) {
		p = parentPath(p)
	}
	return p
}

var indexRE = regexp.MustCompile(`\[[^\]]*\]`)

// normalPath replaces indices and map keys with "[*]".
func normalPath(p string) string { return indexRE.ReplaceAllString(p, "[*]") }

// refuse words the error for a refused field at path with value v.
func (r refusal) refuse(path string) *field.Error {
	d := "podflow does not support " + r.what
	if len(r.allow) > 0 {
		d += fmt.Sprintf(" (accepted: %q, Kubernetes' default)", strings.Join(r.allow, `", "`))
	}
	return field.Forbidden(field.NewPath(path), d)
}

// droppedPodFields checks the Kubernetes fields of a Pod the proto has no
// place for (Decode's drops): each leaf must be refused, and is accepted
// only with an allowed value. status is the system's, replaced on create
// as kube-apiserver does, so its drops are not errors.
// prefix locates the Pod in its document ("items[2]"): the paths of the
// errors keep it, the lists are looked up without it.
func droppedPodFields(drops []dropped, prefix string) field.ErrorList {
	if prefix != "" {
		prefix += "."
	}
	var errs field.ErrorList
	for _, d := range drops {
		rel := strings.TrimPrefix(d.path, prefix)
		if rel == "status" || strings.HasPrefix(rel, "status.") {
			continue
		}
		leaves(d.path, d.value, func(path string, v any) {
			r, ok := ruleFor(normalPath(strings.TrimPrefix(path, prefix)))
			switch {
			case !ok || r.honoured:
				// Cannot happen while TestEveryPodFieldIsListed passes:
				// an honoured field is one the proto holds.
				errs = append(errs, field.Forbidden(field.NewPath(path), "podflow does not support this field"))
			case !slices.Contains(r.refusal.allow, scalarString(v)):
				errs = append(errs, r.refusal.refuse(prefix+concretePrefix(strings.TrimPrefix(path, prefix), r.path)))
			}
		})
	}
	return dedupe(errs)
}

// leaves calls f for each non-empty leaf of a JSON value.
func leaves(path string, v any, f func(string, any)) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			leaves(joinPath(path, k), e, f)
		}
	case []any:
		for i, e := range x {
			leaves(path+"["+strconv.Itoa(i)+"]", e, f)
		}
	case nil:
	default:
		f(path, v)
	}
}

func scalarString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case json.Number:
		return x.String()
	case bool:
		return strconv.FormatBool(x)
	}
	return fmt.Sprint(v)
}

// dedupe keeps the first error per refused field path and sorts by path.
func dedupe(errs field.ErrorList) field.ErrorList {
	slices.SortFunc(errs, func(a, b *field.Error) int { return strings.Compare(a.Field, b.Field) })
	return slices.CompactFunc(errs, func(a, b *field.Error) bool { return a.Field == b.Field })
}

// RefusedPodFields returns one Forbidden error per field of pod that
// podflow refuses ("spec.volumes[0].persistentVolumeClaim: Forbidden:
// podflow does not support PersistentVolumeClaims: …"), or nil. Admission
// calls it for every pod, whichever door it came in by. It visits only the
// fields on the way to a refused field the proto holds (protoRefusedTree),
// and builds a path only for an error.
func RefusedPodFields(pod *pf.Pod) field.ErrorList {
	if pod == nil {
		return nil
	}
	var errs field.ErrorList
	var segs [16]string
	walkProto(pod, pod.ProtoReflect(), protoRefusedTree(), segs[:0], &errs)
	return dedupe(errs)
}

// refusedNode is one step of the tree of the refused fields the proto
// holds, by proto field number.
type refusedNode struct {
	kubeName string
	children map[protoreflect.FieldNumber]*refusedNode
	refusal  *refusal
}

var protoRefusedTree = sync.OnceValue(func() *refusedNode {
	root := &refusedNode{children: map[protoreflect.FieldNumber]*refusedNode{}}
	rootMD, rootT := (&pf.Pod{}).ProtoReflect().Descriptor(), reflect.TypeFor[kcorev1.Pod]()
	for path, r := range podRefused {
		n, md, t := root, rootMD, rootT
		for _, name := range strings.Split(strings.ReplaceAll(path, "[*]", ""), ".") {
			if md == nil {
				n = nil
				break
			}
			s := shapeOf(md, t)
			fd := s.byKube[name]
			if fd == nil {
				n = nil // the proto has no place for it: Decode refuses it
				break
			}
			child := n.children[fd.Number()]
			if child == nil {
				child = &refusedNode{kubeName: name, children: map[protoreflect.FieldNumber]*refusedNode{}}
				n.children[fd.Number()] = child
			}
			n, t = child, s.kubeType[fd.Number()]
			switch {
			case fd.IsMap():
				md = fd.MapValue().Message()
			default:
				md = fd.Message()
			}
		}
		if n != nil {
			n.refusal = &r
		}
	}
	return root
})

func walkProto(pod *pf.Pod, m protoreflect.Message, n *refusedNode, segs []string, errs *field.ErrorList) {
	fields := m.Descriptor().Fields()
	for num, child := range n.children { // a handful: no Range closure
		fd := fields.ByNumber(num)
		if !m.Has(fd) {
			continue
		}
		v := m.Get(fd)
		segs := append(segs, child.kubeName)
		if r := child.refusal; r != nil {
			if !fd.IsList() && !fd.IsMap() && fd.Message() == nil && slices.Contains(r.allow, v.String()) {
				continue
			}
			if r.okIf == nil || !r.okIf(pod) {
				*errs = append(*errs, r.refuse(segPath(segs)))
			}
			continue
		}
		switch {
		case fd.IsList() && fd.Message() != nil:
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				walkProto(pod, l.Get(i).Message(), child, append(segs, indexSeg(i)), errs)
			}
		case fd.Message() != nil && !fd.IsMap():
			walkProto(pod, v.Message(), child, segs, errs)
		}
	}
}

// indexSegs are the index segments of short lists, built once.
var indexSegs = func() (out [64]string) {
	for i := range out {
		out[i] = "[" + strconv.Itoa(i) + "]"
	}
	return out
}()

func indexSeg(i int) string {
	if i < len(indexSegs) {
		return indexSegs[i]
	}
	return "[" + strconv.Itoa(i) + "]"
}

// segPath joins path segments: names with ".", indices ("[3]") as they are.
func segPath(segs []string) string {
	var b strings.Builder
	for _, s := range segs {
		if b.Len() > 0 && !strings.HasPrefix(s, "[") {
			b.WriteByte('.')
		}
		b.WriteString(s)
	}
	return b.String()
}

// RefusedFields returns the Pod's name and the refused-field errors of a
// Decode or FromKube error wrapping ErrUnsupportedField, for a 422 Invalid
// Status (validate.InvalidStatus); ok is false for any other error.
func RefusedFields(err error) (name string, errs field.ErrorList, ok bool) {
	var walk func(error)
	walk = func(err error) {
		if j, isJoin := err.(interface{ Unwrap() []error }); isJoin {
			for _, e := range j.Unwrap() {
				walk(e)
			}
			return
		}
		var me *Error
		if errors.As(err, &me) && errors.Is(me.Err, ErrUnsupportedField) {
			name = me.Name
			errs = append(errs, &field.Error{Type: field.ErrorTypeForbidden, Field: me.Field, Detail: me.Detail})
		}
	}
	walk(err)
	return name, errs, len(errs) > 0
}

// refusedError turns field errors into Decode's error: one *Error per
// field, wrapping ErrUnsupportedField, joined.
func refusedError(base *Error, errs field.ErrorList) error {
	out := make([]error, len(errs))
	for i, fe := range errs {
		e := *base
		e.Err, e.Field, e.Detail = ErrUnsupportedField, fe.Field, fe.Detail
		out[i] = &e
	}
	if len(out) == 1 {
		return out[0]
	}
	return errors.Join(out...)
}

// deprecatedNodeLabels are the node labels kube-apiserver warns about in a
// pod's nodeSelector and node affinity (pkg/api/pod/warnings.go).
var deprecatedNodeLabels = map[string]string{
	"beta.kubernetes.io/arch":                  `deprecated since v1.14; use "kubernetes.io/arch" instead`,
	"beta.kubernetes.io/os":                    `deprecated since v1.14; use "kubernetes.io/os" instead`,
	"failure-domain.beta.kubernetes.io/region": `deprecated since v1.17; use "topology.kubernetes.io/region" instead`,
	"failure-domain.beta.kubernetes.io/zone":   `deprecated since v1.17; use "topology.kubernetes.io/zone" instead`,
	"beta.kubernetes.io/instance-type":         `deprecated since v1.17; use "node.kubernetes.io/instance-type" instead`,
}

// PodWarnings returns the warnings kube-apiserver gives for a pod it
// accepts (pkg/api/pod/warnings.go: deprecated node labels and
// annotations), worded as it words them, for HTTP "Warning: 299" headers
// and `podflow apply`. It returns nil for anything but a Pod.
func PodWarnings(m any) []string {
	pod, ok := m.(*pf.Pod)
	if !ok {
		return nil
	}
	var out []string
	md := field.NewPath("metadata", "annotations")
	for _, k := range slices.Sorted(maps.Keys(pod.GetMetadata().GetAnnotations())) {
		switch {
		case k == "scheduler.alpha.kubernetes.io/critical-pod":
			out = append(out, fmt.Sprintf(`%s: non-functional in v1.16+; use the "priorityClassName" field instead`, md.Key(k)))
		case k == "seccomp.security.alpha.kubernetes.io/pod" || strings.HasPrefix(k, "container.seccomp.security.alpha.kubernetes.io/"):
			out = append(out, fmt.Sprintf(`%s: non-functional in v1.27+; use the "seccompProfile" field instead`, md.Key(k)))
		case strings.HasPrefix(k, "container.apparmor.security.beta.kubernetes.io/"):
			out = append(out, fmt.Sprintf(`%s: deprecated since v1.30; use the "appArmorProfile" field instead`, md.Key(k)))
		}
	}
	spec := field.NewPath("spec")
	for _, k := range slices.Sorted(maps.Keys(pod.GetSpec().GetNodeSelector())) {
		if msg, ok := deprecatedNodeLabels[k]; ok {
			out = append(out, fmt.Sprintf("%s: %s", spec.Child("nodeSelector").Key(k), msg))
		}
	}
	na := pod.GetSpec().GetAffinity().GetNodeAffinity()
	terms := func(p *field.Path, exprs []*pf.NodeSelectorRequirement) {
		for j, e := range exprs {
			if msg, ok := deprecatedNodeLabels[e.GetKey()]; ok {
				out = append(out, fmt.Sprintf("%s: %s is %s", p.Child("matchExpressions").Index(j).Child("key"), e.GetKey(), msg))
			}
		}
	}
	req := spec.Child("affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms")
	for i, t := range na.GetRequiredDuringSchedulingIgnoredDuringExecution().GetNodeSelectorTerms() {
		terms(req.Index(i), t.GetMatchExpressions())
	}
	pref := spec.Child("affinity", "nodeAffinity", "preferredDuringSchedulingIgnoredDuringExecution")
	for i, t := range na.GetPreferredDuringSchedulingIgnoredDuringExecution() {
		terms(pref.Index(i).Child("preference"), t.GetPreference().GetMatchExpressions())
	}
	return out
}
