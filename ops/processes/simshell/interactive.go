package simshell

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"mvdan.cc/sh/v3/syntax"
)

// An interactive shell reads lines from stdin and runs each. With a
// terminal (kubectl run -it, debug -it, exec -it) it also does what a
// terminal's line discipline does for a shell: it echoes what is typed,
// erases on backspace, ends a line on Enter, interrupts the running
// command on Ctrl-C and ends the input on Ctrl-D at the start of a line;
// and it prints busybox's prompt ("/ # "). `exit N` ends it with N; the
// end of its input with the last command's status.

// input is what an interactive shell reads: lines, interrupts, the end.
type input struct {
	lines chan string
	intr  chan struct{}
}

// readLines reads lines from r (no terminal).
func readLines(ctx context.Context, r io.Reader) *input {
	in := &input{lines: make(chan string), intr: make(chan struct{}, 1)}
	go func() {
		defer close(in.lines)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			select {
			case in.lines <- sc.Text():
			case <-ctx.Done():
				return
			}
		}
	}()
	return in
}

// readTerminal reads keystrokes from r as a terminal in canonical mode,
// echoing to echo.
func readTerminal(ctx context.Context, r io.Reader, echo io.Writer) *input {
	in := &input{lines: make(chan string), intr: make(chan struct{}, 1)}
	go func() {
		defer close(in.lines)
		var line []byte
		buf := make([]byte, 4096)
		esc := 0 // bytes of an escape sequence still to skip
		for {
			n, err := r.Read(buf)
			for _, b := range buf[:n] {
				switch {
				case esc > 0:
					esc--
					if esc == 1 && b != '[' && b != 'O' {
						esc = 0
					}
					continue
				case b == 0x1b: // an arrow key and the like: ignored
					esc = 2
				case b == '\r' || b == '\n':
					echo.Write([]byte("\r\n"))
					select {
					case in.lines <- string(line):
					case <-ctx.Done():
						return
					}
					line = line[:0]
				case b == 0x7f || b == 0x08:
					if len(line) > 0 {
						_, size := utf8.DecodeLastRune(line)
						line = line[:len(line)-size]
						echo.Write([]byte("\b \b"))
					}
				case b == 0x03: // Ctrl-C
					echo.Write([]byte("^C\r\n"))
					line = line[:0]
					select {
					case in.intr <- struct{}{}:
					default:
					}
				case b == 0x04: // Ctrl-D
					if len(line) == 0 {
						return
					}
				case b == 0x15: // Ctrl-U
					for range utf8.RuneCount(line) {
						echo.Write([]byte("\b \b"))
					}
					line = line[:0]
				case b >= 0x20 || b == '\t' || b >= 0x80:
					line = append(line, b)
					echo.Write([]byte{b})
				}
			}
			if err != nil {
				return
			}
		}
	}()
	return in
}

// interactive runs an interactive shell over e's stdin.
func (e *cmdEnv) interactive(ctx context.Context) int {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var in *input
	if e.tty {
		e.out = crlf(e.out)
		e.eo = e.out
		in = readTerminal(ctx, e.stdin, e.out)
	} else {
		in = readLines(ctx, e.stdin)
	}
	r, err := e.newRunner(nil, nil)
	if err != nil {
		fmt.Fprintf(e.eo, "sh: %v\n", err)
		return 2
	}
	status := 0
	var src strings.Builder
	for {
		if e.tty {
			if src.Len() == 0 {
				fmt.Fprintf(e.out, "%s # ", r.Dir)
			} else {
				fmt.Fprint(e.out, "> ")
			}
		}
		var line string
		var ok bool
		select {
		case <-ctx.Done():
			return 130
		case line, ok = <-in.lines:
		case <-in.intr:
			src.Reset()
			continue
		}
		if !ok {
			return status
		}
		src.WriteString(line)
		src.WriteByte('\n')
		f, err := syntax.NewParser().Parse(strings.NewReader(src.String()), "")
		if syntax.IsIncomplete(err) {
			continue
		}
		src.Reset()
		if err != nil {
			fmt.Fprintf(e.eo, "sh: syntax error: %v\n", err)
			status = 2
			continue
		}
		// The watcher takes an interrupt typed while the command runs.
		// It is waited for once the command is done, so that it cannot
		// take the interrupt meant for the next command.
		cctx, ccancel := context.WithCancel(ctx)
		done, watched := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(watched)
			select {
			case <-in.intr:
				ccancel()
			case <-done:
			}
		}()
		for _, st := range f.Stmts {
			err = r.Run(cctx, st)
			status = exitCode(err)
			if err != nil && !isStatus(err) && cctx.Err() == nil {
				fmt.Fprintf(e.eo, "sh: %v\n", err)
			}
			if r.Exited() || cctx.Err() != nil {
				break
			}
		}
		close(done)
		<-watched
		// An interrupt ends the line, not the shell, though the
		// interpreter counts a cancelled context as a fatal exit.
		interrupted := cctx.Err() != nil && ctx.Err() == nil
		ccancel()
		if interrupted {
			status = 130
			continue
		}
		if r.Exited() {
			return status
		}
	}
}
