package container

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// startTime returns the start time of pid in clock ticks since boot (field
// 22 of /proc/<pid>/stat), which with the pid identifies a process.
func startTime(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command (field 2) may hold spaces and parentheses: fields
	// resume after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("container: malformed /proc/%d/stat", pid)
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 20 { // f[0] is field 3 (state); field 22 is f[19]
		return 0, fmt.Errorf("container: short /proc/%d/stat", pid)
	}
	return strconv.ParseUint(string(f[19]), 10, 64)
}

// openProcess returns a non-blocking pidfd of pid if it is still the process
// that started at start (0: any). It returns ErrNotRunning when it is gone.
func openProcess(pid int, start uint64) (*os.File, error) {
	if pid <= 0 {
		return nil, ErrNotRunning
	}
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if errors.Is(err, unix.ESRCH) {
		return nil, ErrNotRunning
	}
	if err != nil {
		return nil, fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	f := os.NewFile(uintptr(fd), "pidfd:"+strconv.Itoa(pid))
	// The pidfd now pins the process: if the start time still matches,
	// the pidfd refers to the process we mean.
	if start != 0 {
		if st, err := startTime(pid); err != nil || st != start {
			f.Close()
			return nil, ErrNotRunning
		}
	}
	return f, nil
}

// exited reports whether the process of pidfd f has exited, without blocking.
func exited(f *os.File) bool {
	rc, err := f.SyscallConn()
	if err != nil {
		return true
	}
	done := false
	_ = rc.Control(func(fd uintptr) {
		n, _ := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 0)
		done = n > 0
	})
	return done
}

// waitExit blocks until the process of pidfd f exits (the pidfd becomes
// readable), or ctx ends. It waits in the runtime's poller: closing f or
// setting a past read deadline also ends it.
func waitExit(ctx context.Context, f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { _ = f.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	err = rc.Read(func(fd uintptr) bool {
		n, _ := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 0)
		return n > 0
	})
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// sendSignal signals the process of pidfd f.
func sendSignal(f *os.File, sig unix.Signal) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.PidfdSendSignal(int(fd), sig, nil, 0) }); err != nil {
		return err
	}
	if errors.Is(serr, unix.ESRCH) {
		return ErrNotRunning
	}
	return serr
}
