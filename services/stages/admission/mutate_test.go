package admission

import (
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/podrules"
)

func TestMutations(t *testing.T) {
	lr := &corev1.LimitRange{
		Metadata: &corev1.ObjectMeta{Name: "defaults", Namespace: "default"},
		Spec: &corev1.LimitRangeSpec{Limits: []*corev1.LimitRangeItem{{
			Type:           "Container",
			Default:        map[string]string{"cpu": "500m", "memory": "256Mi"},
			DefaultRequest: map[string]string{"cpu": "100m"},
		}}},
	}
	tests := []struct {
		name  string
		given *corev1.Pod
		state State
		want  []string                 // mutations that must be listed
		check func(*corev1.Pod) string // "" when the pod is as expected
	}{
		{
			name:  "service account defaulted",
			given: pod(),
			want:  []string{"serviceaccount: defaulted to default"},
			check: func(p *corev1.Pod) string { return expect(p.Spec.ServiceAccountName, "default") },
		},
		{
			name:  "service account kept",
			given: pod(func(p *corev1.Pod) { p.Spec.ServiceAccountName = "builder" }),
			check: func(p *corev1.Pod) string { return expect(p.Spec.ServiceAccountName, "builder") },
		},
		{
			name:  "limitrange defaults and defaultRequest",
			given: pod(),
			state: State{LimitRanges: []*corev1.LimitRange{lr}},
			want: []string{
				"limitrange/defaults: set limits.cpu=500m on container app",
				"limitrange/defaults: set limits.memory=256Mi on container app",
				"limitrange/defaults: set requests.cpu=100m on container app",
				"limitrange/defaults: set requests.memory=256Mi on container app",
			},
			check: func(p *corev1.Pod) string {
				r := app(p).Resources
				return expect(r.Limits["cpu"]+" "+r.Limits["memory"]+" "+r.Requests["cpu"]+" "+r.Requests["memory"], "500m 256Mi 100m 256Mi")
			},
		},
		{
			name: "limit without request: request = limit, before LimitRange",
			given: pod(func(p *corev1.Pod) {
				app(p).Resources = &corev1.ResourceRequirements{Limits: map[string]string{"cpu": "2"}}
			}),
			state: State{LimitRanges: []*corev1.LimitRange{lr}},
			want:  []string{"defaults: set requests.cpu=2 from limits on container app"},
			check: func(p *corev1.Pod) string {
				r := app(p).Resources
				return expect(r.Limits["cpu"]+" "+r.Requests["cpu"], "2 2")
			},
		},
		{
			name: "limitrange keeps what the container sets",
			given: pod(func(p *corev1.Pod) {
				app(p).Resources = &corev1.ResourceRequirements{Requests: map[string]string{"cpu": "50m"}}
			}),
			state: State{LimitRanges: []*corev1.LimitRange{lr}},
			check: func(p *corev1.Pod) string { return expect(app(p).Resources.Requests["cpu"], "50m") },
		},
		{
			name:  "limitrange max and min as fallbacks",
			given: pod(),
			state: State{LimitRanges: []*corev1.LimitRange{{
				Metadata: &corev1.ObjectMeta{Name: "bounds"},
				Spec: &corev1.LimitRangeSpec{Limits: []*corev1.LimitRangeItem{
					{Type: "Container", Max: map[string]string{"cpu": "1"}, Min: map[string]string{"memory": "64Mi"}},
					{Type: "Pod", Default: map[string]string{"cpu": "9"}},
				}},
			}}},
			want: []string{
				"limitrange/bounds: set limits.cpu=1 on container app",
				"limitrange/bounds: set requests.cpu=1 on container app",
				"limitrange/bounds: set requests.memory=64Mi on container app",
			},
		},
		{
			name:  "limitrange of another namespace ignored",
			given: pod(),
			state: State{LimitRanges: []*corev1.LimitRange{{
				Metadata: &corev1.ObjectMeta{Name: "other", Namespace: "kube-system"},
				Spec:     lr.Spec,
			}}},
			check: func(p *corev1.Pod) string {
				if app(p).Resources != nil {
					return "resources set from another namespace's LimitRange"
				}
				return ""
			},
		},
		{
			name: "every container defaulted by the LimitRange, an injected sidecar too",
			given: pod(func(p *corev1.Pod) {
				p.Spec.Containers = append(p.Spec.Containers, &corev1.Container{Name: "proxy", Image: "mesh/proxy:1"})
			}),
			state: State{LimitRanges: []*corev1.LimitRange{lr}},
			want: []string{
				"limitrange/defaults: set limits.cpu=500m on container app",
				"limitrange/defaults: set limits.cpu=500m on container proxy",
			},
		},
		{
			name:  "field defaults",
			given: pod(),
			want: []string{
				"defaults: set restartPolicy=Always, terminationGracePeriodSeconds=30",
				"defaults: set imagePullPolicy=IfNotPresent, terminationMessagePath=/dev/termination-log, terminationMessagePolicy=File on container app",
			},
			check: func(p *corev1.Pod) string {
				return expect(p.Spec.RestartPolicy+" "+app(p).ImagePullPolicy, "Always IfNotPresent") +
					expect(p.Spec.GetTerminationGracePeriodSeconds(), int64(30)) +
					expect(app(p).TerminationMessagePath+" "+app(p).TerminationMessagePolicy, "/dev/termination-log File")
			},
		},
		{
			name: "explicit fields kept",
			given: pod(func(p *corev1.Pod) {
				p.Spec.RestartPolicy = "Never"
				p.Spec.TerminationGracePeriodSeconds = proto.Int64(0)
				app(p).ImagePullPolicy = "Never"
				app(p).TerminationMessagePath = "/tmp/why"
				app(p).TerminationMessagePolicy = "FallbackToLogsOnError"
			}),
			check: func(p *corev1.Pod) string {
				return expect(p.Spec.RestartPolicy+" "+app(p).ImagePullPolicy, "Never Never") +
					expect(p.Spec.GetTerminationGracePeriodSeconds(), int64(0)) +
					expect(app(p).TerminationMessagePath+" "+app(p).TerminationMessagePolicy, "/tmp/why FallbackToLogsOnError")
			},
		},
		{
			name: "port protocol and probe defaults",
			given: pod(func(p *corev1.Pod) {
				c := app(p)
				c.Ports = []*corev1.ContainerPort{{ContainerPort: 8080}, {ContainerPort: 53, Protocol: "UDP"}}
				c.LivenessProbe = &corev1.Probe{HttpGet: &corev1.HTTPGetAction{Port: &corev1.IntOrString{Value: &corev1.IntOrString_IntVal{IntVal: 8080}}}}
				c.ReadinessProbe = &corev1.Probe{TcpSocket: &corev1.TCPSocketAction{Port: &corev1.IntOrString{Value: &corev1.IntOrString_IntVal{IntVal: 8080}}}, PeriodSeconds: 5}
			}),
			want: []string{"defaults: set imagePullPolicy=IfNotPresent, terminationMessagePath=/dev/termination-log, terminationMessagePolicy=File, ports[0].protocol=TCP, " +
				"livenessProbe.timeoutSeconds=1, livenessProbe.periodSeconds=10, livenessProbe.successThreshold=1, livenessProbe.failureThreshold=3, " +
				"livenessProbe.httpGet.path=/, livenessProbe.httpGet.scheme=HTTP, " +
				"readinessProbe.timeoutSeconds=1, readinessProbe.successThreshold=1, readinessProbe.failureThreshold=3 on container app"},
			check: func(p *corev1.Pod) string {
				c := app(p)
				return expect(c.Ports[0].Protocol+c.Ports[1].Protocol, "TCPUDP") +
					expect(c.ReadinessProbe.PeriodSeconds, int32(5)) + expect(c.LivenessProbe.PeriodSeconds, int32(10))
			},
		},
		{
			name: "grpc probe service defaults to empty",
			given: pod(func(p *corev1.Pod) {
				app(p).StartupProbe = &corev1.Probe{Grpc: &corev1.GRPCAction{Port: 9090}, TimeoutSeconds: 1, PeriodSeconds: 10, SuccessThreshold: 1, FailureThreshold: 3}
			}),
			want: []string{`defaults: set imagePullPolicy=IfNotPresent, terminationMessagePath=/dev/termination-log, terminationMessagePolicy=File, startupProbe.grpc.service="" on container app`},
			check: func(p *corev1.Pod) string {
				g := app(p).StartupProbe.GetGrpc()
				return expect(g.Service != nil && *g.Service == "", true)
			},
		},
		{
			name: "file volumes' defaultMode defaults to 0644, a secret's too",
			given: pod(func(p *corev1.Pod) {
				p.Spec.Volumes = []*corev1.Volume{
					{Name: "cm", ConfigMap: &corev1.ConfigMapVolumeSource{Name: "cm"}},
					{Name: "sec", Secret: &corev1.SecretVolumeSource{SecretName: "s"}},
					{Name: "dapi", DownwardApi: &corev1.DownwardAPIVolumeSource{}},
					{Name: "proj", Projected: &corev1.ProjectedVolumeSource{}},
					{Name: "own", Secret: &corev1.SecretVolumeSource{SecretName: "s", DefaultMode: proto.Int32(0o400)}},
					{Name: "scratch", EmptyDir: &corev1.EmptyDirVolumeSource{}},
				}
			}),
			want: []string{"defaults: set restartPolicy=Always, terminationGracePeriodSeconds=30, volumes[0].configMap.defaultMode=0644, " +
				"volumes[1].secret.defaultMode=0644, volumes[2].downwardAPI.defaultMode=0644, volumes[3].projected.defaultMode=0644"},
			check: func(p *corev1.Pod) string {
				v := p.Spec.Volumes
				return expect(v[0].ConfigMap.GetDefaultMode(), int32(0o644)) + expect(v[1].Secret.GetDefaultMode(), int32(0o644)) +
					expect(v[2].DownwardApi.GetDefaultMode(), int32(0o644)) + expect(v[3].Projected.GetDefaultMode(), int32(0o644)) +
					expect(v[4].Secret.GetDefaultMode(), int32(0o400))
			},
		},
		{
			name:  "serviceaccount's imagePullSecrets copied into a pod without any",
			given: pod(func(p *corev1.Pod) { p.Spec.ServiceAccountName = "builder" }),
			state: State{ServiceAccount: &corev1.ServiceAccount{Metadata: &corev1.ObjectMeta{Name: "builder", Namespace: "default"},
				ImagePullSecrets: []*corev1.LocalObjectReference{{Name: "regcred"}, {Name: "mirror"}}}},
			want: []string{"serviceaccount: set imagePullSecrets=regcred,mirror from serviceaccount builder"},
			check: func(p *corev1.Pod) string {
				s := p.Spec.ImagePullSecrets
				return expect(len(s), 2) + expect(s[0].GetName()+","+s[1].GetName(), "regcred,mirror")
			},
		},
		{
			name: "a pod's own imagePullSecrets are kept",
			given: pod(func(p *corev1.Pod) {
				p.Spec.ServiceAccountName = "builder"
				p.Spec.ImagePullSecrets = []*corev1.LocalObjectReference{{Name: "mine"}}
			}),
			state: State{ServiceAccount: &corev1.ServiceAccount{Metadata: &corev1.ObjectMeta{Name: "builder", Namespace: "default"},
				ImagePullSecrets: []*corev1.LocalObjectReference{{Name: "regcred"}}}},
			check: func(p *corev1.Pod) string {
				s := p.Spec.ImagePullSecrets
				return expect(len(s), 1) + expect(s[0].GetName(), "mine")
			},
		},
		{
			name:  "the default serviceaccount's, for a pod naming none",
			given: pod(),
			state: State{ServiceAccount: &corev1.ServiceAccount{Metadata: &corev1.ObjectMeta{Name: "default", Namespace: "default"},
				ImagePullSecrets: []*corev1.LocalObjectReference{{Name: "regcred"}}}},
			want:  []string{"serviceaccount: defaulted to default", "serviceaccount: set imagePullSecrets=regcred from serviceaccount default"},
			check: func(p *corev1.Pod) string { return expect(len(p.Spec.ImagePullSecrets), 1) },
		},
		{
			name:  "another namespace's serviceaccount is not the pod's",
			given: pod(func(p *corev1.Pod) { p.Spec.ServiceAccountName = "builder" }),
			state: State{ServiceAccount: &corev1.ServiceAccount{Metadata: &corev1.ObjectMeta{Name: "builder", Namespace: "other"},
				ImagePullSecrets: []*corev1.LocalObjectReference{{Name: "regcred"}}}},
			check: func(p *corev1.Pod) string { return expect(len(p.Spec.ImagePullSecrets), 0) },
		},
		{
			name:  "qos class recorded",
			given: pod(),
			want:  []string{"qos: set status.qosClass=BestEffort"},
			check: func(p *corev1.Pod) string { return expect(p.Status.GetQosClass(), podrules.QOSBestEffort) },
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := proto.Clone(tc.given)
			res := mustAdmit(t, tc.given, tc.state)
			if !proto.Equal(before, tc.given) {
				t.Fatal("Admit modified its input")
			}
			if !containsAll(res.Mutations, tc.want) {
				t.Fatalf("mutations\n%s\nwant to include\n%s", strings.Join(res.Mutations, "\n"), strings.Join(tc.want, "\n"))
			}
			if tc.check != nil {
				if msg := tc.check(res.Pod); msg != "" {
					t.Fatal(msg)
				}
			}
			// Idempotency: a second pass changes nothing and says so.
			again := Admit(res.Pod, tc.state)
			if !proto.Equal(again.Pod, res.Pod) {
				t.Fatalf("second Admit changed the pod:\n%v\n%v", res.Pod, again.Pod)
			}
			if len(again.Mutations) != 0 {
				t.Fatalf("second Admit listed mutations: %q", again.Mutations)
			}
		})
	}
}

func TestAdmitDoesNotAliasPolicies(t *testing.T) {
	lr := &corev1.LimitRange{Metadata: &corev1.ObjectMeta{Name: "defaults", Namespace: "default"},
		Spec: &corev1.LimitRangeSpec{Limits: []*corev1.LimitRangeItem{{Type: "Container",
			Default: map[string]string{"cpu": "500m"}, DefaultRequest: map[string]string{"cpu": "100m"}}}}}
	before := proto.Clone(lr)
	res := mustAdmit(t, pod(), State{LimitRanges: []*corev1.LimitRange{lr}})
	res.Pod.Spec.Containers[0].Resources.Limits["cpu"] = "9"
	if !proto.Equal(before, lr) {
		t.Fatal("the admitted pod shares its resource maps with the LimitRange")
	}
}

func TestMutationOrderIsDeterministic(t *testing.T) {
	lrs := []*corev1.LimitRange{
		{Metadata: &corev1.ObjectMeta{Name: "b"}, Spec: &corev1.LimitRangeSpec{Limits: []*corev1.LimitRangeItem{{Type: "Container", DefaultRequest: map[string]string{"cpu": "2"}}}}},
		{Metadata: &corev1.ObjectMeta{Name: "a"}, Spec: &corev1.LimitRangeSpec{Limits: []*corev1.LimitRangeItem{{Type: "Container", DefaultRequest: map[string]string{"cpu": "1"}}}}},
	}
	res := mustAdmit(t, pod(), State{LimitRanges: lrs})
	if got := app(res.Pod).Resources.Requests["cpu"]; got != "1" {
		t.Fatalf("requests.cpu = %q, want 1 from LimitRange \"a\" (name order)", got)
	}
	want := []string{
		"serviceaccount: defaulted to default",
		"limitrange/a: set requests.cpu=1 on container app",
		"defaults: set restartPolicy=Always, terminationGracePeriodSeconds=30",
		"defaults: set imagePullPolicy=IfNotPresent, terminationMessagePath=/dev/termination-log, terminationMessagePolicy=File on container app",
		"defaulttolerationseconds: tolerate node.kubernetes.io/not-ready:NoExecute for 300s",
		"defaulttolerationseconds: tolerate node.kubernetes.io/unreachable:NoExecute for 300s",
		"qos: set status.qosClass=Burstable",
	}
	if !slices.Equal(res.Mutations, want) {
		t.Fatalf("mutations\n%q\nwant\n%q", res.Mutations, want)
	}
}

func TestAdmitNilPodAndBadConfig(t *testing.T) {
	if res := Admit(nil, State{}); res.Allowed() || res.Status.Code != 400 {
		t.Fatalf("Admit(nil) = %v, want 400", res.Status)
	}
	res := Admit(pod(), State{Config: Config{DefaultLevel: "strict"}})
	if res.Allowed() || res.Status.Code != 500 {
		t.Fatalf("Admit with bad config = %v, want 500", res.Status)
	}
	if err := (Config{DefaultLevel: "strict"}).Validate(); err == nil {
		t.Fatal("Validate accepted an unknown level")
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}

func names(cs []*corev1.Container) string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name)
	}
	return strings.Join(out, ",")
}

func expect[T comparable](got, want T) string {
	if got != want {
		return "got " + strings.TrimSpace(strings.ReplaceAll(fmtv(got), "\n", " ")) + ", want " + fmtv(want) + "; "
	}
	return ""
}

// TestDefaultTolerationSeconds: as kube-apiserver's DefaultTolerationSeconds
// plugin, a pod gets a 300 s toleration of the not-ready and of the
// unreachable NoExecute taint unless it tolerates that taint already (by
// key or every key, with NoExecute or every effect); the configuration
// sets other seconds.
func TestDefaultTolerationSeconds(t *testing.T) {
	tol := func(key, effect string, secs ...int64) *corev1.Toleration {
		t := &corev1.Toleration{Key: key, Operator: "Exists", Effect: effect}
		if len(secs) > 0 {
			t.TolerationSeconds = proto.Int64(secs[0])
		}
		if key == "" {
			t.Operator = "Exists"
		}
		return t
	}
	thirty := int64(30)
	for _, tc := range []struct {
		name  string
		given []*corev1.Toleration
		cfg   Config
		want  []*corev1.Toleration
	}{
		{"none", nil, Config{}, []*corev1.Toleration{tol(TaintNodeNotReady, "NoExecute", 300), tol(TaintNodeUnreachable, "NoExecute", 300)}},
		{"configured", nil, Config{NotReadyTolerationSeconds: &thirty},
			[]*corev1.Toleration{tol(TaintNodeNotReady, "NoExecute", 30), tol(TaintNodeUnreachable, "NoExecute", 300)}},
		{"own unreachable kept", []*corev1.Toleration{tol(TaintNodeUnreachable, "NoExecute", 5)}, Config{},
			[]*corev1.Toleration{tol(TaintNodeUnreachable, "NoExecute", 5), tol(TaintNodeNotReady, "NoExecute", 300)}},
		{"every key, every effect", []*corev1.Toleration{tol("", "")}, Config{}, []*corev1.Toleration{tol("", "")}},
		{"NoSchedule only is not NoExecute", []*corev1.Toleration{tol(TaintNodeNotReady, "NoSchedule")}, Config{},
			[]*corev1.Toleration{tol(TaintNodeNotReady, "NoSchedule"), tol(TaintNodeNotReady, "NoExecute", 300), tol(TaintNodeUnreachable, "NoExecute", 300)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := mustAdmit(t, pod(func(p *corev1.Pod) { p.Spec.Tolerations = tc.given }), State{Config: tc.cfg})
			got := res.Pod.Spec.Tolerations
			if len(got) != len(tc.want) {
				t.Fatalf("tolerations %v, want %v", got, tc.want)
			}
			for i := range got {
				if !proto.Equal(got[i], tc.want[i]) {
					t.Errorf("toleration %d: %v, want %v", i, got[i], tc.want[i])
				}
			}
		})
	}
}
