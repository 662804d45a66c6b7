// Package client is the one client-session setup of every podflow command
// that talks to a running system (get, describe, apply, delete, logs,
// events, trace, streams, publish, scale, chaos, bench), and of the
// process roles that `podflow up` runs (stages, node agents).
//
// A Config is what `podflow up` writes to DATA-DIR/config.json: where the
// bus client file is and the admin's token. A Session is a connected
// client: the bus and a store client over it.
//
// The caller:
//  1. finds and reads the configuration with LoadConfig (an explicit
//     path, else $PODFLOW_CONFIG, ./.podflow/config.json,
//     ~/.podflow/config.json; $PODFLOW_NATS_CONFIG overrides the bus file),
//  2. connects with Connect (or both at once with Open), naming the
//     connection after the process,
//  3. closes the Session when done.
//
// A command connects with OpenCLI instead: it gives up within
// CLI.ConnectTimeout (3s) with "cannot reach podflow at URL: is `podflow
// up` running?" (an *UnreachableError, ErrUnreachable), reconnects at
// most CLI.MaxReconnects times after a lost connection, and bounds every
// request without a deadline by CLI.RequestTimeout (the global
// --request-timeout, kubectl's flag). Process roles keep Open and Connect,
// which wait for the bus and reconnect forever.
//
// Over a Session, the client protocol: CreatePod sends a pod through the
// lifecycle and waits for persistence's 201 (or the refusing stage's
// Status, a *StatusError), ObjectRequest applies, creates or deletes any
// other kind through the api stage, ApplyFiles applies manifests as
// kubectl apply does, PodRequested is the fire-and-forget event of
// `podflow publish`. Get, DescribePod and DescribeService read the store
// and print what kubectl get and describe print (Printer: -o wide, json,
// yaml, name, jsonpath, custom-columns).
//
// A Session whose bus user is a role (not the admin) reads and writes the
// store as that role (services/pipeline.StoreReadACL, StoreWriteACL).
//
// Example:
//
//	sess, err := client.OpenCLI(ctx, "", "podflow-cli", client.DefaultCLI())
//	if err != nil {
//		return err
//	}
//	defer sess.Close()
//	pods, _, err := objects.List[*corev1.Pod](ctx, sess.Store, "default")
//	created, err := sess.CreatePod(ctx, pod, sess.Token(""), false)
package client
