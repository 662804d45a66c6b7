// Package informer keeps an in-memory copy of one kind of object from the
// store, fed by a list and then an ordered watch from the list's revision —
// Kubernetes' informer pattern over raftstore. When the watch falls behind
// compaction (raftstore.ErrGone) it relists and replays the difference, so
// the cache never misses a change and never travels back in time.
//
// The caller:
//  1. creates an Informer with New, optionally with handlers,
//  2. runs Run in a goroutine it owns (Run returns when ctx is done),
//  3. waits for WaitForSync before trusting Get and List,
//  4. treats returned objects as read-only (they are shared).
//
// A stage with several informers adds them to one Group and starts them
// with one call, which returns once every cache is synced:
//
//	var infs informer.Group
//	nodes, err := informer.New[*corev1.Node](env.Store, "", informer.Handlers[*corev1.Node]{})
//	...
//	infs.Add(nodes, pods)
//	// in Start(ctx, g):
//	if err := infs.Start(ctx, g); err != nil { ... }
//
// An informer needed only now and then (a controller's pods while it has
// objects of its own kind) is wrapped in a Lazy, a Member that runs it
// while a wanted function says so and stops and empties it (Reset) after
// an idle time; its WaitForSync starts it if wanted and waits for its
// list.
//
// The store is an objects.Store, so an informer runs as well over
// objectstest's in-memory store (with its watches and compaction) in unit
// tests as over raftstore.
//
// A cache of a kind written often that needs only part of each object
// decodes only that: NewMeta keeps identities (name, namespace, uid,
// deletionTimestamp, resourceVersion; the api stage's pods), NewMetaLabels
// identities and labels (the endpoints stage's pods, for selectors).
// NewFiltered decodes in full only the objects a predicate of their
// metadata accepts and keeps the others as identity, labels and owner
// references (a controller's pods: those another kind of controller
// controls are only looked at to see whose they are); NewDecoding takes a
// decoder of the caller's (a pod cut to the spec fields a controller
// reads, services/controller.NewPodSpecInformer).
//
// Handlers are called from Run's goroutine, in revision order; a slow
// handler delays the cache, so hand heavy work to a queue.
package informer
