package admission

import (
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
)

func TestPodSecurity(t *testing.T) {
	sidecar := func(p *corev1.Pod) {
		p.Spec.Containers = append(p.Spec.Containers, &corev1.Container{Name: "side", Image: "side:1",
			SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: proto.Bool(false), Capabilities: &corev1.Capabilities{Drop: []string{"ALL"}}}})
	}
	side := func(p *corev1.Pod) *corev1.Container { return p.Spec.Containers[1] }
	// baselineOnly drops what only restricted requires, so a baseline
	// violation is reported alone at restricted too.
	tests := []struct {
		name  string
		level Level
		given []func(*corev1.Pod)
		want  string // the part after `violates PodSecurity "<level>:latest": `; "" = allowed
		// refused: for an allowed pod, the fields podflow then refuses
		// (422, after Pod Security: manifest.RefusedPodFields).
		refused []string
	}{
		{name: "restricted pod passes restricted", level: LevelRestricted},
		{name: "privileged level checks nothing", level: LevelPrivileged, given: []func(*corev1.Pod){func(p *corev1.Pod) {
			p.Spec.HostPid = true
			app(p).SecurityContext.Privileged = proto.Bool(true)
			app(p).SecurityContext.AllowPrivilegeEscalation = nil // privileged implies escalation
		}}},
		{name: "bare pod passes baseline", level: LevelBaseline, given: []func(*corev1.Pod){func(p *corev1.Pod) {
			p.Spec.SecurityContext = nil
			app(p).SecurityContext = nil
		}}},
		{
			name: "privileged", level: LevelBaseline,
			given: []func(*corev1.Pod){func(p *corev1.Pod) {
				app(p).SecurityContext.Privileged = proto.Bool(true)
				app(p).SecurityContext.AllowPrivilegeEscalation = nil
			}},
			want: `privileged (container "app" must not set securityContext.privileged=true)`,
		},
		{
			name: "seLinuxOptions of the container types pass baseline", level: LevelBaseline,
			given: []func(*corev1.Pod){sidecar, func(p *corev1.Pod) {
				p.Spec.SecurityContext.SeLinuxOptions = &corev1.SELinuxOptions{Level: "s0:c123,c456"}
				app(p).SecurityContext.SeLinuxOptions = &corev1.SELinuxOptions{Type: "container_init_t"}
				side(p).SecurityContext.SeLinuxOptions = &corev1.SELinuxOptions{Type: "container_t", Level: "s0"}
			}},
		},
		{
			name: "seLinuxOptions", level: LevelRestricted,
			given: []func(*corev1.Pod){sidecar, func(p *corev1.Pod) {
				p.Spec.SecurityContext.SeLinuxOptions = &corev1.SELinuxOptions{User: "system_u"}
				app(p).SecurityContext.SeLinuxOptions = &corev1.SELinuxOptions{Type: "spc_t", Role: "system_r"}
				side(p).SecurityContext.SeLinuxOptions = &corev1.SELinuxOptions{Type: "unconfined_t"}
			}},
			want: `seLinuxOptions (pod and containers "app", "side" set forbidden securityContext.seLinuxOptions: types "spc_t", "unconfined_t"; user may not be set; role may not be set)`,
		},
		{
			name: "host namespaces", level: LevelBaseline,
			given: []func(*corev1.Pod){func(p *corev1.Pod) { p.Spec.HostNetwork, p.Spec.HostPid, p.Spec.HostIpc = true, true, true }},
			want:  `host namespaces (hostNetwork=true, hostPID=true, hostIPC=true)`,
		},
		{
			name: "hostPath volumes at baseline", level: LevelBaseline,
			given: []func(*corev1.Pod){func(p *corev1.Pod) {
				p.Spec.Volumes = []*corev1.Volume{
					{Name: "root", HostPath: &corev1.HostPathVolumeSource{Path: "/"}},
					{Name: "tmp", EmptyDir: &corev1.EmptyDirVolumeSource{}},
					{Name: "sock", HostPath: &corev1.HostPathVolumeSource{Path: "/run/x.sock"}},
				}
			}},
			want: `hostPath volumes (volumes "root", "sock")`,
		},
		{
			name: "hostPath volumes at restricted are restricted volume types", level: LevelRestricted,
			given: []func(*corev1.Pod){func(p *corev1.Pod) {
				p.Spec.Volumes = []*corev1.Volume{{Name: "root", HostPath: &corev1.HostPathVolumeSource{Path: "/"}}}
			}},
			want: `restricted volume types (volume "root" uses restricted volume type "hostPath")`,
		},
		{
			name: "restricted allows the common volume types", level: LevelRestricted,
			given: []func(*corev1.Pod){func(p *corev1.Pod) {
				p.Spec.Volumes = []*corev1.Volume{
					{Name: "a", EmptyDir: &corev1.EmptyDirVolumeSource{}},
					{Name: "b", ConfigMap: &corev1.ConfigMapVolumeSource{Name: "cm"}},
					{Name: "c", Secret: &corev1.SecretVolumeSource{SecretName: "s"}},
					{Name: "d", PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "pvc"}},
				}
			}},
			refused: []string{"spec.volumes[3].persistentVolumeClaim"},
		},
		{
			name: "hostPorts", level: LevelBaseline,
			given: []func(*corev1.Pod){sidecar, func(p *corev1.Pod) {
				app(p).Ports = []*corev1.ContainerPort{{ContainerPort: 80, HostPort: 8080, Protocol: "TCP"}, {ContainerPort: 443, HostPort: 8443, Protocol: "TCP"}}
				side(p).Ports = []*corev1.ContainerPort{{ContainerPort: 9090, HostPort: 9090, Protocol: "TCP"}}
			}},
			want: `hostPort (containers "app", "side" use hostPorts 8080, 8443, 9090)`,
		},
		{
			name: "non-default capabilities at baseline", level: LevelBaseline,
			given: []func(*corev1.Pod){func(p *corev1.Pod) {
				app(p).SecurityContext.Capabilities = &corev1.Capabilities{Add: []string{"SYS_ADMIN", "CHOWN", "NET_ADMIN"}}
			}},
			want: `non-default capabilities (container "app" must not include "NET_ADMIN", "SYS_ADMIN" in securityContext.capabilities.add)`,
		},
		{
			name: "default capabilities allowed at baseline", level: LevelBaseline,
			given: []func(*corev1.Pod){func(p *corev1.Pod) {
				app(p).SecurityContext.Capabilities = &corev1.Capabilities{Add: []string{"CHOWN", "NET_BIND_SERVICE", "KILL"}}
			}},
		},
		{
			name: "restricted capabilities", level: LevelRestricted,
			given: []func(*corev1.Pod){sidecar, func(p *corev1.Pod) {
				app(p).SecurityContext.Capabilities = &corev1.Capabilities{Add: []string{"CHOWN"}}
				side(p).SecurityContext.Capabilities.Add = []string{"NET_BIND_SERVICE"}
			}},
			want: `unrestricted capabilities (container "app" must set securityContext.capabilities.drop=["ALL"]; ` +
				`container "app" must not include "CHOWN" in securityContext.capabilities.add)`,
		},
		{
			name: "procMount", level: LevelBaseline,
			given: []func(*corev1.Pod){func(p *corev1.Pod) { app(p).SecurityContext.ProcMount = "Unmasked" }},
			want:  `procMount (container "app" must not set securityContext.procMount to "Unmasked")`,
		},
		{
			name: "procMount Default allowed", level: LevelRestricted,
			given: []func(*corev1.Pod){func(p *corev1.Pod) { app(p).SecurityContext.ProcMount = "Default" }},
		},
		{
			name: "seccomp Unconfined at baseline", level: LevelBaseline,
			given: []func(*corev1.Pod){sidecar, func(p *corev1.Pod) {
				p.Spec.SecurityContext.SeccompProfile.Type = "Unconfined"
				side(p).SecurityContext.SeccompProfile = &corev1.SeccompProfile{Type: "Unconfined"}
			}},
			// Upstream's wording (check_seccompProfile_baseline.go).
			want: `seccompProfile (pod and container "side" must not set securityContext.seccompProfile.type to "Unconfined")`,
		},
		{
			name: "seccomp unset is fine at baseline", level: LevelBaseline,
			given: []func(*corev1.Pod){func(p *corev1.Pod) { p.Spec.SecurityContext.SeccompProfile = nil }},
		},
		{
			name: "seccomp unset at restricted", level: LevelRestricted,
			given: []func(*corev1.Pod){func(p *corev1.Pod) { p.Spec.SecurityContext.SeccompProfile = nil }},
			want:  `seccompProfile (pod or container "app" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")`,
		},
		{
			name: "seccomp on every container instead of the pod", level: LevelRestricted,
			given: []func(*corev1.Pod){func(p *corev1.Pod) {
				p.Spec.SecurityContext.SeccompProfile = nil
				app(p).SecurityContext.SeccompProfile = &corev1.SeccompProfile{Type: "Localhost", LocalhostProfile: "p.json"}
			}},
		},
		{
			name: "seccomp Unconfined at restricted", level: LevelRestricted,
			given: []func(*corev1.Pod){func(p *corev1.Pod) {
				app(p).SecurityContext.SeccompProfile = &corev1.SeccompProfile{Type: "Unconfined"}
			}},
			want: `seccompProfile (container "app" must not set securityContext.seccompProfile.type to "Unconfined")`,
		},
		{
			name: "sysctls", level: LevelBaseline,
			given: []func(*corev1.Pod){func(p *corev1.Pod) {
				p.Spec.SecurityContext.Sysctls = []*corev1.Sysctl{{Name: "net.ipv4.tcp_syncookies", Value: "1"}, {Name: "kernel.msgmax", Value: "1"}, {Name: "vm.swappiness", Value: "1"}}
			}},
			want: `forbidden sysctls (kernel.msgmax, vm.swappiness)`,
		},
		{
			name: "allowPrivilegeEscalation unset", level: LevelRestricted,
			given: []func(*corev1.Pod){sidecar, func(p *corev1.Pod) {
				p.Spec.InitContainers = []*corev1.Container{{Name: "init", Image: "i:1", SecurityContext: &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Drop: []string{"ALL"}}}}}
				app(p).SecurityContext.AllowPrivilegeEscalation = nil
			}},
			want: `allowPrivilegeEscalation != false (containers "init", "app" must set securityContext.allowPrivilegeEscalation=false)`,
		},
		{
			name: "runAsNonRoot unset", level: LevelRestricted,
			given: []func(*corev1.Pod){func(p *corev1.Pod) { p.Spec.SecurityContext.RunAsNonRoot = nil }},
			want:  `runAsNonRoot != true (pod or container "app" must set securityContext.runAsNonRoot=true)`,
		},
		{
			name: "runAsNonRoot on the container instead", level: LevelRestricted,
			given: []func(*corev1.Pod){func(p *corev1.Pod) {
				p.Spec.SecurityContext.RunAsNonRoot = nil
				app(p).SecurityContext.RunAsNonRoot = proto.Bool(true)
			}},
		},
		{
			name: "runAsNonRoot explicitly false", level: LevelRestricted,
			given: []func(*corev1.Pod){sidecar, func(p *corev1.Pod) {
				p.Spec.SecurityContext.RunAsNonRoot = proto.Bool(false)
				app(p).SecurityContext.RunAsNonRoot = proto.Bool(false)
			}},
			want: `runAsNonRoot != true (pod and container "app" must not set securityContext.runAsNonRoot=false)`,
		},
		{
			name: "runAsUser 0", level: LevelRestricted,
			given: []func(*corev1.Pod){func(p *corev1.Pod) {
				p.Spec.SecurityContext.RunAsUser = proto.Int64(0)
				app(p).SecurityContext.RunAsUser = proto.Int64(0)
			}},
			want: `runAsUser=0 (pod and container "app" must not set runAsUser=0)`,
		},
		{
			name: "runAsUser 1000 is fine", level: LevelRestricted,
			given: []func(*corev1.Pod){func(p *corev1.Pod) { app(p).SecurityContext.RunAsUser = proto.Int64(1000) }},
		},
		{
			name: "several checks, in Kubernetes' order", level: LevelRestricted,
			given: []func(*corev1.Pod){func(p *corev1.Pod) {
				p.Spec.SecurityContext = nil
				app(p).SecurityContext = nil
			}},
			want: `allowPrivilegeEscalation != false (container "app" must set securityContext.allowPrivilegeEscalation=false), ` +
				`unrestricted capabilities (container "app" must set securityContext.capabilities.drop=["ALL"]), ` +
				`runAsNonRoot != true (pod or container "app" must set securityContext.runAsNonRoot=true), ` +
				`seccompProfile (pod or container "app" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := Admit(pod(tc.given...), State{Namespace: nsWithLevel(string(tc.level))})
			if tc.want == "" {
				var refused []string
				for _, c := range res.Status.GetCauses() {
					refused = append(refused, c.GetField())
				}
				if !res.Allowed() && (res.Status.GetCode() != 422 || !slices.Equal(refused, tc.refused)) {
					t.Fatalf("rejected: %s", res.Status.Message)
				}
				if res.Allowed() && len(tc.refused) > 0 {
					t.Fatalf("admitted, want %q refused", tc.refused)
				}
				return
			}
			st := res.Status
			if st.GetCode() != 403 || st.GetReason() != eventsv1.ReasonPolicyViolation {
				t.Fatalf("status = %v, want 403 PolicyViolation", st)
			}
			want := `pods "web" is forbidden: violates PodSecurity "` + string(tc.level) + `:latest": ` + tc.want
			if st.Message != want {
				t.Fatalf("message\n got %s\nwant %s", st.Message, want)
			}
		})
	}
}

func TestLevelFor(t *testing.T) {
	tests := []struct {
		name string
		ns   *corev1.Namespace
		cfg  Config
		want Level
	}{
		{"no namespace, zero config", nil, Config{}, LevelPrivileged},
		{"no label, default config", nsWithLevel(""), DefaultConfig(), LevelPrivileged},
		{"no label, configured default", nsWithLevel(""), Config{DefaultLevel: LevelBaseline}, LevelBaseline},
		{"label wins over default", nsWithLevel("privileged"), Config{DefaultLevel: LevelRestricted}, LevelPrivileged},
		{"restricted label", nsWithLevel("restricted"), DefaultConfig(), LevelRestricted},
		{"unknown label fails closed", nsWithLevel("strict"), DefaultConfig(), LevelRestricted},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := LevelFor(tc.ns, tc.cfg); got != tc.want {
				t.Fatalf("LevelFor = %s, want %s", got, tc.want)
			}
		})
	}
	// The configured default reaches Admit.
	hostNet := pod(func(p *corev1.Pod) { p.Spec.HostNetwork = true })
	if res := Admit(hostNet, State{}); !res.Allowed() {
		t.Fatalf("default (privileged) rejected: %s", res.Status.Message)
	}
	if res := Admit(hostNet, State{Config: Config{DefaultLevel: LevelBaseline}}); res.Allowed() {
		t.Fatal("configured default baseline admitted a hostNetwork pod")
	}
}
