package admission

import (
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
)

func port(n int32) *corev1.IntOrString {
	return &corev1.IntOrString{Value: &corev1.IntOrString_IntVal{IntVal: n}}
}

func TestValidatePod(t *testing.T) {
	tests := []struct {
		name  string
		given func(*corev1.Pod)
		want  []string // "CauseType field" of every cause, in order
	}{
		{"valid", func(*corev1.Pod) {}, nil},
		{"name missing", func(p *corev1.Pod) { p.Metadata.Name = "" }, []string{"FieldValueRequired metadata.name"}},
		{"generateName is enough", func(p *corev1.Pod) { p.Metadata.Name, p.Metadata.GenerateName = "", "web-" }, nil},
		{"bad generateName", func(p *corev1.Pod) { p.Metadata.Name, p.Metadata.GenerateName = "", "Web_" }, []string{"FieldValueInvalid metadata.generateName"}},
		{"name not a DNS subdomain", func(p *corev1.Pod) { p.Metadata.Name = "Web_1" }, []string{"FieldValueInvalid metadata.name"}},
		{"namespace missing", func(p *corev1.Pod) { p.Metadata.Namespace = "" }, []string{"FieldValueRequired metadata.namespace"}},
		{"bad label", func(p *corev1.Pod) { p.Metadata.Labels["-bad"] = "x y" }, []string{"FieldValueInvalid metadata.labels", "FieldValueInvalid metadata.labels"}},
		{"bad annotation key", func(p *corev1.Pod) { p.Metadata.Annotations = map[string]string{"a b": ""} }, []string{"FieldValueInvalid metadata.annotations"}},
		{"no containers", func(p *corev1.Pod) { p.Spec.Containers = nil }, []string{"FieldValueRequired spec.containers"}},
		{"hostname, subdomain, hostAliases", func(p *corev1.Pod) {
			p.Spec.Hostname, p.Spec.Subdomain = "web-0", "web"
			p.Spec.HostAliases = []*corev1.HostAlias{{Ip: "10.1.2.3", Hostnames: []string{"foo.local", "bar"}}, {Ip: "fd00::1", Hostnames: []string{"v6"}}}
		}, nil},
		{"bad hostname and subdomain", func(p *corev1.Pod) { p.Spec.Hostname, p.Spec.Subdomain = "web.0", "Web" },
			[]string{"FieldValueInvalid spec.hostname", "FieldValueInvalid spec.subdomain"}},
		{"bad hostAliases", func(p *corev1.Pod) {
			p.Spec.HostAliases = []*corev1.HostAlias{{Ip: "10.1.2", Hostnames: []string{"ok", "Not_OK"}}}
		}, []string{"FieldValueInvalid spec.hostAliases[0].ip", "FieldValueInvalid spec.hostAliases[0].hostnames[1]"}},
		{"subPathExpr", func(p *corev1.Pod) {
			p.Spec.Volumes = []*corev1.Volume{{Name: "v", EmptyDir: &corev1.EmptyDirVolumeSource{}}}
			app(p).VolumeMounts = []*corev1.VolumeMount{{Name: "v", MountPath: "/v", SubPathExpr: "$(POD_NAME)/logs"}}
		}, nil},
		{"bad subPathExpr", func(p *corev1.Pod) {
			p.Spec.Volumes = []*corev1.Volume{{Name: "v", EmptyDir: &corev1.EmptyDirVolumeSource{}}}
			app(p).VolumeMounts = []*corev1.VolumeMount{{Name: "v", MountPath: "/a", SubPath: "x", SubPathExpr: "$(A)"},
				{Name: "v", MountPath: "/b", SubPathExpr: "/abs"}, {Name: "v", MountPath: "/c", SubPathExpr: "$(A)/../x"}}
		}, []string{"FieldValueInvalid spec.containers[0].volumeMounts[0].subPathExpr", "FieldValueInvalid spec.containers[0].volumeMounts[1].subPathExpr",
			"FieldValueInvalid spec.containers[0].volumeMounts[2].subPathExpr"}},
		{"seLinuxOptions and seLinuxChangePolicy", func(p *corev1.Pod) {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{SeLinuxOptions: &corev1.SELinuxOptions{Level: "s0:c1,c2"}, SeLinuxChangePolicy: proto.String("MountOption")}
			app(p).SecurityContext = &corev1.SecurityContext{SeLinuxOptions: &corev1.SELinuxOptions{Type: "container_t"}}
		}, nil},
		{"bad seLinuxChangePolicy", func(p *corev1.Pod) {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{SeLinuxChangePolicy: proto.String("Sometimes")}
		}, []string{"FieldValueNotSupported spec.securityContext.seLinuxChangePolicy"}},
		{"ephemeral containers on create", func(p *corev1.Pod) {
			p.Spec.EphemeralContainers = []*corev1.EphemeralContainer{{Name: "debugger", Image: "busybox"}}
		}, []string{"FieldValueForbidden spec.ephemeralContainers"}},
		{"image missing", func(p *corev1.Pod) { app(p).Image = "" }, []string{"FieldValueRequired spec.containers[0].image"}},
		{"container name missing", func(p *corev1.Pod) { app(p).Name = "" }, []string{"FieldValueRequired spec.containers[0].name"}},
		{"container name not a DNS label", func(p *corev1.Pod) { app(p).Name = "app.v1" }, []string{"FieldValueInvalid spec.containers[0].name"}},
		{"duplicate container name across init", func(p *corev1.Pod) {
			p.Spec.InitContainers = []*corev1.Container{{Name: "app", Image: "x:1", ImagePullPolicy: "IfNotPresent"}}
		}, []string{"FieldValueDuplicate spec.containers[0].name"}},
		{"restartPolicy unsupported", func(p *corev1.Pod) { p.Spec.RestartPolicy = "Sometimes" }, []string{"FieldValueNotSupported spec.restartPolicy"}},
		{"dnsPolicy unsupported", func(p *corev1.Pod) { p.Spec.DnsPolicy = "Sometimes" }, []string{"FieldValueNotSupported spec.dnsPolicy"}},
		{"dnsPolicy None without dnsConfig", func(p *corev1.Pod) { p.Spec.DnsPolicy = "None" }, []string{"FieldValueRequired spec.dnsConfig"}},
		{"dnsPolicy None without a nameserver", func(p *corev1.Pod) {
			p.Spec.DnsPolicy, p.Spec.DnsConfig = "None", &corev1.PodDNSConfig{Searches: []string{"a.example"}}
		}, []string{"FieldValueRequired spec.dnsConfig.nameservers"}},
		{"dnsPolicy None with dnsConfig", func(p *corev1.Pod) {
			p.Spec.DnsPolicy, p.Spec.DnsConfig = "None", &corev1.PodDNSConfig{Nameservers: []string{"10.244.1.1"}}
		}, nil},
		{"dnsConfig nameservers", func(p *corev1.Pod) {
			p.Spec.DnsConfig = &corev1.PodDNSConfig{Nameservers: []string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "resolver"}}
		}, []string{"FieldValueInvalid spec.dnsConfig.nameservers", "FieldValueInvalid spec.dnsConfig.nameservers[3]"}},
		{"imagePullPolicy unsupported", func(p *corev1.Pod) { app(p).ImagePullPolicy = "Sometimes" }, []string{"FieldValueNotSupported spec.containers[0].imagePullPolicy"}},
		{"negative grace period", func(p *corev1.Pod) { p.Spec.TerminationGracePeriodSeconds = proto.Int64(-1) }, []string{"FieldValueInvalid spec.terminationGracePeriodSeconds"}},
		{"restartPolicy on a regular container", func(p *corev1.Pod) { app(p).RestartPolicy = "Always" }, []string{"FieldValueForbidden spec.containers[0].restartPolicy"}},
		{"init container restartPolicy", func(p *corev1.Pod) {
			p.Spec.InitContainers = []*corev1.Container{{Name: "init", Image: "x:1", ImagePullPolicy: "IfNotPresent", RestartPolicy: "OnFailure"}}
		}, []string{"FieldValueNotSupported spec.initContainers[0].restartPolicy"}},
		{"bad quantity", func(p *corev1.Pod) {
			app(p).Resources = &corev1.ResourceRequirements{Limits: map[string]string{"cpu": "lots"}}
		}, []string{ // the bad limit was also copied into the missing request
			"FieldValueInvalid spec.containers[0].resources.limits[cpu]",
			"FieldValueInvalid spec.containers[0].resources.requests[cpu]",
		}},
		{"negative quantity", func(p *corev1.Pod) {
			app(p).Resources = &corev1.ResourceRequirements{Requests: map[string]string{"memory": "-1Gi"}}
		}, []string{"FieldValueInvalid spec.containers[0].resources.requests[memory]"}},
		{"request above limit", func(p *corev1.Pod) {
			app(p).Resources = &corev1.ResourceRequirements{Requests: map[string]string{"cpu": "2"}, Limits: map[string]string{"cpu": "1"}}
		}, []string{"FieldValueInvalid spec.containers[0].resources.requests[cpu]"}},
		{"request equal to limit in other units", func(p *corev1.Pod) {
			app(p).Resources = &corev1.ResourceRequirements{Requests: map[string]string{"cpu": "1000m"}, Limits: map[string]string{"cpu": "1"}}
		}, nil},
		{"ports", func(p *corev1.Pod) {
			app(p).Ports = []*corev1.ContainerPort{
				{Name: "http", ContainerPort: 0, Protocol: "TCP"},
				{Name: "http", ContainerPort: 70000, Protocol: "TCP"},
				{Name: "Not_Valid", ContainerPort: 80, HostPort: -1, Protocol: "ICMP"},
			}
		}, []string{
			"FieldValueRequired spec.containers[0].ports[0].containerPort",
			"FieldValueDuplicate spec.containers[0].ports[1].name",
			"FieldValueInvalid spec.containers[0].ports[1].containerPort",
			"FieldValueInvalid spec.containers[0].ports[2].name",
			"FieldValueInvalid spec.containers[0].ports[2].hostPort",
			"FieldValueNotSupported spec.containers[0].ports[2].protocol",
		}},
		{"one host port, protocol and host IP twice", func(p *corev1.Pod) {
			app(p).Ports = []*corev1.ContainerPort{
				{ContainerPort: 80, HostPort: 8080, Protocol: "TCP"},
				{ContainerPort: 81, HostPort: 8080, Protocol: "UDP"},
				{ContainerPort: 82, HostPort: 8080, Protocol: "TCP", HostIp: "127.0.0.1"},
				{ContainerPort: 83, HostPort: 8080, Protocol: "TCP"},
			}
		}, []string{"FieldValueDuplicate spec.containers[0].ports[3].hostPort"}},
		{"hostNetwork needs hostPort = containerPort", func(p *corev1.Pod) {
			p.Spec.HostNetwork = true
			app(p).Ports = []*corev1.ContainerPort{{ContainerPort: 80, HostPort: 8080, Protocol: "TCP"}}
		}, []string{"FieldValueInvalid spec.containers[0].ports[0].hostPort"}},
		{"env", func(p *corev1.Pod) {
			app(p).Env = []*corev1.EnvVar{{Name: ""}, {Name: "A=B"}, {Name: "X", Value: "v", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
				{Name: "Y", ValueFrom: &corev1.EnvVarSource{}}}
		}, []string{"FieldValueRequired spec.containers[0].env[0].name", "FieldValueInvalid spec.containers[0].env[1].name",
			"FieldValueInvalid spec.containers[0].env[2].valueFrom", "FieldValueInvalid spec.containers[0].env[3].valueFrom"}},
		{"volumes", func(p *corev1.Pod) {
			p.Spec.Volumes = []*corev1.Volume{
				{Name: "data", EmptyDir: &corev1.EmptyDirVolumeSource{}},
				{Name: "data", EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: "big"}},
				{Name: "none"},
				{Name: "two", ConfigMap: &corev1.ConfigMapVolumeSource{Name: "cm"}, Secret: &corev1.SecretVolumeSource{SecretName: "s"}},
				{Name: "Bad_Name", Secret: &corev1.SecretVolumeSource{}},
			}
		}, []string{
			"FieldValueDuplicate spec.volumes[1].name",
			"FieldValueInvalid spec.volumes[1].emptyDir.sizeLimit",
			"FieldValueRequired spec.volumes[2]",
			"FieldValueForbidden spec.volumes[3].secret",
			"FieldValueInvalid spec.volumes[4].name",
			"FieldValueRequired spec.volumes[4].secret.secretName",
		}},
		{"volume mounts", func(p *corev1.Pod) {
			p.Spec.Volumes = []*corev1.Volume{{Name: "data", EmptyDir: &corev1.EmptyDirVolumeSource{}}}
			app(p).VolumeMounts = []*corev1.VolumeMount{
				{Name: "data", MountPath: "/data"},
				{Name: "missing", MountPath: "/data"},
				{Name: "data", MountPath: "/x", SubPath: "../etc"},
				{Name: "data"},
			}
		}, []string{
			"FieldValueNotFound spec.containers[0].volumeMounts[1].name",
			"FieldValueInvalid spec.containers[0].volumeMounts[1].mountPath",
			"FieldValueInvalid spec.containers[0].volumeMounts[2].subPath",
			"FieldValueRequired spec.containers[0].volumeMounts[3].mountPath",
		}},
		{"probe without handler", func(p *corev1.Pod) {
			app(p).LivenessProbe = &corev1.Probe{TimeoutSeconds: 1, PeriodSeconds: 10, SuccessThreshold: 1, FailureThreshold: 3}
		}, []string{"FieldValueRequired spec.containers[0].livenessProbe"}},
		{"probe with two handlers", func(p *corev1.Pod) {
			app(p).ReadinessProbe = &corev1.Probe{Exec: &corev1.ExecAction{Command: []string{"true"}},
				TcpSocket: &corev1.TCPSocketAction{Port: port(80)}, TimeoutSeconds: 1, PeriodSeconds: 10, SuccessThreshold: 1, FailureThreshold: 3}
		}, []string{"FieldValueForbidden spec.containers[0].readinessProbe.tcpSocket"}},
		{"grpc probe", func(p *corev1.Pod) {
			app(p).ReadinessProbe = &corev1.Probe{Grpc: &corev1.GRPCAction{Port: 0}, TimeoutSeconds: 1, PeriodSeconds: 10, SuccessThreshold: 1, FailureThreshold: 3}
			app(p).LivenessProbe = &corev1.Probe{Grpc: &corev1.GRPCAction{Port: 9090},
				TcpSocket: &corev1.TCPSocketAction{Port: port(80)}, TimeoutSeconds: 1, PeriodSeconds: 10, SuccessThreshold: 1, FailureThreshold: 3}
		}, []string{
			"FieldValueForbidden spec.containers[0].livenessProbe.grpc",
			"FieldValueInvalid spec.containers[0].readinessProbe.grpc.port",
		}},
		{"probe fields", func(p *corev1.Pod) {
			app(p).LivenessProbe = &corev1.Probe{HttpGet: &corev1.HTTPGetAction{Port: &corev1.IntOrString{Value: &corev1.IntOrString_StrVal{StrVal: "no_such-"}}, Scheme: "FTP", Path: "/"},
				InitialDelaySeconds: -1, TimeoutSeconds: 1, PeriodSeconds: 10, SuccessThreshold: 2, FailureThreshold: 3}
			app(p).StartupProbe = &corev1.Probe{Exec: &corev1.ExecAction{}, TimeoutSeconds: 1, PeriodSeconds: 10, SuccessThreshold: 1, FailureThreshold: 3}
		}, []string{
			"FieldValueInvalid spec.containers[0].livenessProbe.httpGet.port", // bad characters
			"FieldValueInvalid spec.containers[0].livenessProbe.httpGet.port", // ends with a hyphen
			"FieldValueNotSupported spec.containers[0].livenessProbe.httpGet.scheme",
			"FieldValueInvalid spec.containers[0].livenessProbe.initialDelaySeconds",
			"FieldValueInvalid spec.containers[0].livenessProbe.successThreshold",
			"FieldValueRequired spec.containers[0].startupProbe.exec.command",
		}},
		{"probe on an init container", func(p *corev1.Pod) {
			p.Spec.InitContainers = []*corev1.Container{{Name: "init", Image: "x:1", ImagePullPolicy: "IfNotPresent",
				ReadinessProbe: &corev1.Probe{Exec: &corev1.ExecAction{Command: []string{"true"}}, TimeoutSeconds: 1, PeriodSeconds: 10, SuccessThreshold: 1, FailureThreshold: 3}}}
		}, []string{"FieldValueForbidden spec.initContainers[0].readinessProbe"}},
		{"security contexts", func(p *corev1.Pod) {
			p.Spec.SecurityContext.SeccompProfile = &corev1.SeccompProfile{Type: "Localhost"}
			p.Spec.SecurityContext.Sysctls = []*corev1.Sysctl{{Name: "net.ipv4.tcp_syncookies"}, {Name: "net.ipv4.tcp_syncookies"}, {Name: "Bad..name"}}
			app(p).SecurityContext.ProcMount = "Hidden"
			app(p).SecurityContext.RunAsUser = proto.Int64(-5)
			app(p).SecurityContext.Privileged = proto.Bool(true)
		}, []string{
			"FieldValueNotSupported spec.containers[0].securityContext.procMount",
			"FieldValueInvalid spec.containers[0].securityContext.runAsUser",
			"FieldValueInvalid spec.containers[0].securityContext",
			"FieldValueRequired spec.securityContext.seccompProfile.localhostProfile",
			"FieldValueDuplicate spec.securityContext.sysctls[1].name",
			"FieldValueInvalid spec.securityContext.sysctls[2].name",
		}},
		{"tolerations", func(p *corev1.Pod) {
			p.Spec.Tolerations = []*corev1.Toleration{
				{Key: "gpu", Operator: "Exists"},
				{Operator: "Exists"},
				{Key: "gpu", Operator: "Exists", Value: "yes"},
				{Key: "gpu", Operator: "Matches"},
				{Operator: "Equal", Value: "x"},
				{Key: "gpu", Effect: "NoRun"},
				{Key: "gpu", Effect: "NoSchedule", TolerationSeconds: proto.Int64(5)},
			}
		}, []string{
			"FieldValueInvalid spec.tolerations[2].operator",
			"FieldValueNotSupported spec.tolerations[3].operator",
			"FieldValueInvalid spec.tolerations[4].operator",
			"FieldValueNotSupported spec.tolerations[5].effect",
			"FieldValueInvalid spec.tolerations[6].effect",
		}},
		{"node affinity", func(p *corev1.Pod) {
			term := func(reqs ...*corev1.NodeSelectorRequirement) *corev1.NodeSelectorTerm {
				return &corev1.NodeSelectorTerm{MatchExpressions: reqs}
			}
			p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []*corev1.NodeSelectorTerm{
					term(&corev1.NodeSelectorRequirement{Key: "zone", Operator: "In", Values: []string{"a"}},
						&corev1.NodeSelectorRequirement{Key: "zone", Operator: "In"},
						&corev1.NodeSelectorRequirement{Key: "zone", Operator: "Exists", Values: []string{"a"}},
						&corev1.NodeSelectorRequirement{Key: "cores", Operator: "Gt", Values: []string{"many"}},
						&corev1.NodeSelectorRequirement{Key: "zone", Operator: "Near"}),
				}},
				PreferredDuringSchedulingIgnoredDuringExecution: []*corev1.PreferredSchedulingTerm{
					{Weight: 0, Preference: term(&corev1.NodeSelectorRequirement{Key: "zone", Operator: "DoesNotExist"})},
				},
			}}
		}, []string{
			"FieldValueRequired spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[1].values",
			"FieldValueForbidden spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[2].values",
			"FieldValueInvalid spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[3].values[0]",
			"FieldValueNotSupported spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[4].operator",
			"FieldValueInvalid spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight",
		}},
		{"empty required node selector", func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{}}}
		}, []string{"FieldValueRequired spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"}},
		{"bad nodeSelector and serviceAccountName", func(p *corev1.Pod) {
			p.Spec.NodeSelector = map[string]string{"zone": "a b"}
			p.Spec.ServiceAccountName = "Bad_SA"
		}, []string{"FieldValueInvalid spec.serviceAccountName", "FieldValueInvalid spec.nodeSelector"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := pod(tc.given)
			res := Admit(p, State{})
			got := causeFields(res.Status)
			if len(tc.want) == 0 {
				if res.Status != nil {
					t.Fatalf("rejected: %s", res.Status.Message)
				}
				return
			}
			if res.Status.GetCode() != 422 || res.Status.GetReason() != eventsv1.ReasonInvalid {
				t.Fatalf("status = %v, want 422 Invalid", res.Status)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("causes\n  %s\nwant\n  %s\nmessage: %s", strings.Join(got, "\n  "), strings.Join(tc.want, "\n  "), res.Status.Message)
			}
		})
	}
}

func TestValidatePodMessage(t *testing.T) {
	p := pod(func(p *corev1.Pod) {
		app(p).Image = ""
		p.Spec.RestartPolicy = "Sometimes"
	})
	st := Admit(p, State{}).Status
	want := `Pod "web" is invalid: [spec.containers[0].image: Required value, spec.restartPolicy: Unsupported value: "Sometimes": supported values: "Always", "OnFailure", "Never"]`
	if st.GetMessage() != want {
		t.Fatalf("message\n got %s\nwant %s", st.GetMessage(), want)
	}
	if c := st.Causes[1]; c.Message != `Unsupported value: "Sometimes": supported values: "Always", "OnFailure", "Never"` || c.Field != "spec.restartPolicy" {
		t.Fatalf("cause = %v", c)
	}
	one := Admit(pod(func(p *corev1.Pod) { app(p).Image = "" }), State{}).Status
	if want := `Pod "web" is invalid: spec.containers[0].image: Required value`; one.GetMessage() != want {
		t.Fatalf("message\n got %s\nwant %s", one.GetMessage(), want)
	}
	if st := ValidatePod(&corev1.Pod{}); st == nil || !slices.Contains(causeFields(st), "FieldValueRequired spec.containers") {
		t.Fatalf("empty pod: %v", st)
	}
}

func TestSchemaBeforePodSecurity(t *testing.T) {
	p := pod(func(p *corev1.Pod) {
		app(p).Image = ""
		p.Spec.HostNetwork = true
	})
	if st := Admit(p, State{Namespace: nsWithLevel("restricted")}).Status; st.GetCode() != 422 {
		t.Fatalf("status = %v, want 422 (schema is checked first)", st)
	}
}
