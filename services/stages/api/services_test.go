package api

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/services/ipalloc"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/stage/stagetest"
)

// newServiceFixture is an api stage whose user alice may manage Services
// in namespace team.
func newServiceFixture(t *testing.T) (*Stage, stage.Env) {
	t.Helper()
	env, _, _ := stagetest.NewEnv("api")
	ctx := context.Background()
	for _, o := range []objects.Object{
		testNamespace("team"),
		&corev1.Role{Metadata: &corev1.ObjectMeta{Namespace: "team", Name: "svc"}, Rules: []*corev1.PolicyRule{
			{Verbs: []string{"create", "update", "delete"}, ApiGroups: []string{""}, Resources: []string{"services"}},
		}},
		&corev1.RoleBinding{Metadata: &corev1.ObjectMeta{Namespace: "team", Name: "svc"},
			Subjects: []*corev1.Subject{{Kind: "User", ApiGroup: "rbac.authorization.k8s.io", Name: "alice"}},
			RoleRef:  &corev1.RoleRef{ApiGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "svc"}},
	} {
		if _, err := env.Store.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	tokens := filepath.Join(t.TempDir(), "tokens.csv")
	if err := os.WriteFile(tokens, []byte(aliceToken+",alice,uid-alice\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.TokenFile = tokens
	s, err := New(env, cfg)
	if err != nil {
		t.Fatal(err)
	}
	stagetest.Start(t, s.startCaches)
	return s, env
}

// TestServiceClusterIP: the api stage — where both front doors create
// Services — allocates a ClusterIP on create, keeps it across apply,
// refuses a taken or out-of-range IP with 422 and releases it on delete.
func TestServiceClusterIP(t *testing.T) {
	s, env := newServiceFixture(t)
	ctx := context.Background()
	svc := func(name, ip string) *corev1.Service {
		return &corev1.Service{Metadata: &corev1.ObjectMeta{Name: name},
			Spec: &corev1.ServiceSpec{ClusterIp: ip, Selector: map[string]string{"app": name}, Ports: []*corev1.ServicePort{{Port: 80}}}}
	}
	var first string
	steps := []struct {
		name     string
		verb     string
		obj      *corev1.Service
		wantCode int32
		wantMsg  string
		check    func(t *testing.T, got *corev1.Service)
	}{
		{name: "create allocates", verb: "create", obj: svc("web", ""), wantCode: 201, check: func(t *testing.T, got *corev1.Service) {
			first = got.GetSpec().GetClusterIp()
			if first == "" || len(got.GetSpec().GetClusterIps()) != 1 {
				t.Fatalf("spec %v, want a clusterIP", got.GetSpec())
			}
		}},
		{name: "apply without clusterIP keeps it", verb: "apply", obj: svc("web", ""), wantCode: 200, check: func(t *testing.T, got *corev1.Service) {
			if got.GetSpec().GetClusterIp() != first {
				t.Fatalf("clusterIP %q after apply, want %q", got.GetSpec().GetClusterIp(), first)
			}
		}},
		{name: "requested IP honoured", verb: "create", obj: svc("db", "10.96.0.53"), wantCode: 201, check: func(t *testing.T, got *corev1.Service) {
			if got.GetSpec().GetClusterIp() != "10.96.0.53" {
				t.Fatalf("clusterIP %q", got.GetSpec().GetClusterIp())
			}
		}},
		{name: "taken IP refused", verb: "create", obj: svc("db2", "10.96.0.53"), wantCode: 422,
			wantMsg: `Service "db2" is invalid: spec.clusterIPs: Invalid value: ["10.96.0.53"]: failed to allocate IP 10.96.0.53: provided IP is already allocated`},
		{name: "out of range refused", verb: "create", obj: svc("db3", "192.168.0.1"), wantCode: 422},
		{name: "change refused", verb: "apply", obj: svc("db", "10.96.0.54"), wantCode: 422},
		{name: "headless", verb: "create", obj: svc("peers", "None"), wantCode: 201},
		{name: "delete releases", verb: "delete", obj: svc("db", ""), wantCode: 200, check: func(t *testing.T, _ *corev1.Service) {
			held, _ := ipalloc.Allocated(ctx, env.Store)
			if _, ok := held["10.96.0.53"]; ok || len(held) != 1 || held[first] != "team/web" {
				t.Fatalf("reservations %v, want only %s for team/web", held, first)
			}
		}},
		{name: "released IP reusable", verb: "create", obj: svc("db4", "10.96.0.53"), wantCode: 201},
		{name: "delete missing", verb: "delete", obj: svc("nope", ""), wantCode: 404},
	}
	for _, tt := range steps {
		t.Run(tt.name, func(t *testing.T) {
			st, obj := s.object(ctx, objectReq(aliceToken, tt.verb, "services", "team", tt.obj))
			if st.GetCode() != tt.wantCode {
				t.Fatalf("status %v, want code %d", st, tt.wantCode)
			}
			if tt.wantMsg != "" && st.GetMessage() != tt.wantMsg {
				t.Fatalf("message %q\nwant    %q", st.GetMessage(), tt.wantMsg)
			}
			if tt.check != nil {
				got, _ := obj.(*corev1.Service)
				tt.check(t, got)
			}
		})
	}
}

// TestServiceDefaultsValidationNodePorts: the api stage — where both
// front doors create Services — stores a Service defaulted as
// kube-apiserver does, refuses an invalid one with kube-apiserver's 422,
// allocates node ports for a NodePort Service (refusing a taken one) and
// releases them when the Service turns ClusterIP.
func TestServiceDefaultsValidationNodePorts(t *testing.T) {
	s, env := newServiceFixture(t)
	ctx := context.Background()
	do := func(verb string, svc *corev1.Service) (*corev1.Status, *corev1.Service) {
		st, obj := s.object(ctx, objectReq(aliceToken, verb, "services", "team", svc))
		got, _ := obj.(*corev1.Service)
		return st, got
	}
	st, _ := do("create", &corev1.Service{Metadata: &corev1.ObjectMeta{Name: "web"}, Spec: &corev1.ServiceSpec{
		Selector: map[string]string{"app": "web"}, Ports: []*corev1.ServicePort{{Port: 80}}}})
	if st.GetCode() != 201 {
		t.Fatalf("create: %v", st)
	}
	stored, err := objects.Get[*corev1.Service](ctx, env.Store, "team", "web")
	if err != nil {
		t.Fatal(err)
	}
	sp := stored.GetSpec()
	if sp.GetType() != "ClusterIP" || sp.GetSessionAffinity() != "None" || sp.GetIpFamilyPolicy() != "SingleStack" ||
		len(sp.GetIpFamilies()) != 1 || sp.GetIpFamilies()[0] != "IPv4" || sp.GetInternalTrafficPolicy() != "Cluster" ||
		sp.GetPorts()[0].GetProtocol() != "TCP" || sp.GetPorts()[0].GetTargetPort().GetIntVal() != 80 {
		t.Fatalf("stored spec not defaulted as kube-apiserver does: %v", sp)
	}

	st, _ = do("create", &corev1.Service{Metadata: &corev1.ObjectMeta{Name: "bad"}, Spec: &corev1.ServiceSpec{
		Ports: []*corev1.ServicePort{{Port: 80, Protocol: "HTTP"}}}})
	if want := `Service "bad" is invalid: spec.ports[0].protocol: Unsupported value: "HTTP": supported values: "SCTP", "TCP", "UDP"`; st.GetCode() != 422 || st.GetMessage() != want {
		t.Fatalf("invalid Service: %v\nwant 422 %q", st, want)
	}
	if _, err := objects.Get[*corev1.Service](ctx, env.Store, "team", "bad"); err == nil {
		t.Fatal("an invalid Service was stored")
	}

	np := func(name string, nodePort int32) *corev1.Service {
		return &corev1.Service{Metadata: &corev1.ObjectMeta{Name: name}, Spec: &corev1.ServiceSpec{Type: "NodePort",
			Selector: map[string]string{"app": name}, Ports: []*corev1.ServicePort{{Port: 80, NodePort: nodePort}}}}
	}
	st, got := do("create", np("np", 0))
	if st.GetCode() != 201 || got.GetSpec().GetPorts()[0].GetNodePort() < 30000 || got.GetSpec().GetExternalTrafficPolicy() != "Cluster" {
		t.Fatalf("NodePort create: %v %v", st, got.GetSpec())
	}
	taken := got.GetSpec().GetPorts()[0].GetNodePort()
	st, _ = do("create", np("np2", taken))
	if want := fmt.Sprintf(`Service "np2" is invalid: spec.ports[0].nodePort: Invalid value: %d: provided port is already allocated`, taken); st.GetCode() != 422 || st.GetMessage() != want {
		t.Fatalf("taken node port: %v\nwant 422 %q", st, want)
	}
	// Re-applying the manifest without the node port keeps it.
	if st, got = do("apply", np("np", 0)); st.GetCode() != 200 || got.GetSpec().GetPorts()[0].GetNodePort() != taken {
		t.Fatalf("re-apply: %v %v", st, got.GetSpec())
	}
	cur, _ := objects.Get[*corev1.Service](ctx, env.Store, "team", "np")
	cur.Spec.Type = "ClusterIP"
	if st, got = do("update", cur); st.GetCode() != 200 || got.GetSpec().GetPorts()[0].GetNodePort() != 0 {
		t.Fatalf("to ClusterIP: %v %v", st, got.GetSpec())
	}
	if held, _ := ipalloc.AllocatedNodePorts(ctx, env.Store); len(held) != 0 {
		t.Fatalf("node ports held after the Service turned ClusterIP: %v", held)
	}
}
