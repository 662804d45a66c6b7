package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/podflow/podflow/ops/client"
	"github.com/podflow/podflow/proto/podrules"
	"github.com/podflow/podflow/services/manifest"
	"github.com/podflow/podflow/services/objects"
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
	cli := client.DefaultCLI()
	rt, err := client.ParseRequestTimeout(requestTimeout)
	if err != nil {
		return nil, "", err
	}
	cli.RequestTimeout = rt
	sess, err := client.OpenCLI(ctx, o.config, "podflow-cli", cli)
	if err != nil {
		return nil, "", err
	}
	return sess, sess.Token(o.token), nil
}

func readManifest(path string) ([]manifest.Object, error) {
	var data []byte
	var err error
	if path == "-" {
		data, err = io.ReadAll(io.LimitReader(os.Stdin, int64(manifest.DefaultConfig().MaxBytes)+1))
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, err
	}
	objs, err := manifest.Decode(data)
	if name, errs, ok := manifest.RefusedFields(err); ok {
		// As kubectl shows the API server's 422 for it.
		return nil, fmt.Errorf("error validating %q: The Pod %q is invalid: %v: %w", path, name, errs.ToAggregate(), manifest.ErrUnsupportedField)
	}
	if err != nil {
		return nil, fmt.Errorf("error validating %q: %w", path, err)
	}
	return objs, nil
}

func newApplyCmd() *cobra.Command {
	o := &clientOptions{}
	var files []string
	cmd := &cobra.Command{
		Use:   "apply -f FILE",
		Short: "Apply Kubernetes YAML (Pod, Service, Namespace, ServiceAccount, RBAC, ConfigMap, Secret, ...)",
		Long: `Apply Kubernetes manifests. A Pod travels the whole lifecycle (api, admission,
persistence) and apply returns once it is stored — like kubectl, "created"
does not mean running. Other kinds are written through the api stage after
authentication and RBAC. Multi-document YAML and "-" for stdin work.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(files) == 0 {
				return errors.New("must specify -f FILE")
			}
			ctx := cmd.Context()
			sess, token, err := o.session(ctx)
			if err != nil {
				return err
			}
			defer sess.Close()
			return applyFiles(ctx, sess, files, token, o.namespace, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	o.flags(cmd)
	cmd.Flags().StringArrayVarP(&files, "filename", "f", nil, "manifest file (or - for stdin); repeatable")
	return cmd
}

// applyFiles applies every object of every file, going on after a failed
// object as kubectl does, and fails at the end if any did.
func applyFiles(ctx context.Context, sess *client.Session, files []string, token, namespace string, out, errOut io.Writer) error {
	failed := 0
	for _, f := range files {
		objs, err := readManifest(f)
		if err != nil {
			return err
		}
		for _, mo := range objs {
			for _, w := range mo.Warnings {
				fmt.Fprintf(errOut, "Warning: %s\n", w)
			}
			obj, ok := mo.Message.(objects.Object)
			if !ok {
				return fmt.Errorf("%s is not a stored kind", mo.Kind)
			}
			if namespace != "" {
				objects.Meta(obj).Namespace = namespace
			}
			verb, err := applyObject(ctx, sess, obj, token)
			if err != nil {
				fmt.Fprintln(errOut, err)
				failed++
				continue
			}
			fmt.Fprintf(out, "%s/%s %s\n", strings.ToLower(mo.Kind), obj.GetMetadata().GetName(), verb)
		}
	}
	if failed > 0 {
		return silentError{fmt.Errorf("%d object(s) failed", failed)}
	}
	return nil
}

// silentError has been reported already; main prints nothing more.
type silentError struct{ error }

func (silentError) Silent() bool { return true }
