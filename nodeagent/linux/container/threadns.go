package container

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// Namespace is one namespace for OnThreadIn to join: a namespace file
// (/proc/<pid>/ns/<kind>, a bind-mounted netns) and its kind.
type Namespace struct {
	Path string
	Kind NamespaceKind
	// Open, when set, opens the namespace instead of Path (a pidfd, which
	// setns takes for a process's namespace of Kind).
	Open func() (*os.File, error)
}

// NamespaceKind names a namespace as /proc/<pid>/ns does, with its setns
// flag.
type NamespaceKind struct {
	name string // in /proc/thread-self/ns ("pid": pid_for_children is what setns changes)
	flag int
}

// The namespace kinds OnThreadIn joins.
var (
	NSIPC = NamespaceKind{"ipc", unix.CLONE_NEWIPC}
	NSUTS = NamespaceKind{"uts", unix.CLONE_NEWUTS}
	NSNet = NamespaceKind{"net", unix.CLONE_NEWNET}
	NSPID = NamespaceKind{"pid", unix.CLONE_NEWPID}
)

// OnThreadIn runs fn on a locked OS thread that has joined nss in order,
// then moves the thread back into the namespaces it had and unlocks it.
// It runs fn in a goroutine of its own and returns fn's error.
//
// Moving back matters: Go never ends the main thread (it parks it when a
// goroutine locked to it exits), and the main thread's namespaces are the
// process's, as /proc/self/ns shows them. A thread that cannot be moved
// back stays locked, so Go ends it (or parks it) with the goroutine, and
// OnThreadIn reports the error.
func OnThreadIn(nss []Namespace, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		restore, err := enter(nss)
		if err == nil {
			err = fn()
		}
		if rerr := restore(); rerr != nil {
			errc <- fmt.Errorf("%w (and the thread could not go back: %v)", err, rerr)
			return // still locked: the thread ends with this goroutine
		}
		runtime.UnlockOSThread()
		errc <- err
	}()
	return <-errc
}

// enter joins nss on the calling (locked) thread; restore moves it back
// into the namespaces it had, whatever enter managed to join.
func enter(nss []Namespace) (restore func() error, err error) {
	var back []*os.File
	var joined []NamespaceKind
	restore = func() error {
		var first error
		for i := len(joined) - 1; i >= 0; i-- {
			if err := unix.Setns(int(back[i].Fd()), joined[i].flag); err != nil && first == nil {
				first = fmt.Errorf("return to the %s namespace: %w", joined[i].name, err)
			}
		}
		for _, f := range back {
			f.Close()
		}
		return first
	}
	for _, ns := range nss {
		own, err := os.Open("/proc/thread-self/ns/" + ns.Kind.name)
		if err != nil {
			return restore, err
		}
		open := ns.Open
		if open == nil {
			open = func() (*os.File, error) { return os.Open(ns.Path) }
		}
		target, err := open()
		if err != nil {
			own.Close()
			return restore, err
		}
		err = unix.Setns(int(target.Fd()), ns.Kind.flag)
		target.Close()
		if err != nil {
			own.Close()
			return restore, fmt.Errorf("join %s namespace %q: %w", ns.Kind.name, ns.Path, err)
		}
		back, joined = append(back, own), append(joined, ns.Kind)
	}
	return restore, nil
}
