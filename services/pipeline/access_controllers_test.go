package pipeline_test

import (
	"testing"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/bus/bustest"
	"github.com/podflow/podflow/services/objects"
	"github.com/podflow/podflow/services/pipeline"
)

// TestControllerPodsSubjects: a workload controller stage asks the api
// stage for pods on ControllerPodsSubject(itself) only, and only the api
// stage receives those requests: another controller, any other stage, a
// node, a user and the store cannot publish there (and so cannot make
// pods as the controller), and no controller can listen there.
func TestControllerPodsSubjects(t *testing.T) {
	t.Parallel()
	srv, admin := lockedDown(t)
	api := bustest.ConnectAs(t, srv, pipeline.StageRole(pipeline.API), "api")
	rs := bustest.ConnectAs(t, srv, pipeline.StageRole(pipeline.ReplicaSet), "rs")
	subject := pipeline.ControllerPodsSubject(pipeline.ReplicaSet)

	if err := serves(t, api, rs, subject); err != nil {
		t.Fatalf("the api stage does not answer the replicaset controller: %v", err)
	}
	publishers := map[string]*bus.Conn{
		"node n1":   bustest.ConnectAs(t, srv, pipeline.NodeRole("n1"), "n1"),
		"a user":    bustest.ConnectUser(t, srv, "alice", "alice"),
		"the store": bustest.ConnectAs(t, srv, pipeline.RoleStore, "store"),
	}
	for _, s := range pipeline.Stages {
		if s != pipeline.API && s != pipeline.ReplicaSet {
			publishers["stage "+s] = bustest.ConnectAs(t, srv, pipeline.StageRole(s), s)
		}
	}
	for name, c := range publishers {
		t.Run(name+" publishes on the replicaset controller's subject", func(t *testing.T) {
			t.Parallel()
			if delivers(t, c, admin, subject) {
				t.Errorf("%s may ask for pods as the replicaset controller on %s", name, subject)
			}
		})
	}
	if !subscribeRefused(t, rs, pipeline.ControllerPodsPrefix+".*") {
		t.Errorf("a controller may listen to the controllers' pod requests")
	}
}

// TestControllerUsers: every workload controller has a ServiceAccount
// identity, and the user names map back to their stage.
func TestControllerUsers(t *testing.T) {
	t.Parallel()
	for _, s := range []string{pipeline.ReplicaSet, pipeline.ReplicationController, pipeline.Job, pipeline.CronJob, pipeline.Deployment, pipeline.StatefulSet, pipeline.Disruption} {
		u := pipeline.ControllerUser(s)
		if u == nil {
			t.Fatalf("%s has no user", s)
		}
		if got, ok := pipeline.ControllerOfUser(u.GetUsername()); !ok || got != s {
			t.Errorf("ControllerOfUser(%q) = %q, %v", u.GetUsername(), got, ok)
		}
	}
	for _, u := range []string{"system:serviceaccount:kube-system:default", "system:serviceaccount:other:replicaset-controller", "admin"} {
		if s, ok := pipeline.ControllerOfUser(u); ok {
			t.Errorf("%q is taken for controller %s", u, s)
		}
	}
	if pipeline.ControllerUser(pipeline.API) != nil {
		t.Error("the api stage has a controller user")
	}
}

// TestDeploymentControllerAuthority: the Deployment controller makes
// ReplicaSets, not pods: it cannot ask the api stage for pods (not even on
// its own subject), cannot write pods in the store or publish pod
// deletions, and may write Deployments, ReplicaSets, Events and Leases.
func TestDeploymentControllerAuthority(t *testing.T) {
	t.Parallel()
	srv, admin := lockedDown(t)
	dc := bustest.ConnectAs(t, srv, pipeline.StageRole(pipeline.Deployment), "deployment")
	for _, subject := range []string{pipeline.ControllerPodsSubject(pipeline.Deployment), pipeline.ControllerPodsSubject(pipeline.ReplicaSet),
		bus.TypeFilter("PodDeleteRequested")} {
		if delivers(t, dc, admin, subject) {
			t.Errorf("the deployment controller may publish on %s", subject)
		}
	}
	writer := pipeline.StageRole(pipeline.Deployment)
	for key, want := range map[string]bool{
		objects.Pods.Key("default", "p"):                          false,
		objects.Secrets.Key("default", "s"):                       false,
		objects.ReplicationControllers.Key("default", "rc"):       false,
		objects.Deployments.Key("default", "d"):                   true,
		objects.ReplicaSets.Key("default", "d-1"):                 true,
		objects.Leases.Key("kube-system", "podflow-deployment-x"): true,
	} {
		if got := pipeline.StoreWriteACL(writer, key); got != want {
			t.Errorf("StoreWriteACL(%q, %q) = %v, want %v", writer, key, got, want)
		}
	}
}

// TestStatefulSetControllerAuthority: the StatefulSet controller asks the
// api stage for pods on its own subject only, publishes its pods'
// deletions, and may write StatefulSets, ControllerRevisions, pods,
// Events and Leases — not Deployments, ReplicaSets, Secrets or
// PersistentVolumeClaims (podflow makes none).
func TestStatefulSetControllerAuthority(t *testing.T) {
	t.Parallel()
	srv, admin := lockedDown(t)
	api := bustest.ConnectAs(t, srv, pipeline.StageRole(pipeline.API), "api")
	sc := bustest.ConnectAs(t, srv, pipeline.StageRole(pipeline.StatefulSet), "statefulset")
	if err := serves(t, api, sc, pipeline.ControllerPodsSubject(pipeline.StatefulSet)); err != nil {
		t.Fatalf("the api stage does not answer the statefulset controller: %v", err)
	}
	if delivers(t, sc, admin, pipeline.ControllerPodsSubject(pipeline.ReplicaSet)) {
		t.Errorf("the statefulset controller may ask for pods as the replicaset controller")
	}
	if !pipeline.MakesPods(pipeline.StatefulSet) || pipeline.ControllerAccount(pipeline.StatefulSet) != "statefulset-controller" {
		t.Errorf("MakesPods %v, account %q", pipeline.MakesPods(pipeline.StatefulSet), pipeline.ControllerAccount(pipeline.StatefulSet))
	}
	writer := pipeline.StageRole(pipeline.StatefulSet)
	for key, want := range map[string]bool{
		objects.StatefulSets.Key("default", "web"):                  true,
		objects.ControllerRevisions.Key("default", "web-1"):         true,
		objects.Pods.Key("default", "web-0"):                        true,
		objects.Leases.Key("kube-system", "podflow-statefulset-x"):  true,
		objects.Deployments.Key("default", "d"):                     false,
		objects.ReplicaSets.Key("default", "d-1"):                   false,
		objects.Secrets.Key("default", "s"):                         false,
		objects.PersistentVolumeClaims.Key("default", "data-web-0"): false,
	} {
		if got := pipeline.StoreWriteACL(writer, key); got != want {
			t.Errorf("StoreWriteACL(%q, %q) = %v, want %v", writer, key, got, want)
		}
	}
}

// TestNodeLifecycleLeaseAuthority: the node lifecycle controller writes
// its leader election's Lease, and no other: not a node's heartbeat in
// kube-node-lease, not another controller's.
func TestNodeLifecycleLeaseAuthority(t *testing.T) {
	t.Parallel()
	writer := pipeline.StageRole(pipeline.NodeLifecycle)
	for key, want := range map[string]bool{
		objects.Leases.Key("kube-system", "podflow-nodelifecycle"):   true,
		objects.Leases.Key(pipeline.NodeLeaseNamespace, "n1"):        false,
		objects.Leases.Key("kube-system", "podflow-nodelifecycle-x"): false,
		objects.Leases.Key("kube-system", "podflow-deployment"):      false,
		objects.Leases.Key("default", "podflow-nodelifecycle"):       false,
		objects.Nodes.Key("", "n1"):                                  true,
	} {
		if got := pipeline.StoreWriteACL(writer, key); got != want {
			t.Errorf("StoreWriteACL(%q, %q) = %v, want %v", writer, key, got, want)
		}
	}
}

// TestDisruptionControllerAuthority: the disruption controller writes
// PodDisruptionBudgets (their status), Events and its Leases, nothing
// else: no pods, no workloads, no Secrets; it cannot ask for pods nor
// publish pod deletions.
func TestDisruptionControllerAuthority(t *testing.T) {
	t.Parallel()
	srv, admin := lockedDown(t)
	dc := bustest.ConnectAs(t, srv, pipeline.StageRole(pipeline.Disruption), "disruption")
	for _, subject := range []string{pipeline.ControllerPodsSubject(pipeline.Disruption), pipeline.ControllerPodsSubject(pipeline.ReplicaSet),
		bus.TypeFilter("PodDeleteRequested"), bus.TypeFilter("PodDeleted")} {
		if delivers(t, dc, admin, subject) {
			t.Errorf("the disruption controller may publish on %s", subject)
		}
	}
	writer := pipeline.StageRole(pipeline.Disruption)
	for key, want := range map[string]bool{
		objects.Pods.Key("default", "p"):                          false,
		objects.Secrets.Key("default", "s"):                       false,
		objects.Deployments.Key("default", "d"):                   false,
		objects.ReplicaSets.Key("default", "rs"):                  false,
		objects.PodDisruptionBudgets.Key("default", "web"):        true,
		objects.Events.Key("default", "e"):                        true,
		objects.Leases.Key("kube-system", "podflow-disruption-x"): true,
	} {
		if got := pipeline.StoreWriteACL(writer, key); got != want {
			t.Errorf("StoreWriteACL(%q, %q) = %v, want %v", writer, key, got, want)
		}
	}
}

// TestTTLAfterFinishedAuthority: the TTL-after-finished controller only
// deletes Jobs: it cannot ask the api stage for pods, publish pod
// deletions or write pods, CronJobs or Secrets in the store; it may write
// Jobs, Events and Leases, and acts as kube's ServiceAccount.
func TestTTLAfterFinishedAuthority(t *testing.T) {
	t.Parallel()
	srv, admin := lockedDown(t)
	ttl := bustest.ConnectAs(t, srv, pipeline.StageRole(pipeline.TTLAfterFinished), "ttl")
	for _, subject := range []string{pipeline.ControllerPodsSubject(pipeline.TTLAfterFinished), pipeline.ControllerPodsSubject(pipeline.Job),
		bus.TypeFilter("PodDeleteRequested"), bus.TypeFilter("PodDeleted")} {
		if delivers(t, ttl, admin, subject) {
			t.Errorf("the ttlafterfinished controller may publish on %s", subject)
		}
	}
	writer := pipeline.StageRole(pipeline.TTLAfterFinished)
	for key, want := range map[string]bool{
		objects.Pods.Key("default", "p"):                                false,
		objects.Secrets.Key("default", "s"):                             false,
		objects.CronJobs.Key("default", "c"):                            false,
		objects.Jobs.Key("default", "j"):                                true,
		objects.Events.Key("default", "e"):                              true,
		objects.Leases.Key("kube-system", "podflow-ttlafterfinished-x"): true,
	} {
		if got := pipeline.StoreWriteACL(writer, key); got != want {
			t.Errorf("StoreWriteACL(%q, %q) = %v, want %v", writer, key, got, want)
		}
	}
	if u := pipeline.ControllerUser(pipeline.TTLAfterFinished); u.GetUsername() != "system:serviceaccount:kube-system:ttl-after-finished-controller" {
		t.Errorf("user %q", u.GetUsername())
	}
}
