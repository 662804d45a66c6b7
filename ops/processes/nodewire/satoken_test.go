package nodewire_test

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/bus/bustest"
	"github.com/podflow/podflow/nodeagent"
	"github.com/podflow/podflow/nodeagent/sim"
	"github.com/podflow/podflow/ops/processes/nodewire"
	"github.com/podflow/podflow/proto/apiv1"
	corev1 "github.com/podflow/podflow/proto/corev1"
	"github.com/podflow/podflow/proto/eventsv1"
	"github.com/podflow/podflow/raftstore/raftstoretest"
	"github.com/podflow/podflow/services/apiserver"
	"github.com/podflow/podflow/services/auth"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
	"github.com/podflow/podflow/services/stage"
	"github.com/podflow/podflow/services/stages/api"
)

// TestProjectedServiceAccountToken runs the projected serviceAccountToken
// path on real parts: a sim node agent over nodewire, connected as its
// node's bus role, and a real api stage with a signing key, over an
// embedded NATS server and a raft store. The pod's projected volume gets
// a token from the api stage that authenticates (the authenticator the
// HTTPS front door uses) as the pod's ServiceAccount, and stops
// authenticating once the pod is deleted.
func TestProjectedServiceAccountToken(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin, nodeConn := apiAndNodeConns(t)
	topo, err := pipeline.Topology(bus.DefaultStreamsConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.Provision(ctx, admin.JetStream(), topo); err != nil {
		t.Fatal(err)
	}
	cluster := raftstoretest.MakeCluster(t, 1)
	store := objects.New(cluster.Client(t))

	// The api stage and the node token signer, with the signing key.
	tokens, err := auth.LoadBoundTokens(filepath.Join(t.TempDir(), "sa.key"))
	if err != nil {
		t.Fatal(err)
	}
	acfg := api.DefaultConfig()
	acfg.Authn.BoundTokens = tokens
	env := stage.NewEnv(admin, store, pipeline.API, "api-1", slog.New(slog.NewTextHandler(io.Discard, nil)))
	apiStage, err := api.New(env, acfg)
	if err != nil {
		t.Fatal(err)
	}
	signer := &apiserver.NodeTokens{NATS: env.NATS, Store: store, Tokens: tokens, Workers: 1, Log: env.Log, Cache: apiStage}
	rc, err := pipeline.RunnerConfig(pipeline.API, env.Replica)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- stage.Run(runCtx, admin, env, stage.Compose(apiStage, signer), stage.Config{Runner: rc})
	}()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil && runCtx.Err() == nil {
			t.Errorf("api stage: %v", err)
		}
	})

	// The node agent, asking for tokens over its own connection.
	rt, err := sim.New(sim.DefaultConfig("10.244.1.0/24"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Close)
	cfg := nodeagent.DefaultConfig(node, "10.244.1.0/24")
	cfg.SpecSecond = 10 * time.Millisecond
	cfg.SetupBackOff = nodeagent.Backoff{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond} // until the api stage serves
	agent, err := nodeagent.New(cfg, rt, nodewire.NewStore(store).WithTokens(nodeConn.NATS()), nodewire.NewPublisher(nodeConn))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(agent.Stop)
	if err := agent.Start(ctx); err != nil {
		t.Fatal(err)
	}

	if _, err := store.Create(ctx, &corev1.ServiceAccount{Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "robot", Uid: "uid-robot"}}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "web", Uid: "uid-web"},
		Spec: &corev1.PodSpec{NodeName: node, ServiceAccountName: "robot",
			Containers: []*corev1.Container{{Name: "app", Image: "busybox"}},
			Volumes: []*corev1.Volume{{Name: "token", Projected: &corev1.ProjectedVolumeSource{Sources: []*corev1.VolumeProjection{
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}}}}}}},
	}
	if _, err := store.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if err := agent.HandlePodBound(ctx, pod); err != nil {
		t.Fatal(err)
	}
	var token string
	if err := rt.WaitVolume(ctx, "uid-web", "token", func(files map[string][]byte, _ int) bool {
		token = string(files["token"])
		return token != ""
	}); err != nil {
		t.Fatalf("the projected token never arrived: %v", err)
	}
	bustest.Eventually(t, "the pod's token authenticates as its ServiceAccount", func() bool {
		user, st := apiStage.AuthenticateToken(token)
		return st == nil && user.GetUsername() == "system:serviceaccount:default:robot"
	})
	if _, err := store.Delete(ctx, objects.Pods, "default", "web", 0); err != nil {
		t.Fatal(err)
	}
	bustest.Eventually(t, "the token refused once the pod is deleted", func() bool {
		_, st := apiStage.AuthenticateToken(token)
		return st.GetCode() == 401
	})
}

// TestTokenWithoutNodeIdentity: a node agent started with the admin's bus
// identity instead of its node's cannot get its pods' ServiceAccount
// tokens (the api stage answers only a node agent). Its pod does not wait
// in ContainerCreating silently: the mount fails at once with kubelet's
// FailedMount wording, naming the cause (the bus user it runs as).
func TestTokenWithoutNodeIdentity(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := bustest.ServerAt(t, bus.DefaultEmbeddedConfig(t.TempDir()))
	admin := bustest.Connect(t, srv, "nodeagent-"+node)
	topo, err := pipeline.Topology(bus.DefaultStreamsConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := bus.Provision(ctx, admin.JetStream(), topo); err != nil {
		t.Fatal(err)
	}
	failed := make(chan *eventsv1.PodFailed, 16)
	if _, err := admin.NATS().Subscribe(bus.PodPrefix+".PodFailed.>", func(m *nats.Msg) {
		var env eventsv1.Envelope
		if proto.Unmarshal(m.Data, &env) == nil && env.GetPodFailed() != nil {
			failed <- env.GetPodFailed()
		}
	}); err != nil {
		t.Fatal(err)
	}
	cluster := raftstoretest.MakeCluster(t, 1)
	store := objects.New(cluster.Client(t))
	rt, err := sim.New(sim.DefaultConfig("10.244.1.0/24"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Close)
	cfg := nodeagent.DefaultConfig(node, "10.244.1.0/24")
	cfg.SpecSecond = 10 * time.Millisecond
	agent, err := nodeagent.New(cfg, rt, nodewire.NewStore(store).WithTokens(admin.NATS()), nodewire.NewPublisher(admin))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(agent.Stop)
	if err := agent.Start(ctx); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		Metadata: &corev1.ObjectMeta{Namespace: "default", Name: "web", Uid: "uid-web"},
		Spec: &corev1.PodSpec{NodeName: node, ServiceAccountName: "default",
			Containers: []*corev1.Container{{Name: "app", Image: "busybox"}},
			Volumes: []*corev1.Volume{{Name: "kube-api-access-x1", Projected: &corev1.ProjectedVolumeSource{Sources: []*corev1.VolumeProjection{
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token"}}}}}}},
	}
	if _, err := store.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := agent.HandlePodBound(ctx, pod); err != nil {
		t.Fatal(err)
	}
	select {
	case f := <-failed:
		want := `MountVolume.SetUp failed for volume "kube-api-access-x1" : failed to fetch token: not a node's bus identity: this node agent is connected to the bus as "admin", not with its node's identity (node-<node>)`
		if f.GetReason() != "FailedMount" || !strings.HasPrefix(f.GetMessage(), want) {
			t.Fatalf("PodFailed %s: %q, want FailedMount: %q…", f.GetReason(), f.GetMessage(), want)
		}
		// Not the token request's timeout: the agent never asked.
		if d := time.Since(start); d >= pipeline.DefaultTokenRequestTimeout {
			t.Errorf("the mount failed after %s, the token request's timeout", d)
		}
	case <-ctx.Done():
		t.Fatal("the pod waits with no FailedMount")
	}
}

// TestTokenRequestNamesPodRevision: a node's token request names the
// revision its pod was seen at (its resourceVersion), which the api stage
// waits for its pod cache to reach instead of reading the store.
func TestTokenRequestNamesPodRevision(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin, nodeConn := apiAndNodeConns(t)
	asked := make(chan *apiv1.NodeTokenRequest, 1)
	sub, err := admin.NATS().Subscribe(pipeline.TokenSubject(node), func(m *nats.Msg) {
		req := &apiv1.NodeTokenRequest{}
		if err := proto.Unmarshal(m.Data, req); err != nil {
			t.Error(err)
		}
		asked <- req
		data, _ := proto.Marshal(&apiv1.NodeTokenResponse{Token: "tok", Expiration: timestamppb.New(time.Unix(1700003600, 0))})
		_ = m.Respond(data)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := admin.NATS().Flush(); err != nil {
		t.Fatal(err)
	}
	s := nodewire.NewStore(objects.New(raftstoretest.MakeCluster(t, 1).Client(t))).WithTokens(nodeConn.NATS())
	pod := &corev1.Pod{Metadata: &corev1.ObjectMeta{Namespace: "team", Name: "web", Uid: "uid-web", ResourceVersion: "17"},
		Spec: &corev1.PodSpec{NodeName: node, ServiceAccountName: "robot"}}
	if tok, _, err := s.RequestServiceAccountToken(ctx, pod, "vault", 3600); err != nil || tok != "tok" {
		t.Fatalf("token %q, %v", tok, err)
	}
	req := <-asked
	if req.GetPodRevision() != 17 || req.GetPodUid() != "uid-web" || req.GetServiceAccount() != "robot" || req.GetAudience() != "vault" {
		t.Errorf("request %v: want pod uid-web of robot at revision 17, for vault", req)
	}
}

// apiAndNodeConns starts an embedded NATS server where node has its bus
// role and returns a connection as the api stage and one as the node.
func apiAndNodeConns(t *testing.T) (api, nodeConn *bus.Conn) {
	t.Helper()
	bcfg := bus.DefaultEmbeddedConfig(t.TempDir())
	bcfg.Roles = []bus.RoleSpec{pipeline.NodeAgentRole(pipeline.NodeAgentRunnerConfig(node), node)}
	srv := bustest.ServerAt(t, bcfg)
	return bustest.Connect(t, srv, "api"), bustest.ConnectAs(t, srv, pipeline.NodeRole(node), node)
}
