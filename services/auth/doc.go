// Package auth is the decision core of podflow's api stage and of its HTTPS
// server (services/apiserver): it turns a bearer token into a user
// (authentication) and decides whether that user may make a request
// (Kubernetes RBAC authorization). It lives beside both, not inside the api
// stage's folder, so that api → apiserver → auth has no loop. It does no
// I/O: the stage feeds it the token file's contents and the Secrets and RBAC objects
// it watches in the store, and publishes the Status values it returns.
//
// Callers' obligations:
//
//  1. Parse the token file with ParseTokenFile and build one
//     TokenAuthenticator with NewTokenAuthenticator; rebuild it to reload
//     the file.
//  2. Feed every Secret the store watch reports to UpsertSecret (any type:
//     non-token Secrets are ignored or forgotten) and every deletion to
//     DeleteSecret.
//     Feed every ServiceAccount to UpsertServiceAccount and every deletion
//     to DeleteServiceAccount: a token authenticates only while its
//     account exists with the uid its Secret is bound to.
//     Feed every Pod to UpsertPod and every deletion to DeletePod (and
//     Secrets as above): a bound token whose TokenRequest named a
//     boundObjectRef authenticates only while that Pod or Secret exists
//     with the uid it names.
//  3. Feed Roles, ClusterRoles, RoleBindings and ClusterRoleBindings to
//     RBAC.Upsert / RBAC.Delete. Seed the store with BootstrapPolicy at
//     first start. After RBAC allows a write of one of them, call
//     RBAC.CheckRBACWrite: it refuses a role or binding granting more than
//     the writer holds (Kubernetes' escalation check).
//  4. Send the returned *corev1.Status (401 Unauthorized, 403 Forbidden) as
//     the rejection; receivers match it by Reason, never by Message.
//
// Both TokenAuthenticator and RBAC are safe for concurrent use.
//
// Example:
//
//	tokens, err := auth.ParseTokenFile(f)
//	if err != nil { return err }
//	authn, err := auth.NewTokenAuthenticator(auth.DefaultAuthenticatorConfig(), tokens)
//	if err != nil { return err }
//	rbac, err := auth.NewRBAC(auth.DefaultRBACConfig())
//	if err != nil { return err }
//
//	user, st := authn.AuthenticateToken(req.GetToken())
//	if st != nil { return reject(st) }
//	if st := rbac.Check(auth.Attributes{User: user, Verb: "create",
//		Namespace: pod.GetMetadata().GetNamespace(), Resource: "pods"}); st != nil {
//		return reject(st)
//	}
package auth
