// Package crd serves CustomResourceDefinitions' objects as
// kube-apiserver's apiextensions-apiserver does, with its published
// packages doing what they do there: structural schemas, pruning and
// defaulting (pkg/apiserver/schema), OpenAPI schema validation
// (pkg/apiserver/validation), CEL x-kubernetes-validations
// (pkg/apiserver/schema/cel, inside the customresource strategy), the
// custom resource strategies (pkg/registry/customresource: status reset,
// generation, metadata and list-type checks), printer columns
// (customresource/tableconvertor), OpenAPI v2 and v3
// (pkg/controller/openapi/builder) and conversion, None or a Webhook
// (pkg/apiserver/conversion).
//
// A Catalog follows the definitions in the store (an informer), builds a
// Definition of each one whose names are accepted or that is
// established, and registers its kind (objects.Replace: stored under
// /registry/<group>/<plural>/ in the storage version), so that the rest of
// the process treats its objects as any generic kind: the api stage
// writes them through Registry (the definition's strategy of the version
// written, then converted to the storage version), the HTTPS server reads
// them converted to the version asked for (Version.FromStorage: pruned
// and defaulted from storage too), and the namespace controller deletes
// them with their namespace.
//
// The caller:
//  1. starts the Catalog before serving (Start returns once it holds
//     every stored definition) and gives the same one to the api stage
//     (Registry) and the HTTPS server of its process;
//  2. calls Sync before it answers 404 for a group, version or resource it
//     does not know: another replica may have just established it (Sync
//     reads the store, linearizably, and takes in what is new);
//  3. treats Definitions and Versions as immutable: a changed definition
//     is a new Definition, found again through the Catalog.
//
// Who sets a definition's conditions (NamesAccepted, Established,
// Terminating) and deletes its objects when it is deleted is the CRD
// controller (services/stages/crds), not this package.
//
// Example (an api process):
//
//	cat, err := crd.NewCatalog(crd.Config{Store: env.Store, Log: env.Log})
//	apiCfg.Registry = crd.Registry{Builtin: builtins, Catalog: cat}
//	...
//	if v, ok := cat.Lookup("stable.example.com", "v1", "crontabs"); ok {
//		out, err := v.FromStorage(stored) // as v1 serves it
//	}
package crd
