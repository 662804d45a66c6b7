// Package apiserver is podflow's Kubernetes REST front door: an HTTPS
// server, run in each api process beside its api stage replica
// (FrontDoor), that speaks enough of the Kubernetes API for the stock
// kubectl (1.32) and client-go to work unchanged. Beside it in the same
// process run the node relays (NodeRelays: exec, attach, port-forward,
// logs and metrics, to the nodes over NATS) and the node agents' token
// signer (NodeTokens).
//
// What it serves:
//
//   - Discovery: aggregated (apidiscovery.k8s.io/v2 on /api and /apis,
//     what kubectl asks for first) and the legacy documents (/api/v1,
//     /apis/<group>[/<version>]), /version, /healthz, and an OpenAPI v3
//     document per group version with the schema of every kind served
//     (kube-openapi's builder over the definitions openapi-gen generated
//     from the Go types served, with their documentation: openapigen) and
//     the operations' fieldValidation parameter, so kubectl explain works
//     and kubectl validates server-side (fieldValidation=Strict: unknown
//     fields are refused with their path); /openapi/v2 is the same
//     schemas and operations as one Swagger 2.0 document (JSON or gnostic
//     protobuf, by Accept).
//   - Resources: pods (create, get, list, watch, update, patch, delete,
//     status, log, ephemeralcontainers: get, update and patch that only
//     add ephemeral containers, validated as kube-apiserver, ephemeral.go;
//     eviction: create, the PodDisruptionBudget check done by the api
//     stage, eviction.go),
//     nodes,
//     namespaces (and their status and finalize subresources,
//     nssubresources.go), services, endpointslices (discovery.k8s.io/v1), events
//     (core/v1, and events.k8s.io/v1 as a view that converts writes), configmaps,
//     secrets, serviceaccounts, limitranges, the RBAC kinds,
//     core/v1 endpoints (a
//     read-only view of the EndpointSlices), selfsubjectaccessreviews
//     (kubectl auth can-i), selfsubjectrulesreviews (kubectl auth can-i
//     --list), selfsubjectreviews (kubectl auth whoami), tokenreviews,
//     subjectaccessreviews and localsubjectaccessreviews (reviews.go).
//     A create or update body without apiVersion and kind takes the URL's
//     (typemeta.go). pods/exec, attach, portforward and log speak every
//     WebSocket subprotocol kube-apiserver accepts besides SPDY (exec.go,
//     portforward_ws.go, logs.go).
//   - Generic kinds (services/objects' kinds registered as data: apps/v1,
//     batch/v1, policy/v1, admissionregistration, apiextensions, networking,
//     storage, certificates, flowcontrol, coordination, node and core's
//     ReplicationController, PodTemplate, ResourceQuota,
//     PersistentVolume(Claim)): the same verbs, their status subresource
//     (the kind's StatusStrategy in the api stage), scale (autoscaling/v1
//     Scale of deployments, replicasets, statefulsets and
//     replicationcontrollers: scale.go) and a CSR's approval; tables with
//     kube-apiserver's columns (Config.Printer).
//   - Kubernetes protobuf request bodies for every built-in kind, and
//     protobuf answers (objects, lists, Scale) to clients that prefer them
//     (protobuf.go); watches and errors are JSON.
//   - metrics.k8s.io/v1beta1 pods and nodes (kubectl top), get and list,
//     read from the nodes on each request through a MetricsBackend
//     (services/podmetrics); a node that does not answer is left out.
//   - Lists with label and field selectors (the kind's field labels, with
//     kube's values: fieldselect.go), paged with
//     limit and continue over the first page's snapshot (kept
//     ListSnapshotTTL, then 410 Expired with a token to continue at the
//     latest revision), resourceVersion and resourceVersionMatch (Exact,
//     NotOlderThan) on lists and gets, deletecollection; server-side
//     Tables (kubectl get) with kubectl's columns for pods, nodes,
//     namespaces, services and events; watches with resourceVersion,
//     bookmarks, client-go's streaming lists (sendInitialEvents) and 410
//     Expired once the store compacted the history asked for; strategic
//     merge, JSON merge and JSON patches, a patch without a
//     resourceVersion precondition re-applied on a conflict.
//   - Server-side apply and managedFields (apply.go), as kube-apiserver:
//     apimachinery's FieldManager per stored Kubernetes kind, typed by the
//     /openapi/v2 schemas. Creates, updates and patches record their
//     manager (fieldManager, else the User-Agent's first word) as Update;
//     an apply (fieldManager required) merges into the live object or
//     creates it, 409 Conflict with a FieldManagerConflict cause per field
//     another manager owns unless force=true. A write that changes nothing
//     but managedFields timestamps is not stored (no new resourceVersion).
//     A write through pods/ephemeralcontainers records its manager with
//     subresource "ephemeralcontainers", as kube-apiserver's.
//   - Authentication: X.509 client certificates of the cluster CA (CN =
//     user, O = groups), bearer tokens (static token file and
//     ServiceAccount tokens, through the api stage), OIDC ID tokens
//     verified against locally configured issuer keys; anonymous only when
//     enabled; impersonation when RBAC allows it. A failure is a bare 401
//     for the client and a logged reason for the operator.
//   - Errors as meta/v1 Status (401, 403, 404, 408, 409, 413, 415, 422
//     with causes, 429 past an in-flight limit, 500, 503, 504).
//
// Limits, as kube-apiserver's (each refusal names its limit; Config
// documents the defaults):
//
//   - A request body is at most MaxBodyBytes (413) and must arrive within
//     BodyReadTimeout of its headers (408, connection closed); headers
//     within 10s.
//   - A JSON patch has at most MaxJSONPatchOperations operations (413);
//     its copy operations add at most JSONPatchMaxCopyBytes in total (422,
//     checked while it is applied, so a copy bomb stops at the limit); a
//     patched object larger than MaxBodyBytes is refused (413) before it
//     is decoded.
//   - Requests in flight: MaxInFlight read-only, MaxMutatingInFlight
//     mutating, MaxWatches watches (429 with Retry-After past each). A
//     watch is a GET with a watch parameter other than 0 or false (any
//     case), as kube-apiserver parses booleans (the Python client sends
//     watch=True); the parameter on any other method does not move a
//     request out of its class. Inside the mutating and long-running
//     pools each user has seats of its own (MaxMutatingPerUser,
//     MaxWatchesPerUser; system:masters and system:nodes exempt:
//     fairness.go), so one user cannot take a pool.
//   - A watch from a resourceVersion the store has not reached waits
//     TooLargeResourceVersionWait, then gets 504 Timeout "Too large
//     resource version: X, current: Y" with retryAfterSeconds 1.
//
// Pod creations become the pipeline's flow: the Backend (the api stage)
// authorizes them and publishes PodAuthorized; the response waits for the
// persistence stage's 201 with the stored pod. Other writes go through the
// Backend's object requests; reads and watches come from the store
// (linearizable reads) through a cache of converted objects keyed by
// revision.
//
// Callers must:
//
//  1. Give a Backend that authenticates tokens and authorizes with the
//     same RBAC as the bus front door: the server trusts the users it
//     passes to it, so it must run in the same process as the Backend.
//  2. Give every replica of one machine the same Config.Addr when they
//     should share a port (the listener uses SO_REUSEPORT).
//  3. Stop the server by cancelling the context given to Run or Serve; it
//     ends watches and waits up to 5s for requests in flight.
//
// Example (what the api process does, see ops's roles.APIProcess):
//
//	cfg := apiserver.DefaultConfig()
//	cfg.Addr, cfg.CertFile, cfg.KeyFile, cfg.ClientCAFile = "127.0.0.1:6443", "apiserver.crt", "apiserver.key", "ca.crt"
//	fd := apiserver.FrontDoor{Config: cfg, Backend: apiStage, Store: store, NATS: nc, Tokens: tokens, Log: log}
//	h := stage.Compose(apiStage, fd) // fd starts after the stage, on its errgroup
package apiserver
