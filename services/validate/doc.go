// Package validate holds Kubernetes' validation that every kind shares:
// names by each kind's rule, namespaces, ConfigMap and Secret data keys and
// sizes (Object), and the 422 Invalid Status built from field errors as
// kube-apiserver words it (InvalidStatus). It is a library, not a stage:
// the api stage calls Object on every create and apply (so the HTTPS and
// the bus front doors refuse alike), and admission builds its pod
// validation on the same helpers.
package validate
