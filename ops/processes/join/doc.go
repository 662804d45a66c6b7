// Package join is how a host joins a podflow cluster: a join token, the
// first server's join endpoint, and the certificates it issues from the
// cluster CA for that host's own names.
//
// A join token is k3s's: K10<sha256 of the cluster CA certificate,
// hex>::<id>.<secret>, its id and secret a kubeadm bootstrap token's. The
// token is stored as kubeadm stores it, a Secret bootstrap-token-<id> of
// type bootstrap.kubernetes.io/token in kube-system, with an expiration
// and its usages (UsageServer: may join as a server, UsageAgent: as a
// node agent only).
//
// The joiner (Join):
//
//  1. fetches the CA certificate from GET /cacerts without verifying the
//     server, and refuses a CA whose hash is not the token's: a joiner
//     never sends its secret to another cluster, nor to anybody between;
//  2. generates one key per certificate it needs, locally (NewKeys), and
//     sends only certificate requests, with the token's id and secret,
//     over TLS verified against that CA (POST /v1/join);
//  3. gets back the certificates, issued for its name and advertised
//     address only, whatever its requests said, and what the server's
//     Admit hands a host of its kind (a server's shared files, the
//     cluster's addresses).
//
// The server (Server, on the first host, which holds the CA key) refuses
// an unknown token, a wrong secret and an expired token with 401, a token
// without the usage the joiner asks for with 403, and a certificate kind
// a host of that kind may not hold with 403. Refusals carry a Code.
//
// Usage:
//
//	tok, err := join.CreateToken(ctx, store, ca.CertPEM, 24*time.Hour, join.UsageServer)
//	srv := &join.Server{Config: join.Config{CA: ca, Tokens: store, Admit: admit}}
//	go http.Serve(tlsListener, srv.Handler())
//	// on the new host:
//	keys, csrs, err := join.NewKeys(join.Kinds("h2", false))
//	resp, err := join.Join(ctx, "10.0.0.1:9345", tok, join.Request{Name: "h2", Advertise: "10.0.0.2", CSRs: csrs})
package join
