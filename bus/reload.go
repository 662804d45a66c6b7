package bus

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"
)

// ReloadCredentials re-reads the server's credentials file and applies
// its users: new ones may connect, removed ones are disconnected. A
// cluster's servers each hold the file: a host joining a cluster of
// several machines adds its node agent's user to the first server's.
func (e *Embedded) ReloadCredentials() error {
	creds, err := loadOrCreateCredentials(e.CredsFile(), e.cfg.Roles)
	if err != nil {
		return err
	}
	e.reloadMu.Lock()
	defer e.reloadMu.Unlock()
	opts := e.opts.Clone()
	users := creds.serverUsers()
	for _, u := range opts.Users { // the system user and nobody are not in the file
		if u.Username == SystemUser && u.Account != nil || u.Username == nobodyUser {
			users = append(users, u)
		}
	}
	opts.Users = users
	if err := e.srv.ReloadOptions(opts); err != nil {
		return fmt.Errorf("bus: reload credentials: %w", err)
	}
	e.opts, e.creds = opts, creds
	return nil
}

// WatchCredentials reloads the credentials (ReloadCredentials) whenever
// the file changes, checking every interval, until ctx is done. A failed
// reload is reported to onError and tried again at the next change.
func (e *Embedded) WatchCredentials(ctx context.Context, interval time.Duration, onError func(error)) {
	stamp := func() (time.Time, int64) {
		fi, err := os.Stat(e.CredsFile())
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) && onError != nil {
				onError(err)
			}
			return time.Time{}, -1
		}
		return fi.ModTime(), fi.Size()
	}
	mt, size := stamp()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		m, s := stamp()
		if m.Equal(mt) && s == size {
			continue
		}
		mt, size = m, s
		if err := e.ReloadCredentials(); err != nil && onError != nil {
			onError(err)
		}
	}
}
