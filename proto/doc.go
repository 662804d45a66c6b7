// Package proto is podflow's wire module: the object model (corev1), the
// lifecycle events (eventsv1) and the store protocol (storev1), as protobuf
// with committed generated Go code. It is a leaf: it depends on nothing in
// podflow, and every other module depends on it.
//
// Regenerate with `make proto`; `make test` fails when the committed code is
// stale.
package proto
