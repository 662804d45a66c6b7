package nodeagent_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/podflow/podflow/nodeagent"
	"github.com/podflow/podflow/nodeagent/sim"
	corev1 "github.com/podflow/podflow/proto/corev1"
	eventsv1 "github.com/podflow/podflow/proto/eventsv1"
)

// recordingRuntime is the simulated runtime that keeps the container
// config of every StartContainer, as the runtime received it, and when each
// StopContainer began and returned.
type recordingRuntime struct {
	*sim.Runtime
	mu      sync.Mutex
	started map[string][]*corev1.Container // by pod uid, in start order
	stops   map[nodeagent.ContainerID]stopCall
	hooks   []hookCall
	startAt map[string]time.Time // by "uid/container": the last start
}

type hookCall struct {
	kind nodeagent.ProbeKind
	id   nodeagent.ContainerID
	at   time.Time
}

func (r *recordingRuntime) Probe(ctx context.Context, pod *corev1.Pod, c *corev1.Container, id nodeagent.ContainerID, kind nodeagent.ProbeKind, p *corev1.Probe) (nodeagent.ProbeResult, error) {
	if kind == nodeagent.HookPostStart || kind == nodeagent.HookPreStop {
		r.mu.Lock()
		r.hooks = append(r.hooks, hookCall{kind, id, time.Now()})
		r.mu.Unlock()
	}
	return r.Runtime.Probe(ctx, pod, c, id, kind, p)
}

func (r *recordingRuntime) hookCalls() []hookCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.hooks)
}

type stopCall struct{ began, returned time.Time }

func (r *recordingRuntime) StopContainer(ctx context.Context, id nodeagent.ContainerID, grace time.Duration) (nodeagent.ContainerExit, error) {
	began := time.Now()
	ex, err := r.Runtime.StopContainer(ctx, id, grace)
	r.mu.Lock()
	r.stops[id] = stopCall{began, time.Now()}
	r.mu.Unlock()
	return ex, err
}

func (r *recordingRuntime) stopped(id string) (stopCall, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.stops[nodeagent.ContainerID(id)]
	return c, ok
}

func (r *recordingRuntime) StartContainer(ctx context.Context, pod *corev1.Pod, c *corev1.Container, sb nodeagent.Sandbox) (nodeagent.ContainerID, error) {
	id, err := r.Runtime.StartContainer(ctx, pod, c, sb)
	if err == nil {
		r.mu.Lock()
		r.started[pod.GetMetadata().GetUid()] = append(r.started[pod.GetMetadata().GetUid()], c)
		r.startAt[pod.GetMetadata().GetUid()+"/"+c.GetName()] = time.Now()
		r.mu.Unlock()
	}
	return id, err
}

func (r *recordingRuntime) startTime(uid, name string) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.startAt[uid+"/"+name]
}

func (r *recordingRuntime) starts(uid string) []*corev1.Container {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.started[uid])
}

// newRecordingEnv is newEnv with the agent over a recordingRuntime.
func newRecordingEnv(t *testing.T, simCfg ...func(*sim.Config)) (*env, *recordingRuntime) {
	t.Helper()
	e := newEnv(t)
	if len(simCfg) > 0 {
		cfg := sim.DefaultConfig(podCIDR)
		for _, f := range simCfg {
			f(&cfg)
		}
		rt, err := sim.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(rt.Close)
		e.rt = rt
	}
	rec := &recordingRuntime{Runtime: e.rt, started: map[string][]*corev1.Container{}, stops: map[nodeagent.ContainerID]stopCall{},
		startAt: map[string]time.Time{}}
	e.useRuntime(rec)
	return e, rec
}

func envMap(c *corev1.Container) map[string]string {
	m := map[string]string{}
	for _, e := range c.GetEnv() {
		if e.GetValueFrom() != nil {
			m[e.GetName()] = "<valueFrom left unresolved>"
			continue
		}
		m[e.GetName()] = e.GetValue()
	}
	return m
}

func ptr[T any](v T) *T { return &v }

func TestContainerEnvironment(t *testing.T) {
	e, rec := newRecordingEnv(t)
	e.store.PutConfigMap(&corev1.ConfigMap{Metadata: &corev1.ObjectMeta{Name: "cfg", Namespace: "default"},
		Data: map[string]string{"level": "debug", "mode": "fast"}})
	e.store.PutSecret(&corev1.Secret{Metadata: &corev1.ObjectMeta{Name: "creds", Namespace: "default"},
		Data: map[string][]byte{"password": []byte("s3cret"), "user": []byte("admin")}})
	field := func(path string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}
	}
	resource := func(res, divisor string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: res, Divisor: divisor}}
	}
	p := newPod("envy", func(p *corev1.Pod) {
		p.Metadata.Labels = map[string]string{"app": "web", "tier": "front"}
		p.Metadata.Annotations["note"] = "hello"
		p.Spec.ServiceAccountName = "robot"
		c := p.Spec.Containers[0]
		c.Resources = &corev1.ResourceRequirements{Limits: map[string]string{"memory": "256Mi"},
			Requests: map[string]string{"cpu": "250m", "memory": "128Mi"}}
		c.EnvFrom = []*corev1.EnvFromSource{
			{Prefix: "CFG_", ConfigMapRef: &corev1.ConfigMapEnvSource{Name: "cfg"}},
			{SecretRef: &corev1.SecretEnvSource{Name: "creds"}},
			{ConfigMapRef: &corev1.ConfigMapEnvSource{Name: "absent", Optional: ptr(true)}},
		}
		c.Env = []*corev1.EnvVar{
			{Name: "user", Value: "overridden by env"},
			{Name: "GREETING", Value: "$(user) at $(CFG_level) $$(user) $(UNDEFINED)"},
			{Name: "LEVEL", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.KeySelector{Name: "cfg", Key: "level"}}},
			{Name: "PASSWORD", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.KeySelector{Name: "creds", Key: "password"}}},
			{Name: "NO_KEY", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.KeySelector{Name: "cfg", Key: "nope", Optional: ptr(true)}}},
			{Name: "NO_SECRET", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.KeySelector{Name: "absent", Key: "k", Optional: ptr(true)}}},
			{Name: "POD_NAME", ValueFrom: field("metadata.name")},
			{Name: "POD_NAMESPACE", ValueFrom: field("metadata.namespace")},
			{Name: "POD_UID", ValueFrom: field("metadata.uid")},
			{Name: "APP", ValueFrom: field("metadata.labels['app']")},
			{Name: "NOTE", ValueFrom: field("metadata.annotations['note']")},
			{Name: "MISSING_LABEL", ValueFrom: field("metadata.labels['none']")},
			{Name: "LABELS", ValueFrom: field("metadata.labels")},
			{Name: "NODE", ValueFrom: field("spec.nodeName")},
			{Name: "SA", ValueFrom: field("spec.serviceAccountName")},
			{Name: "HOST_IP", ValueFrom: field("status.hostIP")},
			{Name: "HOST_IPS", ValueFrom: field("status.hostIPs")},
			{Name: "POD_IP", ValueFrom: field("status.podIP")},
			{Name: "POD_IPS", ValueFrom: field("status.podIPs")},
			{Name: "MEM_LIMIT_MI", ValueFrom: resource("limits.memory", "1Mi")},
			{Name: "MEM_REQUEST", ValueFrom: resource("requests.memory", "")},
			{Name: "CPU_REQUEST_M", ValueFrom: resource("requests.cpu", "1m")},
			{Name: "CPU_REQUEST", ValueFrom: resource("requests.cpu", "")},
			{Name: "CPU_LIMIT", ValueFrom: resource("limits.cpu", "")},
			{Name: "STORAGE_LIMIT_GI", ValueFrom: resource("limits.ephemeral-storage", "1Gi")},
			{Name: "REF_VALUE_FROM", Value: "[$(POD_NAME)]"},
			{Name: "FROM_NOT_EXPANDED", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.KeySelector{Name: "cfg", Key: "mode"}}},
		}
		c.Command = []string{"/bin/$(POD_NAME)", "$$(POD_NAME)"}
		c.Args = []string{"--level=$(CFG_level)", "--ip=$(POD_IP)", "$(NOT_SET)"}
	})
	e.bind(p)
	st := e.waitStatus(p.Metadata.Uid, "Running", func(st *corev1.PodStatus) bool { return st.GetPhase() == "Running" })
	starts := rec.starts(p.Metadata.Uid)
	if len(starts) != 1 {
		t.Fatalf("%d starts, want 1", len(starts))
	}
	got := starts[0]
	if len(got.GetEnvFrom()) != 0 {
		t.Errorf("envFrom reached the runtime: %v", got.GetEnvFrom())
	}
	vars := envMap(got)
	want := map[string]string{
		"CFG_level": "debug", "CFG_mode": "fast", "password": "s3cret", "user": "overridden by env",
		"GREETING": "overridden by env at debug $(user) $(UNDEFINED)",
		"LEVEL":    "debug", "PASSWORD": "s3cret",
		"POD_NAME": "envy", "POD_NAMESPACE": "default", "POD_UID": "uid-envy",
		"APP": "web", "NOTE": "hello", "MISSING_LABEL": "", "LABELS": "app=\"web\"\ntier=\"front\"",
		"NODE": node, "SA": "robot",
		"HOST_IP": "172.16.0.1", "HOST_IPS": "172.16.0.1",
		"POD_IP": st.GetPodIp(), "POD_IPS": st.GetPodIp(),
		"MEM_LIMIT_MI": "256", "MEM_REQUEST": "134217728",
		"CPU_REQUEST_M": "250", "CPU_REQUEST": "1", // rounded up
		"CPU_LIMIT":        "8",   // no limit: the node's allocatable
		"STORAGE_LIMIT_GI": "100", // likewise
		"REF_VALUE_FROM":   "[envy]", "FROM_NOT_EXPANDED": "fast",
	}
	for k, v := range want {
		t.Run(k, func(t *testing.T) {
			if got, ok := vars[k]; !ok || got != v {
				t.Errorf("%s = %q (set %v), want %q", k, got, ok, v)
			}
		})
	}
	for _, k := range []string{"NO_KEY", "NO_SECRET"} {
		if v, ok := vars[k]; ok {
			t.Errorf("%s = %q: an optional missing source must leave it unset", k, v)
		}
	}
	if len(vars) != len(want) {
		t.Errorf("%d variables, want %d: %v", len(vars), len(want), vars)
	}
	if st.GetPodIp() == "" {
		t.Error("pod has no IP")
	}
	t.Run("order: envFrom first, a redefinition keeps its place", func(t *testing.T) {
		var names []string
		for _, e := range got.GetEnv() {
			names = append(names, e.GetName())
		}
		if first := []string{"CFG_level", "CFG_mode", "password", "user", "GREETING"}; !slices.Equal(names[:5], first) {
			t.Errorf("order %v, want it to begin %v", names, first)
		}
	})
	t.Run("command and args expanded", func(t *testing.T) {
		if want := []string{"/bin/envy", "$(POD_NAME)"}; !slices.Equal(got.GetCommand(), want) {
			t.Errorf("command %q, want %q", got.GetCommand(), want)
		}
		if want := []string{"--level=debug", "--ip=" + st.GetPodIp(), "$(NOT_SET)"}; !slices.Equal(got.GetArgs(), want) {
			t.Errorf("args %q, want %q", got.GetArgs(), want)
		}
	})
	t.Run("the pod's spec is untouched", func(t *testing.T) {
		if c := p.Spec.Containers[0]; len(c.GetEnvFrom()) != 3 || c.GetCommand()[0] != "/bin/$(POD_NAME)" {
			t.Errorf("spec modified: %v", c)
		}
	})
}

// A source that is missing (and not optional) keeps the container in
// CreateContainerConfigError with kubelet's message; once it exists the
// container starts.
func TestContainerEnvironmentMissingSource(t *testing.T) {
	cases := []struct {
		name   string
		env    []*corev1.EnvVar
		from   []*corev1.EnvFromSource
		given  func(e *env) // before the pod is bound
		create func(e *env) // then
		msg    string
	}{
		{name: "configMapKeyRef, no configmap",
			env: []*corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.KeySelector{Name: "cfg", Key: "k"}}}},
			create: func(e *env) {
				e.store.PutConfigMap(&corev1.ConfigMap{Metadata: &corev1.ObjectMeta{Name: "cfg", Namespace: "default"}, Data: map[string]string{"k": "v"}})
			},
			msg: `configmap "cfg" not found`},
		{name: "configMapKeyRef, no key",
			env: []*corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.KeySelector{Name: "cfg2", Key: "k"}}}},
			given: func(e *env) {
				e.store.PutConfigMap(&corev1.ConfigMap{Metadata: &corev1.ObjectMeta{Name: "cfg2", Namespace: "default"}, Data: map[string]string{"other": "v"}})
			},
			create: func(e *env) {
				e.store.PutConfigMap(&corev1.ConfigMap{Metadata: &corev1.ObjectMeta{Name: "cfg2", Namespace: "default"}, Data: map[string]string{"k": "v"}})
			},
			msg: "couldn't find key k in ConfigMap default/cfg2"},
		{name: "secretKeyRef, no secret",
			env: []*corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.KeySelector{Name: "creds", Key: "k"}}}},
			create: func(e *env) {
				e.store.PutSecret(&corev1.Secret{Metadata: &corev1.ObjectMeta{Name: "creds", Namespace: "default"}, Data: map[string][]byte{"k": []byte("v")}})
			},
			msg: `secret "creds" not found`},
		{name: "secretKeyRef, no key",
			env: []*corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.KeySelector{Name: "creds2", Key: "k"}}}},
			given: func(e *env) {
				e.store.PutSecret(&corev1.Secret{Metadata: &corev1.ObjectMeta{Name: "creds2", Namespace: "default"}, Data: map[string][]byte{"other": []byte("v")}})
			},
			create: func(e *env) {
				e.store.PutSecret(&corev1.Secret{Metadata: &corev1.ObjectMeta{Name: "creds2", Namespace: "default"}, Data: map[string][]byte{"k": []byte("v")}})
			},
			msg: "couldn't find key k in Secret default/creds2"},
		{name: "envFrom configMapRef",
			from: []*corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{Name: "all"}}},
			create: func(e *env) {
				e.store.PutConfigMap(&corev1.ConfigMap{Metadata: &corev1.ObjectMeta{Name: "all", Namespace: "default"}})
			},
			msg: `configmap "all" not found`},
		{name: "envFrom secretRef",
			from: []*corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{Name: "all"}}},
			create: func(e *env) {
				e.store.PutSecret(&corev1.Secret{Metadata: &corev1.ObjectMeta{Name: "all", Namespace: "default"}})
			},
			msg: `secret "all" not found`},
		{name: "unsupported fieldPath",
			env: []*corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nope"}}}},
			msg: "unsupported fieldPath: spec.nope"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			if tc.given != nil {
				tc.given(e)
			}
			p := newPod("cfgerr", func(p *corev1.Pod) { p.Spec.Containers[0].Env, p.Spec.Containers[0].EnvFrom = tc.env, tc.from })
			e.bind(p)
			st := e.waitStatus(p.Metadata.Uid, "CreateContainerConfigError", func(st *corev1.PodStatus) bool {
				return waiting(st) == string(nodeagent.CodeCreateContainerConfig)
			})
			if got := st.GetContainerStatuses()[0].GetState().GetWaiting().GetMessage(); got != tc.msg {
				t.Errorf("waiting message %q, want %q", got, tc.msg)
			}
			envs := e.waitEnvs(p.Metadata.Uid, "the Failed event", func(envs []*eventsv1.Envelope) bool {
				return hasRecord(envs, "Warning", "Failed", "Error: "+tc.msg)
			})
			if st.GetPhase() != "Pending" {
				t.Errorf("phase %q, want Pending", st.GetPhase())
			}
			if n := len(ofType(envs, "ContainerStarted")); n != 0 {
				t.Errorf("%d ContainerStarted, want none", n)
			}
			if tc.create == nil {
				return
			}
			tc.create(e)
			e.waitStatus(p.Metadata.Uid, "Running once the source exists", func(st *corev1.PodStatus) bool { return st.GetPhase() == "Running" })
		})
	}
}
