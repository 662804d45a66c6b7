package main

import (
	"fmt"
	"strconv"
	"strings"
)

// member is one etcd member of the peer: its name and its loopback ports.
type member struct {
	Name       string
	ClientPort int
	PeerPort   int
	DataDir    string
}

func (m member) clientURL() string { return "http://127.0.0.1:" + strconv.Itoa(m.ClientPort) }
func (m member) peerURL() string   { return "http://127.0.0.1:" + strconv.Itoa(m.PeerPort) }

// etcdArgs are member i's flags in a cluster of members. etcd fsyncs its
// WAL and backend by default (--unsafe-no-fsync is off), as podflow's
// store replicas fsync their raft log.
func etcdArgs(members []member, i int) []string {
	m := members[i]
	var initial []string
	for _, o := range members {
		initial = append(initial, o.Name+"="+o.peerURL())
	}
	return []string{
		"--name=" + m.Name,
		"--data-dir=" + m.DataDir,
		"--listen-client-urls=" + m.clientURL(),
		"--advertise-client-urls=" + m.clientURL(),
		"--listen-peer-urls=" + m.peerURL(),
		"--initial-advertise-peer-urls=" + m.peerURL(),
		"--initial-cluster=" + strings.Join(initial, ","),
		"--initial-cluster-state=new",
		"--initial-cluster-token=podflow-peer",
		"--log-level=warn",
	}
}

// pki is where the bench wrote the peer's certificates and kubeconfig.
type pki struct {
	CACert, ServerCert, ServerKey, SAKey, Kubeconfig string
}

// apiserverArgs are kube-apiserver's flags: loopback only, the members as
// its storage, no request limits and no priority and fairness (as kwokctl's
// --disable-qps-limits), so the bench's client is not what limits it.
func apiserverArgs(members []member, p pki, port int) []string {
	var etcd []string
	for _, m := range members {
		etcd = append(etcd, m.clientURL())
	}
	return []string{
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--etcd-servers=" + strings.Join(etcd, ","),
		"--tls-cert-file=" + p.ServerCert,
		"--tls-private-key-file=" + p.ServerKey,
		"--client-ca-file=" + p.CACert,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + p.SAKey,
		"--service-account-signing-key-file=" + p.SAKey,
		"--service-cluster-ip-range=10.96.0.0/16",
		"--authorization-mode=Node,RBAC",
		"--max-requests-inflight=0",
		"--max-mutating-requests-inflight=0",
		"--enable-priority-and-fairness=false",
	}
}

// schedulerArgs are kube-scheduler's flags: serving on loopback, no leader
// election (it is the only one), its client at QPS 5,000.
func schedulerArgs(p pki, port int) []string {
	return []string{
		"--kubeconfig=" + p.Kubeconfig,
		"--authentication-kubeconfig=" + p.Kubeconfig,
		"--authorization-kubeconfig=" + p.Kubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--leader-elect=false",
		"--kube-api-qps=5000",
		"--kube-api-burst=10000",
	}
}

// kwokArgs are the KWOK controller's flags: it plays the kubelet of every
// node, with its default node and pod stages, serving on loopback.
func kwokArgs(p pki, port int) []string {
	return []string{
		"--kubeconfig=" + p.Kubeconfig,
		"--manage-all-nodes=true",
		"--server-address=127.0.0.1:" + strconv.Itoa(port),
		"--node-ip=127.0.0.1",
	}
}

// podflowArgs are the arguments of podflow's own run of the same load.
func podflowArgs(pods, nodes, rate int, costJSON string) []string {
	return []string{"bench", "pipeline", "--own",
		"--pods", strconv.Itoa(pods), "--nodes", strconv.Itoa(nodes), "--rate", strconv.Itoa(rate),
		"--cost-json", costJSON}
}

func memberNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("etcd-%d", i+1)
	}
	return names
}
