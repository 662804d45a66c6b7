// Package services is the module of the lifecycle stages (one package
// each: api, admission, persistence, scheduler, status, endpoints) and the
// libraries they share (stage, objects, informer, auth, validate, events,
// manifest, pipeline, namespace). Its test keeps the layering: no stage
// imports another, and no shared library imports a stage.
package services
