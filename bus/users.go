package bus

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"
)

// One bus identity per person or program. A user of podflow (an API user:
// a person's name in the token file, a ServiceAccount's
// system:serviceaccount:<ns>:<name>, ...) gets a NATS user of its own,
// UserRole(apiUser), bound to that API user: it may ask the api front door
// (APIPrefix) and read its own inbox, UserInbox(apiUser), and nothing
// else. The api stage answers a request only into the inbox of the user
// its bearer token authenticates, so nobody receives another's replies:
// the server refuses a subscription to anybody else's inbox, and the api
// stage refuses to answer a request into one.

// UserRolePrefix starts the NATS user of an API user.
const UserRolePrefix = "user-"

// UserRole is the NATS user (and role) bound to apiUser.
func UserRole(apiUser string) string { return UserRolePrefix + EncodeToken(apiUser) }

// UserInbox is the inbox prefix of apiUser's bus connections,
// _INBOX.user-<apiUser>: the api stage answers apiUser's requests only
// below it.
func UserInbox(apiUser string) string { return InboxPrefix(UserRole(apiUser)) }

// UserPermissions are the subject permissions of apiUser's NATS user:
// request-reply to the api front door, its own inbox. It cannot publish
// onto the events stream (a pod creation enters through the api stage,
// which bounds each user's intake before the stream), cannot reach the
// store and cannot manage streams or consumers.
func UserPermissions(apiUser string) *Permissions {
	return &Permissions{
		Publish:   &SubjectPermission{Allow: []string{APIPrefix + ".>"}},
		Subscribe: &SubjectPermission{Allow: []string{UserInbox(apiUser) + ".>"}},
	}
}

// ErrNoSuchUser is returned by RemoveUser for an API user without a bus
// identity.
var ErrNoSuchUser = errors.New("bus: no bus user")

// AddUser gives apiUser a NATS user in the credentials file at path (a
// new password, mode 0600), or returns the one it has. A running server
// started with that file takes the user within its reload interval
// (Embedded.WatchCredentials).
func AddUser(path, apiUser string) (UserCredential, error) {
	if apiUser == "" || strings.ContainsAny(apiUser, "\n\r") {
		return UserCredential{}, invalidf("user %q: an API user name is required", apiUser)
	}
	c, err := LoadCredentials(path)
	if err != nil {
		return UserCredential{}, err
	}
	role := UserRole(apiUser)
	if u, ok := c.User(role); ok {
		return u, nil
	}
	pw, err := randomSecret()
	if err != nil {
		return UserCredential{}, err
	}
	u := UserCredential{Role: role, User: role, Password: pw, APIUser: apiUser, Permissions: UserPermissions(apiUser)}
	c.Users = append(c.Users, u)
	return u, writeJSON0600(path, c)
}

// RemoveUser removes apiUser's NATS user from the credentials file: a
// running server closes its connections at its next reload.
func RemoveUser(path, apiUser string) error {
	c, err := LoadCredentials(path)
	if err != nil {
		return err
	}
	role := UserRole(apiUser)
	i := slices.IndexFunc(c.Users, func(u UserCredential) bool { return u.Role == role })
	if i < 0 {
		return fmt.Errorf("%w %q", ErrNoSuchUser, apiUser)
	}
	c.Users = slices.Delete(c.Users, i, i+1)
	return writeJSON0600(path, c)
}

// ReloadCredentials re-reads the server's credentials file and applies
// its users: new ones may connect, removed ones are disconnected, and
// changed permissions hold for existing connections.
func (e *Embedded) ReloadCredentials() error {
	creds, err := loadOrCreateCredentials(e.CredsFile(), e.cfg.Roles)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
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
	// The file may have changed between the server's start and this
	// watch's: the first stamp is followed by a reload, so nothing written
	// before it is missed.
	mt, size := stamp()
	if size >= 0 {
		if err := e.ReloadCredentials(); err != nil && onError != nil {
			onError(err)
		}
	}
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
