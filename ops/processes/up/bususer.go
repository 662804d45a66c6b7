package up

import (
	"os"
	"path/filepath"

	"github.com/podflow/podflow/bus"
	"github.com/podflow/podflow/ops/client"
	"github.com/podflow/podflow/ops/processes/plan"
)

// AddBusUser gives the API user name a NATS user of its own on the bus of
// the data directory l (`podflow config bus-user`): the user in the shared
// credentials, its bus client file and a client configuration using it
// (with the admin's seal key), both readable by their owner only, and on a
// cluster with TLS a client certificate of the cluster CA. Run again, it
// rewrites the same files for the same user.
func AddBusUser(l plan.Layout, admin client.Config, name string) (bus.UserCredential, error) {
	adminBus, err := bus.ReadClientConfig(admin.NATS)
	if err != nil {
		return bus.UserCredential{}, err
	}
	u, err := bus.AddUser(l.Credentials(), name)
	if err != nil {
		return u, err
	}
	if err := os.MkdirAll(filepath.Dir(l.UserBusConfig(name)), 0o700); err != nil {
		return u, err
	}
	var files bus.TLSFiles
	if adminBus.TLSFiles.CAFile != "" { // up --cluster: a client certificate of the cluster CA too
		if files, err = IssueBusClientCert(l, u.Role); err != nil {
			return u, err
		}
	}
	if err := bus.WriteClientConfigTLS(l.UserBusConfig(name), adminBus.URLs, u, files); err != nil {
		return u, err
	}
	return u, client.WriteConfig(l.UserClientConfig(name), client.Config{NATS: l.UserBusConfig(name), SealKey: admin.SealKey})
}

// RemoveBusUser takes the API user name's NATS user away (the running
// server disconnects it) and removes its files.
func RemoveBusUser(l plan.Layout, name string) error {
	if err := bus.RemoveUser(l.Credentials(), name); err != nil {
		return err
	}
	tls := l.BusTLS(bus.UserRole(name))
	for _, f := range []string{l.UserBusConfig(name), l.UserClientConfig(name), tls.CertFile, tls.KeyFile} {
		_ = os.Remove(f)
	}
	return nil
}
