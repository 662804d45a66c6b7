package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/podflow/podflow/ops/client"
	"github.com/podflow/podflow/proto/podrules"
)

func init() { register(newApplyCmd); register(newPublishCmd) }

type clientOptions struct {
	config    string
	token     string
	namespace string
}

func (o *clientOptions) flags(cmd *cobra.Command) {
	configFlag(cmd, &o.config)
	cmd.Flags().StringVar(&o.token, "token", "", "bearer token (default: the admin token of the client configuration)")
	cmd.Flags().StringVarP(&o.namespace, "namespace", "n", "", "namespace (default: the manifest's, else default)")
}

// ns is the namespace a command acts in: -n, else default.
func (o *clientOptions) ns() string { return podrules.NamespaceOrDefault(o.namespace) }

// session connects as the CLI (giving up within a few seconds when the
// bus is unreachable, every request bounded by --request-timeout) and
// returns the token to act with: --token, else the configuration's admin
// token.
func (o *clientOptions) session(ctx context.Context) (*client.Session, string, error) {
	sess, err := openCLI(ctx, o.config, "podflow-cli")
	if err != nil {
		return nil, "", err
	}
	return sess, sess.Token(o.token), nil
}

// openCLI is every client command's session: it gives up within the
// connect timeout with the same message everywhere (client.OpenCLI), and
// bounds each request by --request-timeout.
func openCLI(ctx context.Context, config, name string) (*client.Session, error) {
	cli := client.DefaultCLI()
	rt, err := client.ParseRequestTimeout(requestTimeout)
	if err != nil {
		return nil, err
	}
	cli.RequestTimeout = rt
	return client.OpenCLI(ctx, config, name, cli)
}

func newApplyCmd() *cobra.Command {
	o := &clientOptions{}
	var files []string
	var kustomize string
	var recursive bool
	cmd := &cobra.Command{
		Use:   "apply (-f FILE|DIR | -k DIR)",
		Short: "Apply Kubernetes YAML (Pod, Service, Namespace, ServiceAccount, RBAC, ConfigMap, Secret, ...)",
		Long: `Apply Kubernetes manifests. A Pod travels the whole lifecycle (api, admission,
persistence) and apply returns once it is stored — like kubectl, "created"
does not mean running. Other kinds are written through the api stage after
authentication and RBAC. Multi-document YAML and "-" for stdin work; a
directory applies its .json, .yaml and .yml files (-R: and its
subdirectories'); -k applies a kustomization, built as kubectl builds it.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			objs, err := client.ReadSources(files, kustomize, recursive)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			sess, token, err := o.session(ctx)
			if err != nil {
				return err
			}
			defer sess.Close()
			return sess.ApplyObjects(ctx, objs, token, o.namespace, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	o.flags(cmd)
	cmd.Flags().StringArrayVarP(&files, "filename", "f", nil, "manifest file or directory (or - for stdin); repeatable")
	cmd.Flags().StringVarP(&kustomize, "kustomize", "k", "", "apply the kustomization in this directory")
	cmd.Flags().BoolVarP(&recursive, "recursive", "R", false, "with -f DIR, also the files of its subdirectories")
	return cmd
}
