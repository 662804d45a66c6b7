// Package services is the module of the lifecycle stages and the
// libraries they share.
//
// The stages live together in services/stages, one package each: api,
// admission, persistence, scheduler, status, endpoints, and the controller
// stages (namespace, ...). The libraries live directly under services:
// stage, objects, informer, manifest, validate, auth, events, ipalloc,
// sealed, pipeline, namespace, apiserver, nodeexec, nodelogs, podmetrics.
//
// The layering test (layering_test.go) keeps the direction: no stage
// imports another, and no library imports a stage.
package services
