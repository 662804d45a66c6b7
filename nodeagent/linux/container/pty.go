package container

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// ResizeFunc returns the next terminal size of an exec with a terminal,
// blocking until there is one; ok is false once there will be none (or
// ctx ended).
type ResizeFunc func(ctx context.Context) (width, height uint16, ok bool)

// terminal is the pseudo-terminal of an exec: the command gets the slave
// as its stdin, stdout, stderr and controlling terminal (a session of its
// own), the caller's streams are copied to and from the master.
type terminal struct {
	master, slave *os.File
	wg            sync.WaitGroup
	out           chan struct{} // closed when the master's output is copied
	started       bool
}

func openTerminal() (*terminal, error) {
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open /dev/ptmx: %w", err)
	}
	master := os.NewFile(uintptr(fd), "ptmx")
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		master.Close()
		return nil, fmt.Errorf("unlock pty: %w", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		master.Close()
		return nil, fmt.Errorf("pty number: %w", err)
	}
	slave, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		master.Close()
		return nil, fmt.Errorf("open pty slave: %w", err)
	}
	return &terminal{master: master, slave: slave, out: make(chan struct{})}, nil
}

// start copies once the command has started (and holds the slave): stdin
// to the master, the master to stdout, resizes to the master's window
// size. The slave is closed here: the command holds it.
func (t *terminal) start(ctx context.Context, stdio Stdio) {
	t.started = true
	t.slave.Close()
	if stdio.Stdin != nil {
		go func() { _, _ = io.Copy(t.master, stdio.Stdin) }() // ends with the master
	}
	go func() {
		defer close(t.out)
		w := stdio.Stdout
		if w == nil {
			w = io.Discard
		}
		_, _ = io.Copy(w, t.master) // EIO once the last holder of the slave exits
	}()
	if stdio.Resize != nil {
		fd := int(t.master.Fd()) // read once: finish closes the master after this goroutine ends
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			for {
				w, h, ok := stdio.Resize(ctx)
				if !ok {
					return
				}
				_ = unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Row: h, Col: w})
			}
		}()
	}
}

// finish waits (a little) for the output, then closes the master; ctx's
// end stops the resizes.
func (t *terminal) finish() {
	if !t.started { // the command never started
		t.slave.Close()
		t.master.Close()
		return
	}
	select {
	case <-t.out:
	case <-time.After(time.Second): // a background process keeps the slave
	}
	t.wg.Wait() // the resizes (ctx ended first), so no ioctl races the close
	t.master.Close()
	<-t.out
}
